"""Every activation of the registry (library/activations.py) computed by the kernels over a dense grid,
against its float64 reference, through gemm_ladder.linear: the small-M kernel (M = 64) and the general
kernel (M = 512), float32 and bf16 output. The argument at (r, c) is exactly x[r, 0] + b[c] (w[:, 0] = 1,
every other product 0; b float32): a grid over [-12.5, 12.5], the tails, and -inf, +inf, NaN.

Bounds: float32 output |y - g| <= 2^-24 (64 + 32 |v|) |g| + 2^-21 |v| + 1e-30 (a few ulp of the MUFU
approximations, the argument's rounding amplified by |v|, and the cancellation of 1 + erf or 1 + tanh in
the negative tail, where the value tends to 0); bf16 output |y - g| <= 2^-8 |g| + 2^-11 |v| + 2^-20 |v|
(one rounding, and gelu_tanh's tanh.approx: tests/test_epilogue_gpu.py derives its bound). Non-finite
placement as torch's."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import gemm_ladder
from gemm_ladder.gates.correctness import check_nonfinite
from gemm_ladder.library.activations import ACTIVATIONS

pytestmark = pytest.mark.gpu


def _grid(m: int, dtype: torch.dtype):
    n_dense = 8192 - 17
    tails = [-1e4, -1e3, -100.0, -40.0, -20.0, -15.0, -13.0, 13.0, 15.0, 20.0, 40.0, 100.0, 1e3, 1e4]
    b = torch.cat([torch.linspace(-12.5, 12.5, n_dense, dtype=torch.float64), torch.tensor(tails, dtype=torch.float64),
                   torch.tensor([-math.inf, math.inf, math.nan], dtype=torch.float64)]).float().cuda()
    x = torch.zeros(m, 64, dtype=dtype, device="cuda")
    x[:, 0] = (torch.arange(m, device="cuda", dtype=torch.float64) - m / 2) / (2 * m)  # exact in bf16
    w = torch.zeros(b.numel(), 64, dtype=dtype, device="cuda")
    w[:, 0] = 1.0
    return x, w, b, x[:, :1].double() + b.double().view(1, -1)


@pytest.mark.parametrize("out_dtype", [torch.float32, None])
@pytest.mark.parametrize("m", [64, 512])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_every_activation_over_a_dense_grid(name, m, out_dtype):
    x, w, b, v = _grid(m, torch.bfloat16)
    y = gemm_ladder.linear(x, w, b, activation=name, out_dtype=out_dtype)
    torch.cuda.synchronize()
    g = ACTIVATIONS[name].reference(v)
    assert check_nonfinite(y, g) is None, check_nonfinite(y, g)
    fin = torch.isfinite(g) & torch.isfinite(v)
    err = (y.double() - g).abs()
    if out_dtype is torch.float32:
        bound = 2.0**-24 * (64 + 32 * v.abs()) * g.abs() + 2.0**-21 * v.abs() + 1e-30
    else:
        bound = 2.0**-8 * g.abs() + (2.0**-11 + 2.0**-20) * v.abs() + 1e-30
    ratio = (err / bound)[fin]
    worst = ratio.argmax().item()
    assert ratio.max().item() <= 1.0, (name, ratio.max().item(), v[fin][worst].item(), y.double()[fin][worst].item(),
                                       g[fin][worst].item())


# --- the erf GELU's polynomial form in the kernels (fused_epilogue.cuh's act_gelu, bf16/fp16 outputs) ---
GELU_REL_BOUND = 2.0**-15  # fused_epilogue.cuh's stated bound
GELU_TINY = 2.0**-122


@pytest.mark.parametrize("m", [64, 512])  # the small-M kernel and the general kernel
def test_act_gelu_relative_error_in_the_kernels_over_a_dense_grid(m):
    """The kernel's own fp32 act_gelu (MUFU rcp.approx and ex2.approx, ftz) before its rounding: a user
    epilogue on a bf16 output computes (act_gelu(v) - g) / g with v = acc + b (one fp32 add, as torch's
    on the GPU) and g = the float64 erf GELU of that v rounded to fp32 (2^-24 relative), so the output
    is act_gelu's relative error (scaled by 2^15 to sit far above bf16's rounding)."""
    from gemm_ladder import Epilogue

    x, w, b, _ = _grid(m, torch.bfloat16)
    fin = torch.isfinite(b)
    w, b = w[fin], b[fin].contiguous()
    v32 = x[:, :1].float() + b.view(1, -1)  # what the kernel's acc + b is, in fp32
    g64 = v32.double() * 0.5 * torch.special.erfc(-v32.double() / math.sqrt(2))
    g = g64.float()
    use = g64.abs() >= GELU_TINY
    ep = Epilogue("(gl::act_gelu(acc + b) - g) / g * 32768.0f", lambda acc, b, g: (F.gelu(acc + b) - g) / g * 32768.0,
                  {"b": "col", "g": "tile"}, name="gelu_rel_err")
    y = gemm_ladder.linear(x, w, epilogue=ep, b=b, g=torch.where(use, g, torch.ones_like(g)))
    torch.cuda.synchronize()
    rel = (y.double()[use].abs() / 32768.0).max().item()
    assert rel <= GELU_REL_BOUND * (1 + 2.0**-7) + 2.0**-23, rel


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_bias_gelu_output_within_one_rounding_plus_the_bound(dtype):
    """bf16 / fp16 output: |y - gelu(v)| <= (u + 2^-15) |gelu(v)| + the output's subnormal half-spacing
    + 2^-122 (the flushed tail), element by element, the negative tail included (the erf form failed
    there: 1 + erf cancels)."""
    x, w, b, _ = _grid(512, dtype)
    fin = torch.isfinite(b) & (b.abs() <= 12.5)
    w, b = w[fin], b[fin].contiguous()
    y = gemm_ladder.linear(x, w, b.to(dtype), activation="gelu")
    bq = b.to(dtype).double()  # the bias the kernel reads, rounded to the dtype
    v = x[:, :1].double() + bq.view(1, -1)
    g = v * 0.5 * torch.special.erfc(-v / math.sqrt(2))
    u, sub = (2.0**-8, 2.0**-134) if dtype == torch.bfloat16 else (2.0**-11, 2.0**-25)
    err = (y.double() - g).abs()
    # v = acc + b is exact in fp32 here (x on a 2^-10 grid below 1/4, b with 8 or 11 significant bits, |v| < 13)
    bound = (u + 2.0**-15) * g.abs() * (1 + 2.0**-20) + sub + GELU_TINY
    ratio = (err / bound).max().item()
    assert ratio <= 1.0, ratio
