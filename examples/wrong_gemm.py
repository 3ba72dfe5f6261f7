"""A deliberately wrong GEMM, to see the gate fail: ``gemm-ladder gate examples/wrong_gemm.py:gemm``.

The classic K-tail bug: the loop covers only whole blocks of 64, so when K is not a multiple of 64
the last K % 64 columns are dropped. Shapes with K a multiple of 64 pass; the edge set's K = 1,
K = 65, K = 1000, ... fail the correctness gate, and the exit status is 1.
"""

from __future__ import annotations

import torch

BLOCK_K = 64


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b.T`` except for the K tail (see the module docstring)."""
    m, k = a.shape
    acc = torch.zeros((m, b.shape[0]), dtype=torch.float32, device=a.device)
    for k0 in range(0, k - k % BLOCK_K, BLOCK_K):  # bug: no iteration for the partial last block
        acc += a[:, k0 : k0 + BLOCK_K].float() @ b[:, k0 : k0 + BLOCK_K].float().T
    return acc.to(a.dtype)
