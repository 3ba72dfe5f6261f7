"""Split "tail_spread" (the library kernel's GL_SK_SPREAD build: a split tile reduced by its participants
together, kernels/include/gemm_ladder/stream_k_spread.cuh) on the GPU.

Each check: fresh random operands, the output NaN-poisoned before the launch (a share nobody stores
stays NaN), compared with the float64 reference under the correctness gate's bounds, and with split
"tail" of the plain build (the same fp32 slots added in the same order, then the same rounding:
bitwise equal without an epilogue). Shapes are found for the device's resident clusters so that the
tail really is split, with few contributors per tile (K = 128: one or two), about nine (the issue's
4097 x 4096 x 4096 at BN 256) and many (one tail unit over every cluster, K = 8192), with M and N
tails; each BN (64, 128, 256); the TMA-store build (shares stored with plain stores beside its tensor
map) and the register-store build (an odd pitch and base, nothing written outside the view); a float32
output; fp16; MN-major operands; a fused epilogue in both orientations; three launches bitwise equal.

Run on the H200: ``python3 -m pytest -q -m gpu -n 12 tests/test_stream_k_spread_gpu.py``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from gemm_ladder.design.problem import ceil_div
from gemm_ladder.gates.correctness import absolute_cap, error_bound
from gemm_ladder.library.gemm import TILE_N, library_gemm, split_schedule
from gemm_ladder.library.operand import operand_view

pytestmark = pytest.mark.gpu

NAN = float("nan")
DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.fixture(scope="module", autouse=True)
def _built_in_parallel():
    """The plain and spread builds the tests launch (24; the epilogue builds compile at first use), at
    once (nvcc in threads)."""
    jobs = [(library_gemm("k", "k", bn, c_from_registers=creg, out_fp32=f32, sk_spread=spread), "bf16")
            for bn in TILE_N for creg, f32 in ((False, False), (True, False), (True, True)) for spread in (False, True)]
    jobs += [(library_gemm(a, a, 128, sk_spread=spread), dt) for a, dt in (("k", "fp16"), ("mn", "bf16"), ("mn", "fp16"))
             for spread in (False, True)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda job: job[0].build(job[1]), jobs))


def clusters(kernel) -> int:
    return kernel.loaded("bf16", torch.device("cuda")).max_active_clusters(torch.device("cuda"))


def split_shape(bn: int, g: int, k: int, lo: int, hi: int) -> tuple[int, int, int]:
    """An (M, N, K) whose "tail" split on ``g`` clusters at width ``bn`` has between lo and hi
    contributors on its most shared tile, with tails in M (M = 256 u - 37) and N (N = bn t - 24)."""
    for t in (16, 8, 4, 2, 1, 3, 5, 7, 9, 11, 13):
        for u in range(1, 400):
            s = split_schedule(u * t, g, ceil_div(k, 64), "tail")
            if s.tail_units and lo <= s.max_contributors <= hi:
                return 256 * u - 37, bn * t - 24, k
    raise AssertionError(f"no shape with {lo}-{hi} contributors at BN {bn} on {g} clusters, K = {k}")


def shapes(bn: int, g: int) -> list[tuple[int, int, int]]:
    """Few (2), about nine and many contributors per split tile, and the issue's shape at BN 256."""
    out = [split_shape(bn, g, 128, 2, 2), split_shape(bn, g, 4096, 6, 12), split_shape(bn, g, 8192, g // 2, g + 1)]
    if bn == 256:
        out.append((4097, 4096, 4096))
    return out


def operands(m, n, k, dtype, a_major="k", b_major="k", seed=0):
    """Fresh random a (M, K), b (N, K) and views of them in the given majors, each at a padded pitch
    (extent rounded up to 8, plus 8) 16 bytes into its buffer (test_library_gemm_gpu.place)."""
    from test_library_gemm_gpu import place

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(DT[dtype])
    b = torch.randn(n, k, device="cuda", generator=g).to(DT[dtype])
    return a, b, place(a, a_major, pad=None, offset=8), place(b, b_major, pad=None, offset=8)


def assert_close(c, a, b, dtype):
    """No NaN left; relative Frobenius error within the gate's bound (cuBLAS's error x 2 + u) and every
    element within the gate's absolute cap."""
    assert not torch.isnan(c).any(), f"{int(torch.isnan(c).sum())} elements never written"
    ref = a.double() @ b.double().T
    cub = (a @ b.T).double()
    rel = lambda x: ((x - ref).norm() / ref.norm()).item()  # noqa: E731
    err, bound = rel(c.double()), error_bound(rel(cub), dtype)
    assert err <= bound, (err, bound)
    cap = absolute_cap(a, b, ref.abs().max().item(), dtype)
    assert (c.double() - ref).abs().max().item() <= cap


def output(m, n, dtype, creg, fp32=False):
    """A NaN-poisoned (m, n) output; for the register-store build, a view at an odd pitch and base inside
    a larger poisoned buffer (returned too, to check nothing is written outside the view)."""
    t = torch.float32 if fp32 else DT[dtype]
    if not creg:
        return torch.full((m, n), NAN, device="cuda", dtype=t), None
    buf = torch.full(((m + 2) * (n + 3) + 1,), NAN, device="cuda", dtype=t)
    return buf[1:1 + m * (n + 3)].view(m, n + 3)[:, :n], buf


def outside_untouched(c, buf):
    if buf is None:
        return
    mask = torch.ones_like(buf, dtype=torch.bool)
    base = c.data_ptr() - buf.data_ptr()
    idx = base // buf.element_size() + (torch.arange(c.shape[0], device="cuda")[:, None] * c.stride(0)
                                         + torch.arange(c.shape[1], device="cuda")[None, :])
    mask[idx.flatten()] = False
    assert torch.isnan(buf[mask]).all(), "written outside the output view"


def run(kernel, va, vb, c, split):
    c.fill_(NAN)
    kernel.launch(va, vb, c, split=split)
    torch.cuda.synchronize()
    return c.clone()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("creg", [False, True], ids=["tma_store", "register_store"])
@pytest.mark.parametrize("bn", TILE_N)
def test_split_tails_are_correct_and_bitwise_equal_to_tail(bn, creg):
    kernel = library_gemm("k", "k", bn, c_from_registers=creg)
    g = clusters(kernel.spread_build())
    assert g == clusters(kernel)  # one grid: the same split, the same slots
    for i, (m, n, k) in enumerate(shapes(bn, g)):
        s = split_schedule(ceil_div(ceil_div(m, 128), 2) * ceil_div(n, bn), g, ceil_div(k, 64), "tail_spread")
        assert s.tail_units and s.max_contributors > 1, (m, n, k)  # the spread path runs
        a, b, va, vb = operands(m, n, k, "bf16", seed=100 * bn + i)
        c, buf = output(m, n, "bf16", creg)
        spread = run(kernel, va, vb, c, "tail_spread")
        assert_close(spread, a, b, "bf16")
        outside_untouched(c, buf)
        tail = run(kernel, va, vb, c, "tail")
        assert torch.equal(spread, tail), (m, n, k, (spread.float() - tail.float()).abs().max().item())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bn", [64, 256])
def test_three_launches_are_bitwise_identical(bn):
    kernel = library_gemm("k", "k", bn)
    g = clusters(kernel)
    for i, (m, n, k) in enumerate(shapes(bn, g)):
        a, b, va, vb = operands(m, n, k, "bf16", seed=7 + i)
        c, _ = output(m, n, "bf16", False)
        first = run(kernel, va, vb, c, "tail_spread")
        for _ in range(2):
            assert torch.equal(run(kernel, va, vb, c, "tail_spread"), first), (m, n, k)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bn", TILE_N)
def test_float32_output(bn):
    """The float32 register-store build: fp32 sums stored unrounded, compared with float64 (bf16 products
    are exact in fp32: only the accumulation errs) and bitwise with split "tail"."""
    kernel = library_gemm("k", "k", bn, c_from_registers=True, out_fp32=True)
    g = clusters(kernel)
    for i, (m, n, k) in enumerate(shapes(bn, g)[:3]):
        a, b, va, vb = operands(m, n, k, "bf16", seed=300 + i)
        c, buf = output(m, n, "bf16", True, fp32=True)
        spread = run(kernel, va, vb, c, "tail_spread")
        outside_untouched(c, buf)
        ref = a.double() @ b.double().T
        assert not torch.isnan(spread).any()
        assert ((spread.double() - ref).norm() / ref.norm()).item() < 1e-5
        assert torch.equal(spread, run(kernel, va, vb, c, "tail"))


@pytest.mark.timeout(300)
def test_fp16_and_mn_major_operands():
    for dtype, am, bm in (("fp16", "k", "k"), ("bf16", "mn", "mn"), ("fp16", "mn", "mn")):
        kernel = library_gemm(am, bm, 128)
        g = clusters(kernel)
        for i, (m, n, k) in enumerate(shapes(128, g)):
            a, b, va, vb = operands(m, n, k, dtype, am, bm, seed=500 + i)
            c, _ = output(m, n, dtype, False)
            spread = run(kernel, va, vb, c, "tail_spread")
            assert_close(spread, a, b, dtype)
            assert torch.equal(spread, run(kernel, va, vb, c, "tail"))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("creg", [False, True], ids=["tma_store", "register_store"])
@pytest.mark.parametrize("swap", [False, True], ids=["direct", "swapped"])
def test_fused_epilogue_on_the_shares(creg, swap):
    """linear's epilogue (bias, GELU(tanh), residual, alpha, beta) applied by each participant to its
    share: within the epilogue gate's bound of the float64 reference, and equal to split "tail" (the
    same fp32 sums through the same epilogue code) to within one rounding of the output."""
    from gemm_ladder.dispatch.validate import linear_call
    from test_epilogue_gpu import assert_epilogue_close

    bf = torch.bfloat16
    for bn in (128, 256):
        kernel = library_gemm("k", "k", bn, c_from_registers=creg)
        g = clusters(kernel)
        for i, (m, n, k) in enumerate(shapes(bn, g)[:3]):
            if swap:
                m, n = n, m  # the kernel's output is c.T: its split in kernel coordinates
            gen = torch.Generator(device="cuda").manual_seed(900 + 10 * bn + i)
            x, w = (torch.randn(s, k, device="cuda", generator=gen).to(bf) for s in (m, n))
            bias, res = torch.randn(n, device="cuda", generator=gen).to(bf), torch.randn(
                m, n, device="cuda", generator=gen).to(bf)
            call = linear_call(x, w, bias, activation="gelu_tanh", residual=res, alpha=0.5, beta=1.0)
            outs = {}
            for split in ("tail", "tail_spread"):
                if swap:
                    c = torch.full((n, m), NAN, device="cuda", dtype=bf).T
                    kernel.launch(operand_view(w, k_dim=1), operand_view(x, k_dim=1), c.T, split=split,
                                  epilogue=call.oriented(True))
                else:
                    c = torch.full((m, n), NAN, device="cuda", dtype=bf)
                    kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, split=split, epilogue=call)
                torch.cuda.synchronize()
                assert_epilogue_close(c, x, w, call)
                outs[split] = c.float()
            # one bf16 rounding apart at most (the same fp32 sums through the same epilogue code; only a
            # different contraction of its math into FMAs could move a rounding)
            diff = (outs["tail"] - outs["tail_spread"]).abs()
            scale = torch.maximum(outs["tail"].abs(), outs["tail_spread"].abs())
            assert (diff <= 2.0 ** -7 * scale + 1e-6 * scale.max()).all(), diff.max().item()


@pytest.mark.timeout(300)
def test_the_grid_fits_the_resident_clusters_and_the_shares_get_the_output():
    """The spin needs every CTA resident at once: the bound launch's grid is at most the occupancy query's
    clusters (2 CTAs each); the TMA-store spread build gets c's pointer and pitch after the counters."""
    import ctypes

    for bn in TILE_N:
        kernel = library_gemm("k", "k", bn)
        g = clusters(kernel.spread_build())
        assert 1 <= g <= torch.cuda.get_device_properties(0).multi_processor_count // 2
        m, n, k = shapes(bn, g)[1]
        a, b, va, vb = operands(m, n, k, "bf16")
        c, _ = output(m, n, "bf16", False)
        bound = kernel.bind(va, vb, c, split="tail_spread")
        s = split_schedule(ceil_div(ceil_div(m, 128), 2) * ceil_div(n, bn), g, ceil_div(k, 64), "tail_spread")
        assert bound.prepared._config.gridDimX == 2 * s.clusters and s.clusters <= g
        ptr, ldc = bound.prepared.args[-2:]
        assert isinstance(ptr, ctypes.c_void_p) and ptr.value == c.data_ptr() and ldc.value == c.stride(0)
        bound()
        torch.cuda.synchronize()
        assert_close(c, a, b, "bf16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("creg", [False, True], ids=["tma_store", "register_store"])
def test_every_unit_split_on_the_spread_build(creg):
    """Split "all_spread" (the spread build under "all"'s schedule: every unit shared by K over every
    cluster, the protocol on every tile: a range's first segment may hand in and leave, its last one
    participates): correct, and bitwise equal to the plain build's "all"; the spread build's own "all"
    is the same launch."""
    for bn in TILE_N:
        kernel = library_gemm("k", "k", bn, c_from_registers=creg)
        for i, (m, n, k) in enumerate([(1000, 520, 4096), (256, 384, 65), (392, 776, 200), (1, 24, 4000)]):
            a, b, va, vb = operands(m, n, k, "bf16", seed=700 + i)
            c, buf = output(m, n, "bf16", creg)
            spread = run(kernel, va, vb, c, "all_spread")
            assert_close(spread, a, b, "bf16")
            outside_untouched(c, buf)
            assert torch.equal(spread, run(kernel, va, vb, c, "all")), (bn, m, n, k)
            assert torch.equal(spread, run(kernel.spread_build(), va, vb, c, "all")), (bn, m, n, k)
