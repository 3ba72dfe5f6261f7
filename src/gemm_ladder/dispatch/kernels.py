"""The kernel families the dispatcher chooses from, reached by their configs
(:class:`~gemm_ladder.library.kernel.KernelConfig`) through the
:class:`~gemm_ladder.library.kernel.Kernel` protocol: ``supports(config, problem)``,
``build(config)``, ``bind(config, problem, **options)``, ``launch(bound)``.

* :func:`small_m` - the small-M kernel's config (``library/small_m.py``: M <= 256, a bucket of M
  rows per tile), options ``splits``.
* :func:`general` - the general kernel's config for an operand order and tile width
  (``library/gemm.py``), options ``split`` in ("none", "tail", "all", "wave") and, for a workspace output,
  ``c_padding_writable``.
* :func:`general_from_registers` - its build that stores C from registers (any pitch, float32 too):
  the route's build for outputs a TMA store cannot write; options ``split``.

The grouped GEMM (``sm90_grouped_gemm``, library/grouped.py) and fp8 (``sm90_fp8_gemm``,
library/fp8.py) families are reached the same way; the public grouped and fp8 calls (api_grouped.py,
the ``scaled_mm`` op) choose their builds themselves (no route ranks them).

:func:`family` gives a config's family (its host module's protocol object), :func:`kernel_object`
the per-configuration object the tests, benches and ``explain`` read (plan, tile, stages, name).
"""

from __future__ import annotations

import importlib

from gemm_ladder.library.kernel import STORE_REGISTERS, STORE_TMA, Kernel, KernelConfig

#: Family name -> (host module, its protocol object's name). Imported on first use: a route on meta
#: tensors needs no kernel module it does not choose from.
FAMILIES: dict[str, tuple[str, str]] = {
    "sm90_gemm": ("gemm_ladder.library.gemm", "GEMM"),
    "sm90_gemm_small_m": ("gemm_ladder.library.small_m", "SMALL_M"),
    "sm90_swiglu": ("gemm_ladder.library.swiglu", "SWIGLU"),
    "sm90_swiglu_small_m": ("gemm_ladder.library.swiglu_small_m", "SWIGLU_SMALL_M"),
    "sm90_grouped_gemm": ("gemm_ladder.library.grouped", "GROUPED_GEMM"),
    "sm90_fp8_gemm": ("gemm_ladder.library.fp8", "FP8_GEMM"),
}


def family(config: KernelConfig | str) -> Kernel:
    """The family (its :class:`Kernel` protocol object) of ``config`` or of a family name; raises
    KeyError for an unknown family."""
    name = config if isinstance(config, str) else config.family
    module, attr = FAMILIES[name]
    return getattr(importlib.import_module(module), attr)


def kernel_object(config: KernelConfig):
    """The per-configuration object of ``config`` (a LibraryGemm, a SmallMGemm, the SwigluKernel, a
    GroupedGemm or an Fp8Kernel):
    its plan, tile, stages and name, for ``explain``, the benches and the tests."""
    return importlib.import_module(FAMILIES[config.family][0]).kernel_for(config)


def small_m(m: int, bn: int | None = None, dtype: str = "bf16", *, a_major: str = "k", b_major: str = "k",
            out_dtype: str | None = None) -> KernelConfig | None:
    """The small-M kernel's config for M rows (bucket ``bn``, M in ceil(M / BN) tiles; None: the
    smallest bucket >= M, one tile), or None when M is past its range. Raises ValueError for a ``bn``
    not built."""
    from gemm_ladder.library.small_m import SMALL_M, SMALL_M_MAX, bucket

    if not 1 <= m <= SMALL_M_MAX:
        return None
    return SMALL_M.config(bucket(m) if bn is None else bn, dtype, a_major=a_major, b_major=b_major,
                          out_dtype=out_dtype)


def small_m_bn(m: int) -> int | None:
    """The bucket of M rows in one tile, or None past the small-M kernel's range."""
    from gemm_ladder.library.small_m import SMALL_M_MAX, bucket

    return bucket(m) if 1 <= m <= SMALL_M_MAX else None


def small_m_buckets() -> tuple[int, ...]:
    """The small-M kernel's buckets (BN: M rows per tile)."""
    from gemm_ladder.library.small_m import BUCKETS

    return BUCKETS


def general(a_major: str, b_major: str, bn: int, dtype: str = "bf16", cluster: int = 2, bm: int = 128,
            pingpong: bool = False) -> KernelConfig:
    """The general kernel's config reading A ``a_major`` and B ``b_major`` with ``bm`` x ``bn`` tiles
    (TMA store; BM 128 or 64), in clusters of ``cluster`` CTAs (2: sharing B; 1); ``pingpong`` (BM 64 or 128):
    two consumers taking the tiles in turn (dispatch/pingpong.py says when the route takes it)."""
    from gemm_ladder.library.gemm import GEMM

    return GEMM.config(a_major, b_major, bn, dtype, store=STORE_TMA, cluster=cluster, bm=bm, pingpong=pingpong)


def general_from_registers(a_major: str, b_major: str, bn: int, dtype: str = "bf16",
                           out_fp32: bool = False, cluster: int = 2, out_e4m3: bool = False) -> KernelConfig:
    """The general kernel's build that stores C from the consumers' registers (masked stores: any row
    pitch and element-aligned base; ``out_fp32``: a float32 output; ``out_e4m3``: the quantized output,
    e4m3 values with 1 x 128 scales, at BN 128 or 256), for outputs a TMA store cannot write."""
    from gemm_ladder.library.gemm import GEMM

    out_dtype = "fp32" if out_fp32 else "e4m3" if out_e4m3 else None
    return GEMM.config(a_major, b_major, bn, dtype, store=STORE_REGISTERS, out_dtype=out_dtype, cluster=cluster)


def general_bns() -> tuple[int, ...]:
    """Tile widths the general kernel is built for, widest first: for some B major (BN 192 for a K-major B
    only, :func:`general_built`)."""
    from gemm_ladder.library.gemm import K_MAJOR_B_TILE_N, TILE_N

    return tuple(sorted({*TILE_N, *K_MAJOR_B_TILE_N}, reverse=True))


def general_built(b_major: str, bn: int) -> bool:
    """Whether the general kernel is built at tile width ``bn`` for a B of major ``b_major`` ("k" or "mn"):
    library/gemm.py's tile_n_built (BN 192 for a K-major B only: the designer refuses an MN-major B's 96-row
    cluster slice there)."""
    from gemm_ladder.library.gemm import tile_n_built

    return tile_n_built(b_major, bn)


def general_clusters() -> tuple[int, ...]:
    """The cluster sizes the general kernel is built for (library/gemm.py's CLUSTERS: 2, level 9's, first)."""
    from gemm_ladder.library.gemm import CLUSTERS

    return CLUSTERS


def general_tile_ms() -> tuple[int, ...]:
    """The tile heights the general kernel is built for (library/gemm.py's TILE_M: 128, level 9's, first)."""
    from gemm_ladder.library.gemm import TILE_M

    return TILE_M


def general_tile_m_routed(tile_m: int, a_major: str, b_major: str) -> bool:
    """Whether the route offers the general kernel's ``tile_m``-row build for these operand majors: the
    128-row build everywhere, the 64-row build for K-major A and B only (``F.linear``'s layout of a
    row-major activation and weight: what its GPU tests and measurements cover)."""
    return tile_m == 128 or (a_major, b_major) == ("k", "k")


def kernel_splits(config: KernelConfig) -> tuple[str, ...]:
    """The split policies a launch of ``config`` takes that the dispatcher ranks (its family's ``splits``;
    a ping-pong build's: "none")."""
    return ("none",) if config.pingpong else family(config).splits


def describe(config: KernelConfig) -> dict:
    """Name, source file, tile, stages, cluster and BN of a config, as its family says them."""
    return family(config).describe(config)


__all__ = ["FAMILIES", "describe", "family", "general", "general_bns", "general_built", "general_clusters", "general_tile_m_routed", "general_tile_ms", "general_from_registers", "kernel_object",
           "kernel_splits", "small_m", "small_m_bn", "small_m_buckets"]
