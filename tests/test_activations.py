"""The activation registry (library/activations.py): one entry per activation, read by the epilogue
generator, the op's autograd formula and the gates. No GPU, no nvcc: each entry's derivative is held
against torch.autograd of its reference on a dense grid (float64, CPU), its reference against the torch
function it names, and the places that list activations against the registry. That every entry's CUDA
builds into the kernels without spills is tests/test_epilogue.py's (nvcc); that it computes its
reference over a dense grid, tests/test_activations_gpu.py's (GPU)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gemm_ladder.library.activations import ACTIVATIONS, DERIVATIVES, Activation, activation
from gemm_ladder.library.epilogue import linear_epilogue

#: What each entry must compute, written independently of the registry.
TORCH = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"), "silu": F.silu}


def _grid() -> torch.Tensor:
    """A dense float64 grid over [-12, 12] (step 1e-4, 0 included), the tails and the kinks' neighbours."""
    dense = torch.linspace(-12.0, 12.0, 240_001, dtype=torch.float64)
    tails = torch.tensor([-1e4, -100.0, -30.0, -15.0, 15.0, 30.0, 100.0, 1e4, -1e-300, 1e-300, -1e-12, 1e-12],
                         dtype=torch.float64)
    return torch.cat([dense, tails])


def test_the_registry_lists_the_documented_activations():
    assert list(ACTIVATIONS) == ["relu", "gelu", "gelu_tanh", "silu"] == list(TORCH)
    for name, a in ACTIVATIONS.items():
        assert isinstance(a, Activation) and a.name == name and "{x}" in a.cuda and a.torch
        assert activation(name) is a and DERIVATIVES[name] is a.derivative
    with pytest.raises(ValueError, match="relu, gelu, gelu_tanh, silu"):
        activation("tanh")


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_reference_is_the_torch_function(name):
    z = _grid()
    torch.testing.assert_close(ACTIVATIONS[name].reference(z), TORCH[name](z), rtol=0, atol=0)
    special = torch.tensor([math.inf, -math.inf, math.nan], dtype=torch.float64)
    torch.testing.assert_close(ACTIVATIONS[name].reference(special), TORCH[name](special), rtol=0, atol=0,
                               equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_derivative_matches_autograd_of_the_reference(name, dtype):
    """grad * act'(z) by the registry's derivative (torch's backward kernel) against torch.autograd of the
    reference, with a random upstream gradient, on every grid point (relu at exactly 0: both 0)."""
    z = _grid().to(dtype).requires_grad_(True)
    g = torch.randn(z.shape, dtype=dtype, generator=torch.Generator().manual_seed(3))
    (want,) = torch.autograd.grad(ACTIVATIONS[name].reference(z), z, g)
    got = ACTIVATIONS[name].derivative(g, z.detach())
    tol = {torch.float64: 1e-12, torch.float32: 2e-6}[dtype]
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    # and the derivative is the slope: a central difference in float64 away from relu's kink
    if dtype is torch.float64:
        h = 1e-6
        zz = torch.linspace(-8.0, 8.0, 1601, dtype=torch.float64)
        zz = zz[zz.abs() > 1e-3]
        slope = (TORCH[name](zz + h) - TORCH[name](zz - h)) / (2 * h)
        torch.testing.assert_close(ACTIVATIONS[name].derivative(torch.ones_like(zz), zz), slope, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_the_epilogue_emits_the_entrys_cuda_and_reference(name):
    """linear's generated epilogue is the registry's expression around alpha * acc + bias, and its float64
    reference applies the registry's reference."""
    ep = linear_epilogue(bias=True, activation=name, residual=True, alpha=True)
    assert ep.cuda == ACTIVATIONS[name].cuda_of("gl_alpha_ * acc + gl_bias_") + " + gl_beta_ * gl_residual_"
    acc = torch.randn(3, 5, dtype=torch.float64)
    bias, res = torch.randn(1, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    got = ep.reference(acc, gl_alpha_=0.5, gl_bias_=bias, gl_residual_=res, gl_beta_=2.0)
    torch.testing.assert_close(got, TORCH[name](0.5 * acc + bias) + 2.0 * res)


def test_the_ops_backward_and_the_validator_read_the_registry():
    from gemm_ladder import ops
    from gemm_ladder.dispatch import validate

    assert ops._ACTIVATION_BACKWARD is DERIVATIVES
    assert validate.ACTIVATIONS is ACTIVATIONS


# --- the erf GELU's approximation (fused_epilogue.cuh's act_gelu, bf16/fp16 outputs) ------------------
GELU_REL_BOUND = 2.0**-15  # the bound fused_epilogue.cuh states
GELU_TINY = 2.0**-122  # below it (x < -12.9) an absolute bound of the same size


def _act_gelu_constants() -> list[float]:
    """The fp32 constants of act_gelu's polynomial branch, in source order, read from the header itself."""
    import re
    from pathlib import Path

    import gemm_ladder

    src = (Path(gemm_ladder.__file__).parent / "kernels/include/gemm_ladder/fused_epilogue.cuh").read_text()
    body = src[src.index("float act_gelu(float x) {"):]
    body = body[body.index("#else"):body.index("#endif")]
    return [float(v) for v in re.findall(r"(-?\d+\.\d+)f", body)]


def act_gelu_float32(x: torch.Tensor) -> torch.Tensor:
    """act_gelu's polynomial form evaluated step by step in float32 (IEEE division and exp2 in place of
    rcp.approx and ex2.approx; fmaf as one rounding: addcmul)."""
    p, *coef, k = _act_gelu_constants()
    x = x.float()
    a = x.abs()
    t = 1.0 / torch.addcmul(torch.ones_like(a), a, torch.full_like(a, p))
    r = torch.full_like(a, coef[0])
    for c in coef[1:]:
        r = torch.addcmul(torch.full_like(a, c), r, t)
    q = r * t * torch.exp2(a * a * k)
    return x * torch.where(x >= 0, 1 - q, q)


def test_act_gelu_constants_are_the_fit():
    p, *coef, k = _act_gelu_constants()
    assert p == 0.3 and len(coef) == 6 and k == pytest.approx(-math.log2(math.e) / 2, rel=1e-15)
    assert sum(coef) == pytest.approx(0.5, rel=1e-5)  # R(0) = erfcx(0) / 2 = 1/2, to the fit's relative error


def test_act_gelu_approximation_within_its_bound_over_a_dense_grid():
    """10^6 points over [-10, 10], the tail to -14, and the extremes, against float64 erf GELU."""
    x = torch.cat([torch.linspace(-10, 10, 1_000_001), torch.linspace(-14, -10, 100_001),
                   torch.tensor([0.0, 1e-30, -1e-30, 1e-3, -1e-3, 20.0, 100.0, 3e38, -3e38, -13.0, -12.9])])
    exact = x.double() * 0.5 * torch.special.erfc(-x.double() / math.sqrt(2))
    y = act_gelu_float32(x).double()
    err = (y - exact).abs()
    big = exact.abs() >= GELU_TINY
    rel = (err[big] / exact.abs()[big]).max().item()
    assert rel <= GELU_REL_BOUND, rel
    assert err[~big].max().item() <= GELU_TINY
    # the erf form it replaces loses all relative accuracy in the negative tail (1 + erf cancels)
    old = (0.5 * x.float() * (1 + torch.erf(x.float() * 0.70710678118654752))).double()
    tail = big & (x < -5) & (x > -10)
    assert ((old - exact).abs()[tail] / exact.abs()[tail]).max().item() > 1e-2
    nonfinite = act_gelu_float32(torch.tensor([math.inf, -math.inf, math.nan]))
    assert nonfinite[0] == math.inf and nonfinite[1:].isnan().all()  # as torch: +inf, NaN, NaN
