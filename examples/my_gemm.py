"""A user's GEMM for ``gemm-ladder gate``: a blocked ``a @ b.T`` with an fp32 accumulator.

    gemm-ladder gate examples/my_gemm.py:gemm --shapes edge,square

It walks K in blocks of 256 and accumulates each block's product in fp32, rounding to the input
dtype once at the end: the same numerics as a tensor-core kernel with an fp32 accumulator, written
with torch ops so that it runs anywhere. Replace the body with a launch of your own kernel.
"""

from __future__ import annotations

import torch

BLOCK_K = 256


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b.T``: a (M, K), b (N, K), bf16 or fp16; returns (M, N) in the inputs' dtype."""
    m, k = a.shape
    acc = torch.zeros((m, b.shape[0]), dtype=torch.float32, device=a.device)
    for k0 in range(0, k, BLOCK_K):
        acc += a[:, k0 : k0 + BLOCK_K].float() @ b[:, k0 : k0 + BLOCK_K].float().T
    return acc.to(a.dtype)
