"""Where a kernel stands on the ladder: which rungs' ideas its evidence shows.

Each rung is the one idea its level adds (docs/ladder.md; the registry's ``idea``), tested on
the evidence (:class:`gemm_ladder.advise.evidence.Evidence`), the SASS first and the build or launch where
the SASS cannot say (how many consumer warpgroups a CTA runs):

1. wgmma: HGMMA in the SASS.
2. K loop: a loop around the MMA.
3. spatial tiling: the CTA reads its index (SR_CTAID): a grid of CTAs shares the output.
4. TMA: UTMALDG (TMA loads).
5. multi-stage pipeline: a ring of at least 2 stages (the build's GL_STAGES; else two mbarriers per
   stage, a full and an empty one, counted by mbarrier.init in the SASS or ptxas's EIATTR_NUM_MBARRIERS).
6. persistent: one loop holds the MMA and the output store (the CTA walks several tiles).
7. warp specialization: setmaxnreg both down (the producer) and up (the consumers), or the build's
   producer warpgroup.
8. 2-CTA cluster with multicast: multicast TMA loads.
9. multi-consumer: at least two consumer warpgroups per CTA (the build's GL_CONSUMERS; else threads per
   CTA, less one producer warpgroup, over 128).

The ladder is cumulative: a kernel stands at N when rungs 1..N are all present. A rung present above a
missing one is reported as skipped-over: the next step is the lowest missing rung, one idea at a time
(the method's first failure mode: jumping several levels at once hides where an error comes from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from gemm_ladder.advise.evidence import Evidence

#: Threads of one warpgroup (4 warps of 32): the unit of wgmma and of the ladder's roles.
WARPGROUP_THREADS = 128


@dataclass(frozen=True)
class RungResult:
    """One rung tested: ``present`` is True, False, or None (the evidence cannot say)."""

    level: int
    name: str
    present: bool | None
    because: str
    label: str  # the label of the fact that decided it

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "name": self.name, "present": self.present, "because": self.because,
                "label": self.label}


def _no_sass(ev: Evidence) -> tuple[bool | None, str, str]:
    """The rung cannot be read: False when the target is known to have no kernel of its own, else unknown."""
    own = ev.get("callable.own_kernel")
    if own is not None and own.value is False:
        return False, own.statement, own.label
    f = ev.get("sass.available")
    return None, f.statement if f else "no SASS fact to decide it", f.label if f else "not run"


def _wgmma(ev: Evidence):
    if (f := ev.get("sass.hgmma")) is None:
        return _no_sass(ev)
    if f.value:
        return True, f.statement, f.label
    if (hmma := ev.get("sass.hmma")) is not None and hmma.value:
        return False, f"{hmma.value} HMMA (mma.sync) and no HGMMA: tensor cores, but not through wgmma", hmma.label
    return False, "no HGMMA and no HMMA: no tensor-core instruction", f.label


def _sass_fact(key: str):
    """A rung shown by one SASS fact being non-zero / true."""
    def test(ev: Evidence):
        if (f := ev.get(key)) is None:
            return _no_sass(ev)
        return bool(f.value), f.statement, f.label
    return test


def _ring(ev: Evidence):
    if (f := ev.get("build.stages")) is not None:
        return f.value >= 2, f.statement, f.label
    for key in ("elf.mbarriers", "sass.mbarrier_inits"):
        if (f := ev.get(key)) is not None and f.value is not None:
            stages = f.value // 2
            return stages >= 2, f"{f.statement}: about {stages} stage(s) at a full and an empty barrier each", "inferred"
    return _no_sass(ev)


def _persistent(ev: Evidence):
    launch = ev.get("launch.persistent")
    if (f := ev.get("sass.tile_loop")) is None:
        return (launch.value, launch.statement, launch.label) if launch is not None else _no_sass(ev)
    present, because, label = f.value, f.statement, f.label
    if launch is not None and launch.value != present:
        because += f"; but the launch says otherwise: {launch.statement}"
        present = present or launch.value
    return present, because, label


def _warp_specialized(ev: Evidence):
    pw = ev.get("build.producer_warpgroup")
    if (f := ev.get("sass.setmaxnreg")) is None:
        return (pw.value, pw.statement, pw.label) if pw is not None else _no_sass(ev)
    down, up = f.value
    if down and up:
        return True, f.statement, f.label
    if pw is not None and pw.value:
        return True, pw.statement + " (no setmaxnreg in the SASS)", pw.label
    return False, f.statement, f.label


def _multicast(ev: Evidence):
    if (f := ev.get("sass.multicast_loads")) is None:
        return _no_sass(ev)
    because = f.statement
    for key in ("build.cluster", "elf.cluster_dims"):
        if (c := ev.get(key)) is not None:
            because += f"; {c.statement}"
    return bool(f.value), because, f.label


def _consumers(ev: Evidence):
    if (f := ev.get("build.consumers")) is not None:
        return f.value >= 2, f.statement, f.label
    threads = ev.get("build.threads") or ev.get("elf.max_threads")
    if threads is None or threads.value is None:
        if ev.get("sass.available") is None or not ev.value("sass.available"):
            return _no_sass(ev)
        return None, "threads per CTA unknown (no build geometry, no __launch_bounds__)", "not run"
    producer = 1 if (ev.value("sass.setmaxnreg") or (0, 0))[0] else 0
    consumers = threads.value // WARPGROUP_THREADS - producer
    return consumers >= 2, (f"{threads.statement}, {'less one producer warpgroup, ' if producer else ''}"
                            f"so {consumers} consumer warpgroup(s)"), "inferred"


#: (level, test) per rung; the rung's name and idea come from the level registry.
RUNG_TESTS: tuple[tuple[int, Callable[[Evidence], tuple[bool | None, str, str]]], ...] = (
    (1, _wgmma),
    (2, _sass_fact("sass.mma_in_loop")),
    (3, _sass_fact("sass.reads_ctaid")),
    (4, _sass_fact("sass.utmaldg")),
    (5, _ring),
    (6, _persistent),
    (7, _warp_specialized),
    (8, _multicast),
    (9, _consumers),
)


@dataclass(frozen=True)
class Position:
    """Where a kernel stands: ``level`` 0 (not on the ladder: no wgmma) to 9, and every rung's test."""

    level: int
    rungs: tuple[RungResult, ...]

    @property
    def next_level(self) -> int | None:
        """The lowest rung not present (the next step), or None at the top."""
        return self.level + 1 if self.level < len(self.rungs) else None

    @property
    def skipped_over(self) -> list[RungResult]:
        """Rungs present above the first missing one (ideas taken out of order)."""
        return [r for r in self.rungs if r.level > self.level + 1 and r.present]

    @property
    def unknown(self) -> list[RungResult]:
        return [r for r in self.rungs if r.present is None]

    def statement(self) -> str:
        from gemm_ladder.levels import LEVELS

        if self.level == 0:
            first = self.rungs[0]
            where = "not on the ladder yet" if first.present is False else "cannot be placed"
            s = f"{where}: {first.because}"
        else:
            s = (f"level {self.level} ({LEVELS[self.level].name}): "
                 + ("rung 1 present" if self.level == 1 else f"rungs 1-{self.level} present"))
        if self.skipped_over:
            s += "; also has " + ", ".join(f"rung {r.level} ({r.name})" for r in self.skipped_over) + \
                 f" above the missing rung {self.level + 1}"
        return s

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "next_level": self.next_level, "statement": self.statement(),
                "skipped_over": [r.level for r in self.skipped_over], "rungs": [r.to_json() for r in self.rungs]}


def place(ev: Evidence) -> Position:
    """Test every rung on ``ev`` and place the kernel at the top of the unbroken run from rung 1."""
    from gemm_ladder.levels import LEVELS

    results: list[RungResult] = []
    for level, test in RUNG_TESTS:
        present, because, label = test(ev)
        same = next((r for r in results if r.because == because), None)  # one missing source answers many rungs
        results.append(RungResult(level, LEVELS[level].name, present, f"as rung {same.level}" if same else because, label))
    level = 0
    for r in results:
        if r.present is not True:
            break
        level = r.level
    return Position(level, tuple(results))
