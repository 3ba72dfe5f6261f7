"""The seeded-fault corpus (tests/audit_faults.py): every fault written into a designer plan is
rejected, with a counterexample trace (the interleaving, or the sum that fails), in process and
through `gemm-ladder audit` (exit 1); and the defects of issue 26, each a test that failed before.
CPU only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gemm_ladder.audit import PlanBoundsError, audit, audit_plan, check_plan, protocol_from_plan
from gemm_ladder.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from audit_faults import FAULTS, base, faulty, write  # noqa: E402


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_every_seeded_fault_is_rejected_with_a_trace(name):
    _, _, kinds, why = FAULTS[name]
    result = audit_plan(faulty(name))
    assert not result.ok, f"{name} ({why}) passed:\n{result.render()}"
    found = {v.kind: v for v in result.violations}
    assert kinds <= set(found), f"{name}: want {sorted(kinds)}, got {sorted(found)}\n{result.render()}"
    for kind in kinds:
        assert found[kind].trace, f"{name}: {kind} has no counterexample trace"


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_every_base_plan_is_clean_without_its_fault(name):
    result = audit_plan(base(FAULTS[name][0]))
    assert result.ok, result.render()


def test_the_corpus_through_the_command_line(tmp_path, capsys):
    """Each fault as a file, as a user runs it: exit 1, VIOLATIONS, each kind's trace printed."""
    for path in write(tmp_path):
        capsys.readouterr()
        assert main(["audit", str(path)]) == 1, path.name
        out = capsys.readouterr().out
        assert "VIOLATIONS" in out
        for kind in FAULTS[path.stem][2]:
            block = out.split(f"[{kind}]", 1)
            assert len(block) == 2, f"{path.name}: no [{kind}] in\n{out}"
            own = block[1].split("\n[", 1)[0]  # this kind's report only, up to the next kind's
            assert "    1. " in own or "... " in own, f"{path.name}: [{kind}] has no trace"


# ---------------------------------------------------------------------------------------- issue 26's defects


def test_issue_26_ring_whose_first_reuse_waits_forever_is_rejected(tmp_path, capsys):
    """`design --shape 4096x4096x4096 --format json`, ring.empty_init_count 2: exit 1 with the deadlock
    at the first reuse of a stage (before: exit 0, 'K iterations bounded to 4 of the plan's 64')."""
    doc = base("issue")
    doc = json.loads(json.dumps(doc))
    doc["ring"]["empty_init_count"] = 2
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    assert main(["audit", str(path)]) == 1
    out = capsys.readouterr().out
    assert "[deadlock]" in out and "wait empty[0] parity 0" in out
    assert "bounded to 4" not in out and "k_iters=12" in out


def test_issue_26_expect_tx_short_of_the_tensor_maps_bytes_is_rejected(tmp_path, capsys):
    doc = json.loads(json.dumps(base("issue")))
    doc["load_protocol"]["expect_tx_bytes"] //= 2
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    assert main(["audit", str(path)]) == 1
    out = capsys.readouterr().out
    assert "[byte_count]" in out and "A 16384 + B 16384 = 32768 B" in out and "[read_before_landed]" in out


def test_issue_26_k_iters_is_honoured_for_plans(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(base("issue")))
    assert main(["audit", str(path), "--k-iters", "13", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bounds"]["k_iters"] == 13
    assert main(["audit", str(path), "--k-iters", "10"]) == 2  # too few to reuse each of 4 stages twice
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and "--k-iters 12 or more" in err


def test_the_exploration_reuses_every_stage_twice():
    """Default bounds: every stage used three times per CTA, for plans short and long, persistent or not."""
    from gemm_ladder.design import plan_gemm

    for kw in (dict(), dict(stages=2), dict(persistent=True), dict(stages=3, persistent=True, consumers=2)):
        for k in (64, 128, 4096):
            doc = json.loads(json.dumps(plan_gemm(1024, 1024, k, "bf16", **kw).to_json()))
            p = protocol_from_plan(doc)
            b = p.bounds
            assert b["k_iters"] * b["tiles_per_cta"] >= 3 * b["stages"], (kw, k, b)
            if doc["problem"]["persistent"]:
                assert b["tiles_per_cta"] >= 2
            uses = {}
            for op in p.roles[0].program:
                if op.op == "issue_load" and op.buffers == ("A",):
                    uses[op.stage] = uses.get(op.stage, 0) + 1
            assert min(uses.values()) >= 3 and len(uses) == b["stages"], (kw, k, uses)
    with pytest.raises(PlanBoundsError, match="--k-iters 12 or more"):
        protocol_from_plan(base("issue"), k_iters=11)


def test_a_designer_plan_has_no_arithmetic_findings():
    assert check_plan(base("issue")) == [] and check_plan(base("ws")) == []


def test_the_ring_order_is_the_plans():
    """ring.order drives the model: the right order gives the plan's clean protocol; the JSON of an older
    plan without it reads as the right order, with a note."""
    doc = json.loads(json.dumps(base("ws")))
    assert doc["ring"]["order"] == {"producer": ["producer_acquire", "producer_commit"],
                                    "consumer": ["consumer_wait", "mma", "consumer_release"],
                                    "store": ["store_drain", "write_staging", "store_commit"]}
    with_order = protocol_from_plan(doc)
    del doc["ring"]["order"]
    without = protocol_from_plan(doc)
    assert [r.to_json() for r in with_order.roles] == [r.to_json() for r in without.roles]
    assert any("no ring.order" in n for n in without.notes)
    assert audit(without).ok


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`gemm-ladder audit plan.json | head -2`: the reader goes away; no BrokenPipeError traceback."""
    path = tmp_path / "plan.json"
    doc = json.loads(json.dumps(base("issue")))
    doc["ring"]["empty_init_count"] = 2  # a long report
    path.write_text(json.dumps(doc))
    proc = subprocess.Popen([sys.executable, "-m", "gemm_ladder", "audit", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
