"""The layouts kernel's staged-store build (sm90_gemm.cu with GL_C_STAGED, ``_cstage``: each consumer
warp stages its rows in shared memory and copies them out with 16-byte stores), on the GPU: outputs a
TMA store cannot write (N in {1, 7, 8, 9, 63, 65, 255, 257, 4095}, odd pitches, bases 1 and 3 elements
past a 16-byte boundary, column-major outputs with such a pitch), held to the correctness gate's
bounds against the float64 reference, and bitwise equal to the register-store build (the same
accumulators, rounded by the same pack).

Every output is a view inside a larger NaN-poisoned buffer (pitch padding, elements before the base, 7
after the last row): after each launch every element of the buffer outside the view must still be NaN
(guard values: nothing written past a row's end, before the base or after the last row), and the gate's
poisoned call checks every element inside it is written. All four operand layouts, bf16 and fp16, a
float32 output, BN 64, 128 and 256, every stream-K policy (the split tail's store after the reduction is
the same staged copy), a fused epilogue (bias, GELU(tanh), residual, alpha, beta; both orientations),
repeated launches bitwise identical, and the API with the dispatcher's switch (STAGED_STORE) on.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_library_gemm_cstage_gpu.py``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.gates.correctness import error_bound, random_operands
from gemm_ladder.library.gemm import SPLITS, TILE_N, library_gemm
from gemm_ladder.library.operand import operand_view
from test_library_gemm_gpu import LAYOUTS, gate
from test_library_gemm_regstore_gpu import (EPILOGUE_SHAPES, RegisterCall, _check_fp32, assert_repeats_bitwise,
                                            assert_untouched, check_api_on_unaligned_outputs, epilogue_case,
                                            poisoned_out)

pytestmark = pytest.mark.gpu

#: (M, N, K): the N edges (1, 7, 8, 9, 63, 65, 255, 257, 4095) with M tails (not multiples of 64 or
#: 128), K tails; one row; a split stream-K tail on 132 SMs (2304 x 2050: 72 units over 66 clusters).
SHAPES = [(257, 4095, 130), (300, 1, 64), (129, 7, 72), (200, 8, 64), (77, 9, 40), (1000, 63, 200),
          (513, 65, 96), (384, 255, 128), (1, 257, 40), (2304, 2050, 1000)]
STAGED = "staged copy (16-byte stores)"


def staged(a="k", b="k", bn=256, fp32=False):
    return library_gemm(a, b, bn, c_from_registers=True, c_staged=True, out_fp32=fp32)


def register(a="k", b="k", bn=256, fp32=False):
    return library_gemm(a, b, bn, c_from_registers=True, out_fp32=fp32)


@pytest.fixture(scope="module", autouse=True)
def _built_in_parallel():
    """Compile the staged builds (and the register-store ones they are compared with) at once."""
    jobs = [(lambda a=a, b=b, bn=bn, dt=dt: staged(a, b, bn).build(dt))
            for a, b in LAYOUTS for bn in TILE_N for dt in ("bf16", "fp16")]
    jobs += [(lambda bn=bn, f=f: make("k", "k", bn, f).build("bf16"))
             for bn in TILE_N for f in (False, True) for make in (staged, register)]
    sources = {epilogue_case(m, n, act, "cpu").oriented(swap).source()
               for m, n, _ in EPILOGUE_SHAPES for act in (None, "gelu_tanh") for swap in (False, True)}
    jobs += [(lambda src=src, bn=bn: staged("k", "k", bn).build("bf16", epilogue_source=src))
             for src in sources for bn in (256, 128)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda job: job(), jobs))


class StagedCall(RegisterCall):
    """The register-store test's call (operands at padded pitches 16 bytes into their buffers, an output of
    pitch N + ``c_pad`` starting ``c_offset`` elements into a NaN-poisoned buffer, checked untouched
    outside the view after each launch) through the staged build."""

    def __init__(self, a_major="k", b_major="k", bn=256, split="tail", c_pad=1, c_offset=1):
        super().__init__(a_major, b_major, bn, split, c_pad, c_offset)
        self.kernel = staged(a_major, b_major, bn)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
def test_every_layout_on_odd_outputs(a_major, b_major, dtype):
    """Pitch N + 1 with the base 1 element past 16 bytes (rows misaligned by varying amounts: the funnel
    shift on every row), pitch N + 3 at offset 3, the dense pitch N at offset 0 (odd N: odd pitch), and
    an aligned pitch (N rounded up to 8, + 8) at offset 0 (every row 16-byte aligned: no shift)."""
    for m, n, k in SHAPES:
        for c_pad, c_offset in ((1, 1), (3, 3), (0, 0), (-n % 8 + 8, 0)):
            gate(StagedCall(a_major, b_major, c_pad=c_pad, c_offset=c_offset), m, n, k, dtype)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("bn", TILE_N)
@pytest.mark.parametrize("split", SPLITS)
def test_tile_widths_and_stream_k_splits(bn, split):
    """Every BN under each stream-K policy ('all': every unit reduced from partials and stored by its last
    contributor through the same staged copy), odd pitch and base; fp16 on one shape."""
    fn = StagedCall("k", "mn", bn=bn, split=split, c_pad=1, c_offset=1)
    for m, n, k in [(256, 255, 4096), (1000, 521, 200), (2304, 2050, 1000), (130, 4095, 512)]:
        gate(fn, m, n, k, "bf16")
    gate(fn, 777, 1001, 300, "fp16")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("bn", TILE_N)
@pytest.mark.parametrize("fp32", [False, True])
def test_bitwise_equal_to_the_register_store(bn, fp32):
    """Same accumulators, same rounding: the staged build's output equals the register store's bit for
    bit (split 'none': each tile's K order is the same in both), on odd pitches and bases."""
    for m, n, k in [(1000, 4095, 256), (513, 65, 96), (300, 1, 64), (2304, 2050, 1000)]:
        a, b = random_operands(m, n, k, "bf16", "cuda", seed=3 * m + n + k)
        outs = []
        for make in (staged, register):
            store, c, outside = poisoned_out(m, n, torch.float32 if fp32 else torch.bfloat16, ldc=n + 3, offset=1)
            make("k", "k", bn, fp32).launch(operand_view(a, k_dim=1), operand_view(b, k_dim=1), c, split="none")
            torch.cuda.synchronize()
            assert_untouched(store, outside)
            outs.append(c)
        assert not torch.isnan(outs[0]).any() and torch.equal(outs[0], outs[1]), (bn, fp32, m, n, k)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("split", ["tail", "all"])
def test_repeated_launches_are_bitwise_identical(split):
    assert_repeats_bitwise(StagedCall, split)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bn", TILE_N)
@pytest.mark.parametrize("split", SPLITS)
def test_float32_output(bn, split):
    """Float32 (4-byte elements: rows misaligned by 4, 8 or 12 bytes at pitch N + 1, base 1 element in)."""
    kernel = staged("k", "k", bn, fp32=True)
    for m, n, k in [(1000, 300, 200), (2304, 2049, 1000), (257, 1, 64), (129, 7, 72), (513, 65, 96)]:
        a, b = random_operands(m, n, k, "bf16", "cuda", seed=m + 3 * n + k)
        for pad, offset in ((1, 1), (2, 3), (-n % 4, 0)):
            store, c, outside = poisoned_out(m, n, torch.float32, ldc=n + pad, offset=offset)
            kernel.launch(operand_view(a, k_dim=1), operand_view(b, k_dim=1), c, split=split)
            torch.cuda.synchronize()
            assert_untouched(store, outside)
            _check_fp32(c, a, b)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("bn", [256, 128])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("activation", [None, "gelu_tanh"])
@pytest.mark.parametrize("split", ["tail", "all"])
def test_fused_epilogue_in_both_orientations(bn, transposed, activation, split):
    """bias + activation + residual, alpha, beta applied to each pair right before it is staged (BN 128;
    at BN 256 the build stores from registers: GL_STAGED_COPY): into c (row-major, odd pitch) or,
    D^T = B A^T, into c.T (c column-major, odd pitch; GL_EPI_SWAP)."""
    dt = torch.bfloat16
    kernel = staged("k", "k", bn)
    for m, n, k in EPILOGUE_SHAPES:
        a, b = random_operands(m, n, k, "bf16", "cuda", seed=m + n + 5 * k)
        call = epilogue_case(m, n, activation, "cuda")
        store, c, outside = poisoned_out(m, n, dt, ldc=(m if transposed else n) + 3, offset=3, transposed=transposed)
        if transposed:
            kernel.launch(operand_view(b, k_dim=1), operand_view(a, k_dim=1), c.T, split=split,
                          epilogue=call.oriented(True))
        else:
            kernel.launch(operand_view(a, k_dim=1), operand_view(b, k_dim=1), c, split=split,
                          epilogue=call.oriented(False))
        torch.cuda.synchronize()
        assert_untouched(store, outside)
        ref = call.reference(a.double() @ b.double().T)
        base = call.reference((a.float() @ b.float().T).to(dt).double())
        rel = ((c.double() - ref).norm() / ref.norm()).item()
        base_rel = ((base.to(dt).double() - ref).norm() / ref.norm()).item()
        assert not torch.isnan(c).any(), "outputs unwritten"
        assert rel <= error_bound(base_rel, "bf16"), (m, n, k, rel, base_rel)


@pytest.mark.timeout(300)
def test_the_api_routes_unaligned_outputs_to_the_staged_build_when_switched_on(monkeypatch):
    """dispatch/kernels.py's STAGED_STORE on: gemm_ladder.mm and linear on outputs TMA cannot write (N =
    4095 at the issue's 4097 x 4095 x 4093, N = 300, an out= view with an odd pitch and base, a
    column-major out= with an odd pitch, a float32 output) run the staged build in place, and explain
    names the staged copy."""
    monkeypatch.setattr(K, "STAGED_STORE", True)
    dispatch.clear_cache()
    try:
        check_api_on_unaligned_outputs([((4097, 4093, 4095), None), ((1000, 520, 300), None),
                                        ((1000, 520, 384), "pitch"), ((1000, 520, 384), "transposed"),
                                        ((600, 130, 777), "fp32")], STAGED, "_cstage")
        x = torch.randn(1000, 512, device="cuda").to(torch.bfloat16)
        w = torch.randn(301, 512, device="cuda").to(torch.bfloat16)
        bias = torch.randn(301, device="cuda").to(torch.bfloat16)
        res = torch.randn(1000, 301, device="cuda").to(torch.bfloat16)
        y = gemm_ladder.linear(x, w, bias, activation="gelu", residual=res)
        ref = torch.nn.functional.gelu(x.double() @ w.double().T + bias.double()) + res.double()
        assert ((y.double() - ref).norm() / ref.norm()).item() < 4e-3
    finally:
        dispatch.clear_cache()
