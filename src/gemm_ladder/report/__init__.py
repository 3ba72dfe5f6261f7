"""``gemm-ladder report``: a result JSON (docs/results-schema.md) as one self-contained HTML page
and a Markdown twin with PNG files beside it.

    from gemm_ladder.report import load_result, write_report
    files = write_report(load_result("bench/results/run.json"), "report_out")

The report reads only the JSON; the pipeline designer, when importable, adds timelines.
"""

from gemm_ladder.report.model import MISSING, ResultError, load_result
from gemm_ladder.report.render import Report, ReportFiles, build_report, render_html, render_markdown, write_report

__all__ = [
    "MISSING",
    "Report",
    "ReportFiles",
    "ResultError",
    "build_report",
    "load_result",
    "render_html",
    "render_markdown",
    "write_report",
]
