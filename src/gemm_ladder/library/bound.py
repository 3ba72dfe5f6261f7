"""A kernel launch bound to one set of operands: the form the per-call cache keeps.

:meth:`LibraryGemm.bind <gemm_ladder.library.gemm.LibraryGemm.bind>` and
:meth:`SmallMGemm.bind <gemm_ladder.library.small_m.SmallMGemm.bind>` do everything a launch needs
that depends only on the operands' shapes, strides, addresses and the stream (checks, the schedule,
the tensor maps, which embed the operands' base addresses, the packed arguments) and return a
:class:`BoundLaunch`; calling it does what must happen per launch (a split launch's zeroed counters
and workspace addresses) and one driver call. A bound launch is valid only for the addresses it was
bound to: whoever keeps one keys it by them.
"""

from __future__ import annotations

from typing import Callable


class BoundLaunch:
    """``launch()`` for the operands it was bound to. ``before``, when set, runs first on every call
    (it refreshes the per-launch arguments in place: the prepared launch holds ctypes values)."""

    __slots__ = ("prepared", "before")

    def __init__(self, prepared: Callable[[], None], before: Callable[[], None] | None = None):
        self.prepared = prepared
        self.before = before

    def __call__(self) -> None:
        if self.before is not None:
            self.before()
        self.prepared()
