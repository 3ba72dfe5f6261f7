"""swiglu's small-M path on the GPU (dispatch/swiglu_small_m.py): one launch of the small-M kernel's gated
build up to ONE_LAUNCH_MAX_M rows (tests/test_swiglu_small_m_gated_gpu.py tests the build itself), else two
small-M GEMMs, up into float32, gate with silu(gate) * up in its epilogue; against the float64 reference under the swiglu tests' rule
(relative error within error_bound of torch's bf16/fp16 composition, the absolute cap), the output
poisoned before the call (a NaN-filled block of its size freed just before, which the caching
allocator hands back), bitwise repeatable, and the path chosen as explain_swiglu says.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_swiglu_small_m_gpu.py``.
"""

from __future__ import annotations

import secrets

import pytest
import torch

import gemm_ladder
from gemm_ladder.dispatch import swiglu_small_m
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.swiglu import swiglu_kernel
from test_library_swiglu_gpu import check, operands

pytestmark = pytest.mark.gpu

#: M across the small-M buckets (odd M among them, the threshold itself: "max", this GPU's small_m_max); N
#: odd (not a multiple of 8) and not of 128; K not a multiple of 64; Llama-3-8B's and Qwen2.5-7B's MLP at decode.
#: M = 97 takes the pair where the device's threshold reaches it (skipped elsewhere).
SHAPES = [(1, 256, 64), (7, 520, 200), (16, 100, 136), (33, 300, 72), (64, 1000, 1000), (97, 36, 4096),
          ("max", 384, 512), (7, 14336, 4096), (1, 18944, 3584), (64, 14336, 4096)]


def device_max() -> int:
    """This GPU's threshold (dispatch/swiglu_small_m.small_m_max of its name)."""
    return swiglu_small_m.small_m_max(torch.cuda.get_device_name())


def poisoned_call(x, wg, wu):
    m, n = x.shape[:-1].numel(), wg.shape[0]
    block = torch.full((m, n), float("nan"), dtype=x.dtype, device=x.device)
    del block  # its memory is handed back to the call's output by the caching allocator
    return gemm_ladder.swiglu(x, wg, wu)


@pytest.mark.parametrize("dtype", ("bf16", "fp16"))
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_small_m_path_against_float64(m, n, k, dtype):
    m = device_max() if m == "max" else m
    if m > device_max():
        pytest.skip(f"M = {m} > this GPU's threshold {device_max()}: the fused kernel runs it")
    seed = secrets.randbits(31)
    x, wg, wu = operands(m, n, k, dtype, seed)
    one = swiglu_small_m.ONE_LAUNCH and m <= swiglu_small_m.ONE_LAUNCH_MAX_M
    assert gemm_ladder.explain_swiglu(x, wg, wu)["path"] == ("small_m_gated" if one else "small_m_pair")
    out = poisoned_call(x, wg, wu)
    torch.cuda.synchronize()
    check(out, x, wg, wu, dtype, seed)


@pytest.mark.parametrize("m,n,k", [(1, 256, 64), (33, 300, 72), (64, 14336, 4096)])
def test_the_pair_with_one_launch_off(m, n, k, monkeypatch):
    """The two-launch path as GL_SWIGLU_SMALL_M_ONE_LAUNCH=0 runs it (and as M past ONE_LAUNCH_MAX_M does)."""
    monkeypatch.setattr(swiglu_small_m, "ONE_LAUNCH", False)
    if m > device_max():
        pytest.skip(f"M = {m} > this GPU's pair threshold {device_max()}")
    seed = secrets.randbits(31)
    x, wg, wu = operands(m, n, k, "bf16", seed)
    assert gemm_ladder.explain_swiglu(x, wg, wu)["path"] == "small_m_pair"
    out = poisoned_call(x, wg, wu)
    torch.cuda.synchronize()
    check(out, x, wg, wu, "bf16", seed)


@pytest.mark.parametrize("m", (1, 7, 64))
def test_matches_the_fused_kernel_closely_and_repeats_bitwise(m):
    """Same fp32 math and one rounding as the fused kernel: results within an output ulp or so of each
    other (only the fp32 summation order differs); two calls give the same bits."""
    seed = secrets.randbits(31)
    x, wg, wu = operands(m, 4096, 4096, "bf16", seed)
    a, b = gemm_ladder.swiglu(x, wg, wu), gemm_ladder.swiglu(x, wg, wu)
    assert torch.equal(a, b), f"not bitwise repeatable, seed {seed}"
    fused = torch.empty_like(a)
    swiglu_kernel().launch(*(operand_view(t, k_dim=1) for t in (x, wg, wu)), fused)
    diff = (a.float() - fused.float()).abs()
    assert (diff <= 2 ** -7 * fused.float().abs() + 1e-3).all(), f"max diff {diff.max().item():.3e}, seed {seed}"


def test_batch_dimensions_and_the_threshold():
    seed = secrets.randbits(31)
    x, wg, wu = operands(6, 264, 128, "bf16", seed)
    out = gemm_ladder.swiglu(x.view(2, 3, 128), wg, wu)
    assert out.shape == (2, 3, 264)
    check(out.view(6, 264), x, wg, wu, "bf16", seed)
    big = device_max() + 1
    x2, wg2, wu2 = operands(big, 264, 128, "bf16", seed)
    e = gemm_ladder.explain_swiglu(x2, wg2, wu2)
    assert e["path"] == "fused" and f"M = {big} >" in e["reason"]
    check(gemm_ladder.swiglu(x2, wg2, wu2), x2, wg2, wu2, "bf16", seed)


@pytest.mark.parametrize("m", (64, 97, 192))
def test_a_fused_kernel_that_fills_its_waves_runs_at_small_m(m):
    """Phi-3-mini's MLP (8192 output columns: 64 work units on 66 clusters) takes the fused kernel from
    FUSED_FILL_MIN_M rows on (swiglu_small_m.FUSED_MIN_WAVE_FILL), as explain_swiglu says, and is right against
    float64."""
    from gemm_ladder.dispatch.route import device_facts

    clusters = device_facts(torch.device("cuda")).clusters
    if swiglu_small_m.fused_wave_fill(m, 8192, clusters) < swiglu_small_m.FUSED_MIN_WAVE_FILL:
        pytest.skip(f"64 work units fill {clusters} clusters' waves below FUSED_MIN_WAVE_FILL on this GPU")
    seed = secrets.randbits(31)
    x, wg, wu = operands(m, 8192, 3072, "bf16", seed)
    e = gemm_ladder.explain_swiglu(x, wg, wu)
    assert e["path"] == "fused" and e["fused_wave_fill"] >= swiglu_small_m.FUSED_MIN_WAVE_FILL, e["reason"]
    out = poisoned_call(x, wg, wu)
    torch.cuda.synchronize()
    check(out, x, wg, wu, "bf16", seed)


def test_nan_rows_stay_in_their_rows():
    """A NaN in x's row r gives NaN in row r only (both products), as the composition."""
    seed = secrets.randbits(31)
    x, wg, wu = operands(9, 256, 256, "bf16", seed)
    x[4, 17] = float("nan")
    out = gemm_ladder.swiglu(x, wg, wu)
    assert torch.isnan(out[4]).all() and not torch.isnan(out[torch.arange(9) != 4]).any()


def test_under_torch_compile():
    seed = secrets.randbits(31)
    x, wg, wu = operands(7, 512, 256, "bf16", seed)
    f = torch.compile(lambda a, b, c: gemm_ladder.swiglu(a, b, c), fullgraph=True)
    check(f(x, wg, wu), x, wg, wu, "bf16", seed)
