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


def quantized_error(values: torch.Tensor, scales: torch.Tensor, ref: torch.Tensor) -> tuple[bool, bool, float]:
    """How close (values, scales) of shape (*, N) and (*, ceil(N / 128)) are to quantizing the float64 result
    ``ref`` (*, N): (scales within 1e-3 of max(amax / 448, FLT_MIN) per block, dequantized values within
    e4m3's rounding: 2^-4 relative (3 mantissa bits: OCP 8-bit floating point, E4M3), 2^-9 of the block's
    scale near zero (e4m3's smallest subnormal step), plus 1e-4 of the block's amax for the fp32
    accumulation's own error, the largest error in units of its block's scale). What the GPU tests and
    bench/quantized_linear.py judge a quantized output by."""
    n = ref.shape[-1]
    r = ref.reshape(-1, n).double()
    amax = torch.nn.functional.pad(r.abs(), (0, -n % SCALE_BLOCK)).view(r.shape[0], -1, SCALE_BLOCK).amax(-1)
    ref_scales = (amax / 448).clamp_min(torch.finfo(torch.float32).tiny)
    got_scales = scales.reshape(-1, scales.shape[-1]).double()
    s = ref_scales.repeat_interleave(SCALE_BLOCK, dim=1)[:, :n]
    deq = values.reshape(-1, n).double() * got_scales.repeat_interleave(SCALE_BLOCK, dim=1)[:, :n]
    err = (deq - r).abs()
    scales_ok = bool(((got_scales - ref_scales).abs() <= 1e-3 * ref_scales).all())
    values_ok = bool((err <= 2**-4 * r.abs() + 2**-9 * s + 1e-4 * 448 * s).all())
    return scales_ok, values_ok, (err / s).max().item()


__all__ = ["QUANT_OUT", "SCALE_BLOCK", "kernel_views", "quantized_buffers", "quantized_error"]
