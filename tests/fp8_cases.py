"""Operands the fp8 GPU tests share (tests/test_fp8_store_gpu.py, tests/test_fp8_split_gpu.py): quantized
a and w in scaled_mm's scale layouts for each scheme, their float64 dequantized values, and the error the
tests bound. Not a test module (no test_ prefix); imported like conftest's helpers."""

from __future__ import annotations

import math

import torch

from gemm_ladder.library.fp8 import dequantize, quantize_fp8

#: Each scheme's quantization blocks of a and of w (quantize_fp8's ``block``).
BLOCKS = {"tensorwise": ((-1, -1), (-1, -1)), "rowwise": ((1, -1), (1, -1)), "blockwise": ((1, 128), (128, 128))}


def fp8_problem(m: int, n: int, k: int, mode: str, *, seed: int = 0):
    """Quantized a (M, K) and w (N, K) of scheme ``mode``, as scaled_mm takes them (a, w.T, scale_a,
    scale_b), then the float64 dequantized a and w. a's columns span two decades of magnitude (logspace),
    so the blocks' scales differ."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), device="cuda", generator=g) * torch.logspace(-1, 1, k, device="cuda")
    w = torch.randn((n, k), device="cuda", generator=g) / math.sqrt(k)
    ba, bw = BLOCKS[mode]
    qa, sa = quantize_fp8(a, ba)
    qw, sw = quantize_fp8(w, bw)
    sb = sw.T if sw.dim() == 2 else sw
    return qa, qw.T, sa, sb, dequantize(qa, sa, ba), dequantize(qw, sw, bw)


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest element error over the reference's largest magnitude."""
    return ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()
