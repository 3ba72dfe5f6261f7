"""gemm_ladder.mm / linear on the GPU: every operand order, dtype, edge and unaligned shape, views
TMA cannot describe, small M, ``out=`` (contiguous, transposed, odd pitch), ``out_dtype``, repeated
runs, and an operand of more than 2^31 elements.

Each check draws fresh random operands (the correctness gate's ``random_operands``, a new seed per
call), poisons the output with NaN before the call (the gate's exact protocol: it allocates ``c``
NaN-filled and calls ``launch``), and holds the result to the gate's bounds against the float64
reference (``check_correctness``: 2 x cuBLAS's error + u, the absolute cap, every element written,
NaN/Inf placement).

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_api_gpu.py``.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import gemm_ladder
from gemm_ladder.contract import DTYPES, GemmInputError, reference
from gemm_ladder.gates.correctness import (
    ACCUMULATION_FACTOR,
    FP32_UNIT_ROUNDOFF,
    check_correctness,
    random_operands,
)
from gemm_ladder.shapes import SHAPE_SETS

pytestmark = pytest.mark.gpu


# --- how an operand sits in memory ------------------------------------------------------------


def row_major(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous()


def col_major(x: torch.Tensor) -> torch.Tensor:
    return x.T.contiguous().T


def padded(x: torch.Tensor, extra: int = 3) -> torch.Tensor:
    """Row-major with a pitch of cols + ``extra`` elements (not a multiple of 16 bytes for odd extra)."""
    big = torch.full((x.shape[0], x.shape[1] + extra), float("nan"), dtype=x.dtype, device=x.device)
    big[:, :x.shape[1]] = x
    return big[:, :x.shape[1]]


def offset(x: torch.Tensor, elems: int = 1) -> torch.Tensor:
    """Row-major at a base ``elems`` x 2 bytes past a 16-byte boundary."""
    big = torch.full((x.numel() + 8,), float("nan"), dtype=x.dtype, device=x.device)
    view = big[elems:elems + x.numel()].view(x.shape)
    view.copy_(x)
    return view


def strided(x: torch.Tensor) -> torch.Tensor:
    """Neither row- nor column-major: every other column of a twice-as-wide buffer."""
    big = torch.full((x.shape[0], 2 * x.shape[1]), float("nan"), dtype=x.dtype, device=x.device)
    big[:, ::2] = x
    return big[:, ::2]


LAYOUTS = {"row": row_major, "col": col_major}
ODD_VIEWS = {"padded": padded, "offset": offset, "strided": strided, "col_padded": lambda x: padded(x.T).T}


class MmTarget:
    """``mm`` seen by the correctness gate: a (M, K) and b (N, K) from the gate become ``mm(A, B)``
    with A = a and B = b.T laid out by ``a_layout`` / ``b_layout`` (B is (K, N): "col" is w.T of a
    row-major weight). ``out``: 'given' writes into the gate's NaN-filled c; 'transposed' into a
    NaN-filled column-major tensor, copied into c afterwards; 'none' returns a new tensor."""

    def __init__(self, a_layout, b_layout, out: str = "given"):
        self.a_layout, self.b_layout, self.out = a_layout, b_layout, out

    def operands(self, a, b):
        return self.a_layout(a), self.b_layout(b.T)

    def check(self, a, b):
        from gemm_ladder.dispatch.validate import check_mm

        check_mm(*self.operands(a, b))

    def launch(self, a, b, c):
        x, y = self.operands(a, b)
        if self.out == "given":
            gemm_ladder.mm(x, y, out=c)
        elif self.out == "transposed":
            t = torch.full((c.shape[1], c.shape[0]), float("nan"), dtype=c.dtype, device=c.device)
            gemm_ladder.mm(x, y, out=t.T)
            c.copy_(t.T)
        else:
            c.copy_(gemm_ladder.mm(x, y))

    def __call__(self, a, b):
        return gemm_ladder.mm(*self.operands(a, b))


def assert_correct(target, shapes, dtype):
    for m, n, k in shapes:
        r = check_correctness(target, m, n, k, dtype, device="cuda")
        assert r.status == "pass", (m, n, k, dtype, r.message, r.seed)


EDGE = SHAPE_SETS["edge"]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("a_layout,b_layout", list(itertools.product(LAYOUTS, LAYOUTS)))
def test_every_order_on_edge_shapes(a_layout, b_layout, dtype):
    """Tails, K = 1, K = BK, M or N = 1, empty dimensions, in all four operand orders."""
    assert_correct(MmTarget(LAYOUTS[a_layout], LAYOUTS[b_layout]), EDGE, dtype)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("view", sorted(ODD_VIEWS))
def test_views_tma_cannot_describe(view, dtype):
    """Padded pitches that are not 16-byte multiples, 2-byte aligned bases, strided views: repacked."""
    shapes = [(1, 1, 1), (7, 8, 9), (129, 136, 65), (300, 200, 1000), (255, 257, 129)]
    fn = ODD_VIEWS[view]
    assert_correct(MmTarget(fn, col_major), shapes, dtype)
    assert_correct(MmTarget(row_major, fn), shapes, dtype)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_unaligned_shapes(dtype):
    """Odd K and N (the issue's 4097 x 4095 x 4093 and smaller), in two orders."""
    for a_layout, b_layout in (("row", "col"), ("row", "row")):
        assert_correct(MmTarget(LAYOUTS[a_layout], LAYOUTS[b_layout]), SHAPE_SETS["unaligned"], dtype)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_small_m(dtype):
    shapes = [(m, n, k) for m in (1, 7, 16, 64, 128, 256) for n, k in ((4096, 4096), (1000, 520))]
    assert_correct(MmTarget(row_major, col_major), shapes, dtype)
    assert_correct(MmTarget(row_major, row_major), [(16, 4096, 4096), (3, 136, 72)], dtype)
    assert_correct(MmTarget(col_major, col_major), [(16, 4096, 4096), (3, 136, 72)], dtype)
    assert_correct(MmTarget(row_major, col_major), [(4096, 16, 4096), (520, 3, 72)], dtype)  # small N


@pytest.mark.timeout(900)
@pytest.mark.parametrize("out", ["given", "transposed", "none"])
def test_out(out):
    shapes = [(1, 1, 1), (129, 136, 65), (300, 200, 1000), (16, 4096, 512), (1023, 1025, 1027), (2048, 2048, 2048)]
    assert_correct(MmTarget(row_major, col_major, out), shapes, "bf16")


def test_out_with_odd_pitch_and_offset_and_fused_blocks():
    a, b = random_operands(300, 200, 1000, "bf16", "cuda", seed=11)
    ref = reference(a, b)
    for pitch, off in ((205, 0), (208, 1), (200, 3)):
        buf = torch.full((300 * pitch + off + 8,), float("nan"), dtype=a.dtype, device="cuda")
        out = buf[off:off + 300 * pitch].view(300, pitch)[:, :200]
        got = gemm_ladder.mm(a, b.T, out=out)
        assert got is out
        assert _close(out, ref, a, b, "bf16"), (pitch, off)
        padding = buf[off:off + 300 * pitch].view(300, pitch)[:, 200:]
        assert torch.isnan(buf[:off]).all() and torch.isnan(padding).all(), "wrote outside out"
    # Two outputs side by side in one buffer (a fused QKV output): neither overlaps the operands.
    fused = torch.full((300, 400), float("nan"), dtype=a.dtype, device="cuda")
    gemm_ladder.mm(a, b.T, out=fused[:, :200])
    gemm_ladder.mm(a, b.T, out=fused[:, 200:])
    assert torch.equal(fused[:, :200], fused[:, 200:]) and _close(fused[:, :200], ref, a, b, "bf16")


def _close(c, ref, a, b, dtype, *, out_fp32=False) -> bool:
    """The gate's bounds: 2 x cuBLAS's relative error + u, and its absolute cap (for a float32 output,
    the cap with fp32's unit roundoff, and the relative error at most cuBLAS's)."""
    from gemm_ladder.gates.correctness import _rel_err, absolute_cap, error_bound

    cub = torch.nn.functional.linear(a, b)
    cub_rel = _rel_err(cub, ref)
    rel = _rel_err(c, ref)
    max_abs = (c.double() - ref).abs().nan_to_num(nan=math.inf).max().item()
    if out_fp32:
        k = a.shape[1]
        row_a = torch.linalg.vector_norm(a.double(), dim=1).max().item()
        row_b = torch.linalg.vector_norm(b.double(), dim=1).max().item()
        cap = (2 * FP32_UNIT_ROUNDOFF * ref.abs().max().item()
               + ACCUMULATION_FACTOR * math.sqrt(k) * FP32_UNIT_ROUNDOFF * row_a * row_b)
        return rel <= cub_rel and max_abs <= cap
    return rel <= error_bound(cub_rel, dtype) and max_abs <= absolute_cap(a, b, ref.abs().max().item(), dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k", [(1, 8, 8), (129, 136, 65), (16, 4096, 4096), (256, 1000, 520), (2048, 2048, 2048),
                                   (4097, 4095, 4093)])
def test_out_dtype_float32(dtype, m, n, k):
    """Computed in fp32 everywhere: the small-M kernel (M <= 256), else the layouts kernel's float32
    register-store build; into a fresh output and into a column-major out= (D^T into c.T past small M:
    another launch, so the same bounds rather than the same bits)."""
    a, b = random_operands(m, n, k, dtype, "cuda", seed=m + n + k)
    e = gemm_ladder.explain(a, b.T, out_dtype=torch.float32)
    assert e.output["output_path"] == "C from registers", str(e)
    c = gemm_ladder.mm(a, b.T, out_dtype=torch.float32)
    assert c.dtype == torch.float32 and c.shape == (m, n)
    ref = reference(a, b)
    assert _close(c, ref, a, b, dtype, out_fp32=True)
    out = torch.full((n, m), float("nan"), dtype=torch.float32, device="cuda").T
    gemm_ladder.mm(a, b.T, out=out, out_dtype=torch.float32)
    if m <= 256:
        assert torch.equal(out, c)  # the same small-M launch
    else:
        assert _close(out, ref, a, b, dtype, out_fp32=True)


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (4097, 4095, 4093), (1024, 1024, 1024), (16, 4096, 4096),
                                   (300, 200, 1000)])
def test_repeated_runs_are_bitwise_identical(m, n, k):
    a, b = random_operands(m, n, k, "bf16", "cuda", seed=7)
    first = gemm_ladder.mm(a, b.T)
    for _ in range(10):
        assert torch.equal(gemm_ladder.mm(a, b.T), first)


def test_linear_batch_dimensions_and_views():
    a, w = random_operands(2 * 3 * 40, 72, 136, "bf16", "cuda", seed=3)
    x = a.view(2, 3, 40, 136)
    y = gemm_ladder.linear(x, w)
    assert y.shape == (2, 3, 40, 72) and y.is_contiguous()
    assert _close(y.view(-1, 72), reference(a, w), a, w, "bf16")
    # A 1-D x gives a 1-D y (M = 1 runs another kernel: equal within the bounds, not bitwise).
    y1 = gemm_ladder.linear(x[0, 1, 5], w)
    assert y1.shape == (72,) and _close(y1[None], reference(x[0, 1, 5][None], w), x[0, 1, 5][None], w, "bf16")
    xt = x.transpose(0, 1)  # batch dimensions that do not merge into one view: copied by torch.reshape
    yt = gemm_ladder.linear(xt, w)
    assert yt.shape == (3, 2, 40, 72) and yt.is_contiguous()
    x2 = xt.reshape(-1, 136)
    assert _close(yt.view(-1, 72), reference(x2, w), x2, w, "bf16")
    bias = torch.randn(72, dtype=w.dtype, device="cuda")
    yb = gemm_ladder.linear(x, w, bias)  # fused since issue 13 (tests/test_epilogue_gpu.py covers it whole)
    assert _close(yb.view(-1, 72), reference(x.reshape(-1, 136), w) + bias.double(), x.reshape(-1, 136), w, "bf16")


def test_bad_cuda_input_is_refused_before_any_launch():
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    for args, kwargs, rule in (
        ((a.float(), a.float()), {}, "dtype"),
        ((a, a.half()), {}, "share a dtype"),
        ((a[None], a), {}, "2-D"),
        ((a, a[:32]), {}, "must equal"),
        ((a, a), {"out": a}, "out overlaps a"),
        ((a, a), {"out": torch.empty(64, 64, device="cuda", dtype=torch.float16)}, "out has dtype"),
        ((a, a.cpu()), {}, "cuda"),
    ):
        with pytest.raises(GemmInputError, match=rule):
            gemm_ladder.mm(*args, **kwargs)
    out = torch.full((64, 0), 1.0, device="cuda", dtype=torch.bfloat16)
    assert gemm_ladder.mm(a, a[:, :0], out=out) is out
    zeros = torch.full((64, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert torch.count_nonzero(gemm_ladder.mm(a[:, :0], a[:0], out=zeros)) == 0


def test_explain_matches_the_run():
    """explain on CUDA tensors names the path mm takes (repacks for odd K and N, in place otherwise)."""
    a, b = random_operands(4097, 4095, 4093, "bf16", "cuda", seed=5)
    e = gemm_ladder.explain(a, b.T)
    assert {op["path"] for op in e.operands} == {"repacked"} and "NVIDIA" in e.device and "assumed" not in e.device
    a, b = random_operands(4096, 4096, 4096, "bf16", "cuda", seed=5)
    e = gemm_ladder.explain(a, b.T)
    assert {op["path"] for op in e.operands} == {"in place"} and e.output["path"] == "in place"


def test_operand_of_more_than_two_to_the_31_elements():
    """A (524424, 4096) bf16 operand (2^31 + 557056 elements, 4 GiB): computed right, checked on its
    first and last rows against the float64 reference (the rule: any element count, each extent < 2^31)."""
    m, n, k = 2**31 // 4096 + 136, 256, 4096
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * m * k * 2:
        pytest.skip(f"needs {3 * m * k * 2 / 2**30:.0f} GiB of free GPU memory")
    gen = torch.Generator(device="cuda").manual_seed(13)
    a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
    b = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.bfloat16)
    assert a.numel() > 2**31
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    gemm_ladder.mm(a, b.T, out=c)
    for rows in (slice(0, 256), slice(m - 300, m)):
        ref = reference(a[rows], b)
        assert _close(c[rows], ref, a[rows], b, "bf16"), rows
    del a, c
    torch.cuda.empty_cache()
