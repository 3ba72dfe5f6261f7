"""Results I/O: the result JSON of ``climb`` and ``gate`` (docs/results-schema.md) and the ``meta``
object every benchmark JSON under ``bench/results/`` carries.

    from gemm_ladder.results import load_result, run_meta, write_json
    write_json({"meta": run_meta("python bench/x.py"), "rows": rows}, "bench/results/x.json")
    result = load_result("bench/results/run.json")     # ResultError if it is not a result

Reading needs neither torch nor a GPU (the report imports this module); :func:`run_meta` imports
torch when called.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

#: The schema id written by this version. 2 adds ``gates`` (which gates ran) and ``summary.verdict``.
SCHEMA = "gemm-ladder/result/2"
#: Every schema id :func:`load_result` reads; files of schema 1 lack ``gates`` (derived from their rows).
READABLE_SCHEMAS = ("gemm-ladder/result/1", SCHEMA)

#: The three gates, in the order the summary names them.
GATES = ("correctness", "performance", "resources")

#: States of one gate in ``gates``: it ran and every check passed; it ran and a check failed; it did
#: not run (``reason`` says why). Readers of a file without ``gates`` see UNKNOWN, never "passed".
PASSED, FAILED, NOT_RUN, UNKNOWN = "passed", "failed", "not run", "unknown"

#: ``summary.verdict``: every gate that applies ran and passed; a gate failed; nothing failed but a
#: gate that applies could not run (no GPU). UNKNOWN is the reader's word for a file without it.
VERDICT_PASSED, VERDICT_FAILED, VERDICT_INCOMPLETE = "passed", "failed", "incomplete"


class ResultError(ValueError):
    """The file is not a readable gemm-ladder result (the message names the file and what is wrong)."""


# --- writing ----------------------------------------------------------------------------------


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _nvcc_version() -> str | None:
    try:
        from gemm_ladder.runtime.compiler import nvcc_path, nvcc_version

        m = re.search(r"V(\d+\.\d+\.\d+)", nvcc_version(nvcc_path()))
        return m.group(1) if m else None
    except Exception:  # noqa: BLE001 - a version string is a report, not a requirement
        return None


def _kernel_compiler() -> str | None:
    """The compiler kernels are built with here (GEMM_LADDER_COMPILER, auto: nvcc, else NVRTC) and its
    release, e.g. 'nvcc 13.0.88' or 'nvrtc 13.0 (nvidia-cuda-nvrtc 13.0.88) headers ...'; None without one."""
    try:
        from gemm_ladder.runtime.compiler import compiler_choice, compiler_identity

        chosen = compiler_choice()
        return f"nvcc {_nvcc_version()}" if chosen == "nvcc" else compiler_identity(chosen)
    except Exception:  # noqa: BLE001 - a version string is a report, not a requirement
        return None


def run_meta(command: str) -> dict[str, Any]:
    """The ``meta`` object: date (UTC), git commit and dirtiness, command, host, GPU, versions.

    Where the source tree is a copy (a lent GPU machine), the commit comes from the environment
    variable GEMM_LADDER_GIT_COMMIT, set by whoever copied the tree; it takes precedence over git, and
    ``git_dirty`` is then null (unknown). ``gpu`` is :func:`gemm_ladder.gpu.gpu_facts` (null without a GPU).
    """
    import torch

    from gemm_ladder.gpu import gpu_facts

    # The variable wins: a copied tree may carry a stale .git of its own (the lent H200's did, and read
    # an older commit than the one copied).
    commit = os.environ.get("GEMM_LADDER_GIT_COMMIT")
    status = None if commit else _git("status", "--porcelain")
    commit = commit or _git("rev-parse", "HEAD")
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": commit,
        "git_dirty": bool(status) if status is not None else None,
        "command": command,
        "host": socket.gethostname(),
        "gpu": gpu_facts(),
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "nvcc": _nvcc_version(),
                     "kernel_compiler": _kernel_compiler(), "python": platform.python_version()},
    }


def _clean(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats become null (JSON has no NaN/Infinity)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_json(result: dict[str, Any], path: str | Path) -> Path:
    """Write ``result`` to ``path`` (parents created), non-finite numbers as null; returns the path.

    Raises OSError when the path cannot be written (:func:`check_writable` says why beforehand).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(result), indent=1) + "\n")
    return path


def check_writable(path: str | Path) -> str | None:
    """None when a file can be written at ``path``, else a one-line reason.

    Creates the missing folders of ``path`` and a temporary file beside it (removed at once): the
    only sure test, and done before a run so that an hour of gates does not end in an unwritable
    ``--json``.
    """
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder: give a file name"
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        return f"cannot write {path}: {ancestor} is not a folder"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    if path.exists() and not os.access(path, os.W_OK):
        return f"cannot write {path}: permission denied"
    return None


# --- reading ----------------------------------------------------------------------------------

#: Top-level members of a result and the JSON type each must have when present.
_MEMBERS: dict[str, type] = {"meta": dict, "ceilings": dict, "levels": list, "resources": list, "rows": list,
                             "summary": dict, "gates": dict}


def load_result(path: str | Path) -> dict[str, Any]:
    """Read a result JSON (``climb --json`` or ``gate --json``) and check that it is one.

    Checks the schema id (:data:`READABLE_SCHEMAS`) and the container types of the top-level
    members (``rows``, ``levels`` and ``resources`` lists of objects; ``meta``, ``ceilings``,
    ``summary`` and ``gates`` objects). Values inside rows are not checked: readers treat an absent
    or mistyped value as missing.

    Raises:
        ResultError: unreadable file, not UTF-8, invalid JSON, a JSON that is not a result (another
            schema, or a benchmark's own JSON), or a member of the wrong type.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ResultError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ResultError(f"{path} is not a result JSON: not UTF-8 text (byte {exc.start})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ResultError(f"{path} is not a result JSON: nested too deeply") from exc
    if not isinstance(data, dict):
        raise ResultError(f"{path} is not a result JSON: the top level is a JSON {type(data).__name__}, not an object")
    schema = data.get("schema")
    if schema not in READABLE_SCHEMAS:
        what = "has no 'schema'" if schema is None else f"has schema {schema!r}"
        raise ResultError(f"{path} is not a result JSON of climb or gate: it {what}; expected one of "
                          f"{', '.join(READABLE_SCHEMAS)} (docs/results-schema.md)")
    for key, kind in _MEMBERS.items():
        value = data.get(key)
        if value is not None and not isinstance(value, kind):
            raise ResultError(f"{path}: {key!r} must be a JSON {'object' if kind is dict else 'array'}")
        if kind is list and value and not all(isinstance(v, dict) for v in value):
            raise ResultError(f"{path}: every entry of {key!r} must be a JSON object")
    return data


def gate_states(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{gate: {"state", "reason", ...}}`` for the three :data:`GATES` of a loaded result.

    A schema-1 file (no ``gates``) has its states derived from its rows and resources
    (:func:`derived_gate_states`, each entry marked ``"derived": True``). A schema-2 file without an
    entry for a gate gives that gate the state :data:`UNKNOWN`: such a file never reads as "passed".
    """
    if not isinstance(result.get("gates"), dict) and result.get("schema") != SCHEMA:
        return derived_gate_states(result)
    recorded = result.get("gates") if isinstance(result.get("gates"), dict) else {}
    out = {}
    for gate in GATES:
        entry = recorded.get(gate)
        if isinstance(entry, dict) and entry.get("state") in (PASSED, FAILED, NOT_RUN):
            out[gate] = dict(entry)
        else:
            out[gate] = {"state": UNKNOWN, "reason": "this result does not record whether this gate ran"}
    return out


def derived_gate_states(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The gates of a schema-1 result, from what it does record: each level row's ``correctness.passed``
    (its status ``error`` a failed check, ``skipped`` a check that did not run: schema 1 wrote those
    rows without a GPU), each row's ``performance.passed`` (true or false: a judged timing; null: not
    judged), each resource entry's ``passed``. cuBLAS rows are the baseline, not checks. A gate with
    nothing recorded is "not run"; performance and resources then do not apply (as schema 2 says of a
    run without timed shapes or builds), correctness always does. Entries carry ``derived: True``."""
    rows = [r for r in result.get("rows") or [] if isinstance(r, dict) and r.get("kind") != "cublas"]
    tally = {gate: {"ran": 0, "failed": 0, "not_run": 0} for gate in GATES}
    skipped = []
    for r in rows:
        checked = (r.get("correctness") or {}).get("passed") if isinstance(r.get("correctness"), dict) else None
        if r.get("status") == "error" or checked is not None:
            tally["correctness"]["ran"] += 1
            tally["correctness"]["failed"] += r.get("status") == "error" or checked is False
        elif r.get("status") == "skipped":
            tally["correctness"]["not_run"] += 1
            skipped.append(str(r.get("message") or "skipped"))
        timed = (r.get("performance") or {}).get("passed") if isinstance(r.get("performance"), dict) else None
        if isinstance(timed, bool):
            tally["performance"]["ran"] += 1
            tally["performance"]["failed"] += not timed
    for e in result.get("resources") or []:
        if isinstance(e, dict) and isinstance(e.get("passed"), bool):
            tally["resources"]["ran"] += 1
            tally["resources"]["failed"] += not e["passed"]
    idle = {"correctness": "no check recorded", "performance": "no judged timing recorded",
            "resources": "no build recorded"}
    out = {}
    for gate, t in tally.items():
        state = FAILED if t["failed"] else NOT_RUN if t["not_run"] or not t["ran"] else PASSED
        reason = None
        if state == NOT_RUN:
            reason = "; ".join(dict.fromkeys(skipped)) if gate == "correctness" and skipped else idle[gate]
        out[gate] = {"state": state, "applies": gate == "correctness" or bool(t["ran"] or t["not_run"]),
                     "reason": reason, **t, "derived": True}
    return out


def verdict(result: dict[str, Any]) -> str:
    """The run's verdict: ``summary.verdict`` when recorded. For a schema-1 file, from its summary and
    its derived gates (:func:`derived_gate_states`): "failed" when the summary or a gate records a
    failure, "incomplete" when a gate that applies did not run, else "passed". A schema-2 file without
    a verdict: "failed" when its summary records a failure, else :data:`UNKNOWN`."""
    summary = result.get("summary") if isinstance(result.get("summary"), dict) else {}
    recorded = summary.get("verdict")
    if recorded in (VERDICT_PASSED, VERDICT_FAILED, VERDICT_INCOMPLETE):
        return recorded
    failed = summary.get("passed") is False or bool(summary.get("failures"))
    gates = gate_states(result)
    if failed or any(g["state"] == FAILED for g in gates.values()):
        return VERDICT_FAILED
    if not any(g.get("derived") for g in gates.values()):
        return UNKNOWN
    if any(g["state"] == NOT_RUN and g.get("applies") for g in gates.values()):
        return VERDICT_INCOMPLETE
    return VERDICT_PASSED
