"""The quantized output's tensors: e4m3 values with one fp32 scale per row and 128 columns, as
``quantize_fp8(x, (1, 128))`` computes them, written by a kernel's epilogue (the fp8 kernel's
``out_dtype=torch.float8_e4m3fn``, library/fp8.py; the 16-bit kernel's ``out_e4m3`` build,
library/gemm.py; both through kernels/include/gemm_ladder/quantized_store.cuh).

The values' rows have a pitch that is a multiple of 16 elements, and the scales are column-major in the
merged rows with a pitch that is a multiple of 4 (element (r, b) at r + b x R, R = the rows rounded up to
4), so the next ``scaled_mm(values, w2.T, scales, ...)`` reads both in place (its tensor maps need 16-byte
pitches). Both are tensors of their own with those strides (``torch.empty_strided``), not views of a
larger buffer: a registered op may return them as they are, and its fake makes the same strides.
"""

from __future__ import annotations

import math

import torch

#: The quantized output's element type.
QUANT_OUT = torch.float8_e4m3fn
#: Output columns per scale (a 1 x 128 block: one K block of the next fp8 GEMM).
SCALE_BLOCK = 128


def _row_major(lead: tuple[int, ...], unit: int) -> tuple[int, ...]:
    """Strides of the leading dimensions ``lead`` laid out row-major, the last one ``unit`` apart."""
    strides, step = [], unit
    for size in reversed(lead):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def quantized_buffers(lead: int | tuple[int, ...], n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, scales) for a result of shape (*lead, N) (``lead`` an int M for a 2-D result), uninitialised:
    values (*lead, N) e4m3, the rows merged with a pitch of N rounded up to 16 elements; scales
    (*lead, ceil(N / 128)) fp32, element (row r, block b) of the merged rows at r + b x R, R = M rounded up
    to 4. What a kernel writes through :func:`kernel_views`."""
    lead = (lead,) if isinstance(lead, int) else tuple(lead)
    m, blocks = math.prod(lead), -(-n // SCALE_BLOCK)
    values = torch.empty_strided((*lead, n), (*_row_major(lead, -(-n // 16) * 16), 1), dtype=QUANT_OUT, device=device)
    scales = torch.empty_strided((*lead, blocks), (*_row_major(lead, 1), -(-m // 4) * 4), dtype=torch.float32,
                                 device=device)
    return values, scales


def kernel_views(values: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`quantized_buffers`' tensors as a kernel writes them: values (M, N) with stride (pitch, 1) and
    the scales as (ceil(N / 128), M) with stride (R, 1), row b the scales of columns [128 b, 128 b + 128)."""
    n, blocks = values.shape[-1], scales.shape[-1]
    m = math.prod(values.shape[:-1])
    return values.reshape(m, n), scales.reshape(m, blocks).t()


__all__ = ["QUANT_OUT", "SCALE_BLOCK", "kernel_views", "quantized_buffers"]
