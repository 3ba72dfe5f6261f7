"""Print (or compare) a SHA-256 of the SASS of every ladder build: 9 levels x bf16/fp16.

A refactor that claims "no behaviour change" keeps every fingerprint identical:

    python tools/sass_fingerprint.py > before.txt      # on the old commit
    python tools/sass_fingerprint.py --compare before.txt

Needs nvcc and cuobjdump (gemm_ladder.runtime.compiler finds them), no GPU. The hash covers the
disassembly of the kernel's code section with the cubin's file name removed.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys

from gemm_ladder.levels import LEVELS
from gemm_ladder.runtime.compiler import cuobjdump_path


def fingerprint(cubin: str) -> str:
    sass = subprocess.run([cuobjdump_path(), "--dump-sass", cubin], capture_output=True, text=True, check=True).stdout
    body = "\n".join(line for line in sass.splitlines() if not re.match(r"\s*(Fatbin|code for|\.?\s*$|File )", line))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", metavar="FILE", help="a previous output: exit 1 if any fingerprint differs")
    args = parser.parse_args()
    lines = []
    for number, level in sorted(LEVELS.items()):
        for dtype in ("bf16", "fp16"):
            lines.append(f"L{number} {dtype} {fingerprint(str(level.build(dtype).cubin))}")
    if not args.compare:
        print("\n".join(lines))
        return 0
    before = dict(line.rsplit(" ", 1) for line in open(args.compare).read().split("\n") if line.strip())
    changed = [line for line in lines if before.get(line.rsplit(" ", 1)[0]) != line.rsplit(" ", 1)[1]]
    for line in lines:
        print(line, "CHANGED" if line in changed else "same")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
