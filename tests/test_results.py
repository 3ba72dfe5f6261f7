"""Results I/O in one module (gemm_ladder/results.py): writing, reading, the schema, and the
committed results of schema 1, which stay readable and never read as "passed"."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gemm_ladder import results
from gemm_ladder.results import READABLE_SCHEMAS, SCHEMA, ResultError, check_writable, load_result, write_json

BENCH = Path(__file__).resolve().parent.parent / "bench" / "results"
#: Every committed result of climb or gate (schema 1, before per-gate records).
COMMITTED = sorted(p for p in BENCH.glob("*.json") if '"schema": "gemm-ladder/result/' in p.read_text()[:200])


def test_write_json_nulls_non_finite_numbers_and_round_trips(tmp_path):
    path = write_json({"schema": SCHEMA, "x": [math.inf, 1.0, {"y": math.nan}], "rows": []}, tmp_path / "a" / "r.json")
    assert json.loads(path.read_text()) == {"schema": SCHEMA, "x": [None, 1.0, {"y": None}], "rows": []}
    assert load_result(path)["x"] == [None, 1.0, {"y": None}]


def test_run_meta_has_every_key():
    meta = results.run_meta("gemm-ladder climb")
    assert set(meta) == {"date", "git_commit", "git_dirty", "command", "host", "gpu", "versions"}
    assert meta["command"] == "gemm-ladder climb" and set(meta["versions"]) == {"torch", "cuda", "nvcc", "kernel_compiler", "python"}


@pytest.mark.parametrize("content, says", [
    (b"\xff\xfe{}", "not UTF-8"),
    (b"{", "not valid JSON"),
    (b"[1, 2]", "the top level is a JSON list"),
    (b'{"meta": {}, "rows": []}', "it has no 'schema'"),
    (b'{"schema": "gemm-ladder/design/1"}', "it has schema 'gemm-ladder/design/1'"),
    (b'{"schema": "gemm-ladder/result/2", "rows": {}}', "'rows' must be a JSON array"),
    (b'{"schema": "gemm-ladder/result/2", "levels": [3]}', "every entry of 'levels' must be a JSON object"),
    (b'{"schema": "gemm-ladder/result/2", "gates": []}', "'gates' must be a JSON object"),
])
def test_load_result_says_what_is_wrong(tmp_path, content, says):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(ResultError, match=f"{path}.*") as err:
        load_result(path)
    assert says in str(err.value)


def test_load_result_of_a_missing_file(tmp_path):
    with pytest.raises(ResultError, match="cannot read"):
        load_result(tmp_path / "absent.json")


def test_check_writable(tmp_path):
    assert check_writable(tmp_path / "new" / "r.json") is None and (tmp_path / "new").is_dir()
    assert "is a folder" in check_writable(tmp_path)
    (tmp_path / "f").write_text("")
    assert "is not a folder" in check_writable(tmp_path / "f" / "r.json")


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_committed_results_load_and_their_verdict_agrees_with_their_gates(path):
    """Written before per-gate records (schema 1): loadable; each gate's state derived from the rows
    (never "unknown": the README's showcase said "Verdict unknown"); the verdict "failed" exactly when
    the summary or a gate records a failure, so the page never shows "Gates failed" above no failed gate."""
    result = load_result(path)
    assert result["schema"] in READABLE_SCHEMAS and "gates" not in result
    states = results.gate_states(result)
    assert all(g["derived"] and g["state"] in (results.PASSED, results.FAILED, results.NOT_RUN) for g in states.values())
    recorded_failure = bool(result["summary"]["failures"]) or not result["summary"]["passed"]
    any_failed = any(g["state"] == results.FAILED for g in states.values())
    assert recorded_failure == any_failed, states
    assert (results.verdict(result) == "failed") == recorded_failure
    assert results.verdict(result) != results.UNKNOWN
    assert states["correctness"]["ran"] > 0  # every committed climb checked something


def test_schema_1_gates_are_derived_from_the_rows():
    row = {"kind": "level", "status": "pass", "correctness": {"passed": True}, "performance": {"passed": True}}
    cublas = {"kind": "cublas", "status": "fail", "correctness": {"passed": False}, "performance": {"passed": False}}
    base = {"schema": "gemm-ladder/result/1", "rows": [row, cublas], "resources": [{"passed": True}],
            "summary": {"passed": True, "failures": []}}
    states = results.gate_states(base)  # the cuBLAS row is the baseline, not a check
    assert [(states[g]["state"], states[g]["ran"]) for g in results.GATES] == [("passed", 1)] * 3
    assert results.verdict(base) == "passed"
    slow = {**base, "rows": [row, {**row, "status": "fail", "performance": {"passed": False}}]}
    assert results.gate_states(slow)["performance"]["failed"] == 1 and results.verdict(slow) == "failed"
    crashed = {**base, "rows": [row, {"kind": "level", "status": "error", "correctness": None}]}
    assert results.gate_states(crashed)["correctness"]["failed"] == 1 and results.verdict(crashed) == "failed"
    no_gpu = {**base, "rows": [{"kind": "level", "status": "skipped", "message": "no GPU"}], "resources": []}
    states = results.gate_states(no_gpu)
    assert states["correctness"] == {**states["correctness"], "state": "not run", "reason": "no GPU", "not_run": 1}
    assert not states["performance"]["applies"] and results.verdict(no_gpu) == "incomplete"
    assert results.verdict({"schema": SCHEMA, "summary": {}}) == results.UNKNOWN  # schema 2 records them or not


def test_there_are_committed_results_to_check():
    assert len(COMMITTED) >= 10


def test_gate_states_read_schema_2():
    result = {"schema": SCHEMA, "gates": {"correctness": {"state": "not run", "reason": "no GPU"},
                                          "performance": {"state": "passed"}, "resources": {"state": "bogus"}},
              "summary": {"verdict": "incomplete"}}
    states = results.gate_states(result)
    assert [states[g]["state"] for g in results.GATES] == ["not run", "passed", "unknown"]
    assert results.verdict(result) == "incomplete"
