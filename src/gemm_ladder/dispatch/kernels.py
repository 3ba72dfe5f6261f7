"""The GEMM kernels the dispatcher chooses from, each behind the library's protocol:

``supports(a: OperandView, b: OperandView, c: Tensor) -> str | None`` (None: computes
``c = A @ B^T``; else the rule broken), ``plan(m, n, k, dtype)`` (the designer's plan) and
``launch(a, b, c, **options)`` on the current stream.

* :func:`small_m` - ``library.small_m.small_m_gemm`` (M <= 256; or the bucket the table's M-tile rule
  picks: ``small_m_kernel``), options ``splits``.
* :func:`general` - the library kernel for an operand order and tile width (``library.gemm.library_gemm``),
  options ``split`` in ("none", "tail", "all") and, for a workspace output, ``c_padding_writable``.
* :func:`general_from_registers` - its build that stores C from registers (any pitch, float32 too):
  the route's build for outputs a TMA store cannot write; options ``split``.
"""

from __future__ import annotations


def small_m(m: int, bn: int | None = None):
    """The small-M kernel for M rows (bucket ``bn``, M in ceil(M / BN) tiles; None: the smallest bucket
    >= M, one tile), or None when M is past its range. Raises ValueError for a ``bn`` not built."""
    from gemm_ladder.library.small_m import SMALL_M_MAX, small_m_gemm, small_m_kernel

    if not 1 <= m <= SMALL_M_MAX:
        return None
    return small_m_gemm(m) if bn is None else small_m_kernel(bn)


def general(a_major: str, b_major: str, bn: int):
    """The general kernel reading A ``a_major`` and B ``b_major`` with 128 x ``bn`` tiles."""
    from gemm_ladder.library.gemm import library_gemm

    return library_gemm(a_major, b_major, bn=bn)


def general_from_registers(a_major: str, b_major: str, bn: int, out_fp32: bool = False):
    """The general kernel's build that stores C from the consumers' registers (masked stores: any row
    pitch and element-aligned base; ``out_fp32``: a float32 output), for outputs a TMA store cannot write."""
    from gemm_ladder.library.gemm import library_gemm

    return library_gemm(a_major, b_major, bn=bn, c_from_registers=True, out_fp32=out_fp32)


def general_bns() -> tuple[int, ...]:
    """Tile widths the general kernel is built for, widest first."""
    from gemm_ladder.library.gemm import TILE_N

    return tuple(sorted(TILE_N, reverse=True))


def kernel_splits(kernel) -> tuple[str, ...]:
    """The split policies ``kernel.launch`` takes (``splits`` attribute; "none", "tail", "all" by default)."""
    return tuple(getattr(kernel, "splits", ("none", "tail", "all")))


def describe(kernel) -> dict:
    """Name, source file, tile, stages, cluster and BN of a kernel, as far as it says (the source
    from its module's ``SOURCE`` where the object has none)."""
    import sys

    name = getattr(kernel, "name", None) or f"{type(kernel).__name__}(bn={getattr(kernel, 'bn', '?')})"
    out = {"name": name}
    source = getattr(kernel, "source", None) or getattr(sys.modules.get(type(kernel).__module__), "SOURCE", None)
    if source:
        out["source"] = source
    for attr in ("tile", "stages", "cluster", "bn"):
        value = getattr(kernel, attr, None)
        if value is not None and not callable(value):
            out[attr] = list(value) if isinstance(value, tuple) else value
    return out


__all__ = ["describe", "general", "general_bns", "general_from_registers", "kernel_splits", "small_m"]
