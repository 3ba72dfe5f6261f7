"""Which builds in a kernel cache have no ptxas report for their kernel (the resource gates read it).

    python3 tools/ptxas_census.py [CACHE]        # default: $GEMM_LADDER_CACHE or ~/.cache/gemm_ladder

Reads every build directory (meta.json, ptxas.log) under CACHE and prints one line for each build whose
ptxas -v report does not name its kernel, with its compiler, the log's length and its first line, then a
count. On the H200 this found NVRTC's own compile cache answering without running ptxas (8 of 337 builds
of a GPU suite; runtime/nvrtc.py now passes --no-cache). Exit status: 0 every build has its report, 1
some do not, 2 no such directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gemm_ladder.gates.resources import parse_ptxas_log  # noqa: E402
from gemm_ladder.runtime.compiler import cache_root  # noqa: E402


def missing_reports(root: Path) -> tuple[int, list[dict]]:
    """(builds read, [{key, kernel, compiler, log_chars, first_line}] for those whose report lacks the kernel)."""
    count, missing = 0, []
    for meta_path in sorted(root.rglob("meta.json")):
        directory = meta_path.parent
        meta = json.loads(meta_path.read_text())
        if "kernel" not in meta:
            continue
        count += 1
        log_path = directory / "ptxas.log"
        log = log_path.read_text() if log_path.exists() else None
        if log and meta["kernel"] in parse_ptxas_log(log):
            continue
        missing.append({"key": directory.name, "kernel": meta["kernel"], "compiler": meta.get("compiler"),
                        "log_chars": None if log is None else len(log),
                        "first_line": (log or "").splitlines()[0][:120] if log else ""})
    return count, missing


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    root = Path(args[0]) if args else cache_root()
    if not root.is_dir():
        print(f"tools/ptxas_census.py: {root} is not a directory", file=sys.stderr)
        return 2
    count, missing = missing_reports(root)
    for m in missing:
        print(f"no report: {m['key']} kernel={m['kernel']} compiler={m['compiler']} log_chars={m['log_chars']} "
              f"first line: {m['first_line']!r}")
    print(f"ptxas census: {count} builds, {len(missing)} without their kernel in the ptxas report")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
