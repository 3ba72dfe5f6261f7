"""Which gates ran and what they found: the ``gates`` and ``summary`` objects of a result, the
summary line and the exit status of ``climb`` and ``gate``.

Each gate counts its checks as they happen: ``ran`` (the check ran: one target x dtype x shape for
correctness, one timing for performance, one build for resources), ``failed`` (it ran and failed)
and ``not_run`` (it applies but could not run here, with the reason). A gate none of whose checks
applies to the run (performance when no shape of the run is timed; resources for a callable with
nothing to build) is "not run" as well, with its reason and ``applies: false``; it does not make
the verdict incomplete. No gate is ever "passed" without a check that ran.
"""

from __future__ import annotations

import sys

from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

from gemm_ladder.results import (
    FAILED,
    GATES,
    NOT_RUN,
    PASSED,
    VERDICT_FAILED,
    VERDICT_INCOMPLETE,
    VERDICT_PASSED,
)

#: Exit statuses of ``climb`` and ``gate`` (their ``--help`` and the README say the same): every gate
#: that applies ran and passed; a gate failed; bad input, nothing run; nothing failed but a gate that
#: applies did not run; the run ended but its result JSON could not be written (stdout too: cli.main).
EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE, EXIT_UNWRITTEN = 0, 1, 2, 3, 4

#: What one check of each gate is, for the summary line.
UNITS = {"correctness": "check", "performance": "timing", "resources": "build"}


@dataclass
class GateTally:
    """The running count of one gate's checks (see the module docstring)."""

    name: str
    ran: int = 0
    failed: int = 0
    not_run: int = 0
    reasons: list[str] = field(default_factory=list)  # why checks that apply did not run, each once
    idle_reason: str = ""  # why no check applied, when none did

    def record(self, passed: bool) -> None:
        """One check ran; it failed unless ``passed``."""
        self.ran += 1
        self.failed += 0 if passed else 1

    def skip(self, reason: str, count: int = 1) -> None:
        """``count`` checks that apply did not run, for ``reason``."""
        self.not_run += count
        if reason not in self.reasons:
            self.reasons.append(reason)

    @property
    def applies(self) -> bool:
        """Whether any check of this gate applies to the run (correctness always does)."""
        return self.name == "correctness" or bool(self.ran or self.not_run)

    @property
    def state(self) -> str:
        if self.failed:
            return FAILED
        if self.not_run or not self.ran:
            return NOT_RUN
        return PASSED

    @property
    def reason(self) -> str | None:
        if self.state != NOT_RUN:
            return None
        if not self.not_run:
            return self.idle_reason or "no check of this gate applies to the run"
        done = f"ran {self.ran} of {self.ran + self.not_run} {UNITS[self.name]}s; " if self.ran else ""
        return done + "; ".join(self.reasons)

    def to_json(self) -> dict[str, Any]:
        """The gate's entry in the result's ``gates`` (docs/results-schema.md)."""
        return {"state": self.state, "applies": self.applies, "reason": self.reason, "ran": self.ran,
                "failed": self.failed, "not_run": self.not_run}


def new_tallies() -> dict[str, GateTally]:
    """One empty tally per gate, in :data:`~gemm_ladder.results.GATES` order."""
    return {name: GateTally(name) for name in GATES}


def summarize(tallies: dict[str, GateTally], failures: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``gates``, ``summary``) of a result from the tallies and the failure lines.

    ``summary.verdict``: "failed" when anything failed, else "incomplete" when a gate that applies did
    not run, else "passed"; ``summary.passed`` is true for "passed" only.
    """
    gates = {name: t.to_json() for name, t in tallies.items()}
    if failures or any(g["state"] == FAILED for g in gates.values()):
        verdict = VERDICT_FAILED
    elif any(g["state"] == NOT_RUN and g["applies"] for g in gates.values()):
        verdict = VERDICT_INCOMPLETE
    else:
        verdict = VERDICT_PASSED
    not_run = [f"{name}: {g['reason']}" for name, g in gates.items() if g["state"] == NOT_RUN]
    return gates, {"passed": verdict == VERDICT_PASSED, "verdict": verdict, "failures": failures, "not_run": not_run}


def gate_phrase(name: str, gate: dict[str, Any]) -> str:
    """``correctness passed (216 checks)`` / ``performance not run: no GPU …`` for one gate entry."""
    state = gate.get("state")
    unit = UNITS.get(name, "check")
    if state == NOT_RUN:
        return f"{name} not run: {gate.get('reason')}"
    ran, failed = gate.get("ran") or 0, gate.get("failed") or 0
    count = f"{failed} of {ran} {unit}s failed" if failed else f"{ran} {unit}{'s' * (ran != 1)}"
    return f"{name} {state} ({count})"


def verdict_text(summary: dict[str, Any], gates: dict[str, Any]) -> str:
    """The verdict in words: what "passed" covers, or that a gate did not run."""
    verdict = summary["verdict"]
    if verdict == VERDICT_FAILED:
        return "FAILED"
    if verdict == VERDICT_INCOMPLETE:
        return "INCOMPLETE: nothing failed, but a gate did not run"
    if all(g["state"] == PASSED for g in gates.values()):
        return "passed: all gates ran and passed"
    return "passed: every gate that applies ran and passed"


def summary_line(result: dict[str, Any], status: int | None = None) -> str:
    """The one line that ends a run: the verdict, then every gate with its state (plain text), then the
    exit status: ``status``, by default the verdict's (:func:`exit_status`)."""
    gates = " · ".join(gate_phrase(name, g) for name, g in result["gates"].items())
    status = exit_status(result) if status is None else status
    unwritten = " (the result was not written)" if status == EXIT_UNWRITTEN else ""
    return f"verdict: {verdict_text(result['summary'], result['gates'])} · {gates} · exit {status}{unwritten}"


def print_summary(result: dict[str, Any], console: Console, status: int | None = None) -> None:
    """Print the failures (if any) and the summary line (:func:`summary_line`), coloured by the verdict."""
    failures = result["summary"]["failures"]
    if failures:
        console.print(f"[bold red]{len(failures)} gate failure(s):[/]")
        for f in failures:
            console.print(f"  [red]x[/] {escape(f)}")
    style = {VERDICT_PASSED: "bold green", VERDICT_FAILED: "bold red", VERDICT_INCOMPLETE: "bold yellow"}
    console.print(f"[{style[result['summary']['verdict']]}]{escape(summary_line(result, status))}[/]")


def exit_status(result: dict[str, Any]) -> int:
    """0 passed, 1 failed, 3 incomplete (:data:`EXIT_PASSED`, ...), from ``summary.verdict``."""
    return {VERDICT_PASSED: EXIT_PASSED, VERDICT_FAILED: EXIT_FAILED,
            VERDICT_INCOMPLETE: EXIT_INCOMPLETE}[result["summary"]["verdict"]]


def write_result(result: dict[str, Any], json_path: str | None, command: str) -> bool:
    """``result`` written to ``json_path`` when one is given ("wrote PATH" on stdout); False, after one
    line on stderr naming ``command``, when it cannot be written."""
    from gemm_ladder.results import write_json

    if json_path:
        try:
            print(f"wrote {write_json(result, json_path)}")
        except OSError as exc:
            print(f"gemm-ladder {command}: cannot write {json_path}: {exc.strerror or exc}", file=sys.stderr)
            return False
    return True


def finish(result: dict[str, Any], json_path: str | None, command: str, console: Console | None = None) -> int:
    """The end of a gate-running command (``climb``, ``gate``; run_gates with ``verdict=False``):
    :func:`write_result`, then the failures and the verdict line, which states the exit status returned:
    :func:`exit_status`, or :data:`EXIT_UNWRITTEN` when the result could not be written (everything ran,
    so it is not bad input; the verdict line still says what the gates found)."""
    from gemm_ladder.gates.tables import make_console

    status = exit_status(result) if write_result(result, json_path, command) else EXIT_UNWRITTEN
    print_summary(result, console or make_console(), status)
    return status
