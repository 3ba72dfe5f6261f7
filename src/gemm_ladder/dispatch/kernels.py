"""The GEMM kernels the dispatcher chooses from, each behind the library's protocol:

``supports(a: OperandView, b: OperandView, c: Tensor) -> str | None`` (None: computes
``c = A @ B^T``; else the rule broken), ``plan(m, n, k, dtype)`` (the designer's plan) and
``launch(a, b, c, **options)`` on the current stream.

* :func:`small_m` - ``library.small_m.small_m_gemm`` (M <= 256), options ``splits``.
* :func:`general` - the library kernel for an operand order and tile width (``library.gemm.library_gemm``),
  options ``split`` in ("none", "tail", "all"). Where that module is absent, level 9 stands in,
  wrapped by :class:`Level9Kernel`: K-major contiguous operands only, BN 256, splits "none" and "tail".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gemm_ladder.contract import dtype_name
from gemm_ladder.library.operand import OperandView


def small_m(m: int):
    """The small-M kernel for M rows, or None when M is past its range."""
    from gemm_ladder.library.small_m import SMALL_M_MAX, small_m_gemm

    return small_m_gemm(m) if 1 <= m <= SMALL_M_MAX else None


def general(a_major: str, b_major: str, bn: int):
    """The general kernel reading A ``a_major`` and B ``b_major`` with 128 x ``bn`` tiles, or None
    when no kernel is built for that combination."""
    try:
        from gemm_ladder.library.gemm import library_gemm
    except ImportError:
        return LEVEL9 if (a_major, b_major, bn) == ("k", "k", 256) else None
    return library_gemm(a_major, b_major, bn=bn)


def general_bns() -> tuple[int, ...]:
    """Tile widths the general kernel is built for, widest first."""
    try:
        import gemm_ladder.library.gemm  # noqa: F401
    except ImportError:
        return (256,)
    return (256, 128)


def kernel_splits(kernel) -> tuple[str, ...]:
    """The split policies ``kernel.launch`` takes (``splits`` attribute; all three by default)."""
    return tuple(getattr(kernel, "splits", ("none", "tail", "all")))


def operand_tensor(v: OperandView) -> torch.Tensor:
    """The (rows, K) tensor a view describes, over the same storage (a view, never a copy)."""
    strides = (v.ld, 1) if v.major == "k" else (1, v.ld)
    return torch.as_strided(v.tensor, (v.rows, v.k), strides, v.tensor.storage_offset())


@dataclass(frozen=True, eq=False)
class Level9Kernel:
    """Level 9 behind the library's protocol, until ``library/gemm.py`` exists: A and B K-major with
    ``ld == K`` (contiguous rows), K and N multiples of 8, 16-byte aligned; c contiguous, the inputs' dtype."""

    name: str = "level 9 (multi_consumer)"
    bn: int = 256
    splits: tuple[str, ...] = ("none", "tail")
    _variants: dict = field(default_factory=dict, repr=False)

    def _level(self, split: str):
        from gemm_ladder.levels import get_level

        if split not in self._variants:
            base = get_level(9)
            self._variants[split] = base if split == "tail" else base.variant(stream_k_min_idle=1.0)
        return self._variants[split]

    @property
    def source(self) -> str:
        return self._level("tail").source

    @property
    def tile(self):
        return self._level("tail").tile

    @property
    def stages(self):
        return self._level("tail").stages

    @property
    def cluster(self):
        return self._level("tail").cluster

    def supports(self, a: OperandView, b: OperandView, c: torch.Tensor) -> str | None:
        for name, v in (("a", a), ("b", b)):
            if v.major != "k" or v.ld != v.k:
                return f"{name}: level 9 reads K-major operands with contiguous rows (ld == K)"
            if v.k % 8 or not v.tma_ok:
                return f"{name}: level 9 needs K a multiple of 8 and a 16-byte aligned base"
        if c.dtype != a.tensor.dtype:
            return f"c has dtype {c.dtype}: level 9 writes the inputs' dtype only"
        if not c.is_contiguous() or c.shape[1] % 8 or c.data_ptr() % 16:
            return "c: level 9 writes a contiguous output with N a multiple of 8 and a 16-byte aligned base"
        return None

    def plan(self, m: int, n: int, k: int, dtype: str):
        return self._level("tail").plan(m, n, k, dtype)

    def build(self, dtype: str, arch: str = "sm_90a"):
        return self._level("tail").build(dtype, arch)

    def launch(self, a: OperandView, b: OperandView, c: torch.Tensor, *, split: str = "tail") -> None:
        reason = self.supports(a, b, c)
        if reason is not None:
            raise ValueError(reason)
        self._level(split).launch(operand_tensor(a), operand_tensor(b), c)

    def grid(self, m: int, n: int, dtype: str, device: torch.device):
        return self._level("tail").grid(m, n, dtype, device)


LEVEL9 = Level9Kernel()


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


__all__ = ["LEVEL9", "Level9Kernel", "describe", "dtype_name", "general", "general_bns", "kernel_splits",
           "operand_tensor", "small_m"]
