"""``gemm-ladder report RESULT.json [-o DIR]``: render a result as an HTML page and a Markdown twin.

    gemm-ladder report bench/results/h200-climb.json -o report_out
    # -> report_out/report.html (one file, pictures inline), report_out/report.md + report_out/report-*.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "report"
HELP = "Render a result JSON as one self-contained HTML page and a Markdown twin."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """RESULT (the JSON of climb or gate), -o DIR, --name STEM."""
    parser.add_argument("result", metavar="RESULT.json", type=Path, help="a result file (docs/results-schema.md)")
    parser.add_argument(
        "-o", "--out", metavar="DIR", type=Path, default=None,
        help="output folder (default: RESULT's name without .json, plus '-report', beside it)",
    )
    parser.add_argument("--name", metavar="STEM", default="report", help="file-name stem of the outputs (default: report)")


def run(args: argparse.Namespace) -> int:
    """Write the report; 0 on success, 2 when the result cannot be read."""
    # imported here so that `gemm-ladder --help` does not pay for matplotlib
    from gemm_ladder.report import ResultError, load_result, write_report

    try:
        result = load_result(args.result)
    except ResultError as exc:
        print(f"gemm-ladder report: {exc}", file=sys.stderr)
        return 2
    out = args.out if args.out is not None else args.result.with_name(args.result.stem + "-report")
    files = write_report(result, out, stem=args.name)
    print(f"wrote {files.html}")
    print(f"wrote {files.markdown} (+{len(files.pngs)} PNG)")
    return 0
