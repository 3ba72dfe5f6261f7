"""Rich tables of gate results: one for the resource gate, one row per (target, dtype, shape)."""

from __future__ import annotations

import errno
from typing import Any

from rich.console import Console
from rich.table import Table

STATUS_STYLE = {"pass": "green", "fail": "bold red", "error": "bold red", "refused": "yellow", "skipped": "dim"}


class PipeConsole(Console):
    """A rich Console that lets a closed pipe end the command as the CLI ends it (quietly, status 141:
    cli.main): rich's own ``on_broken_pipe`` raises SystemExit(1), which reads as "a gate failed"."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more to print; cli.main points stdout at /dev/null
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


def make_console() -> Console:
    """A console for the tables: the terminal's width, or 160 columns when output is piped or
    captured (rich's default of 80 would wrap every row of the gate table)."""
    console = PipeConsole()
    return console if console.is_terminal else PipeConsole(width=160)


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _status(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, '')}]{status}[/]"


def print_resources(resources: list[dict[str, Any]], targets: list[Any], console: Console) -> None:
    """The resource table: registers, shared memory, local memory, occupancy and the SASS census."""
    names = {t.number: t.title for t in targets}
    table = Table(title="resource gate", show_lines=False)
    for col in ("level", "dtype", "regs", "smem B (static+dyn)", "stack/spill B", "CTAs/SM",
                "HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "LDL/STL", "SASS", "status", "notes"):
        table.add_column(col, justify="left" if col in ("level", "notes", "status", "dtype") else "right")
    for r in resources:
        title = names.get(r["level"], "user" if r["level"] is None else f"L{r['level']}")
        status = _status("pass" if r["passed"] else ("error" if r.get("error") else "fail"))
        notes = "; ".join(m.splitlines()[0] for m in r.get("messages", []))
        if r.get("error"):
            table.add_row(title, r["dtype"], *["-"] * 10, status, notes)
            continue
        s = r["sass"]
        table.add_row(
            title, r["dtype"], str(r["registers"]), f"{r['smem_static']}+{r['smem_dynamic']}",
            f"{r['stack_bytes']}/{r['spill_stores'] + r['spill_loads']}",
            _fmt(r["ctas_per_sm"], "d"), str(s["HGMMA"]), str(s["UTMALDG"]), str(s["UTMASTG"]),
            str(s["SYNCS"]), f"{s['LDL']}/{s['STL']}", str(s["total"]), status, notes,
        )
    console.print(table)


def print_rows(rows: list[dict[str, Any]], console: Console) -> None:
    """The gate table: status, error relative to cuBLAS, TFLOP/s, speed ratios, roofline fraction."""
    table = Table(title="correctness and performance gates")
    for col in ("target", "dtype", "shape", "status", "err/cuBLAS", "TFLOP/s", "vs cuBLAS", "vs prev",
                "roofline", "note"):
        table.add_column(col, justify="left" if col in ("target", "dtype", "shape", "status", "note") else "right")
    for r in rows:
        c, p = r["correctness"] or {}, r["performance"] or {}
        ratio = None
        if c.get("rel_err") is not None and c.get("cublas_rel_err"):
            ratio = c["rel_err"] / c["cublas_rel_err"]
        name = "cuBLAS" if r["kind"] == "cublas" else (f"L{r['level']} {r['name']}" if r["level"] is not None else r["name"])
        roof = p.get("roofline_fraction")
        table.add_row(
            f"[dim]{name}[/]" if r["kind"] == "cublas" else name, r["dtype"], f"{r['m']}x{r['n']}x{r['k']}",
            _status(r["status"]), _fmt(ratio, ".2f", "x"), _fmt(p.get("tflops"), ".1f"),
            _fmt(p.get("vs_cublas"), ".2f", "x"), _fmt(p.get("vs_previous"), ".2f", "x"),
            _fmt(roof * 100 if roof is not None else None, ".0f", "%"),
            (r["message"] or "")[:90],
        )
    console.print(table)
