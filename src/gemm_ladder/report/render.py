"""The report as one self-contained HTML page and its Markdown twin.

The HTML page carries its CSS, its pictures (PNG data: URIs) and one small script inline, and loads
nothing from the network, so it can be mailed, archived as a CI artifact or opened offline. The
Markdown twin has the same sections and tables and links PNG files written beside it.
"""

from __future__ import annotations

import base64
import html
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gemm_ladder.report import charts, model, timeline
from gemm_ladder.report.charts import Picture
from gemm_ladder.report.model import MISSING, Table  # noqa: F401 - MISSING: part of the module's API


@dataclass
class Ladder:
    """The ladder of one dtype: the level x timed-shape table, its note, its bars and roofline."""

    dtype: str
    table: Table
    note: str
    bars: Picture | None
    roofline: Picture | None


@dataclass
class Report:
    """Everything the page shows, computed once and printed twice (HTML and Markdown), in page order:
    verdict, ladders (table, bars, roofline), correctness on every checked shape, resources, timelines,
    levels, run facts, and every row."""

    title: str
    subtitle: str
    synthetic: bool
    verdict: model.Verdict
    ladders: list[Ladder]
    checked: Table
    resources: Table
    timelines: list[Picture]
    timeline_note: str
    levels: list[dict[str, Any]]
    facts: list[tuple[str, str]]
    rows: Table

    @property
    def pictures(self) -> list[Picture]:
        """Every picture that was drawn (those with a PNG), in page order."""
        figures = [p for ladder in self.ladders for p in (ladder.bars, ladder.roofline) if p is not None]
        return [p for p in (*figures, *self.timelines) if p.png is not None]


@dataclass
class ReportFiles:
    """Paths written by :func:`write_report`."""

    html: Path
    markdown: Path
    pngs: list[Path] = field(default_factory=list)


def build_report(result: dict[str, Any], *, timelines: bool = True) -> Report:
    """Compute the verdict, tables and pictures of a loaded result (see :func:`model.load_result`).

    ``timelines`` False leaves the designer's timelines out (each takes about a second to draw).
    """
    bars = {p.slug: p for p in charts.bar_charts(result)}
    roofs = {p.slug: p for p in charts.roofline_charts(result)}
    ladders = []
    for dtype in model.dtypes(result):
        table, note = model.ladder_table(result, dtype)
        ladders.append(Ladder(dtype, table, note, bars.get(f"bars-{dtype}"), roofs.get(f"roofline-{dtype}")))
    pictures: list[Picture] = []
    timeline_note = "not drawn for this page"
    if timelines:
        with tempfile.TemporaryDirectory(prefix="gemm-ladder-report-") as tmp:
            pictures, timeline_note = timeline.timelines(result, Path(tmp))
    return Report(
        title=f"gemm-ladder report — {model.gpu_name(result)}",
        subtitle=f"{model.run_date(result)} · commit {model.commit_label(result)}",
        synthetic=model.is_synthetic(result),
        verdict=model.verdict(result),
        ladders=ladders,
        checked=model.checked_table(result),
        resources=model.resource_table(result),
        timelines=pictures,
        timeline_note=timeline_note,
        levels=[lv for lv in result.get("levels") or [] if isinstance(lv, dict)],
        facts=model.facts(result),
        rows=model.rows_table(result),
    )


SYNTHETIC_TEXT = "Synthetic data: this result says it is a test fixture. None of its numbers are measurements."
LADDER_NOTE = ("Each cell: TFLOP/s · speed relative to cuBLAS on the same tensors in the same run (above 1× is "
               "faster); red: a gate failed. Shapes that were only checked, not timed, are counted below.")
CHECKED_NOTE = ("Every shape each kernel was checked on, timed or not. refused: the shape is outside the level's "
                "declared domain and the level said so before any launch (correct behaviour, not a failure). "
                "error ÷ cuBLAS: the level's relative error over cuBLAS's on the same operands.")
TIMELINE_NOTE = ("What one CTA of each TMA level does, replanned by the designer for one of the level's shapes: "
                 "an idealised model (equal load and MMA times), not a measurement.")

# --- HTML -----------------------------------------------------------------------------------------

CSS = """
:root { --fail: #b3261e; --fail-bg: #fde7e5; --pass: #1b7f3b; --warn: #8a6100; --warn-bg: #fff4ce;
        --cublas-bg: #eef3fb; --muted: #666; --line: #d9d9d9; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       margin: 16px auto; max-width: 1600px; padding: 0 24px; }
h1 { font-size: 22px; margin: 0; }
h2 { font-size: 17px; margin: 22px 0 6px; border-bottom: 1px solid var(--line); padding-bottom: 3px; }
h3 { font-size: 14px; margin: 12px 0 4px; }
.subtitle { color: var(--muted); margin: 2px 0 10px; }
.banner { background: var(--warn-bg); border: 1px solid #e0b400; padding: 6px 12px; border-radius: 4px; font-weight: 600; }
.verdict { border-left: 6px solid var(--muted); background: #f6f6f8; padding: 6px 14px; margin: 6px 0 4px; }
.verdict.passed { border-color: var(--pass); } .verdict.failed { border-color: var(--fail); background: var(--fail-bg); }
.verdict.incomplete { border-color: #e0b400; background: var(--warn-bg); }
.verdict .headline { font-weight: 700; font-size: 16px; margin: 0 0 2px; }
.verdict.passed .headline { color: var(--pass); } .verdict.failed .headline { color: var(--fail); }
.verdict.incomplete .headline { color: var(--warn); }
.verdict ul { margin: 0; padding-left: 18px; } .verdict li { margin: 1px 0; }
li.gate.failed { color: var(--fail); font-weight: 600; } li.gate.passed { color: var(--pass); }
li.gate.not-run, li.gate.unknown { color: var(--warn); }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12.5px; }
th, td { border: 1px solid var(--line); padding: 2px 7px; text-align: left; white-space: nowrap; vertical-align: top; }
th { background: #f4f4f6; white-space: normal; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.note { white-space: normal; min-width: 0; max-width: 36em; color: #444; }
tr.cublas td { background: var(--cublas-bg); }
tr.muted td { color: var(--muted); }
tr.failed td { background: var(--fail-bg); }
tr.failed td:first-child { box-shadow: inset 4px 0 0 var(--fail); }
tr.failed td.status { color: var(--fail); font-weight: 700; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; font-family: ui-monospace, monospace; font-size: 12px; }
.figures { display: flex; gap: 16px; align-items: flex-start; margin: 10px 0 4px; }
.figures figure { flex: 1 1 0; min-width: 0; }
figure { margin: 0 0 12px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line); display: block; }
figcaption { color: var(--muted); font-size: 12px; margin: 2px 0; }
.note { color: var(--muted); font-style: italic; margin: 2px 0 6px; }
details > summary { cursor: pointer; font-weight: 600; margin: 18px 0 6px; }
"""

# Lets a headless browser (tests/test_report_browser.py) tell that every picture decoded: after
# `load`, the body carries how many <img> have pixels and how many there are.
SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  document.body.dataset.imagesOk = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.dataset.imagesTotal = imgs.length;
});
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def html_table(table: Table, box: str = "") -> str:
    """A Table as an HTML <table>, row marks as classes (``failed``, ``cublas``, ``muted``); ``box``
    names the block for the browser test (``data-box``)."""
    if not table.rows:
        return '<p class="note">No entries.</p>'
    status_col = table.headers.index("status") if "status" in table.headers else -1
    note_cols = {i for i, h in enumerate(table.headers) if h in ("note", "messages", "failures")}
    attr = f' data-box="{_e(box)}"' if box else ""
    out = [f'<div class="scroll"{attr}><table>', "<thead><tr>"]
    # Headers may wrap (after a '×' of a shape, or between words): at 1280 px the ladder's seven shape
    # columns and its geomean column then fit, where one-line headers made the table scroll sideways.
    out += [f"<th>{_e(h).replace('×', '×<wbr>')}</th>" for h in table.headers]
    out.append("</tr></thead><tbody>")
    for row in table.rows:
        out.append(f'<tr class="{" ".join(sorted(row.marks))}">' if row.marks else "<tr>")
        for i, cell in enumerate(row.cells):
            classes = []
            if i in table.numeric:
                classes.append("num")
            if i == status_col:
                classes.append("status")
            if i in note_cols:
                classes.append("note")
            cls = f' class="{" ".join(classes)}"' if classes else ""
            out.append(f"<td{cls}>{_e(cell)}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def html_picture(p: Picture, caption_above: bool = False) -> str:
    """A picture as a <figure data-box=slug> with its PNG inline, or a note when it was not drawn."""
    if p.png is None:
        return f'<p class="note" data-box="{_e(p.slug)}">{_e(p.title)}: not drawn: {_e(p.note or "no picture")}</p>'
    data = base64.b64encode(p.png).decode("ascii")
    img = f'<img alt="{_e(p.title)}" src="data:image/png;base64,{data}">'
    top = f"<figcaption>{_e(p.title)}</figcaption>" if caption_above else ""
    bottom = f"<figcaption>{_e(p.note)}</figcaption>" if p.note else ""
    return f'<figure data-box="{_e(p.slug)}">{top}{img}{bottom}</figure>'


def level_heading(lv: dict[str, Any]) -> str:
    """``L3 spatial_tiling`` of a level entry (``user callable`` when it has no number)."""
    number = lv.get("number")
    if number is None:
        return str(lv.get("name") or "user callable")
    return f"L{number} {lv.get('name') or ''}".strip()


def _level_extra(lv: dict[str, Any]) -> str:
    extra = [f"{key}: {lv[key]}" for key in ("domain", "source") if lv.get(key)]
    return "; ".join(extra)


def _levels_html(levels: list[dict[str, Any]]) -> str:
    if not levels:
        return '<p class="note">The result lists no levels.</p>'
    items = []
    for lv in levels:
        item = f"<li><b>{_e(level_heading(lv))}</b>"
        if lv.get("idea"):
            item += f" — {_e(lv['idea'])}"
        if _level_extra(lv):
            item += f' <span class="note">({_e(_level_extra(lv))})</span>'
        items.append(item + "</li>")
    return "<ul>" + "".join(items) + "</ul>"


STATE_CLASS = {"passed": "passed", "failed": "failed", "not run": "not-run", "unknown": "unknown"}
#: Failures listed in the verdict before the rest fold into a <details>.
FAILURES_SHOWN = 5


def _verdict_html(v: model.Verdict) -> str:
    out = [f'<section class="verdict {_e(v.verdict)}" data-box="verdict">',
           f'<p class="headline">{_e(v.headline)}</p><ul class="gates">']
    out += [f'<li class="gate {STATE_CLASS.get(g.state, "unknown")}">{_e(g.text)}</li>' for g in v.gates]
    out.append("</ul>")
    if v.note:
        out.append(f'<p class="note">{_e(v.note)}</p>')
    if v.failures:
        shown, rest = v.failures[:FAILURES_SHOWN], v.failures[FAILURES_SHOWN:]
        out.append(f"<p><b>{len(v.failures)} failure(s):</b></p><ul>" + "".join(f"<li>{_e(f)}</li>" for f in shown) + "</ul>")
        if rest:
            out.append(f"<details><summary>{len(rest)} more</summary><ul>"
                       + "".join(f"<li>{_e(f)}</li>" for f in rest) + "</ul></details>")
    out.append("</section>")
    return "".join(out)


def _ladder_html(ladder: Ladder) -> str:
    parts = [f"<h2>Ladder, {_e(ladder.dtype)}: timed shapes</h2>"]
    if not ladder.table.rows:
        return parts[0] + '<p class="note">No shape was timed.</p>'
    parts.append(html_table(ladder.table, f"ladder-{ladder.dtype}"))
    parts.append(f'<p class="note">{_e(LADDER_NOTE)}' + (f" {_e(ladder.note)}." if ladder.note else "") + "</p>")
    figures = [p for p in (ladder.bars, ladder.roofline) if p is not None]
    if figures:
        parts.append('<div class="figures">' + "".join(html_picture(p) for p in figures) + "</div>")
    return "".join(parts)


def _no_timelines(report: Report) -> str:
    if report.timeline_note:
        return f"Timelines {report.timeline_note}."
    return "No level of this result records a stage ring to draw."


def render_html(report: Report) -> str:
    """The whole page as one HTML string (no external resources), in :class:`Report` order."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(report.title)}</title><style>{CSS}</style><script>{SCRIPT}</script></head><body>",
        f'<h1 data-box="title">{_e(report.title)}</h1>',
        f'<p class="subtitle">{_e(report.subtitle)}</p>',
    ]
    if report.synthetic:
        parts.append(f'<p class="banner">{_e(SYNTHETIC_TEXT)}</p>')
    parts.append(_verdict_html(report.verdict))
    if not any(ladder.table.rows for ladder in report.ladders):
        parts.append('<h2>Ladder</h2><p class="note">No shape was timed.</p>')
    else:
        parts += [_ladder_html(ladder) for ladder in report.ladders if ladder.table.rows]
    parts.append("<h2>Correctness on every checked shape</h2>")
    parts.append(f'<p class="note">{_e(CHECKED_NOTE)}</p>' + html_table(report.checked, "checked"))
    parts.append("<h2>Resources</h2>" + html_table(report.resources, "resources"))
    parts.append("<h2>Pipeline timelines</h2>")
    if report.timelines:
        note = TIMELINE_NOTE + (f" Note: {report.timeline_note}." if report.timeline_note else "")
        parts.append(f'<p class="note">{_e(note)}</p>')
        parts += [html_picture(p, caption_above=True) for p in report.timelines]
    else:
        parts.append(f'<p class="note">{_e(_no_timelines(report))}</p>')
    parts.append("<h2>Levels</h2>" + _levels_html(report.levels))
    parts.append('<h2>Run</h2><dl class="facts">')
    parts += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in report.facts]
    parts.append("</dl>")
    parts.append(f"<details><summary>Every row ({len(report.rows.rows)})</summary>{html_table(report.rows, 'rows')}</details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# --- Markdown -------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    # a bare pipe would end the cell; a newline would end the row
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ") or " "


def markdown_table(table: Table) -> str:
    """A Table as a GitHub-flavoured Markdown table; failed rows carry a bold status."""
    if not table.rows:
        return "_No entries._\n"
    status_col = table.headers.index("status") if "status" in table.headers else -1
    align = ["---:" if i in table.numeric else "---" for i in range(len(table.headers))]
    lines = ["| " + " | ".join(_md_cell(h) for h in table.headers) + " |", "|" + "|".join(align) + "|"]
    for row in table.rows:
        cells = [_md_cell(c) for c in row.cells]
        if "failed" in row.marks:
            # Markdown has no row colour; bold the status (or the first cell when there is none)
            i = status_col if status_col >= 0 else 0
            cells[i] = f"**{cells[i]}**" if status_col >= 0 else f"**✗ {cells[i]}**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def png_name(stem: str, p: Picture) -> str:
    """File name of a picture beside the Markdown twin."""
    return f"{stem}-{p.slug}.png"


def _md_picture(p: Picture, stem: str) -> list[str]:
    if p.png is None:
        return [f"_{p.title}: not drawn: {p.note or 'no picture'}_", ""]
    out = [f"![{p.title}]({png_name(stem, p)})", ""]
    return out + ([f"_{p.note}_", ""] if p.note else [])


def render_markdown(report: Report, stem: str = "report") -> str:
    """The Markdown twin, same order as the page; it links ``{stem}-{slug}.png`` files that
    :func:`write_report` writes."""
    v = report.verdict
    out = [f"# {report.title}", "", report.subtitle, ""]
    if report.synthetic:
        out += [f"> **{SYNTHETIC_TEXT}**", ""]
    out += [f"**{v.headline}**", ""] + [f"- {g.text}" for g in v.gates] + [""] + ([f"_{v.note}_", ""] if v.note else [])
    if v.failures:
        out += [f"{len(v.failures)} failure(s):", ""] + [f"- {f}" for f in v.failures] + [""]
    if not any(ladder.table.rows for ladder in report.ladders):
        out += ["## Ladder", "", "_No shape was timed._", ""]
    for ladder in report.ladders:
        if not ladder.table.rows:
            continue
        out += [f"## Ladder, {ladder.dtype}: timed shapes", "", markdown_table(ladder.table)]
        out += [f"_{LADDER_NOTE}" + (f" {ladder.note}." if ladder.note else "") + "_", ""]
        for p in (ladder.bars, ladder.roofline):
            if p is not None:
                out += _md_picture(p, stem)
    out += ["## Correctness on every checked shape", "", f"_{CHECKED_NOTE}_", "", markdown_table(report.checked)]
    out += ["## Resources", "", markdown_table(report.resources)]
    out += ["## Pipeline timelines", ""]
    if report.timelines:
        out += [f"_{TIMELINE_NOTE}" + (f" Note: {report.timeline_note}." if report.timeline_note else "") + "_", ""]
        for p in report.timelines:
            out += [f"### {p.title}", ""] + _md_picture(p, stem)
    else:
        out += [f"_{_no_timelines(report)}_", ""]
    out += ["## Levels", ""]
    for lv in report.levels:
        line = f"- **{level_heading(lv)}**" + (f" — {lv['idea']}" if lv.get("idea") else "")
        if _level_extra(lv):
            line += f" ({_level_extra(lv)})"
        out.append(line)
    if not report.levels:
        out.append("_The result lists no levels._")
    out += ["", "## Run", ""] + [f"- **{k}**: {v}" for k, v in report.facts] + [""]
    out += [f"## Every row ({len(report.rows.rows)})", "", markdown_table(report.rows)]
    return "\n".join(out).rstrip() + "\n"


class ReportOutputError(ValueError):
    """The report cannot be written where it was asked to go (the message names the path and the rule)."""


#: A file-name stem of the outputs: a name, not a path (no folder can be reached through it).
STEM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")


def check_output(out_dir: str | Path, stem: str) -> None:
    """Raise ReportOutputError unless ``stem`` is a plain file name (letters, digits, '.', '_', '-',
    not starting with '.') and ``out_dir`` is a folder or can be made one."""
    if not STEM.fullmatch(stem):
        raise ReportOutputError(f"--name {stem!r}: a file-name stem is letters, digits, '.', '_' and '-', not starting "
                                "with '.' (the outputs stay inside the output folder)")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ReportOutputError(f"-o {out}: an existing file, not a folder; give a folder for the report's files")


def write_report(result: dict[str, Any], out_dir: str | Path, stem: str = "report", *,
                 timelines: bool = True) -> ReportFiles:
    """Write ``{stem}.html``, ``{stem}.md`` and the Markdown twin's PNGs into ``out_dir``.

    Returns the written paths. ``out_dir`` is created if needed; files of the same names are replaced.
    Raises ReportOutputError for a stem that is not a plain name or an ``out_dir`` that is a file, and
    OSError when the folder cannot be written.
    """
    check_output(out_dir, stem)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(result, timelines=timelines)
    files = ReportFiles(html=out / f"{stem}.html", markdown=out / f"{stem}.md")
    for p in report.pictures:
        path = out / png_name(stem, p)
        path.write_bytes(p.png or b"")
        files.pngs.append(path)
    files.html.write_text(render_html(report), encoding="utf-8")
    files.markdown.write_text(render_markdown(report, stem), encoding="utf-8")
    return files


__all__ = ["Ladder", "Report", "ReportFiles", "ReportOutputError", "build_report", "check_output", "render_html",
           "render_markdown", "write_report", "MISSING"]
