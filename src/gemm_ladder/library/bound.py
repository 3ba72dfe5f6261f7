"""A kernel launch bound to one set of operands: the form the per-call cache keeps.

:meth:`LibraryGemm.bind <gemm_ladder.library.gemm.LibraryGemm.bind>` and
:meth:`SmallMGemm.bind <gemm_ladder.library.small_m.SmallMGemm.bind>` do everything a launch needs
that depends only on the operands' shapes, strides, addresses and the stream (checks, the schedule,
the tensor maps, which embed the operands' base addresses, the packed arguments) and return a
:class:`BoundLaunch`; calling it does what must happen per launch (a split launch's zeroed counters
and workspace addresses) and one driver call. A bound launch is valid only for the addresses it was
bound to: whoever keeps one keys it by them (a fused epilogue's input addresses included: they are
in its EpilogueParams argument).
"""

from __future__ import annotations

from typing import Callable


class BoundLaunch:
    """``launch()`` for the operands it was bound to. ``before``, when set, runs first on every call
    (it refreshes the per-launch arguments in place: the prepared launch holds ctypes values).
    ``params``: the fused epilogue's EpilogueParams argument (library/epilogue.py), held by the
    prepared launch, or None without an epilogue.

    ``roles``: what each kernel argument is, in order (the compiled host path's launch template,
    gemm_ladder/host/templates.py, is made from them: one source of truth for the argument layout):
    ``("map", operand, encode_kwargs)`` a tensor map over the kernel's operand "A", "B" or "C";
    ``("ptr", operand)`` its address; ``("value",)`` a value fixed by the signature (extents, pitches,
    the schedule); ``("partials",)`` / ``("counters",)`` the split workspace's addresses (set per
    launch; ``workspace`` = (fp32 partials, int32 counters) it needs, or None unsplit);
    ``("epilogue",)`` the EpilogueParams. None where the binder records none."""

    __slots__ = ("prepared", "before", "params", "roles", "workspace")

    def __init__(self, prepared: Callable[[], None], before: Callable[[], None] | None = None, *, params=None,
                 roles: list | None = None, workspace: tuple[int, int] | None = None):
        self.prepared = prepared
        self.before = before
        self.params = params
        self.roles = roles
        self.workspace = workspace

    def set_scalars(self, scalars) -> None:
        """Write the epilogue's scalar inputs (in its slot order, as fp32) into the bound argument, so
        one bound launch serves every alpha and beta: the prepared launch reads the argument at launch
        time (cuLaunchKernelEx copies kernel parameters when called)."""
        p = self.params
        for i, v in enumerate(scalars):
            p.scalar[i] = v

    def __call__(self) -> None:
        if self.before is not None:
            self.before()
        self.prepared()
