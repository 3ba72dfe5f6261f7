"""Fused epilogues on the GPU: gemm_ladder.linear's bias / activation / residual / alpha / beta and a user
Epilogue against the float64 reference of the whole epilogue, under the gates' bound (2 x the eager
torch composition's relative error + u, and the absolute cap plus twice the composition's worst element;
gates/epilogue.py). Fresh random inputs every check; outputs poisoned with NaN first.

    pytest -m gpu tests/test_epilogue_gpu.py
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

import gemm_ladder
from gemm_ladder.contract import reference
from gemm_ladder.dispatch import decide
from gemm_ladder.dispatch.execute import run
from gemm_ladder.dispatch.validate import linear_call
from gemm_ladder.gates.correctness import _rel_err, absolute_cap, check_nonfinite, error_bound
from gemm_ladder.gates.epilogue import check_epilogue_correctness
from gemm_ladder.library.epilogue import ACTIVATIONS
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
BF16 = torch.bfloat16


def rnd(*shape, dtype=BF16):
    return torch.randn(shape, device="cuda").to(dtype)


def poisoned():
    """Leave a freed NaN block behind so an output that is not written shows NaN (the gate's trick)."""
    p = torch.full((1 << 22,), float("nan"), device="cuda")
    del p


def assert_epilogue_close(y, x2, w, call):
    """y (M, N) against call's reference on the float64 product, with the gate's bounds and NaN placement."""
    torch.cuda.synchronize()
    dtype = "fp16" if x2.dtype == torch.float16 else "bf16"
    ref = call.reference(reference(x2, w))
    base = call.reference(torch.nn.functional.linear(x2, w).double()).to(y.dtype)
    fin = torch.isfinite(ref)
    assert check_nonfinite(y, ref) is None, check_nonfinite(y, ref)
    if y.dtype == torch.float32:
        u = 2.0**-24
        bound = 2 * _rel_err(base, ref) + u
    else:
        bound = error_bound(_rel_err(base, ref), dtype)
    rel = _rel_err(y, ref)
    assert rel <= bound, (rel, bound)
    base_max = (base.double() - ref)[fin].abs().max().item() if fin.any() else 0.0
    # the cap's operand magnitudes from the finite entries: a planted NaN/Inf would make it NaN
    cap = absolute_cap(x2.nan_to_num(0.0, 0.0, 0.0), w.nan_to_num(0.0, 0.0, 0.0),
                       ref[fin].abs().max().item() if fin.any() else 0.0, dtype) + 2 * base_max
    err = (y.double() - ref)[fin].abs().nan_to_num(nan=math.inf).max().item() if fin.any() else 0.0
    assert err <= cap, (err, cap)


def check_linear(x, w, bias=None, **kw):
    if bias is not None:
        kw["bias"] = bias
    poisoned()
    y = gemm_ladder.linear(x, w, **kw)
    x2 = x.reshape(-1, x.shape[-1])
    call = linear_call(x2, w, **{k: (v.reshape(x2.shape[0], -1) if k == "residual" else v) for k, v in kw.items()
                                 if k != "out_dtype"})
    # No epilogue to fuse (no bias, activation or alpha; a residual with beta = 0 is not read): the plain
    # product, checked against float64 under the same bounds.
    assert_epilogue_close(y.reshape(-1, w.shape[0]), x2, w, call if call is not None else _PLAIN_PRODUCT)
    return y


class _PLAIN_PRODUCT:
    """The reference of a call without an epilogue: the product itself."""

    @staticmethod
    def reference(z):
        return z


# General kernel shapes with tails in M and N (and K), and small-M shapes (M <= 256).
SHAPES = [(300, 200, 1000), (513, 520, 520), (2048, 2056, 136), (1, 4096, 512), (100, 264, 192), (256, 1000, 64)]


@pytest.mark.parametrize("activation", [None, *ACTIVATIONS])
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_every_activation_with_bias_residual_alpha_beta(m, n, k, activation):
    x, w = rnd(m, k), rnd(n, k)
    check_linear(x, w, rnd(n), activation=activation, residual=rnd(m, n), alpha=0.75, beta=-1.5)
    check_linear(x, w, rnd(n), activation=activation)
    check_linear(x, w, activation=activation, residual=rnd(m, n))


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
def test_fp32_bias_and_residual_and_fp16(dtype):
    x, w = rnd(513, 264, dtype=dtype), rnd(520, 264, dtype=dtype)
    b32, r32 = rnd(520, dtype=torch.float32), rnd(513, 520, dtype=torch.float32)
    y = check_linear(x, w, b32, activation="gelu", residual=r32)
    assert y.dtype == dtype


def test_beta_zero_ignores_a_nan_residual():
    x, w = rnd(300, 128), rnd(264, 128)
    r = torch.full((300, 264), float("nan"), device="cuda", dtype=BF16)
    y = check_linear(x, w, rnd(264), activation="silu", residual=r, beta=0.0)
    assert torch.isfinite(y).all()
    y = check_linear(x, w, residual=r, beta=0)  # beta = 0 and nothing else: the plain product
    assert torch.isfinite(y).all()


def test_nonfinite_placement_in_every_input():
    for act in ACTIVATIONS:
        x, w, b, r = rnd(200, 192), rnd(264, 192), rnd(264), rnd(200, 264)
        x[3, 5], w[7, 1], b[11], r[13, 17] = float("nan"), float("inf"), float("-inf"), float("nan")
        x[150, 0] = float("-inf")
        check_linear(x, w, b, activation=act, residual=r, alpha=2.0)
        x2 = rnd(600, 192)
        x2[3, 5], x2[500, 7] = float("inf"), float("nan")
        check_linear(x2, w, b, activation=act, residual=rnd(600, 264))


@pytest.mark.parametrize("x_major, w_major, r_layout", [
    ("row", "row", "row"), ("col", "row", "col"), ("row", "col", "padded"), ("col", "col", "broadcast")])
def test_operand_and_residual_layouts(x_major, w_major, r_layout):
    m, n, k = 520, 392, 264
    x = rnd(m, k) if x_major == "row" else rnd(k, m).T
    w = rnd(n, k) if w_major == "row" else rnd(k, n).T
    r = {"row": rnd(m, n), "col": rnd(n, m).T, "padded": rnd(m, n + 24)[:, 8:8 + n],
         "broadcast": rnd(1, n).expand(m, n)}[r_layout]
    check_linear(x, w, rnd(n), activation="gelu_tanh", residual=r, alpha=0.5, beta=2.0)


@pytest.mark.parametrize("m, n, k", [(255, 257, 129), (1023, 1025, 1027), (300, 301, 72), (17, 4095, 4093)])
def test_unaligned_shapes_through_the_repack_path(m, n, k):
    x, w = rnd(m, k), rnd(n, k)
    check_linear(x, w, rnd(n), activation="silu", residual=rnd(m, n), beta=0.5)


@pytest.mark.parametrize("m, n, k", [(1000, 520, 264), (2048, 136, 512), (1000, 2048, 512)])
def test_swapped_orientation(m, n, k):
    """A column-major output makes the dispatcher run D^T = B A^T into c.T: the epilogue must still see the
    caller's rows and columns (the bias per column of c, per row of the kernel's D^T)."""
    x, w, b, r = rnd(m, k), rnd(n, k), rnd(n), rnd(m, n)
    c = torch.full((n, m), float("nan"), device="cuda", dtype=BF16).T
    call = linear_call(x, w, b, activation="gelu", residual=r, alpha=1.5, beta=-1.0)
    route = decide(x, w.T, c, given=True)
    assert route.c_path.transposed
    run(route, x, w.T, c, epilogue=call)
    assert_epilogue_close(c, x, w, call)


@pytest.fixture
def one_tile_table(monkeypatch):
    """The small-M rule with no entry (one tile of the smallest bucket everywhere, the small-M kernel), so
    that a test stays on the small-M kernel whatever the shipped table says; every cached route is
    forgotten before and after (the API's call cache and the host path's templates hold routes)."""
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch.small_m_tiles import ONE_TILE

    dispatch.clear_cache()
    monkeypatch.setattr(dispatch, "_tiles", ONE_TILE)
    yield
    monkeypatch.undo()
    dispatch.clear_cache()


def test_small_m_kernel_in_both_orientations(one_tile_table):
    # Shapes the route sends to the small-M kernel under the one-tile rule (M = 200: one tile of BN 256;
    # 1000 x 64 swapped: the kernel's M is 64). The assert keeps the test on that kernel.
    for m, n, k in ((1, 4096, 512), (16, 4096, 512), (200, 2048, 4096), (1000, 64, 512), (4096, 8, 512)):
        x, w = rnd(m, k), rnd(n, k)
        route = decide(x, w.T, torch.empty(m, n, device="cuda", dtype=BF16), given=True)
        assert route.kind == "small_m", (m, n, k, route.kind)
        check_linear(x, w, rnd(n), activation="relu", residual=rnd(m, n), alpha=0.25)


def test_stream_k_tail_and_full_split():
    """The epilogue after the split-K reduction: every unit split by K ('all') and the tail split."""
    m, n, k = 512, 768, 4096
    x, w, b, r = rnd(m, k), rnd(n, k), rnd(n), rnd(m, n)
    call = linear_call(x, w, b, activation="gelu_tanh", residual=r, alpha=0.5, beta=1.0)
    for split in ("all", "tail", "none"):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
        library_gemm("k", "k", 256).launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, split=split,
                                           epilogue=call)
        assert_epilogue_close(c, x, w, call)


@pytest.mark.parametrize("swap", [False, True], ids=["direct", "swapped"])
def test_bn64_epilogue_both_orientations_and_splits(swap):
    """The fused epilogue on the BN 64 build (one 64-column panel per tile): the caller's bias per column
    and residual per element, directly (D = X W^T into c) and swapped (D^T = W X^T into c.T of a
    column-major c), under every split, on shapes with tails in M and N (not multiples of 64)."""
    kernel = library_gemm("k", "k", 64)
    for m, n, k in ((1000, 520, 264), (1024, 1024, 1024), (304, 200, 4096)):  # N, M: 16-byte rows (TMA store)
        x, w, b, r = rnd(m, k), rnd(n, k), rnd(n), rnd(m, n)
        call = linear_call(x, w, b, activation="gelu_tanh", residual=r, alpha=0.5, beta=1.0)
        for split in ("none", "tail", "all"):
            if swap:
                c = torch.full((n, m), float("nan"), device="cuda", dtype=BF16).T
                kernel.launch(operand_view(w, k_dim=1), operand_view(x, k_dim=1), c.T, split=split,
                              epilogue=call.oriented(True))
            else:
                c = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
                kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, split=split, epilogue=call)
            assert_epilogue_close(c, x, w, call)


def test_out_dtype_float32():
    x, w = rnd(100, 520), rnd(1000, 520)
    y = check_linear(x, w, rnd(1000), activation="silu", residual=rnd(100, 1000), out_dtype=torch.float32)
    assert y.dtype == torch.float32
    # Past the small-M kernel: the layouts kernel's float32 register-store build, epilogue fused.
    y = check_linear(rnd(1000, 520), w, rnd(1000), activation="gelu_tanh", residual=rnd(1000, 1000), alpha=0.5,
                     out_dtype=torch.float32)
    assert y.dtype == torch.float32


# --- gelu_tanh's elementwise error (fused_epilogue.cuh's act_gelu_tanh) ------------------------------

#: PTX ISA, "tanh": tanh.approx.f32's maximum relative error over the whole fp32 range is 2^-11; x 1.25 for a
#: bound quoted to its nearest power of two.
TANH_APPROX_REL = 1.25 * 2.0**-11
UNIT = {BF16: 2.0**-8, torch.float16: 2.0**-11}
#: fp16's smallest subnormal is 2^-24: a result that small is rounded to within 2^-25.
FLOOR = {BF16: 0.0, torch.float16: 2.0**-25}


def _gelu_tanh_grid(m: int, dtype: torch.dtype):
    """x (m, 64), w (n, 64), an fp32 bias b (n) such that the epilogue's argument at (r, c) is exactly
    acc + b[c] with acc = x[r, 0] = (r - m/2) / (2m) (w[:, 0] = 1, every other product 0): a dense grid
    over [-12.75, 12.75] (step 25 / 8174 along columns, 1 / (2m) along rows), then the tails, then -inf,
    +inf and NaN. Returns x, w, b and the float64 argument v (m, n)."""
    n_dense = 8192 - 17
    tails = [-1e4, -1e3, -100.0, -40.0, -20.0, -15.0, -13.0, 13.0, 15.0, 20.0, 40.0, 100.0, 1e3, 1e4]
    b = torch.cat([torch.linspace(-12.5, 12.5, n_dense, dtype=torch.float64), torch.tensor(tails, dtype=torch.float64),
                   torch.tensor([-math.inf, math.inf, math.nan], dtype=torch.float64)])
    assert b.numel() == 8192
    b = b.float().cuda()
    x = torch.zeros(m, 64, dtype=dtype, device="cuda")
    x[:, 0] = (torch.arange(m, device="cuda", dtype=torch.float64) - m / 2) / (2 * m)  # exact in bf16 and fp16
    w = torch.zeros(b.numel(), 64, dtype=dtype, device="cuda")
    w[:, 0] = 1.0
    v = x[:, :1].double() + b.double().view(1, -1)
    return x, w, b, v


@pytest.mark.parametrize("dtype, m, out_dtype", [
    (BF16, 512, None), (torch.float16, 512, None),        # the general kernel (tanh.approx)
    (BF16, 64, None), (torch.float16, 64, None),          # the small-M kernel, 16-bit output (tanh.approx)
    (BF16, 64, torch.float32), (torch.float16, 64, torch.float32)])  # fp32 output: the sigmoid form
def test_gelu_tanh_elementwise_error_over_a_dense_grid(dtype, m, out_dtype):
    """bias + gelu_tanh against its float64 value element by element, NaN/Inf placement as torch's.

    16-bit outputs (tanh.approx.f32): |y - g| <= u |g| + (1 + u) E + floor, with E = 2^-12 |v| |tanh z|
    (tanh.approx's documented relative error 2^-11, x 1.25, times h = |v| / 2) + 2^-20 |v| (the fp32
    roundings of v, z and the final FFMA, about 2^-22 |v|, x 4). That is 2^-12 relative where v >= 0
    and an absolute 2^-12 |v| in the negative tail, where the true value tends to 0.
    fp32 output (the sigmoid form, ex2 + rcp): |y - g| <= 2^-24 (64 + 32 |z|) |g| + 1e-30, a few ulp plus
    the argument's rounding amplified where the result tends to 0, and below ftz's range 0; the
    tanh.approx form (2^-12 relative for v > 0) fails it."""
    x, w, b, v = _gelu_tanh_grid(m, dtype)
    poisoned()
    y = gemm_ladder.linear(x, w, b, activation="gelu_tanh", out_dtype=out_dtype)
    torch.cuda.synchronize()
    z = math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)
    # The truth: v sigmoid(2z), the same function without cancellation. torch's float64 formula
    # 0.5 v (1 + tanh z) rounds 1 + tanh z to 0 past v = -7 (tanh z within 2^-53 of -1), where the true
    # value is about -4e-16 and the fp32 output's sigmoid form gets it right; elsewhere the two agree.
    g = v * torch.sigmoid(2 * z)
    torch_g = torch.nn.functional.gelu(v, approximate="tanh")
    fin = torch.isfinite(g)
    torch.testing.assert_close(g[~fin], torch_g[~fin], rtol=0, atol=0, equal_nan=True)  # -inf: NaN, +inf: +inf, NaN
    assert ((g - torch_g)[fin].abs() <= 2.0**-50 * v[fin].abs()).all()
    assert check_nonfinite(y, g) is None, check_nonfinite(y, g)
    assert fin.sum() == m * (8192 - 3)
    err = (y.double() - g).abs()
    if out_dtype is None:
        u = UNIT[dtype]
        e_act = 0.5 * TANH_APPROX_REL * v.abs() * torch.tanh(z).abs() + 2.0**-20 * v.abs()
        bound = u * g.abs() + (1 + u) * e_act + FLOOR[dtype]
    else:
        bound = 2.0**-24 * (64 + 32 * z.abs()) * g.abs() + 1e-30
    ratio = (err / bound)[fin]
    worst = ratio.argmax().item()
    assert ratio.max().item() <= 1.0, (ratio.max().item(), v[fin][worst].item(), y.double()[fin][worst].item(),
                                       g[fin][worst].item())


def test_batched_x_and_k_zero_and_empty():
    x, w = rnd(2, 150, 264), rnd(520, 264)
    y = check_linear(x, w, rnd(520), activation="gelu", residual=rnd(2, 150, 520))
    assert y.shape == (2, 150, 520)
    b, r = rnd(520), rnd(3, 520)
    y0 = gemm_ladder.linear(rnd(3, 0), rnd(520, 0), b, activation="silu", residual=r, beta=2.0)
    want = (torch.nn.functional.silu(b.double()) + 2.0 * r.double()).to(BF16)
    assert torch.equal(y0, want)
    assert gemm_ladder.linear(rnd(0, 8), rnd(520, 8), rnd(520), activation="relu").shape == (0, 520)


def test_repeated_runs_are_bitwise_identical():
    x, w, b, r = rnd(4096, 1024), rnd(4096, 1024), rnd(4096), rnd(4096, 4096)
    first = gemm_ladder.linear(x, w, b, activation="gelu_tanh", residual=r)
    for _ in range(5):
        assert torch.equal(gemm_ladder.linear(x, w, b, activation="gelu_tanh", residual=r), first)


def _load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.epilogue


@pytest.mark.parametrize("m, n, k", [(300, 200, 1000), (2048, 2056, 136), (100, 264, 192), (1000, 64, 512),
                                     (255, 257, 129)])
def test_example_epilogue_passes_and_wrong_one_fails(m, n, k):
    good, wrong = _load("examples/scale_clamp.py"), _load("examples/wrong_scale_clamp.py")

    def fn(ep):
        return lambda a, b, **inputs: gemm_ladder.linear(a, b, epilogue=ep, **inputs)

    res = check_epilogue_correctness(fn(good), good, m, n, k, "bf16")
    assert res.status == "pass", res.message
    res = check_epilogue_correctness(fn(wrong), wrong, m, n, k, "bf16")
    assert res.status == "fail" and "NaN" in res.message, res.message


def test_gate_cli_with_epilogue(tmp_path):
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", "gemm_ladder", "gate", "--epilogue", "examples/scale_clamp.py:epilogue"],
                        cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run([sys.executable, "-m", "gemm_ladder", "gate", "--epilogue",
                          "examples/wrong_scale_clamp.py:epilogue"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr


def test_user_epilogue_with_every_input_kind():
    ep = gemm_ladder.Epilogue(
        cuda="return acc * rs + cs + 0.5f * t - s + (row == 0 ? 1.0f : 0.0f) + (col == 1 ? 2.0f : 0.0f);",
        inputs={"rs": "row", "cs": "col", "t": "tile", "s": "scalar"},
        reference=lambda acc, rs, cs, t, s: _idx(acc * rs + cs + 0.5 * t - s))
    for m, n in ((300, 520), (100, 1000), (1000, 64)):
        x, w = rnd(m, 264), rnd(n, 264)
        inputs = {"rs": rnd(m, dtype=torch.float32), "cs": rnd(n), "t": rnd(n, m).T, "s": 0.25}
        y = gemm_ladder.linear(x, w, epilogue=ep, **inputs)
        assert_epilogue_close(y, x, w, ep.bind(inputs, m, n, x.device))


def _idx(v):
    v = v.clone()
    v[0, :] += 1.0
    v[:, 1] += 2.0
    return v


# --- the load paths each build compiles in (EpilogueCall.pair_loads / wide_offsets) -----------------


@pytest.mark.parametrize("r_layout", ["row", "col", "odd_offset", "odd_pitch"])
@pytest.mark.parametrize("m, n, k", [(520, 392, 264), (1000, 2048, 512), (64, 1000, 256), (2048, 136, 512)])
def test_residual_pair_and_single_load_paths(m, n, k, r_layout):
    """Pair loads along rows (row-major residual, direct orientation), along columns (column-major,
    swapped), and single loads (misaligned base, odd pitch), in the general, swapped and small-M routes."""
    x, w = rnd(m, k), rnd(n, k)
    r = {"row": rnd(m, n), "col": rnd(n, m).T, "odd_offset": rnd(m * n + 1)[1:].view(m, n),
         "odd_pitch": rnd(m, n + 1)[:, :n]}[r_layout]
    b = rnd(n + 1)[1:]  # a misaligned bias: single loads
    check_linear(x, w, b, activation="gelu_tanh", residual=r, alpha=0.5, beta=1.0)
    check_linear(x, w, rnd(n), residual=r, beta=-1.0)


@pytest.mark.parametrize("m, n", [(513, 301), (301, 513), (255, 255)])
def test_odd_extents_take_single_loads(m, n):
    """An odd extent along the pair: no pair load (one could straddle the edge); the last column or row
    is still right and nothing past it is read (compute-sanitizer would say; here: the values)."""
    x, w = rnd(m, 192), rnd(n, 192)
    check_linear(x, w, rnd(n), activation="silu", residual=rnd(m, n), alpha=2.0, beta=0.5)


def test_wide_offsets_for_a_residual_spanning_2_31_elements():
    """A residual view whose rows are 2^30 elements apart (its span past 2^31 elements, 4 GiB of bf16):
    its build computes offsets in 64 bits and reads the right elements."""
    m, n, k = 3, 256, 128
    try:
        buf = torch.zeros((m - 1) * 2 ** 30 + n, dtype=BF16, device="cuda")
    except torch.cuda.OutOfMemoryError:
        pytest.skip("4 GiB for the wide residual are not free on this GPU")
    r = buf.as_strided((m, n), (2 ** 30, 1))
    r.copy_(rnd(m, n))
    x, w = rnd(m, k), rnd(n, k)
    from gemm_ladder.library.epilogue import linear_epilogue

    call = linear_epilogue(bias=False, activation=None, residual=True, alpha=False).bind(
        {"gl_residual_": r, "gl_beta_": 1.0}, m, n, r.device)
    assert call.wide_offsets()
    check_linear(x, w, residual=r, beta=1.0)
    del buf
