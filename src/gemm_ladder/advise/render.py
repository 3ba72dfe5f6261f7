"""Markdown and JSON for an :class:`~gemm_ladder.advise.advice.Advice` and for a level's criteria.

The Markdown follows the method's required outputs (:mod:`gemm_ladder.advise`), in order: Conclusion, Evidence or assumptions,
Contract/table/timeline, Minimal validation, Risks and fallback. The designer's plan is rendered by the
designer (:func:`gemm_ladder.design.render.plan_markdown`), its headings nested under this document's.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gemm_ladder.advise.advice import Advice
    from gemm_ladder.advise.criteria import Criteria

#: The section headings of :func:`advice_markdown`, in order (the method's required outputs).
SECTIONS = ("Conclusion", "Evidence or assumptions", "Contract/table/timeline", "Minimal validation",
            "Risks and fallback")


def _cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
            + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows])


def _nested(markdown: str, levels: int = 2) -> list[str]:
    """Push every heading of ``markdown`` down ``levels`` levels, so it nests under a section here."""
    return [("#" * levels + line) if line.startswith("#") else line for line in markdown.splitlines()]


def _plan_markdown(plan: Any) -> str:
    from gemm_ladder.design.render import plan_markdown  # the designer's prose; one import to re-point

    return plan_markdown(plan)


def advice_markdown(a: Advice) -> str:
    """The whole answer as Markdown."""
    L = [f"# Where does it stand: {a.subject}", "", "## Conclusion", "", f"**{a.headline}.**", "", a.conclusion, ""]
    if a.position is not None:
        L += [f"Position: {a.position.statement()}.", ""]
    L += ["## Evidence or assumptions", ""]
    L += _table(["label", "evidence", "source"], [[f.label, f.statement, f.source] for f in a.evidence])
    if a.position is not None:
        L += ["", "Rungs (each level's one idea, tested on the evidence):", ""]
        L += _table(["rung", "name", "present", "because", "label"],
                    [[r.level, r.name, {True: "yes", False: "no", None: "unknown"}[r.present], r.because, r.label]
                     for r in a.position.rungs])
    L += ["", "## Contract/table/timeline", "", f"{a.contract.title}.", ""]
    c = a.contract
    if c.kind == "tma_plan":
        L += _nested(_plan_markdown(c.plan), 2)
    elif c.kind == "thread_copy":
        L += _table(["item", "value", "source"], [[r["item"], r["value"], r["source"]] for r in c.data["rows"]])
    elif c.kind == "stopping" and c.data.get("rows"):
        cols = ["level", "name", "verdict", "keeps", "vs_below", "vs_kept", "noise", "vs_cublas", "roofline"]
        L += _table(["level", "name", "verdict", "kept", "vs level below", "vs level kept", "noise", "vs cuBLAS",
                     "roofline"], [[("yes" if r[k] else "no") if k == "keeps" else r[k] for k in cols]
                                   for r in c.data["rows"]])
        if a.stopping is not None:
            L += ["", "Per level, with the measured reason:", ""]
            L += [f"- level {v.level} ({v.name}): {v.reason}" for v in a.stopping.levels]
    elif c.kind == "refused":
        L += [f"Refused: {c.data['refused']}"]
    e = a.experiment
    L += ["", "## Minimal validation", "", f"- **The falsifiable experiment**: {e['what']}: `{e['command']}`."]
    if e.get("expected"):
        L += [f"  Expected: {_expected_text(e['expected'])}."]
    if e.get("falsified_if"):
        L += [f"  Falsified if: {e['falsified_if']}."]
    L += [f"- {c_}" for c_ in a.checks]
    L += ["", "## Risks and fallback", ""] + ([f"- {r}" for r in a.risks] or ["- none found"])
    return "\n".join(L) + "\n"


def _expected_text(expected: dict[str, Any]) -> str:
    parts = []
    for k, v in expected.items():
        if k == "source":
            continue
        if k == "noise" and isinstance(v, float):
            parts.append(f"noise {v:.1%}")
        elif isinstance(v, float):
            parts.append(f"{k} {v:.2f}" + ("x" if "ratio" in k or "vs" in k or "/" in k else ""))
        elif isinstance(v, list) and all(isinstance(x, float) for x in v):
            parts.append(f"{k} {'-'.join(f'{x:.2f}' for x in v)}x")
        elif isinstance(v, dict):
            parts.append(f"{k} " + ", ".join(f"{kk} {vv:.2f}" if isinstance(vv, float) else f"{kk} {vv}" for kk, vv in v.items()))
        elif v is not None:
            parts.append(f"{k} {v}")
    src = expected.get("source")
    return "; ".join(parts) + (f" (from {src})" if src else "")


def advice_json(a: Advice) -> str:
    return json.dumps(a.to_json(), indent=1, default=str) + "\n"


def criteria_markdown(c: Criteria) -> str:
    """The criteria as a Markdown checklist, one section per gate."""
    L = [f"# Acceptance criteria of level {c.level} ({c.name}), {c.dtype}", "", f"The one idea: {c.idea}.", ""]
    for s in c.sections:
        L += [f"## {s.gate.capitalize()}", "", f"Applies to: {s.applies}.", ""]
        for item in s.items:
            gate_says = item.values.get("gate_message")
            L.append(f"- [ ] {item.text}" + (f" (the gate fails it with: \"{gate_says}\")" if gate_says else "")
                     + f" [source: {item.source}]")
        L.append("")
    return "\n".join(L)


def criteria_json(c: Criteria) -> str:
    return json.dumps(c.to_json(), indent=1) + "\n"
