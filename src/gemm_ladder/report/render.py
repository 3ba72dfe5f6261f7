"""The report as one self-contained HTML page and its Markdown twin.

The HTML page carries its CSS, its pictures (PNG data: URIs) and one small script inline, and loads
nothing from the network, so it can be mailed, archived as a CI artifact or opened offline. The
Markdown twin has the same sections and tables and links PNG files written beside it.
"""

from __future__ import annotations

import base64
import html
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gemm_ladder.report import charts, model, timeline
from gemm_ladder.report.charts import Picture
from gemm_ladder.report.model import MISSING, Table


@dataclass
class Report:
    """Everything the page shows, computed once and printed twice (HTML and Markdown)."""

    title: str
    subtitle: str
    synthetic: bool
    passed: bool | None
    failures: list[str]
    facts: list[tuple[str, str]]
    levels: list[dict[str, Any]]
    ladder: Table
    resources: Table
    bars: list[Picture]
    rooflines: list[Picture]
    timelines: list[Picture]
    timeline_note: str

    @property
    def pictures(self) -> list[Picture]:
        """Every picture that was drawn (those with a PNG), in page order."""
        return [p for p in (*self.bars, *self.rooflines, *self.timelines) if p.png is not None]


@dataclass
class ReportFiles:
    """Paths written by :func:`write_report`."""

    html: Path
    markdown: Path
    pngs: list[Path] = field(default_factory=list)


def build_report(result: dict[str, Any]) -> Report:
    """Compute the tables and pictures of a loaded result (see :func:`model.load_result`)."""
    passed, failures = model.summary(result)
    with tempfile.TemporaryDirectory(prefix="gemm-ladder-report-") as tmp:
        timeline_pics, timeline_note = timeline.timelines(result, Path(tmp))
    return Report(
        title=f"gemm-ladder report — {model.gpu_name(result)}",
        subtitle=f"{model.run_date(result)} · commit {model.commit_label(result)}",
        synthetic=model.is_synthetic(result),
        passed=passed,
        failures=failures,
        facts=model.facts(result),
        levels=[lv for lv in result.get("levels") or [] if isinstance(lv, dict)],
        ladder=model.ladder_table(result),
        resources=model.resource_table(result),
        bars=charts.bar_charts(result),
        rooflines=charts.roofline_charts(result),
        timelines=timeline_pics,
        timeline_note=timeline_note,
    )


SYNTHETIC_TEXT = "Synthetic data: this result says it is a test fixture. None of its numbers are measurements."

# --- HTML -----------------------------------------------------------------------------------------

CSS = """
:root { --fail: #b3261e; --fail-bg: #fde7e5; --cublas-bg: #eef3fb; --muted: #777; --line: #d9d9d9; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       margin: 24px auto; max-width: 1600px; padding: 0 24px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
.subtitle { color: var(--muted); margin: 0 0 16px; }
.banner { background: #fff4ce; border: 1px solid #e0b400; padding: 8px 12px; border-radius: 4px; font-weight: 600; }
.verdict { font-weight: 700; font-size: 16px; }
.verdict.pass { color: #1b7f3b; } .verdict.fail { color: var(--fail); }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; white-space: nowrap; vertical-align: top; }
th { background: #f4f4f6; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.note { white-space: normal; min-width: 16em; max-width: 40em; color: #444; }
tr.cublas td { background: var(--cublas-bg); }
tr.muted td { color: var(--muted); }
tr.failed td { background: var(--fail-bg); }
tr.failed td:first-child { box-shadow: inset 4px 0 0 var(--fail); }
tr.failed td.status { color: var(--fail); font-weight: 700; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; font-family: ui-monospace, monospace; font-size: 12px; }
.figures { display: flex; flex-wrap: wrap; gap: 8px 24px; align-items: flex-start; }
figure { margin: 12px 0 20px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 12px; }
.note { color: var(--muted); font-style: italic; }
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


def html_table(table: Table) -> str:
    """A Table as an HTML <table>, row marks as classes (``failed``, ``cublas``, ``muted``)."""
    if not table.rows:
        return '<p class="note">No entries.</p>'
    status_col = table.headers.index("status") if "status" in table.headers else -1
    note_cols = {i for i, h in enumerate(table.headers) if h in ("note", "messages")}
    out = ['<div class="scroll"><table>', "<thead><tr>"]
    out += [f"<th>{_e(h)}</th>" for h in table.headers]
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
            attr = f' class="{" ".join(classes)}"' if classes else ""
            out.append(f"<td{attr}>{_e(cell)}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def html_picture(p: Picture) -> str:
    """A picture as a <figure> with its PNG inline, or a note when it could not be drawn."""
    if p.png is None:
        return f'<h3>{_e(p.title)}</h3><p class="note">{_e(p.note or "not drawn")}</p>'
    data = base64.b64encode(p.png).decode("ascii")
    caption = f"<figcaption>{_e(p.note)}</figcaption>" if p.note else ""
    return f'<figure><img alt="{_e(p.title)}" src="data:image/png;base64,{data}">{caption}</figure>'


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


def _section_pictures(pictures: list[Picture], empty: str) -> str:
    if not pictures:
        return f'<p class="note">{_e(empty)}</p>'
    return '<div class="figures">' + "".join(html_picture(p) for p in pictures) + "</div>"


def render_html(report: Report) -> str:
    """The whole page as one HTML string (no external resources)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(report.title)}</title><style>{CSS}</style><script>{SCRIPT}</script></head><body>",
        f"<h1>{_e(report.title)}</h1>",
        f'<p class="subtitle">{_e(report.subtitle)}</p>',
    ]
    if report.synthetic:
        parts.append(f'<p class="banner">{_e(SYNTHETIC_TEXT)}</p>')
    if report.passed is None:
        parts.append('<p class="verdict">Verdict: —</p>')
    else:
        cls = "pass" if report.passed else "fail"
        parts.append(f'<p class="verdict {cls}">{"All gates passed" if report.passed else "Gates failed"}</p>')
    if report.failures:
        parts.append("<ul>" + "".join(f"<li>{_e(f)}</li>" for f in report.failures) + "</ul>")
    parts.append('<h2>Run</h2><dl class="facts">')
    parts += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in report.facts]
    parts.append("</dl>")
    parts.append("<h2>Levels</h2>" + _levels_html(report.levels))
    parts.append("<h2>Ladder</h2>")
    parts.append(
        '<p class="note">error ÷ cuBLAS: the level\'s relative error over cuBLAS\'s on the same operands. '
        "vs cuBLAS and vs previous: time ratios (above 1× is faster). Red rows failed a gate; "
        "refused means the shape is outside the level's declared domain, which is correct behaviour.</p>"
    )
    parts.append(html_table(report.ladder))
    parts.append("<h2>TFLOP/s per level</h2>")
    parts.append(_section_pictures(report.bars, "No shape was timed."))
    parts.append("<h2>Roofline</h2>")
    parts.append(_section_pictures(report.rooflines, "No timed row to place on a roofline."))
    parts.append("<h2>Resources</h2>")
    parts.append(html_table(report.resources))
    parts.append("<h2>Pipeline timelines</h2>")
    if report.timeline_note:
        parts.append(f'<p class="note">Timelines not drawn: {_e(report.timeline_note)}.</p>')
    else:
        for p in report.timelines:
            parts.append(f"<h3>{_e(p.title)}</h3>" + html_picture(p) if p.png else html_picture(p))
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


def _md_pictures(pictures: list[Picture], stem: str, empty: str) -> list[str]:
    if not pictures:
        return [f"_{empty}_", ""]
    out = []
    for p in pictures:
        if p.png is None:
            out += [f"### {p.title}", "", f"_{p.note or 'not drawn'}_", ""]
        else:
            out += [f"![{p.title}]({png_name(stem, p)})", ""]
            if p.note:
                out += [f"_{p.note}_", ""]
    return out


def render_markdown(report: Report, stem: str = "report") -> str:
    """The Markdown twin; it links ``{stem}-{slug}.png`` files that :func:`write_report` writes."""
    out = [f"# {report.title}", "", report.subtitle, ""]
    if report.synthetic:
        out += [f"> **{SYNTHETIC_TEXT}**", ""]
    if report.passed is None:
        out += ["**Verdict: —**", ""]
    else:
        out += ["**All gates passed**" if report.passed else "**✗ Gates failed**", ""]
    out += [f"- {f}" for f in report.failures]
    if report.failures:
        out.append("")
    out += ["## Run", ""] + [f"- **{k}**: {v}" for k, v in report.facts] + [""]
    out += ["## Levels", ""]
    for lv in report.levels:
        line = f"- **{level_heading(lv)}**" + (f" — {lv['idea']}" if lv.get("idea") else "")
        if _level_extra(lv):
            line += f" ({_level_extra(lv)})"
        out.append(line)
    if not report.levels:
        out.append("_The result lists no levels._")
    out += ["", "## Ladder", "", markdown_table(report.ladder)]
    out += ["## TFLOP/s per level", ""] + _md_pictures(report.bars, stem, "No shape was timed.")
    out += ["## Roofline", ""] + _md_pictures(report.rooflines, stem, "No timed row to place on a roofline.")
    out += ["## Resources", "", markdown_table(report.resources)]
    out += ["## Pipeline timelines", ""]
    if report.timeline_note:
        out += [f"_Timelines not drawn: {report.timeline_note}._", ""]
    else:
        for p in report.timelines:
            if p.png is not None:
                out += [f"### {p.title}", "", f"![{p.title}]({png_name(stem, p)})", ""]
            else:
                out += _md_pictures([p], stem, "")
    return "\n".join(out).rstrip() + "\n"


def write_report(result: dict[str, Any], out_dir: str | Path, stem: str = "report") -> ReportFiles:
    """Write ``{stem}.html``, ``{stem}.md`` and the Markdown twin's PNGs into ``out_dir``.

    Returns the written paths. ``out_dir`` is created if needed; files of the same names are replaced.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(result)
    files = ReportFiles(html=out / f"{stem}.html", markdown=out / f"{stem}.md")
    for p in report.pictures:
        path = out / png_name(stem, p)
        path.write_bytes(p.png or b"")
        files.pngs.append(path)
    files.html.write_text(render_html(report), encoding="utf-8")
    files.markdown.write_text(render_markdown(report, stem), encoding="utf-8")
    return files


__all__ = ["Report", "ReportFiles", "build_report", "render_html", "render_markdown", "write_report", "MISSING"]
