"""The small-M kernel's gated build on the GPU (library/swiglu_small_m.py: silu(x w_gate^T) * (x w_up^T) in one
launch, both weights' rows of the same output columns in each stage): against the float64 reference under the
swiglu tests' rule (test_library_swiglu_gpu.check: relative error within error_bound of torch's bf16/fp16
composition, the absolute cap), into a NaN-filled output with a padded pitch (the padding must stay NaN), over
every bucket, one and several M tiles, N not a multiple of 128 (nor of 8), K not a multiple of 64, every split of
the grid rule; bitwise repeatable; NaN rows stay in their rows; the public call with ONE_LAUNCH on; a CUDA
graph's replay.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_swiglu_small_m_gated_gpu.py``.
"""

from __future__ import annotations

import secrets

import pytest
import torch

import gemm_ladder
from gemm_ladder.dispatch import swiglu_small_m
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.swiglu_small_m import BUCKETS, swiglu_small_m_kernel
from test_library_swiglu_gpu import check, operands

pytestmark = pytest.mark.gpu

#: (M, N, K, BN): every bucket; M in one tile and in two or three (M = 200 at BN 128, 33 at BN 16); N odd, below
#: one 128-column unit, not a multiple of 128; K below one BK, not a multiple of 64; Llama-3-8B's and Qwen2.5-7B's
#: MLPs at decode.
SHAPES = [(1, 256, 64, 8), (7, 520, 200, 8), (16, 100, 136, 16), (33, 300, 72, 16), (30, 1000, 1000, 32),
          (64, 1000, 1000, 64), (97, 36, 4096, 128), (128, 384, 512, 128), (200, 1000, 520, 128),
          (7, 14336, 4096, 8), (1, 18944, 3584, 8), (64, 18944, 3584, 64)]


def launch_poisoned(x, wg, wu, bn, *, splits=None, pad=8):
    """The build on views of x, wg, wu into a NaN-filled output of pitch N + ``pad``; checks the padding stayed
    NaN and returns the (M, N) result."""
    m, n = x.shape[0], wg.shape[0]
    store = torch.full((m, n + pad), float("nan"), dtype=x.dtype, device=x.device)
    views = [operand_view(t, k_dim=1) for t in (x, wg, wu)]
    swiglu_small_m_kernel(bn).launch(*views, store[:, :n], splits=splits)
    torch.cuda.synchronize()
    assert torch.isnan(store[:, n:]).all(), "the kernel wrote past the output's N columns"
    return store[:, :n]


@pytest.mark.parametrize("dtype", ("bf16", "fp16"))
@pytest.mark.parametrize("m,n,k,bn", SHAPES)
def test_against_float64(m, n, k, bn, dtype):
    seed = secrets.randbits(31)
    x, wg, wu = operands(m, n, k, dtype, seed)
    check(launch_poisoned(x, wg, wu, bn), x, wg, wu, dtype, seed)


@pytest.mark.parametrize("splits", (1, 2, 3, 64))
def test_every_split(splits):
    """Classic split-K with s ranges a unit (s = 1: no workspace; 64 ranges on 16 K tiles: capped at 16), each
    unit's gate and up partials reduced by whichever contributor arrives last."""
    seed = secrets.randbits(31)
    x, wg, wu = operands(40, 700, 1000, "bf16", seed)
    check(launch_poisoned(x, wg, wu, 64, splits=splits), x, wg, wu, "bf16", seed)


@pytest.mark.parametrize("bn", BUCKETS)
def test_bitwise_repeatable(bn):
    seed = secrets.randbits(31)
    x, wg, wu = operands(min(bn, 50), 2000, 2048, "bf16", seed)
    a, b = launch_poisoned(x, wg, wu, bn), launch_poisoned(x, wg, wu, bn)
    assert torch.equal(a, b), f"not bitwise repeatable at BN {bn}, seed {seed}"


def test_nan_rows_stay_in_their_rows():
    """A NaN in a row of x makes that output row NaN (silu(NaN) * NaN) and touches no other row, through the
    split's reduction too."""
    seed = secrets.randbits(31)
    x, wg, wu = operands(16, 640, 2048, "bf16", seed)
    x[3, 100] = float("nan")
    out = launch_poisoned(x, wg, wu, 16)
    assert torch.isnan(out[3]).all()
    rest = torch.cat([out[:3], out[4:]])
    assert torch.isfinite(rest).all()
    keep = torch.tensor([r for r in range(16) if r != 3], device=x.device)
    check(rest, x[keep], wg, wu, "bf16", seed)


@pytest.mark.parametrize("m", (1, 7, 64, 128))
def test_the_public_call_with_one_launch(m, monkeypatch):
    """gemm_ladder.swiglu takes the gated build where explain_swiglu says so (ONE_LAUNCH on), with batch
    dimensions, and gives the pair's result to within the output's rounding (the fp32 sums differ in order)."""
    monkeypatch.setattr(swiglu_small_m, "ONE_LAUNCH", True)
    seed = secrets.randbits(31)
    x, wg, wu = operands(m, 4096, 4096, "bf16", seed)
    e = gemm_ladder.explain_swiglu(x, wg, wu)
    if m > swiglu_small_m.small_m_max(torch.cuda.get_device_name()):
        pytest.skip(f"M = {m} is past this GPU's small-M threshold: the fused kernel runs it")
    assert e["path"] == "small_m_gated", e["reason"]
    out = gemm_ladder.swiglu(x.view(1, m, 4096), wg, wu).view(m, 4096)
    check(out, x, wg, wu, "bf16", seed)
    monkeypatch.setattr(swiglu_small_m, "ONE_LAUNCH", False)
    pair = gemm_ladder.swiglu(x, wg, wu)
    diff = (out.float() - pair.float()).abs()
    assert (diff <= 2 ** -7 * pair.float().abs() + 1e-3).all(), f"max diff {diff.max().item():.3e}, seed {seed}"


def test_graph_replay(monkeypatch):
    """Captured in a CUDA graph (nothing split while capturing) and replayed on new inputs copied into the
    captured ones."""
    monkeypatch.setattr(swiglu_small_m, "ONE_LAUNCH", True)
    seed = secrets.randbits(31)
    x, wg, wu = operands(16, 3000, 2048, "bf16", seed)
    gemm_ladder.swiglu(x, wg, wu)  # compiled and loaded outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gemm_ladder.swiglu(x, wg, wu)
    x2, _, _ = operands(16, 3000, 2048, "bf16", seed + 1)
    x.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    check(out, x2, wg, wu, "bf16", seed)


def test_one_row_into_a_strided_output():
    """One row of out with a column stride of 2 (a view the library entry takes: one row has no row pitch): the
    kernel is given the stride and writes every other element, the ones between stay NaN."""
    seed = secrets.randbits(31)
    x, wg, wu = operands(1, 520, 256, "bf16", seed)
    store = torch.full((1, 2 * 520), float("nan"), dtype=x.dtype, device=x.device)
    out = store[:, ::2]
    swiglu_small_m_kernel(8).launch(*(operand_view(t, k_dim=1) for t in (x, wg, wu)), out)
    torch.cuda.synchronize()
    assert torch.isnan(store[:, 1::2]).all(), "wrote between the strided output's elements"
    check(out, x, wg, wu, "bf16", seed)
