"""What a planned launch template depends on beyond its call's tensors: module settings read when it was planned.

The compiled host module keys a template by the call's tensors only. A planner that also reads module settings
(library/grouped.py's store, tail, cluster and ring rules; dispatch/swiglu_small_m.py's thresholds) records them
with :meth:`PlannedSettings.planned`, and the public calls ask :meth:`PlannedSettings.fresh` before going to C++:
where the settings changed since, the host module's templates are dropped and the next call is planned again.
Imports nothing of the library (api.py, ops_grouped.py and the planners all use it).
"""

from __future__ import annotations

from typing import Callable


class PlannedSettings:
    """The settings ``read()`` returned when a template was last planned (None: nothing planned since a drop)."""

    def __init__(self, read: Callable[[], tuple]):
        self.read = read
        self.settings: tuple | None = None

    def planned(self) -> None:
        """Record the settings a template is being planned under (the planner calls it)."""
        self.settings = self.read()

    def fresh(self, clear: Callable[[], None]) -> None:
        """Call ``clear`` (the host module's: every template dropped) when the settings changed since one was planned."""
        if self.settings is not None and self.settings != self.read():
            clear()
            self.settings = None


__all__ = ["PlannedSettings"]
