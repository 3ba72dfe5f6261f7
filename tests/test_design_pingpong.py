"""The designer's ping-pong plan (plan_gemm(schedule="pingpong")): each consumer warpgroup a whole tile in
turn, one order mbarrier per consumer, the empty barriers counting the one consumer that read a stage; its
refusals; the cooperative plans unchanged (their JSON and kernel defines, so every build key); and the
auditor proving the plan's ring with two tiles per consumer, and rejecting it with the cooperative count.
CPU only: no ping-pong kernel is built yet.
"""

from __future__ import annotations

import json

import pytest

from gemm_ladder.audit import audit_plan
from gemm_ladder.cli import main
from gemm_ladder.design import PlanRefused, plan_gemm

PP = dict(consumers=2, persistent=True, schedule="pingpong")


def test_a_pingpong_plan():
    plan = plan_gemm(4096, 4096, 4096, tile=(128, 128, 64), stages=5, c_ring=1, **PP)
    d = plan.to_json()
    assert d["problem"]["schedule"] == "pingpong"
    assert d["consumers"]["rows_per_warpgroup"] == 128 and d["consumers"]["accumulator_registers"] == 128
    assert d["ring"]["empty_init_count"] == d["load_protocol"]["empty_arrival_count"] == 1
    defines = d["kernel_defines"]
    assert defines["GL_EMPTY_ARRIVALS"] == 1 and defines["GL_PINGPONG"] == 1
    smem = d["smem"]
    assert smem["order_bar_offset"] == defines["GL_SMEM_ORDER_BAR_OFFSET"] == smem["empty_bar_offset"] + 5 * 8
    assert [r["name"] for r in smem["regions"]][-2:] == ["order[0]", "order[1]"]
    assert smem["c_panel_bytes"] == 128 * 128  # a consumer stores whole 128-row panels
    regs = plan_gemm(4096, 4096, 4096, tile=(128, 128, 64), stages=6, c_from_registers=True, **PP).to_json()["smem"]
    assert [r["name"] for r in regs["regions"]][-2:] == ["order[0]", "order[1]"]  # no staging ring, still two
    two = plan_gemm(4096, 4096, 4096, tile=(128, 128, 64), stages=4, c_ring=1, cluster=2, **PP).to_json()
    assert two["ring"]["empty_init_count"] == 2  # the tile's consumer, in each CTA of the cluster


def test_cooperative_plans_are_unchanged():
    d = plan_gemm(4096, 4096, 4096, tile=(128, 256, 64), stages=4, c_ring=2, consumers=2, persistent=True).to_json()
    assert "schedule" not in d["problem"] and "order_bar_offset" not in d["smem"]
    assert not {"GL_PINGPONG", "GL_SMEM_ORDER_BAR_OFFSET"} & set(d["kernel_defines"])
    assert d["ring"]["empty_init_count"] == 2


@pytest.mark.parametrize("kw,rule", [
    (dict(consumers=2, schedule="pingpong", c_ring=1), "ping-pong without persistent"),
    (dict(consumers=1, persistent=True, schedule="pingpong", c_ring=1), "ping-pong"),
    (dict(consumers=2, persistent=True, schedule="pingpong"), "ping-pong"),  # no staging ring of its own
    (dict(consumers=2, persistent=True, schedule="pingpong", c_ring=1, tile=(128, 256, 64)),
     "wgmma accumulator registers"),
    (dict(consumers=2, persistent=True, schedule="zigzag"), "schedule"),
])
def test_pingpong_refusals(kw, rule):
    kw = {"tile": (128, 128, 64), **kw}
    with pytest.raises(PlanRefused) as info:
        plan_gemm(4096, 4096, 4096, **kw)
    assert info.value.rule == rule


@pytest.mark.parametrize("kw", [
    dict(tile=(128, 128, 64), stages=5, c_ring=1),
    dict(tile=(128, 128, 64), stages=4, c_ring=2),
    dict(tile=(64, 256, 64), stages=5, c_ring=1),
], ids=["128x128-S5-R1", "128x128-S4-R2", "64x256-S5-R1"])
def test_the_auditor_proves_the_pingpong_plan(kw):
    result = audit_plan(plan_gemm(4096, 4096, 4096, **kw, **PP).to_json())
    assert result.ok and result.complete, result.render()
    assert result.bounds["pingpong"] is True and result.bounds["tiles_per_cta"] >= 4  # two tiles per consumer


def test_the_auditor_rejects_a_pingpong_plan_with_the_cooperative_count():
    d = plan_gemm(4096, 4096, 4096, tile=(128, 128, 64), stages=4, c_ring=1, **PP).to_json()
    d["ring"]["empty_init_count"] = d["load_protocol"]["empty_arrival_count"] = 2
    d["kernel_defines"]["GL_EMPTY_ARRIVALS"] = 2
    kinds = {v.kind for v in audit_plan(d).violations}
    assert {"arrival_count", "deadlock"} <= kinds


def test_design_and_audit_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "pp.json"
    assert main(["design", "--shape", "4096x4096x4096", "--consumers", "2", "--persistent", "--c-ring", "1",
                 "--stages", "4", "--schedule", "pingpong", "--format", "json"]) == 0
    path.write_text(capsys.readouterr().out)
    assert json.loads(path.read_text())["problem"]["schedule"] == "pingpong"
    assert main(["audit", str(path)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["design", "--shape", "4096x4096x4096", "--consumers", "2", "--c-ring", "1",
                 "--schedule", "pingpong"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ping-pong without persistent" in err
