"""``gemm-ladder report RESULT.json [-o DIR] [--name STEM]``: render a result as an HTML page and a
Markdown twin.

    gemm-ladder report bench/results/h200-climb.json -o report_out
    # -> report_out/report.html (one file, pictures inline), report_out/report.md + report_out/report-*.png

Without ``-o`` the report goes into ``RESULT-report/`` (RESULT's name without .json) in the current
directory, or, when the current directory is inside the gemm-ladder checkout the package runs from,
into a new folder under the system's temporary directory: never into the repository unasked. The
paths written are printed.

Exit status 0 when the report was written; 2 when RESULT.json cannot be read or is not a result of
``climb`` or ``gate`` (not UTF-8, not JSON, another schema), or the output cannot be written where
asked (-o an existing file or an unwritable folder, --name not a plain file name): one line on
stderr, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "report"
HELP = "Render a result JSON as one self-contained HTML page and a Markdown twin."
EPILOG = ("exit status: 0 the report was written; 2 RESULT.json is not a readable result of climb or gate, or the "
          "output cannot be written there (-o an existing file or an unwritable folder, --name not a plain file "
          "name): one line on stderr.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """RESULT (the JSON of climb or gate), -o DIR, --name STEM."""
    parser.epilog = EPILOG
    parser.add_argument("result", metavar="RESULT.json", type=Path, help="a result file (docs/results-schema.md)")
    parser.add_argument(
        "-o", "--out", metavar="DIR", type=Path, default=None,
        help="output folder (default: RESULT's name without .json plus '-report', in the current directory; "
             "inside the gemm-ladder checkout, a new folder under the temporary directory instead)",
    )
    parser.add_argument("--name", metavar="STEM", default="report",
                        help="file-name stem of the outputs: letters, digits, '.', '_', '-' (default: report)")


def run(args: argparse.Namespace) -> int:
    """Write the report; the exit status of EPILOG."""
    # imported here so that `gemm-ladder --help` does not pay for matplotlib
    from gemm_ladder.report import ReportOutputError, ResultError, load_result, write_report
    from gemm_ladder.report.model import check_key_fields
    from gemm_ladder.report.render import check_output
    from gemm_ladder.results import check_writable

    out = args.out
    try:
        check_output(out if out is not None else Path.cwd(), args.name)
        result = load_result(args.result)
        check_key_fields(result, args.result)
        if out is None:  # made only now: a refused RESULT leaves no empty folder behind
            out = default_out(args.result)
        if why := check_writable(out / f"{args.name}.html"):  # before the report is built
            raise ReportOutputError(f"cannot write the report into {out}: {why}")
        files = write_report(result, out, stem=args.name)
    except (ResultError, ReportOutputError) as exc:
        print(f"gemm-ladder report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gemm-ladder report: cannot write the report into {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {files.html}")
    print(f"wrote {files.markdown} (+{len(files.pngs)} PNG)")
    return 0


def default_out(result: Path) -> Path:
    """Where the report of ``result`` goes without -o: ``./RESULT-report``, or a new temporary folder when
    the current directory lies inside the source checkout this package is imported from (a clone of
    gemm-ladder: its bench/results/ and its root are not the place for generated files)."""
    import tempfile

    import gemm_ladder

    cwd = Path.cwd().resolve()
    checkout = Path(gemm_ladder.__file__).resolve().parents[2]  # src/gemm_ladder/__init__.py -> the checkout
    if (checkout / "pyproject.toml").is_file() and (cwd == checkout or checkout in cwd.parents):
        return Path(tempfile.mkdtemp(prefix=f"{result.stem}-report-"))
    return cwd / f"{result.stem}-report"
