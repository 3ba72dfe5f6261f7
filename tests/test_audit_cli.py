"""`gemm-ladder audit`: exit 0 and the result for a level; exit 1 and the trace for a faulty plan."""

from __future__ import annotations

import json

from gemm_ladder.audit import PLAN_SCHEMA
from gemm_ladder.cli import main
from gemm_ladder.design import plan_gemm


def test_audit_level5_exits_0_and_prints_the_result(capsys):
    assert main(["audit", "--level", "5"]) == 0
    out = capsys.readouterr().out
    assert "audit level5" in out and "OK" in out and "states" in out and "k_iters=3" in out


def test_audit_full_search_gives_the_same_verdict(capsys):
    assert main(["audit", "--level", "8", "--k-iters", "2", "--tiles", "1", "--json"]) == 0
    reduced = json.loads(capsys.readouterr().out)
    assert main(["audit", "--level", "8", "--k-iters", "2", "--tiles", "1", "--json", "--full-search"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert reduced["reduction"] == "bursts" and full["reduction"] == "none"
    assert full["ok"] and full["states_explored"] > reduced["states_explored"]


def test_audit_level_json_output(capsys):
    assert main(["audit", "--level", "7", "--k-iters", "2", "--tiles", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] is True and res["states_explored"] > 0 and res["bounds"]["tiles_per_cta"] == 2


def _plan(empty_initial_phase: int) -> dict:
    """A designer plan (2 stages, K = 256) whose producer's first empty wait uses ``empty_initial_phase``."""
    doc = json.loads(json.dumps(plan_gemm(128, 128, 256, stages=2).to_json()))
    doc["ring"]["first_empty_wait_parity"] = empty_initial_phase
    return doc


def test_audit_good_plan_exits_0(tmp_path, capsys):
    path = tmp_path / "PLAN.json"
    path.write_text(json.dumps(_plan(1)))
    assert main(["audit", str(path)]) == 0


def test_audit_faulty_plan_exits_1_with_the_trace(tmp_path, capsys):
    path = tmp_path / "PLAN.json"
    path.write_text(json.dumps(_plan(0)))  # the producer's first empty wait uses parity 0
    assert main(["audit", str(path)]) == 1
    out = capsys.readouterr().out
    assert "VIOLATIONS" in out and "[deadlock]" in out and "wait empty[0] parity 0" in out


def test_audit_edited_protocol_json_exits_1(tmp_path, capsys):
    dump = tmp_path / "p.json"
    assert main(["audit", "--level", "6", "--k-iters", "1", "--tiles", "2", "--dump-protocol", str(dump)]) == 0
    d = json.loads(dump.read_text())
    for role in d["roles"]:  # seed: drop the wait_group before staging is reused
        role["program"] = [op for op in role["program"]
                           if not (op["op"] == "store_wait" and "before reuse" in op.get("note", ""))]
    dump.write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["audit", str(dump)]) == 1
    out = capsys.readouterr().out
    assert "[staging_overwrite]" in out and "commit_group" in out


def test_audit_usage_errors_exit_2(tmp_path, capsys):
    assert main(["audit"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": PLAN_SCHEMA, "ring": {"pipe_depth": 2}}))
    assert main(["audit", str(bad)]) == 2
    assert "problem.k" in capsys.readouterr().err
