"""``gemm-ladder report``: a result JSON (docs/results-schema.md) as one self-contained HTML page
and a Markdown twin with PNG files beside it.

    from gemm_ladder.report import load_result, write_report
    files = write_report(load_result("bench/results/run.json"), "report_out")

The page opens with the verdict (which gates ran, passed, failed or did not run), the ladder of
timed shapes, its bars and its roofline; then correctness on every checked shape (refusals
counted), resources, the designer's timeline of each TMA level, the levels, the run, every row.
"""

from gemm_ladder.report.model import MISSING, ResultError, load_result
from gemm_ladder.report.render import (
    Report,
    ReportFiles,
    ReportOutputError,
    build_report,
    render_html,
    render_markdown,
    write_report,
)

__all__ = [
    "MISSING",
    "Report",
    "ReportFiles",
    "ReportOutputError",
    "ResultError",
    "build_report",
    "load_result",
    "render_html",
    "render_markdown",
    "write_report",
]
