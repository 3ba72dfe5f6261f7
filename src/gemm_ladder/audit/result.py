"""What an audit returns: the verdict, the violations with their shortest traces, and how it was decided."""

from __future__ import annotations

from dataclasses import dataclass, field

#: How :meth:`AuditResult.render` names the reduced search that decided (see :mod:`gemm_ladder.audit.reductions`).
REDUCTION_NAMES = {"blocks": " (atomic blocks)", "bursts": " (atomic blocks, TMA completions in bursts)"}


@dataclass
class Violation:
    """One property that fails, with the last steps of a shortest run that shows it."""

    kind: str
    message: str
    trace: list[str] = field(default_factory=list)
    omitted_steps: int = 0

    def to_json(self) -> dict:
        return {"kind": self.kind, "message": self.message, "trace": list(self.trace),
                "omitted_steps": self.omitted_steps}

    def render(self) -> str:
        lines = [f"[{self.kind}] {self.message}"]
        if self.trace:
            if self.omitted_steps:
                lines.append(f"    ... {self.omitted_steps} earlier steps")
            width = len(str(self.omitted_steps + len(self.trace)))
            for i, step in enumerate(self.trace, start=self.omitted_steps + 1):
                lines.append(f"    {i:>{width}}. {step}")
        return "\n".join(lines)


@dataclass
class AuditResult:
    """``ok`` is True only when the whole bounded state space was explored and nothing failed."""

    protocol: str
    ok: bool
    complete: bool
    violations: list[Violation]
    states_explored: int
    transitions: int
    bounds: dict
    seconds: float
    max_states: int
    reduction: str = "none"  # the reduced search that proved it ("bursts", "blocks"; see audit.reductions)
    notes: list[str] = field(default_factory=list)  # what the bounds mean for this protocol (its notes)
    symmetry_order: int = 1  # states visited per orbit of this many renamings (see audit.symmetry)

    def to_json(self) -> dict:
        return {"protocol": self.protocol, "ok": self.ok, "complete": self.complete,
                "violations": [v.to_json() for v in self.violations],
                "states_explored": self.states_explored, "transitions": self.transitions,
                "bounds": dict(self.bounds), "seconds": round(self.seconds, 3), "max_states": self.max_states,
                "reduction": self.reduction, "symmetry_order": self.symmetry_order, "notes": list(self.notes)}

    def render(self) -> str:
        bounds = ", ".join(f"{k}={v}" for k, v in self.bounds.items())
        verdict = "OK" if self.ok else ("VIOLATIONS" if self.violations else "INCOMPLETE")
        lines = [f"audit {self.protocol}: {verdict}",
                 f"  bounded model check{REDUCTION_NAMES.get(self.reduction, '')}"
                 f"{'' if self.symmetry_order == 1 else f' (one state per orbit of {self.symmetry_order} renamings)'}: "
                 f"{self.states_explored} states, {self.transitions} transitions, "
                 f"{self.seconds:.2f} s; bounds: {bounds or 'none recorded'}"]
        if not self.complete:
            lines.append(f"  state bound reached ({self.max_states} states): exploration incomplete")
        if self.ok:
            lines.append("  proved for these bounds only: no deadlock, no early overwrite, no early or stale read, "
                         "no staging reuse before its store drained, no phase error or aliasing, "
                         "one producer and one consumer kind per barrier")
        for v in self.violations:
            lines.append(v.render())
        return "\n".join(lines)

