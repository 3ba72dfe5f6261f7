"""The quantized output's buffers: e4m3 values with one fp32 scale per row and 128 columns, as
``quantize_fp8(x, (1, 128))`` lays them out, written by a kernel's epilogue (the fp8 kernel's
``out_dtype=torch.float8_e4m3fn``, library/fp8.py; the 16-bit kernel's ``out_e4m3`` build,
library/gemm.py; both through kernels/include/gemm_ladder/quantized_store.cuh).

The values have a row pitch that is a multiple of 16 elements and the scales are stored K-block-major
((ceil(N / 128), R) with R = M rounded up to 4), so the (M, ceil(N / 128)) column-major view the caller
gets has a pitch that is a multiple of 4: the next ``scaled_mm(values, w2.T, scales, ...)`` reads both
without a copy (its tensor maps need 16-byte pitches).
"""

from __future__ import annotations

import torch

#: The quantized output's element type.
QUANT_OUT = torch.float8_e4m3fn
#: Output columns per scale (a 1 x 128 block: one K block of the next fp8 GEMM).
SCALE_BLOCK = 128


def quantized_buffers(m: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, scale_buf): values (M, N) e4m3 with a row pitch that is a multiple of 16, and scale_buf
    (ceil(N / 128), M rounded up to 4) fp32, the kernels' layout (row b holds the scales of columns
    [128 b, 128 b + 128)). Uninitialised; the caller returns ``(values, scales_view(scale_buf, m))``."""
    values = torch.empty((m, -(-n // 16) * 16), dtype=QUANT_OUT, device=device)[:, :n]
    scale_buf = torch.empty((-(-n // SCALE_BLOCK), -(-m // 4) * 4), dtype=torch.float32, device=device)
    return values, scale_buf


def scales_view(scale_buf: torch.Tensor, m: int) -> torch.Tensor:
    """The (M, ceil(N / 128)) column-major view of ``scale_buf`` (:func:`quantized_buffers`'s) that
    ``quantize_fp8(x, (1, 128))`` returns."""
    return scale_buf[:, :m].t()
