"""The small-M kernel computing M in two tiles, through gemm_ladder.mm and linear on the GPU.

A made-up M-tile rule that picks two tiles wherever M > 8 (dispatch/small_m_tiles.py) is installed as
the package's; each check asserts the route took two tiles of the smaller bucket, then holds the
result to the correctness gate's bounds against float64 (``check_correctness``: fresh random operands,
the output NaN-filled before the call, 2 x cuBLAS's error + u, the absolute cap, every element
written). M in {96, 128, 192, 200, 256} (200: a second tile of 72 rows in a bucket of 128), N and K with
tails, both dtypes, a float32 output, a fused epilogue, repeated runs bitwise equal, and the shipped
table's own choice at 128 x 4096 x 4096.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_small_m_tiles_gpu.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.contract import reference
from gemm_ladder.dispatch.small_m_tiles import TilesRule, fit, load_rule, tile_bn, two_tile_bn
from gemm_ladder.dispatch.validate import linear_call
from gemm_ladder.gates.correctness import _rel_err, absolute_cap, check_correctness, check_nonfinite, error_bound

pytestmark = pytest.mark.gpu

M_VALUES = (96, 128, 192, 200, 256)
NK = ((4096, 4096), (1000, 520), (264, 1032), (136, 72))  # tails: N not a multiple of 128, K not of 64


@pytest.fixture(scope="module", autouse=True)
def prebuilt():
    """The plain builds these tests launch, compiled in parallel first (nvcc is most of the run's time;
    the fused epilogue's builds compile at their first launch)."""
    from concurrent.futures import ThreadPoolExecutor

    from gemm_ladder.library.small_m import small_m_kernel

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    variants = [("bf16", False, "k", "k"), ("fp16", False, "k", "k"), ("bf16", False, "k", "mn"),
                ("bf16", False, "mn", "k"), ("bf16", True, "k", "k")]
    jobs = [(bn, *v) for bn in (64, 128) for v in variants] + [(16, "bf16", False, "k", "k")]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        list(pool.map(lambda j: small_m_kernel(j[0]).build(j[1], out_fp32=j[2], a_major=j[3], b_major=j[4]), jobs))


def two_everywhere(nk=NK) -> TilesRule:
    """Two tiles for every M > 8 at every timed shape (made-up times the rule agrees with)."""
    rows = [{"m": m, "n": n, "k": k, "one_tile_us": [10.0], "two_tile_us": [5.0]}
            for n, k in nk for m in (16, 32, 64, 128, 192, 256)]
    return fit(rows, "made up: two tiles everywhere")


@pytest.fixture
def two_tiles(monkeypatch):
    dispatch.clear_cache()
    monkeypatch.setattr(dispatch, "_tiles", two_everywhere())
    yield
    dispatch.clear_cache()


def route_of(x, y, c):
    return dispatch.decide(x, y, c, given=True)


class TwoTileMm:
    """``mm(a, b.T, out=c)`` seen by the gate, asserting first that the route computes M in two tiles."""

    def check(self, a, b):
        c = torch.empty(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)
        r = route_of(a, b.T, c)
        assert r.kind == "small_m" and r.tiles.tiles == 2 and r.kernel.bn == two_tile_bn(a.shape[0]), r.tiles

    def launch(self, a, b, c):
        gemm_ladder.mm(a, b.T, out=c)

    def __call__(self, a, b):
        return gemm_ladder.mm(a, b.T)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mm_in_two_tiles_against_float64(two_tiles, dtype):
    target = TwoTileMm()
    for m in M_VALUES:
        for n, k in NK:
            r = check_correctness(target, m, n, k, dtype, device="cuda")
            assert r.status == "pass", (m, n, k, dtype, r.message, r.seed)


def _close(c, a, b, *, out_fp32=False) -> bool:
    """The gate's bounds for c = a @ b.T (a float32 output: at most cuBLAS's relative error + 2^-24)."""
    dtype = "fp16" if a.dtype == torch.float16 else "bf16"
    ref = reference(a, b)
    cub_rel = _rel_err(torch.nn.functional.linear(a, b), ref)
    rel = _rel_err(c, ref)
    if out_fp32:
        return rel <= cub_rel + 2.0**-24
    max_abs = (c.double() - ref).abs().nan_to_num(nan=math.inf).max().item()
    return rel <= error_bound(cub_rel, dtype) and max_abs <= absolute_cap(a, b, ref.abs().max().item(), dtype)


def poison():
    """Leave a freed NaN block behind, so an element the kernel does not write shows NaN."""
    p = torch.full((1 << 24,), float("nan"), device="cuda")
    del p


def test_layouts_fp32_out_and_bitwise_repeats(two_tiles):
    for m in M_VALUES:
        for n, k in ((4096, 4096), (1000, 520)):
            gen = torch.Generator(device="cuda").manual_seed(m * 7 + n + k)
            x = torch.randn(m, k, generator=gen, device="cuda").bfloat16()
            w = torch.randn(n, k, generator=gen, device="cuda").bfloat16()
            for wt in (w.T, w.T.contiguous()):  # F.linear's weight (B K-major), and x @ W (B MN-major)
                out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                assert route_of(x, wt, out).tiles.tiles == 2
                gemm_ladder.mm(x, wt, out=out)
                assert _close(out, x, w), (m, n, k, wt.stride())
                for _ in range(3):  # the same grid adds the partials in the same order: bitwise equal
                    poison()
                    assert torch.equal(gemm_ladder.mm(x, wt), out)
            # A column-major out (written through c.T's orientation... or in place), and a float32 out.
            out_t = torch.full((n, m), float("nan"), dtype=torch.bfloat16, device="cuda").T
            gemm_ladder.mm(x, w.T, out=out_t)
            assert _close(out_t, x, w)
            poison()
            y32 = gemm_ladder.mm(x, w.T, out_dtype=torch.float32)
            assert y32.dtype == torch.float32 and _close(y32, x, w, out_fp32=True), (m, n, k)
            # an MN-major x: BN >= 64 reads it in place in both tile counts
            poison()
            xm = x.T.contiguous().T
            assert _close(gemm_ladder.mm(xm, w.T), x, w)


def test_linear_with_a_fused_epilogue_in_two_tiles(two_tiles):
    for m, n, k in ((96, 4096, 512), (200, 1000, 520), (256, 264, 1032), (128, 4096, 4096)):
        x = torch.randn(m, k, device="cuda").bfloat16()
        w = torch.randn(n, k, device="cuda").bfloat16()
        bias, res = torch.randn(n, device="cuda").bfloat16(), torch.randn(m, n, device="cuda").bfloat16()
        assert route_of(x, w.T, torch.empty(m, n, dtype=torch.bfloat16, device="cuda")).tiles.tiles == 2
        for out_dtype in (None, torch.float32):
            poison()
            y = gemm_ladder.linear(x, w, bias, activation="gelu", residual=res, alpha=0.5, beta=-1.25,
                                   out_dtype=out_dtype)
            call = linear_call(x, w, bias, activation="gelu", residual=res, alpha=0.5, beta=-1.25)
            ref = call.reference(reference(x, w))
            base = call.reference(torch.nn.functional.linear(x, w).double()).to(y.dtype)
            assert check_nonfinite(y, ref) is None
            bound = (2 * _rel_err(base, ref) + 2.0**-24 if y.dtype == torch.float32
                     else error_bound(_rel_err(base, ref), "bf16"))
            assert _rel_err(y, ref) <= bound, (m, n, k, out_dtype, _rel_err(y, ref), bound)
            cap = absolute_cap(x, w, ref.abs().max().item(), "bf16") + 2 * (base.double() - ref).abs().max().item()
            assert (y.double() - ref).abs().max().item() <= cap, (m, n, k, out_dtype)
            first = y.clone()
            assert torch.equal(gemm_ladder.linear(x, w, bias, activation="gelu", residual=res, alpha=0.5,
                                                  beta=-1.25, out_dtype=out_dtype), first)


def test_an_mn_major_x_at_m_64_falls_back_to_one_tile(two_tiles):
    x = torch.randn(64, 1032, device="cuda").bfloat16()
    w = torch.randn(1000, 1032, device="cuda").bfloat16()
    xm = x.T.contiguous().T
    out = torch.full((64, 1000), float("nan"), dtype=torch.bfloat16, device="cuda")
    r = route_of(xm, w.T, out)
    assert r.tiles.tiles == 1 and r.kernel.bn == 64 and r.a_path.repack is None
    gemm_ladder.mm(xm, w.T, out=out)
    assert _close(out, x, w)


def test_the_shipped_table_on_the_gpu():
    """The shipped entry's choice at 128 x 4096 x 4096 (two tiles of BN 64) and 16 x 28672 x 8192 (one)."""
    dispatch.clear_cache()
    rule = load_rule()
    for m, n, k in ((128, 4096, 4096), (256, 4096, 4096), (16, 28672, 8192)):
        x = torch.randn(m, k, device="cuda").bfloat16()
        w = torch.randn(n, k, device="cuda").bfloat16()
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        r = route_of(x, w.T, out)
        want = rule.choose(m, n, k)
        if want.general_why:  # a retune measured the general kernel faster here (tests/test_small_m_general_gpu.py)
            assert r.kind == "general" and r.small_m_table == want, (m, n, k)
        else:
            assert (r.kernel.bn, r.tiles.tiles) == (want.bn, want.tiles), (m, n, k)
            assert r.kernel.bn == tile_bn(m, want.tiles)  # these M are timed: the bucket of ceil(M / tiles) rows
        gemm_ladder.mm(x, w.T, out=out)
        assert _close(out, x, w), (m, n, k)
