"""The small_m table's "general" answer on the GPU: with a made-up table that measured the general kernel
faster at some (M, N, K) with M <= 256 (dispatch/small_m_tiles.py), ``gemm_ladder.mm`` and ``linear``
(with a bias, and with the full fused epilogue) route those calls to the general kernel and compute them
right; a shape the table answers "one tile" stays on the small-M kernel.

Each check: fresh random operands, the output NaN-filled before the call (``check_correctness`` for mm:
2 x cuBLAS's error + u and the absolute cap against float64, every element written), tails in M, N and
K, both dtypes, both orientations (a small N takes D^T = B A^T).

A table saying GENERAL_BM64 (the general kernel's 64-row build with one CTA per cluster, at a BN the
table names) routes ``mm`` to that build at that BN, computed right (not yet run on the GPU).

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_small_m_general_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.contract import reference
from gemm_ladder.dispatch.small_m_tiles import fit
from gemm_ladder.dispatch.validate import linear_call
from gemm_ladder.gates.correctness import _rel_err, absolute_cap, check_correctness, check_nonfinite, error_bound

pytestmark = pytest.mark.gpu

#: (M, N, K) where the made-up table says "general" (M <= 256; tails in M, N and K).
GENERAL_AT = ((256, 4096, 4096), (200, 1000, 520), (96, 264, 1032), (17, 4096, 136))
#: Where it says one tile (the general kernel slower).
SMALL_AT = ((128, 2048, 2048),)


def general_here():
    rows = [{"m": m, "n": n, "k": k, "one_tile_us": [10.0], "two_tile_us": [12.0],
             "general_us": [5.0 if (m, n, k) in GENERAL_AT else 20.0], "general_route": "made up"}
            for m, n, k in GENERAL_AT + SMALL_AT]
    return fit(rows, "made up: the general kernel at GENERAL_AT")


@pytest.fixture
def table(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    dispatch.clear_cache()
    monkeypatch.setattr(dispatch, "_tiles", general_here())
    yield
    dispatch.clear_cache()


def kind_of(x, y):
    c = torch.empty(x.shape[0], y.shape[1], dtype=x.dtype, device=x.device)
    return dispatch.decide(x, y, c, given=True)


class Mm:
    """``mm(a, b.T)`` seen by the gate, asserting first that the route is of ``kind``."""

    def __init__(self, kind: str):
        self.kind = kind

    def check(self, a, b):
        r = kind_of(a, b.T)
        assert r.kind == self.kind, (tuple(a.shape), tuple(b.shape), r.kind)
        assert (r.small_m_table is not None) == (self.kind == "general")

    def launch(self, a, b, c):
        gemm_ladder.mm(a, b.T, out=c)

    def __call__(self, a, b):
        return gemm_ladder.mm(a, b.T)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mm_where_the_table_says_general(table, dtype):
    for m, n, k in GENERAL_AT:
        r = check_correctness(Mm("general"), m, n, k, dtype, device="cuda")
        assert r.status == "pass", (m, n, k, dtype, r.message, r.seed)
    for m, n, k in SMALL_AT:
        r = check_correctness(Mm("small_m"), m, n, k, dtype, device="cuda")
        assert r.status == "pass", (m, n, k, dtype, r.message, r.seed)


def test_mm_transposed_orientation(table):
    """A small N: the small-M kernel would take the caller's N on its M (D^T into c.T), so the table is
    read at (N, M, K); where it says "general", the general kernel computes the caller's (M, N, K) in its
    own orientation (M = 4096 rows: D = A B^T straight into c), and the table's answer is kept on the route."""
    m, n, k = 4096, 256, 4096  # the small-M kernel's (M, N, K) would be (256, 4096, 4096): "general"
    x = torch.randn(m, k, device="cuda").bfloat16()
    w = torch.randn(n, k, device="cuda").bfloat16()
    r = kind_of(x, w.T)
    assert r.kind == "general" and r.small_m_table is not None and r.small_m_table.general_why
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    gemm_ladder.mm(x, w.T, out=out)
    ref = reference(x, w)
    cub = _rel_err(torch.nn.functional.linear(x, w), ref)
    assert check_nonfinite(out, ref) is None and _rel_err(out, ref) <= error_bound(cub, "bf16")


@pytest.mark.parametrize("full", [False, True], ids=["bias", "fused_epilogue"])
def test_linear_where_the_table_says_general(table, full):
    for m, n, k in GENERAL_AT:
        x = torch.randn(m, k, device="cuda").bfloat16()
        w = torch.randn(n, k, device="cuda").bfloat16()
        bias = torch.randn(n, device="cuda").bfloat16()
        assert kind_of(x, w.T).kind == "general"
        kw = dict(activation="gelu", residual=torch.randn(m, n, device="cuda").bfloat16(), alpha=0.5,
                  beta=-1.25) if full else {}
        for out_dtype in (None, torch.float32):
            p = torch.full((1 << 24,), float("nan"), device="cuda")  # a freed NaN block: unwritten shows NaN
            del p
            y = gemm_ladder.linear(x, w, bias, out_dtype=out_dtype, **kw)
            call = linear_call(x, w, bias, **kw)
            ref = call.reference(reference(x, w))
            base = call.reference(torch.nn.functional.linear(x, w).double()).to(y.dtype)
            assert check_nonfinite(y, ref) is None, (m, n, k, out_dtype)
            bound = (2 * _rel_err(base, ref) + 2.0**-24 if y.dtype == torch.float32
                     else error_bound(_rel_err(base, ref), "bf16"))
            assert _rel_err(y, ref) <= bound, (m, n, k, out_dtype, _rel_err(y, ref), bound)
            cap = absolute_cap(x, w, ref.abs().max().item(), "bf16") + 2 * (base.double() - ref).abs().max().item()
            assert (y.double() - ref).abs().max().item() <= cap, (m, n, k, out_dtype)


#: (M, N, K) where a made-up table says GENERAL_BM64 at BN 128 (a K not a multiple of 64, an N not of 128).
BM64_AT = ((128, 4096, 1024), (197, 3000, 1000))


class MmBm64(Mm):
    """``mm(a, b.T)`` seen by the gate, asserting first that the route is the 64-row one-CTA build at BN 128."""

    def __init__(self):
        super().__init__("general")

    def check(self, a, b):
        r = kind_of(a, b.T)
        assert r.kind == "general" and (r.config.tile[0], r.config.cluster, r.bn) == (64, 1, 128), r.config
        assert r.small_m_table is not None and r.small_m_table.general_bm64_bn == 128


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mm_where_the_table_says_the_64_row_build(monkeypatch, dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    rows = [{"m": m, "n": n, "k": k, "one_tile_us": [10.0], "two_tile_us": [12.0], "general_us": [20.0],
             "general_route": "made up", "general_bm64_us": [5.0], "general_bm64_bn": 128,
             "general_bm64_route": "made up"} for m, n, k in BM64_AT]
    dispatch.clear_cache()
    monkeypatch.setattr(dispatch, "_tiles", fit(rows, "made up: the 64-row build at BM64_AT"))
    try:
        for m, n, k in BM64_AT:
            r = check_correctness(MmBm64(), m, n, k, dtype, device="cuda")
            assert r.status == "pass", (m, n, k, dtype, r.message, r.seed)
    finally:
        dispatch.clear_cache()
