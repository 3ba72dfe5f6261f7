"""fp8 values with fp32 block scales: ``quantize_fp8`` (torch ops: any block layout ``scaled_mm`` takes) and
``dequantize``, and the quantized output's tensors: e4m3 values with one fp32 scale per row and 128
columns, as ``quantize_fp8(x, (1, 128))`` computes them, written by a kernel's epilogue (the fp8 kernel's
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

from gemm_ladder.contract import FP8_DTYPES
from gemm_ladder.errors import GemmInputError, GemmTypeError

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


def quantized_product_error(values: torch.Tensor, scales: torch.Tensor, ref: torch.Tensor) -> float:
    """The worst element's error over its bound, for the fp8 GEMM's quantized output against its exact product:
    ``values`` (M, N) e4m3 and ``scales`` (M, ceil(N / 128)) fp32, one per row and 128 columns (any strides:
    the kernel's column-major ones too), ``ref`` (M, N) float64, the product of the dequantized operands (plus
    any bias). Each dequantized value's bound: e4m3's rounding of ``ref`` (2^-4 relative: 3 mantissa bits, OCP
    8-bit Floating Point, E4M3; 2^-9 of its block's scale near zero: the smallest subnormal step) plus the fp8
    GEMM's own error, 2^-10 of the largest |ref| (the fp32 output's bound in tests/test_fp8_gpu.py). At most 1
    passes; NaN (a NaN value or scale) passes no ``<= 1``. Unlike :func:`quantized_error` (the 16-bit kernels'
    output: scales within 1e-3 of quantizing ``ref`` itself, a per-block accumulation term), the kernel's own
    scales are taken as they are and its error is bounded over the whole product. What bench/fp8.py and the
    fp8 GPU tests (tests/fp8_cases.py) judge the output by."""
    deq = dequantize(values, scales, (1, SCALE_BLOCK)).double()
    s = scales.double().repeat_interleave(SCALE_BLOCK, dim=1)[:, :ref.shape[-1]]
    bound = 2**-4 * ref.abs() + 2**-9 * s + 2**-10 * ref.abs().max()
    return ((deq - ref).abs() / bound).max().item()


#: The blocks quantize_fp8 takes: (rows, columns) per scale; -1 spans the whole dimension.
BLOCKS = ((1, 128), (128, 128), (1, -1), (-1, -1))
#: Each scaling scaled_mm takes, as the blocks of ``a`` (M, K) and of ``w`` (N, K) that quantize_fp8 quantizes
#: them with (check_scaled_mm's scale layouts: tensorwise, rowwise, blockwise 1 x 128 with 128 x 128).
SCHEME_BLOCKS = {"tensorwise": ((-1, -1), (-1, -1)), "rowwise": ((1, -1), (1, -1)), "blockwise": ((1, 128), (128, 128))}


def _block_grid(rows: int, cols: int, block) -> tuple[int, int, int, int]:
    """(block rows, block columns, blocks down, blocks across) of ``block`` over a (rows, cols) tensor: a -1
    extent is one block of the whole dimension, which exists (one scale) even when the dimension is empty."""
    br = max(rows, 1) if block[0] == -1 else block[0]
    bc = max(cols, 1) if block[1] == -1 else block[1]
    nr = 1 if block[0] == -1 else math.ceil(rows / br)
    nc = 1 if block[1] == -1 else math.ceil(cols / bc)
    return br, bc, nr, nc


def quantize_fp8(x: torch.Tensor, block=(1, 128), *, dtype: torch.dtype = torch.float8_e4m3fn):
    """Quantize a 2-D floating tensor to fp8 with one fp32 scale per block; return ``(values, scales)``.

    ``values`` (same shape as x, ``dtype``) times the block's scale approximates x: per block,
    ``amax = max |x|`` in fp32, ``scale = max(amax / fmax, finfo(float32).tiny)`` (IEEE division, on CPU and
    CUDA alike; fmax 448 for e4m3fn,
    57344 for e5m2; the floor keeps an all-zero or subnormal block's scale a positive normal number, so
    its values are x / scale, finite and at most fmax), ``values = clamp(x / scale, -fmax, fmax)``. A block
    holding Inf or NaN gets an Inf or NaN scale (its dequantized values are NaN, not silently finite).
    Eager calls only match the kernels bit for bit: traced by ``torch.compile`` on CUDA, inductor turns the
    division by the constant fmax into a multiply by its reciprocal and Triton's ``/`` is approximate
    (unless TORCHINDUCTOR_EMULATE_DIVISION_ROUNDING=1), so a compiled call's scales and values may be 1 ulp off.

    ``block`` and the ``scales`` layout (the layouts ``scaled_mm`` and ``torch._scaled_mm`` take):

    * ``(1, 128)``: (R, ceil(C/128)), column-major (stride (1, R)): activations, ``scale_a``;
    * ``(128, 128)``: (ceil(R/128), ceil(C/128)) row-major: a weight w (N, K) -> pass ``values.T`` as b
      and ``scales.T`` as ``scale_b``;
    * ``(1, -1)``: (R, 1), rowwise; ``(-1, -1)``: one element, shape (), tensorwise.

    Raises GemmTypeError (not a tensor), GemmInputError (not 2-D, not floating, an unknown block or dtype).
    """
    if not isinstance(x, torch.Tensor):
        raise GemmTypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.layout is not torch.strided or x.is_nested:
        raise GemmInputError(f"x is {'a nested tensor' if x.is_nested else f'layout {x.layout}'}: quantize_fp8 "
                             "takes a dense (strided) tensor; pass x.to_dense()")
    if x.dim() != 2:
        raise GemmInputError(f"x must be 2-D, got {x.dim()} dimensions")
    if not x.dtype.is_floating_point or x.dtype in FP8_DTYPES:
        raise GemmInputError(f"x has dtype {x.dtype}; quantize_fp8 takes a floating tensor (float64, float32, "
                             "bfloat16 or float16), not fp8")
    if dtype not in FP8_DTYPES:
        raise GemmInputError(f"dtype = {dtype}: use torch.float8_e4m3fn or torch.float8_e5m2")
    block = tuple(block) if isinstance(block, (tuple, list)) else block
    if block not in BLOCKS:
        raise GemmInputError(f"block = {block!r}: use one of {', '.join(map(str, BLOCKS))}")
    fmax = torch.finfo(dtype).max
    rows, cols = x.shape
    br, bc, nr, nc = _block_grid(rows, cols, block)
    xf = x.float()
    padded = torch.nn.functional.pad(xf, (0, nc * bc - cols, 0, nr * br - rows))
    blocks = padded.view(nr, br, nc, bc)
    amax = blocks.abs().amax(dim=(1, 3)) if blocks.numel() else torch.zeros((nr, nc), device=x.device)
    # amax of a block holding NaN is NaN (torch.amax propagates NaN). The divisor is a tensor on amax's
    # device: CUDA torch divides by a Python (CPU) scalar as a multiply by its rounded reciprocal, 1 ulp off
    # IEEE division for some amax (3.0097604 / 448), which the kernels' epilogue computes (__fdiv_rn).
    scales = torch.clamp(amax / torch.full((), fmax, dtype=torch.float32, device=amax.device),
                         min=torch.finfo(torch.float32).tiny)
    values = (blocks / scales[:, None, :, None]).clamp(-fmax, fmax).reshape(nr * br, nc * bc)[:rows, :cols]
    values = values.to(dtype).contiguous()
    if block == (1, 128):
        scales = scales.t().contiguous().t()
    elif block == (-1, -1):
        scales = scales.reshape(())
    return values, scales


def quantize_fp8_into(x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_fp8(x, (1, 128))`` of a 2-D (M, N) floating tensor written into ``values`` and ``scales``
    (library/quantized.py's ``quantized_buffers`` for (*, N) with M rows merged), which it returns: the
    quantized output's layouts where no kernel runs (empty K). Raises as :func:`quantize_fp8`."""
    v, s = quantize_fp8(x, (1, SCALE_BLOCK))
    out, scale_rows = kernel_views(values, scales)
    out.copy_(v)
    scale_rows.copy_(s.t())
    return values, scales


def dequantize(values: torch.Tensor, scales: torch.Tensor, block) -> torch.Tensor:
    """The float64 tensor ``quantize_fp8`` approximated: each value times its block's scale (tests' reference)."""
    rows, cols = values.shape
    br, bc, nr, nc = _block_grid(rows, cols, block)
    full = scales.double().reshape(nr, nc).repeat_interleave(br, 0)[:rows].repeat_interleave(bc, 1)[:, :cols]
    return values.double() * full


__all__ = ["BLOCKS", "QUANT_OUT", "SCALE_BLOCK", "SCHEME_BLOCKS", "dequantize", "kernel_views", "quantize_fp8",
           "quantize_fp8_into", "quantized_buffers", "quantized_error", "quantized_product_error"]
