"""Every bench script, run as a newcomer would on a machine without a GPU: ``python bench/NAME.py``
refuses in one line with exit status 2 (bench/suite.py's ``require_gpu``), and ``--help`` ends
cleanly (argparse's help, exit 0; or the same one-line refusal for a one-off without arguments).
Never a traceback. The scripts run forked from one Python that imported torch once (cli_runner).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_runner import cli_env, run_scripts

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
#: Modules the scripts import (no command line of their own).
MODULES = {"suite.py", "variants.py", "outputs.py"}
#: Scripts that need no GPU (ptxas only; route_regret.py, committed results only; moe_routing_flips.py, the CPU): only their --help is
#: run here (a run compiles for minutes; route_regret's own tests run it: tests/test_route_regret.py).
NO_GPU_TOOLS = {"l9_register_headroom.py", "route_regret.py", "moe_routing_flips.py"}
SCRIPTS = sorted(p for p in [*BENCH.glob("*.py"), *(BENCH / "experiments").glob("*.py")] if p.name not in MODULES)
REFUSAL = "needs a CUDA GPU (sm_90a); nothing run"


def _name(script: Path) -> str:
    return script.relative_to(ROOT).as_posix()


def test_modules_have_no_command_line():
    for name in MODULES:
        assert '__name__ == "__main__"' not in (BENCH / name).read_text(), name


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    cases = [(s, []) for s in SCRIPTS if s.name not in NO_GPU_TOOLS] + [(s, ["--help"]) for s in SCRIPTS]
    # GEMM_LADDER_NVCC points nowhere (cli_env): a script that tried to compile before refusing would fail.
    results = run_scripts(cases, ROOT, tmp_path_factory.mktemp("bench_scripts"), cli_env(), deadline_s=90)
    return {(_name(s), tuple(argv)): r for (s, argv), r in zip(cases, results)}


@pytest.mark.parametrize("script", [_name(s) for s in SCRIPTS if s.name not in NO_GPU_TOOLS])
def test_refuses_without_gpu_in_one_line(outcomes, script):
    r = outcomes[(script, ())]
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.rc == 2 and not r.traceback and lines == [f"{script}: {REFUSAL}"], r.describe()


@pytest.mark.parametrize("script", [_name(s) for s in SCRIPTS])
def test_help_ends_cleanly(outcomes, script):
    r = outcomes[(script, ("--help",))]
    assert not r.traceback, r.describe()
    if r.rc == 0:
        assert r.stdout.startswith("usage:"), r.describe()
    else:  # a one-off without arguments refuses before reading any
        assert r.rc == 2 and (r.stdout + r.stderr).strip().splitlines() == [f"{script}: {REFUSAL}"], r.describe()


def test_a_real_process_refuses_the_same_way():
    """The forking runner against a plain ``python bench/...`` process."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "bench/l9_targets.py"], cwd=ROOT, env=cli_env(), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr == f"bench/l9_targets.py: {REFUSAL}\n", proc

