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
