"""How two trees' PTX of one grouped-GEMM build differs, where tools/grouped_fp8_sass_fingerprint.py
reports a changed SASS hash (bench/results/logs/2026-12-03_sass_fingerprint_grouped_fp8_fam.log).

Code lines only (no debug sections, .loc or comments). Three counts: lines that differ as they are;
after normalising what computes the same (the name of the function-local __shared__ group table, which
names its enclosing function, and the operand order of the commutative ``and.pred`` / ``or.pred``); and
whether the two are the same multiset of instructions with register numbers removed (then the rest is
independent instructions in another order).

    python tools/ptx_equivalence.py <old tree> <new tree> '{"bn": 128, "b_major": "k"}' bf16

Each tree's ``grouped_gemm(**kwargs).defines(dtype)`` gives the -D constants (their own host code),
compiled with runtime/compiler.py's flags to PTX (``-ptx`` in place of ``-cubin``). Exit 0 when the
normalised instructions are the same multiset. Needs nvcc, no GPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile


def ptx(tree: str, kwargs: dict, dtype: str) -> str:
    code = f"""
import json, sys
from gemm_ladder.library.grouped import grouped_gemm, SOURCE
from gemm_ladder.runtime.compiler import build_flags, nvcc_path
d = {{"GL_DTYPE_" + {dtype!r}.upper(): 1, **grouped_gemm(**json.loads({json.dumps(json.dumps(kwargs))})).defines({dtype!r})}}
print(json.dumps([nvcc_path(), build_flags("sm_90a", d), SOURCE]))
"""
    env = {**os.environ, "PYTHONPATH": os.path.join(tree, "src")}
    nvcc, flags, source = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                                    text=True, check=True).stdout)
    with tempfile.TemporaryDirectory() as tmp:
        unit, out = os.path.join(tmp, "unit.cu"), os.path.join(tmp, "unit.ptx")
        with open(unit, "w") as f:
            f.write(f'#include "{source}"\n')
        subprocess.run([nvcc, *flags, "-ptx", "-o", out, unit], check=True, capture_output=True)
        return open(out).read()


def lines(text: str, normalise: bool) -> list[str]:
    out = []
    text = text.split(".section\t.debug", 1)[0].split(".section .debug", 1)[0]
    for line in text.splitlines():
        if re.match(r"\s*(\.loc|//|\.file)", line) or not line.strip():
            continue
        if normalise:
            line = re.sub(r"_ZZ\w+E5table", "TABLE", line)
            m = re.match(r"(\s*(?:and|or)\.pred\s+%p\d+, )(%p\d+), (%p\d+);", line)
            if m:
                line = m.group(1) + ", ".join(sorted((m.group(2), m.group(3)))) + ";"
        out.append(line)
    return out


def main() -> int:
    old, new, kwargs, dtype = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    a, b = ptx(old, kwargs, dtype), ptx(new, kwargs, dtype)
    raw = sum(x != y for x, y in zip(lines(a, False), lines(b, False))) + abs(len(lines(a, False)) - len(lines(b, False)))
    la, lb = lines(a, True), lines(b, True)
    left = sum(x != y for x, y in zip(la, lb)) + abs(len(la) - len(lb))

    def bag(ls):
        return sorted(re.sub(r"%(r|rd|p|f|fd|h|hh)\d+", r"%\1", x) for x in ls)

    same_bag = bag(la) == bag(lb)
    print(f"{json.dumps(kwargs)} {dtype}: {len(la)} PTX code lines, {raw} differ, {left} after normalising; "
          f"{'the same' if same_bag else 'NOT the same'} instructions up to order and register numbers")
    return 0 if same_bag else 1


if __name__ == "__main__":
    sys.exit(main())
