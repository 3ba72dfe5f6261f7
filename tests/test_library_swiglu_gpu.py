"""gemm_ladder.swiglu on the GPU, against the float64 reference silu(x w_g^T) * (x w_u^T).

Every check draws fresh random normal operands (a new seed each time, printed on failure) and holds
the result to the correctness gate's rule with torch's own bf16/fp16 composition
``F.silu(F.linear(x, wg)) * F.linear(x, wu)`` in the place of cuBLAS: relative Frobenius error at most
``2 x`` the composition's + the dtype's unit roundoff (gates.correctness.error_bound), and the largest
element error under an absolute cap built like gates.correctness.absolute_cap for this epilogue.
Outputs are poisoned: the kernel-level checks launch into a NaN-filled output (padding columns checked
to stay NaN), the API checks free a NaN-filled block of the output's size just before the call (the
caching allocator hands it back). Covered: tails in M, N and K, M = 1, N not a multiple of 128 (and
not of 8: the padded-output path), K not a multiple of 64, batch dimensions, padded pitches, every
stream-K policy, NaN and Inf placement, bitwise repeatability, empty problems, refusals before launch.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_library_swiglu_gpu.py`` (about a minute).
"""

from __future__ import annotations

import math
import secrets

import pytest
import torch
import torch.nn.functional as F

import gemm_ladder
from gemm_ladder.contract import DTYPES
from gemm_ladder.dispatch.validate import NotSupportedError
from gemm_ladder.gates.correctness import ACCUMULATION_FACTOR, FP32_UNIT_ROUNDOFF, UNIT_ROUNDOFF, error_bound
from gemm_ladder.library.gemm import SPLITS
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.swiglu import swiglu_kernel

pytestmark = pytest.mark.gpu

#: (M, N, K): one tile pair; tails in M, N and K together; M = 1; N not a multiple of 128 (and N = 100,
#: 36 not of 8: the padded output); K not a multiple of 64 (K = 8, one partial K tile); an odd number
#: of M tiles (the cluster's second CTA has no rows); a stream-K tail on 132 SMs (9 x 16 = 144 units on
#: 66 clusters); Llama's MLP at M = 1 and a larger M.
SHAPES = [(256, 128, 64), (1000, 520, 200), (1, 256, 4096), (300, 200, 8), (129, 100, 136), (1, 36, 72),
          (2304, 2048, 1000), (1, 14336, 4096), (512, 14336, 4096)]
DTYPE_NAMES = ("bf16", "fp16")


def operands(m, n, k, dtype, seed, *, scale_w=None):
    """x (M, K) standard normal; w_gate, w_up (N, K) normal / sqrt(K) (nn.Linear's scale, so the
    products are O(1) and fp16 does not overflow), from ``seed``."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    s = 1 / math.sqrt(k) if scale_w is None else scale_w
    x = torch.randn((m, k), generator=gen, device="cuda").to(DTYPES[dtype])
    wg = (torch.randn((n, k), generator=gen, device="cuda") * s).to(DTYPES[dtype])
    wu = (torch.randn((n, k), generator=gen, device="cuda") * s).to(DTYPES[dtype])
    return x, wg, wu


def reference(x, wg, wu):
    """float64 silu(x wg^T) * (x wu^T), and the float64 gate and up products."""
    x64, g64, u64 = x.double(), wg.double(), wu.double()
    g, u = x64 @ g64.T, x64 @ u64.T
    return F.silu(g) * u, g, u


def composition(x, wg, wu):
    """What users write: torch's eager composition in the inputs' dtype (cuBLAS, four roundings)."""
    return F.silu(F.linear(x, wg)) * F.linear(x, wu)


def rel_err(c, ref):
    mask = torch.isfinite(ref)
    return (torch.linalg.vector_norm((c.double() - ref)[mask]) / torch.linalg.vector_norm(ref[mask])).item()


def abs_cap(x, wg, wu, g, u, dtype):
    """2 u max|ref| + 16 sqrt(K) u32 max||x_i|| (max|u| max|silu'| max||wg_j|| + max|silu(g)| max||wu_j||):
    the output's rounding plus the fp32 accumulation error of g and u (gates.correctness.absolute_cap's
    model) carried through silu(g) * u (|silu'| <= 1.1)."""
    k = x.shape[1]
    rx = torch.linalg.vector_norm(x.double(), dim=1).max().item()
    rg = torch.linalg.vector_norm(wg.double(), dim=1).max().item()
    ru = torch.linalg.vector_norm(wu.double(), dim=1).max().item()
    ref = F.silu(g) * u
    acc = ACCUMULATION_FACTOR * math.sqrt(k) * FP32_UNIT_ROUNDOFF * rx * (
        u.abs().max().item() * 1.1 * rg + F.silu(g).abs().max().item() * ru)
    return 2 * UNIT_ROUNDOFF[dtype] * ref.abs().max().item() + acc


def check(out, x, wg, wu, dtype, seed):
    """The gate's rule for one result; returns (our error, the composition's)."""
    ref, g, u = reference(x, wg, wu)
    assert out.shape == ref.shape and out.dtype == x.dtype
    assert not torch.isnan(out).any(), f"unwritten (NaN) outputs, seed {seed}"
    ours, theirs = rel_err(out, ref), rel_err(composition(x, wg, wu), ref)
    bound = error_bound(theirs, dtype)
    assert ours <= bound, f"relative error {ours:.3e} > bound {bound:.3e} (composition {theirs:.3e}), seed {seed}"
    cap = abs_cap(x, wg, wu, g, u, dtype)
    worst = (out.double() - ref).abs().max().item()
    assert worst <= cap, f"max abs error {worst:.3e} > cap {cap:.3e}, seed {seed}"
    return ours, theirs


def launch_poisoned(x, wg, wu, *, split="tail", pad_out=8):
    """The kernel on views of x, wg, wu into a NaN-filled output of pitch N rounded up to 8 + ``pad_out``;
    returns the (M, N) result, having checked the padding columns stayed NaN."""
    m, n = x.shape[0], wg.shape[0]
    ldo = (n + 7) // 8 * 8 + pad_out
    store = torch.full((m, ldo), float("nan"), dtype=x.dtype, device=x.device)
    views = [operand_view(t, k_dim=1) for t in (x, wg, wu)]
    swiglu_kernel().launch(*views, store[:, :n], split=split, out_padding_writable=n % 8 != 0)
    torch.cuda.synchronize()
    pad_from = (n + 7) // 8 * 8 if n % 8 else n  # the store may write a row's last 16-byte chunk whole
    assert torch.isnan(store[:, pad_from:]).all(), "the kernel wrote past the output's last 16-byte chunk"
    return store[:, :n]


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_kernel_against_float64(m, n, k, dtype):
    seed = secrets.randbits(31)
    x, wg, wu = operands(m, n, k, dtype, seed)
    check(launch_poisoned(x, wg, wu), x, wg, wu, dtype, seed)


@pytest.mark.parametrize("split", SPLITS)
def test_every_stream_k_policy(split):
    """'all' splits every unit over every cluster (partials handed between clusters), 'none' none."""
    for m, n, k in ((256, 384, 1000), (2304, 2048, 1000), (130, 130, 64)):
        seed = secrets.randbits(31)
        x, wg, wu = operands(m, n, k, "bf16", seed)
        check(launch_poisoned(x, wg, wu, split=split), x, wg, wu, "bf16", seed)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_llama_mlp_shape(dtype):
    """4096 x 14336 x 4096: the benchmark's shape, a stream-K tail on 132 SMs."""
    seed = secrets.randbits(31)
    x, wg, wu = operands(4096, 14336, 4096, dtype, seed)
    ours, theirs = check(launch_poisoned(x, wg, wu), x, wg, wu, dtype, seed)
    assert ours < theirs  # one rounding against four


def _poisoned_call(fn, out_shape, dtype, *args):
    poison = torch.full(out_shape, float("nan"), dtype=dtype, device="cuda")
    del poison  # back to the caching allocator for the result to reuse
    return fn(*args)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
@pytest.mark.parametrize("lead,n,k", [((2, 3, 50), 300, 264), ((7,), 100, 72), ((1, 1), 128, 64), ((), 200, 120)])
def test_api_batch_dimensions_and_odd_n(lead, n, k, dtype):
    """x (*, K) with batch dimensions (and 1-D), N = 100 and 300 (not multiples of 8 or 128: the padded
    workspace path, copied back), through gemm_ladder.swiglu."""
    seed = secrets.randbits(31)
    m = math.prod(lead)
    x2, wg, wu = operands(m, n, k, dtype, seed)
    x = x2.view(*lead, k)
    out = _poisoned_call(gemm_ladder.swiglu, (*lead, n), x.dtype, x, wg, wu)
    assert out.shape == (*lead, n) and out.is_contiguous()
    check(out.reshape(m, n), x2, wg, wu, dtype, seed)


def test_api_padded_pitches_and_a_batch_view():
    """Operands with padded pitches are read in place; a batch view that cannot be merged is reshaped."""
    seed = secrets.randbits(31)
    x, wg, wu = operands(96, 200, 120, "bf16", seed)
    xs = torch.empty(96, 128, dtype=x.dtype, device="cuda")[:, :120]
    xs.copy_(x)
    wgs = torch.empty(200, 136, dtype=x.dtype, device="cuda")[:, :120]
    wgs.copy_(wg)
    check(gemm_ladder.swiglu(xs, wgs, wu), x, wg, wu, "bf16", seed)
    xb = torch.empty(8, 24, 120, dtype=x.dtype, device="cuda")[::2]  # (4, 24, K), batch stride 2 x 24 x K
    xb.copy_(x.view(4, 24, 120))
    check(gemm_ladder.swiglu(xb, wg, wu).view(96, 200), x, wg, wu, "bf16", seed)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_nan_and_inf_placement(dtype):
    """NaN and +-Inf planted in x and in each weight: the output is NaN exactly where the float64
    reference is, and infinite (with its sign) exactly where it is (silu(-inf) = -inf / inf = NaN)."""
    seed = secrets.randbits(31)
    m, n, k = 300, 400, 200
    x, wg, wu = operands(m, n, k, dtype, seed)
    x[3, 7], x[150, 0], x[299, 199] = float("nan"), float("inf"), float("-inf")
    wg[5, 11], wg[390, 100] = float("nan"), float("inf")
    wu[17, 3], wu[200, 64] = float("-inf"), float("nan")
    out = launch_poisoned(x, wg, wu)
    ref, _, _ = reference(x, wg, wu)
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert torch.equal(torch.isposinf(out), torch.isposinf(ref)) and torch.equal(torch.isneginf(out), torch.isneginf(ref))
    finite = torch.isfinite(ref)
    assert finite.sum() > m * n // 2  # the rest is still checked
    assert rel_err(out.masked_fill(~finite, 0), ref.masked_fill(~finite, 0)) < 2 * UNIT_ROUNDOFF[dtype]


def test_silu_at_the_extremes():
    """Large |g| (the exponential overflows or underflows in fp32) and g = 0, against float64."""
    k = 64
    x = torch.zeros(128, k, dtype=torch.bfloat16, device="cuda")
    x[:, 0] = torch.linspace(-120, 120, 128, device="cuda").to(torch.bfloat16)
    wg = torch.zeros(128, k, dtype=torch.bfloat16, device="cuda")
    wg[:, 0] = 1
    wu = torch.ones(128, k, dtype=torch.bfloat16, device="cuda") / 8
    out = launch_poisoned(x, wg, wu)
    ref, _, _ = reference(x, wg, wu)
    assert torch.allclose(out.double(), ref, rtol=2 * UNIT_ROUNDOFF["bf16"], atol=1e-30)


def test_repeatable_bitwise_with_a_split_tail():
    seed = secrets.randbits(31)
    x, wg, wu = operands(2304, 2048, 1000, "bf16", seed)
    first = launch_poisoned(x, wg, wu, split="all").clone()
    for _ in range(5):
        assert torch.equal(launch_poisoned(x, wg, wu, split="all"), first)


def test_empty_problems_and_k_zero():
    e = torch.empty
    assert gemm_ladder.swiglu(e(0, 64, dtype=torch.bfloat16, device="cuda"), e(8, 64, dtype=torch.bfloat16, device="cuda"),
                              e(8, 64, dtype=torch.bfloat16, device="cuda")).shape == (0, 8)
    z = gemm_ladder.swiglu(e(3, 0, dtype=torch.float16, device="cuda"), e(8, 0, dtype=torch.float16, device="cuda"),
                           e(8, 0, dtype=torch.float16, device="cuda"))
    assert z.shape == (3, 8) and not z.any()


def test_refusals_come_before_any_launch():
    x, wg, wu = operands(64, 64, 64, "bf16", 0)
    torch.cuda.synchronize()
    with pytest.raises(NotSupportedError, match="w_gate has strides"):
        gemm_ladder.swiglu(x, wg.T.contiguous().T, wu)
    with pytest.raises(NotSupportedError, match="pad K to a multiple of 8"):
        gemm_ladder.swiglu(x[:, :60], wg[:, :60].contiguous(), wu[:, :60].contiguous())
    with pytest.raises(NotSupportedError, match="requires grad"):
        gemm_ladder.swiglu(x, wg.clone().requires_grad_(), wu)
