"""Levels 1-3: threads copy tiles into swizzled shared memory; wgmma multiplies them."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from gemm_ladder.contract import dtype_name
from gemm_ladder.levels.base import LaunchGeometry, Level

TILE_M = TILE_N = 128


@dataclass(frozen=True, eq=False)
class ThreadCopyLevel(Level):
    """A level whose kernel takes (a, b, c, M, N, K, vec_ok) and 128 threads per CTA.

    ``tiled``: one CTA per 128 x 128 output tile (level 3); otherwise a single CTA (levels 1-2).
    """

    tiled: bool = False

    def defines(self, dtype: str) -> dict[str, int | str]:
        return {}  # tile sizes are constants in the level's source

    def geometry(self, dtype: str) -> LaunchGeometry:
        return LaunchGeometry(threads=128, dynamic_smem=0)

    def launch(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        m, k = a.shape
        n = b.shape[0]
        kernel = self.loaded(dtype_name(a.dtype), a.device)
        # 16-byte vector loads need 16-byte aligned rows: K a multiple of 8 and aligned bases.
        vec_ok = k % 8 == 0 and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0
        grid = (-(-n // TILE_N), -(-m // TILE_M), 1) if self.tiled else (1, 1, 1)
        kernel.launch(
            grid,
            [ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()), ctypes.c_void_p(c.data_ptr()),
             ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), ctypes.c_int(int(vec_ok))],
        )
