"""A first ``mm`` / ``linear`` call allocates its output once: the route is decided for the output the
call then writes (issue 22: the first call used to allocate one output to decide and another to run).
Runs tools/first_call_trace.py (meta tensors, the device layer replaced), which counts the tensors of
the output's shape a first call allocates."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_first_call_allocates_its_output_once():
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "first_call_trace.py")], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    counts = dict(re.findall(r"^## first (mm|linear) .*?(\d+) output allocation", run.stdout, re.M))
    assert counts == {"mm": "1", "linear": "1"}, run.stdout
