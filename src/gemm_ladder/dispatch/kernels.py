"""The GEMM kernels the dispatcher chooses from, each behind the library's protocol:

``supports(a: OperandView, b: OperandView, c: Tensor) -> str | None`` (None: computes
``c = A @ B^T``; else the rule broken), ``plan(m, n, k, dtype)`` (the designer's plan) and
``launch(a, b, c, **options)`` on the current stream.

* :func:`small_m` - ``library.small_m.small_m_gemm`` (M <= 256; or the bucket the table's M-tile rule
  picks: ``small_m_kernel``), options ``splits``.
* :func:`general` - the library kernel for an operand order and tile width (``library.gemm.library_gemm``),
  options ``split`` in ("none", "tail", "all", and "tail_spread" / "all_spread": "tail" / "all" run by
  its sibling build with the distributed fixup) and, for a workspace output, ``c_padding_writable``.
* :func:`general_from_registers` - its build that stores C from registers (any pitch, float32 too),
  options ``split``.
* :func:`general_staged` - its build that stores the same outputs through per-warp shared-memory
  buffers with 16-byte stores, options ``split``.
* :func:`general_unaligned_out` - the one of those two the route takes for outputs a TMA store cannot
  write (:data:`STAGED_STORE`).
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


def general_staged(a_major: str, b_major: str, bn: int, out_fp32: bool = False):
    """The general kernel's build that stores the outputs :func:`general_from_registers` stores (any row
    pitch and element-aligned base; ``out_fp32``: float32) through per-warp shared-memory buffers, copied
    out with 16-byte stores (kernels/include/gemm_ladder/staged_store.cuh)."""
    from gemm_ladder.library.gemm import library_gemm

    return library_gemm(a_major, b_major, bn=bn, c_from_registers=True, out_fp32=out_fp32, c_staged=True)


#: Which build writes the outputs a TMA store cannot write: the staged copy (True) or the register
#: store (False). bench/staged_store.py times both forced; the switch follows its result on the H200:
#: at f865039 (bench/results/2026-12-01_staged_store_f865039.json) the staged copy was no faster where it
#: would serve (N = 4095, BN 256: 207.4 us both; 4097x4095x4093 through mm: 273.8 against 268.0 us;
#: float32 out: 10-20% slower), faster only on aligned bf16 pitches, which the TMA store writes anyway.
#: precompile builds the one the switch picks.
STAGED_STORE = False


#: Whether the route ranks the distributed-fixup splits ("tail_spread", "all_spread": library/gemm.py
#: SPREAD_SPLITS). Off: their participants spin until every contributor has handed in, which needs every
#: CTA of the launch resident; the grid is sized to the resident clusters, but two such launches on
#: concurrent streams (or beside another spinning kernel) can each hold SMs the other's queued CTAs
#: need, and the launch is not cooperative (which would make residency the driver's guarantee). Until it
#: is, they run only when forced (``LibraryGemm.launch(split=...)``, bench/library.py --forced/--tune).
ROUTE_SPREAD = False


def general_unaligned_out(a_major: str, b_major: str, bn: int, out_fp32: bool = False):
    """The build the route takes for an output a TMA store cannot write (N not a whole number of 16
    bytes, a pitch or base not 16-byte aligned, a float32 output): :func:`general_staged` when
    :data:`STAGED_STORE`, else :func:`general_from_registers`."""
    pick = general_staged if STAGED_STORE else general_from_registers
    return pick(a_major, b_major, bn, out_fp32=out_fp32)


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


__all__ = ["ROUTE_SPREAD", "STAGED_STORE", "describe", "general", "general_bns", "general_from_registers", "general_staged",
           "general_unaligned_out", "kernel_splits", "small_m"]
