"""`gemm-ladder audit`: exit 0 and the result for a level; exit 1 and the trace for a faulty plan."""

from __future__ import annotations

import json

import pytest

from gemm_ladder.audit import PLAN_SCHEMA
from gemm_ladder.cli import main
from gemm_ladder.design import plan_gemm


def test_audit_level5_exits_0_and_prints_the_result(capsys):
    assert main(["audit", "--level", "5"]) == 0
    out = capsys.readouterr().out
    # level 5 ships 3 stages: 9 K iterations use every stage three times (reused twice)
    assert "audit level5" in out and "OK" in out and "states" in out and "k_iters=9" in out


def test_audit_full_search_gives_the_same_verdict(capsys):
    # the full search is slow: level 8 at 2 stages, 6 K iterations in one tile (each stage used 3 times)
    args = ["audit", "--level", "8", "--stages", "2", "--k-iters", "6", "--tiles", "1", "--json"]
    assert main(args) == 0
    reduced = json.loads(capsys.readouterr().out)
    assert main([*args, "--full-search"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert reduced["reduction"] == "bursts" and full["reduction"] == "none"
    assert full["ok"] and full["states_explored"] > reduced["states_explored"]


def test_audit_level_json_output(capsys):
    assert main(["audit", "--level", "7", "--k-iters", "6", "--tiles", "2", "--json"]) == 0
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
    assert main(["audit", "--level", "6", "--k-iters", "3", "--tiles", "2", "--dump-protocol", str(dump)]) == 0
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


# ---------------------------------------------------------------------------------------- the shipped levels


@pytest.mark.parametrize("number", [4, 5, 6, 7, 8, 9])
def test_audit_level_audits_the_configuration_the_level_ships(number, capsys):
    from gemm_ladder.levels import LEVELS

    lv = LEVELS[number]
    assert main(["audit", "--level", str(number), "--json"]) == 0
    b = json.loads(capsys.readouterr().out)["bounds"]
    assert (b["stages"], b["cluster"], b["consumers"]) == (lv.stages, lv.cluster, lv.consumers)
    assert b["warp_specialized"] == lv.producer_warpgroup and b["tiles_per_cta"] == (2 if lv.persistent else 1)
    assert b.get("staging_buffers", 1) == max(lv.c_ring, 1)


def test_audit_level9_with_no_flags_is_level9_as_shipped(capsys):
    assert main(["audit", "--level", "9"]) == 0
    out = capsys.readouterr().out
    # 4 stages over 2 tiles: 6 K iterations per tile use every stage three times
    assert "audit level9-S4-K6-T2: OK" in out and "cluster=2" in out and "consumers=2" in out


@pytest.mark.parametrize("args,rule", [
    *[(["--level", str(n), "--stages", "1"], "GL_RELEASES_PREVIOUS_STAGE") for n in (5, 6, 7, 8, 9)],
    (["--level", "9", "--cluster", "3"], "cluster size"), (["--level", "8", "--cluster", "1"], "GL_CLUSTER == 2"),
    (["--level", "7", "--cluster", "2"], "cluster of 1"), (["--level", "9", "--stages", "5"], "at most 4 stages"),
    (["--level", "4", "--stages", "2"], "single stage"), (["--level", "3"], "levels 4..9"),
    (["--level", "10"], "levels 4..9")])
def test_audit_refuses_what_the_level_refuses_with_the_rule(args, rule, capsys):
    assert main(["audit", *args]) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and err.startswith("gemm-ladder audit: ") and rule in err


# ---------------------------------------------------------------------------------------- bad input

BAD_FILES = {
    "array.json": b"[1, 2]", "number.json": b"3", "null.json": b"null", "empty_object.json": b"{}",
    "other_schema.json": b'{"schema": "gemm-ladder/result/1"}', "not_json.json": b"nope",
    "not_utf8.json": b"\xff\xfe\x00{", "empty.json": b"",
    "roles_not_list.json": b'{"roles": 5, "barriers": [], "buffers": []}',
    "bad_parity.json": b'{"roles": [{"name": "x", "program": [{"op": "wait", "barrier": "f", "parity": "z"}]}],'
                       b' "barriers": [], "buffers": []}',
    "list_tag.json": b'{"roles": [{"name": "x", "program": [{"op": "consume", "buffers": ["A"], "tag": [1]}]}],'
                     b' "barriers": [], "buffers": []}',
    "huge_stages.json": b'{"roles": [], "barriers": [{"name": "f", "arrival_count": 1, "stages": 1000000000}],'
                        b' "buffers": []}',
    "role_not_object.json": b'{"roles": [7], "barriers": [], "buffers": []}',
    "plan_with_null.json": b'{"schema": "gemm-ladder/design/1", "problem": null}',
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_audit_bad_plan_files_end_in_one_line_and_exit_2(name, tmp_path, capsys):
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name])
    assert main(["audit", str(path)]) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and err.startswith("gemm-ladder audit: "), err


@pytest.mark.parametrize("args", [
    ["MISSING"], ["FOLDER"], ["--level", "9", "--dump-protocol", "A_FILE/x.json"],
    ["--level", "9", "--dump-protocol", "FOLDER"], ["--level", "5", "--k-iters", "0"],
    ["--level", "5", "--k-iters", "-3"], ["--level", "5", "--tiles", "0"], ["--level", "5", "--tiles", "x"],
    ["--level", "5", "--stages", "0"], ["--level", "5", "--stages", "-1"], ["--level", "9", "--cluster", "0"],
    ["--level", "5", "--max-states", "0"], ["--level", "5", "--max-states", "-5"], ["--level", "x"],
    ["--level", "5", "--k-iters", "1000", "--tiles", "3"], ["--level", "5", "PLAN"], [],
    ["--level", "9", "--k-iters", "3"], ["--level", "5", "--k-iters", "8"], ["PLAN", "--k-iters", "3"],
    ["PLAN", "--k-iters", "1", "--tiles", "2"]], ids=repr)
def test_audit_bad_arguments_end_in_one_line_and_exit_2(args, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan(1)))
    (tmp_path / "a_file").write_text("a file where a folder is expected\n")
    subst = {"MISSING": str(tmp_path / "missing.json"), "FOLDER": str(tmp_path), "PLAN": str(plan),
             "A_FILE/x.json": str(tmp_path / "a_file" / "x.json")}
    assert main(["audit", *[subst.get(a, a) for a in args]]) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and err.startswith("gemm-ladder audit: "), err
