"""Run many ``python -m gemm_ladder ...`` (or ``python SCRIPT ...``) command lines as real processes, cheaply.

Each command line runs in its own process, forked from one Python that has already imported torch,
matplotlib, rich and every ``gemm_ladder`` module (``preload``): the child runs ``gemm_ladder`` as ``__main__``
exactly as ``python -m gemm_ladder`` does (``runpy``), with its own stdout and stderr files, its own
working directory and stdin from /dev/null, and ends the way the interpreter ends: the exit status
of ``SystemExit``, or a printed traceback and status 1 for any other exception. Only the imports are
shared, so dozens of command lines cost one torch import instead of one each.
``test_bad_inputs.py`` checks the runner against a plain ``python -m gemm_ladder`` subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

#: The forking parent, run as ``python -c``: reads [{"argv", "cwd"}, ...] on stdin, answers
#: [{"rc", "stdout", "stderr", "seconds"}, ...] on stdout (rc None: killed at the deadline).
_PARENT = r'''
import importlib, json, os, pkgutil, runpy, signal, sys, time, traceback
cases, jobs, deadline_s, scratch, preload = (json.load(sys.stdin), int(sys.argv[1]), float(sys.argv[2]),
                                             sys.argv[3], sys.argv[4] == "1")
if preload:  # a module that fails here is imported again, and fails again, in the child that needs it
    import gemm_ladder
    names = ["torch", "numpy", "matplotlib", "matplotlib.pyplot", "rich.console", "rich.table"]
    names += [m.name for m in pkgutil.walk_packages(gemm_ladder.__path__, "gemm_ladder.",
                                                     onerror=lambda name: None)  # as any module's failure below
              if m.name != "gemm_ladder.__main__"]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            pass


def child(i, case):
    os.chdir(case["cwd"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, stream in ((1, "out"), (2, "err")):
        os.dup2(os.open(os.path.join(scratch, f"{i}.{stream}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    script = case.get("script")
    sys.argv = [script or "gemm-ladder", *case["argv"]]
    try:
        if script:  # ``python SCRIPT``: its directory first on sys.path
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module("gemm_ladder", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:  # what the interpreter does with it
        code = exc.code
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


results, running, queue = [None] * len(cases), {}, list(enumerate(cases))
sys.stdout.flush()
sys.stderr.flush()
while queue or running:
    while queue and len(running) < jobs:
        i, case = queue.pop(0)
        pid = os.fork()
        if pid == 0:
            child(i, case)
        running[pid] = (i, time.monotonic())
    pid, status = os.waitpid(-1, os.WNOHANG)
    if pid == 0:
        time.sleep(0.01)
        for pid, (i, start) in list(running.items()):
            if time.monotonic() - start > deadline_s:
                os.kill(pid, signal.SIGKILL)
        continue
    i, start = running.pop(pid)
    rc = os.waitstatus_to_exitcode(status)
    results[i] = {"rc": None if rc == -signal.SIGKILL else rc, "seconds": time.monotonic() - start}
for i, r in enumerate(results):
    for stream in ("out", "err"):
        with open(os.path.join(scratch, f"{i}.{stream}"), "rb") as f:
            r["std" + stream] = f.read().decode("utf-8", "replace")
json.dump(results, sys.stdout)
'''


@dataclass(frozen=True)
class Outcome:
    """How one command line ended: exit status (None: killed at the deadline), its output, its time."""

    rc: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stdout + self.stderr

    def describe(self) -> str:
        return f"exit {self.rc} after {self.seconds:.1f} s\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}"


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI run: this checkout's package first on the path, no GPU, no nvcc.

    GEMM_LADDER_NVCC points nowhere, so a command that tries to compile fails at once (a bad input
    must be refused before any compile); CUDA_VISIBLE_DEVICES hides every GPU (before any launch).
    ``extra`` overrides or adds variables.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "GEMM_LADDER_NVCC": "/nonexistent/gemm-ladder-test/nvcc", "CUDA_VISIBLE_DEVICES": "",
           "MPLBACKEND": "Agg"}
    env.pop("GEMM_LADDER_JIT_DEBUG", None)
    env.update(extra)
    return env


def run_many(cases: list[tuple[list[str], Path]], scratch: Path, env: dict[str, str],
             deadline_s: float = 120.0, preload: bool = True) -> list[Outcome]:
    """Run each (argv, cwd) as ``python -m gemm_ladder *argv`` in ``cwd``; outcomes in the same order.

    As many at once as there are CPUs (at least 2); a command still running after ``deadline_s``
    is killed and reported with rc None. ``preload=False`` imports nothing before forking.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    payload = json.dumps([{"argv": list(argv), "cwd": str(cwd)} for argv, cwd in cases])
    jobs = max(2, os.cpu_count() or 2)
    proc = subprocess.run([sys.executable, "-c", _PARENT, str(jobs), str(deadline_s), str(scratch), "1" if preload else "0"],
                          input=payload, capture_output=True, text=True, env=env,
                          timeout=deadline_s * (len(cases) // jobs + 2) + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"the CLI runner itself failed (exit {proc.returncode}):\n{proc.stderr[-5000:]}")
    return [Outcome(**r) for r in json.loads(proc.stdout)]


def run_scripts(cases: list[tuple[Path, list[str]]], cwd: Path, scratch: Path, env: dict[str, str],
                deadline_s: float = 120.0) -> list[Outcome]:
    """Run each (script, argv) as ``python SCRIPT *argv`` in ``cwd`` (forked as :func:`run_many`)."""
    scratch.mkdir(parents=True, exist_ok=True)
    payload = json.dumps([{"argv": list(argv), "cwd": str(cwd), "script": str(script)} for script, argv in cases])
    jobs = max(2, os.cpu_count() or 2)
    proc = subprocess.run([sys.executable, "-c", _PARENT, str(jobs), str(deadline_s), str(scratch), "1"],
                          input=payload, capture_output=True, text=True, env=env,
                          timeout=deadline_s * (len(cases) // jobs + 2) + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"the script runner itself failed (exit {proc.returncode}):\n{proc.stderr[-5000:]}")
    return [Outcome(**r) for r in json.loads(proc.stdout)]


def run_one(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300.0) -> Outcome:
    """``python -m gemm_ladder *argv`` as a plain subprocess (no forking runner)."""
    import time

    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gemm_ladder", *argv], cwd=cwd, env=env, capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return Outcome(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
                   time.monotonic() - start)
