"""Every library build precompile enumerates (and the swiglu and small-M experiment builds) gives the
compiler the same inputs as recorded in tests/data/build_inputs.json: kernel name, translation unit
(by digest) and ``-D`` constants. Same inputs, same cubin and SASS: the compiler's cache key is the
unit, the sorted flags, the compiler and the headers (runtime/compiler.py). Recorded before the
library's kernels were described by KernelConfig (library/kernel.py); regenerate with
``PYTHONPATH=src python3 tools/build_inputs.py > tests/data/build_inputs.json`` only for a change
that means to change builds. Nothing is compiled: tools/build_inputs.py records instead, in a
process of its own (its build caches hold records)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_build_receives_the_recorded_inputs():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "build_inputs.py")], capture_output=True, text=True,
                         env=env, check=True, timeout=600).stdout
    now = json.loads(out)
    before = json.loads((ROOT / "tests" / "data" / "build_inputs.json").read_text())
    assert set(now["builds"]) == set(before["builds"]), "the labels of the builds changed"
    changed = [label for label, b in before["builds"].items() if now["builds"][label] != b]
    assert not changed, f"{len(changed)} builds changed inputs, e.g. {changed[:3]}"
    assert now["defines"] == before["defines"]
    assert len(before["builds"]) > 2000 and sum("refused" in b for b in before["builds"].values()) < 30
