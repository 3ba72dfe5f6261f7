"""Designer -> auditor: every plan the designer writes is read by the auditor as the ring it describes.

The plans come from the designer itself (``plan_gemm(...).to_json()`` through JSON text), over a
matrix of its options: stages 2-4, cluster 1 and 2, consumers 1 and 2, persistent or not, whole-tile
staging or a panel ring (c_ring), stream-K tail or not. One case runs the documented command line,
``gemm-ladder design ... --format json > plan.json && gemm-ladder audit plan.json``, through real files.
CPU only.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from gemm_ladder.audit import (PLAN_SCHEMA, PlanFormatError, audit, audit_plan, check_plan, min_iterations,
                               protocol_from_json, protocol_from_plan)
from gemm_ladder.cli import main
from gemm_ladder.design import PlanRefused, plan_gemm

#: K = 128 (2 K tiles) keeps each audit small; M = N = 8192 with 128 x 256 tiles on 66 clusters
#: leaves a partial last wave that the stream-K tail splits.
SHAPE = (8192, 8192, 128)


def designer_matrix() -> list[dict]:
    """Every combination of the options that the designer plans (the rest it refuses)."""
    out = []
    for stages, cluster, consumers, persistent, c_ring, stream_k in itertools.product(
            (2, 3, 4), (1, 2), (1, 2), (False, True), (0, 2), (False, True)):
        kw = dict(tile=(128, 256, 64) if c_ring else (128, 128, 64), stages=stages, cluster=cluster,
                  consumers=consumers, persistent=persistent, c_ring=c_ring, stream_k=stream_k)
        try:
            plan_gemm(*SHAPE, "bf16", **kw)
        except PlanRefused:
            continue
        out.append(kw)
    return out


MATRIX = designer_matrix()


def as_json(plan) -> dict:
    """The plan as the auditor receives it: the designer's JSON, through text."""
    return json.loads(json.dumps(plan.to_json()))


def test_the_matrix_covers_every_option():
    for key, values in (("stages", {2, 3, 4}), ("cluster", {1, 2}), ("consumers", {1, 2}),
                        ("persistent", {False, True}), ("c_ring", {0, 2}), ("stream_k", {False, True})):
        assert {kw[key] for kw in MATRIX} == values, key
    assert any(kw["cluster"] == 2 and kw["consumers"] == 2 and kw["stream_k"] and kw["c_ring"] for kw in MATRIX)
    assert any(plan_gemm(*SHAPE, "bf16", **kw).schedule.stream_k["tail_units"] for kw in MATRIX if kw["stream_k"])


@pytest.mark.parametrize("kw", MATRIX, ids=lambda kw: "-".join(f"{k}{int(v) if isinstance(v, bool) else v}"
                                                               for k, v in kw.items() if k != "tile"))
def test_every_designer_plan_audits_as_the_ring_it_describes(kw):
    plan = plan_gemm(*SHAPE, "bf16", **kw)
    p = protocol_from_plan(as_json(plan))
    b = p.bounds
    assert (b["stages"], b["cluster"], b["consumers"]) == (plan.stages, plan.cluster, plan.consumers.warpgroups)
    assert b["warp_specialized"] == plan.consumers.producer_warpgroup
    # every stage used three times per CTA: persistent plans run tiles of their own K, as many as needed
    k_tiles = plan.schedule.k_tiles
    assert b["k_iters"] * b["tiles_per_cta"] >= min_iterations(plan.stages)
    if plan.persistent:
        k = min(k_tiles, -(-3 * plan.stages // 2))
        assert b["k_iters"] == k and b["tiles_per_cta"] == max(2, -(-3 * plan.stages // k))
    else:
        assert (b["k_iters"], b["tiles_per_cta"]) == (3 * plan.stages, 1)
    full, empty = p.barrier("full"), p.barrier("empty")
    assert (full.arrival_count, empty.arrival_count) == (plan.ring.full_init_count, plan.ring.empty_init_count)
    assert (full.initial_phase, empty.initial_phase) == (plan.ring.first_full_wait_parity,
                                                         plan.ring.first_empty_wait_parity)
    staging = [buf for buf in p.buffers if buf.kind == "staging"]
    assert len(staging) == max(plan.smem.c_ring, 1) * plan.consumers.warpgroups
    assert b.get("panels_per_tile", 1) == (plan.smem.c_panels if plan.smem.c_ring else 1)
    r = audit_plan(as_json(plan))
    assert r.ok, r.render()


@pytest.mark.parametrize("field,value,kind", [("first_empty_wait_parity", 0, "deadlock"),
                                              ("empty_init_count", 3, "deadlock"),
                                              ("empty_init_count", 1, "early_overwrite")])
def test_a_fault_written_into_the_plans_ring_is_found(field, value, kind):
    # small, since a violation is reported by the full search: 3 K tiles, one tile, two consumers
    plan = plan_gemm(1024, 1024, 192, "bf16", tile=(128, 256, 64), stages=2, consumers=2, c_ring=2)
    doc = as_json(plan)
    doc["ring"][field] = value
    assert kind in {v.kind for v in audit(protocol_from_plan(doc)).violations}


def test_protocol_json_and_plans_are_told_apart():
    plan = as_json(plan_gemm(4096, 4096, 256, stages=3))
    assert plan["schema"] == PLAN_SCHEMA
    from_plan = protocol_from_json(plan)
    again = protocol_from_json(json.loads(from_plan.dumps()))
    assert again.to_json() == from_plan.to_json()


@pytest.mark.parametrize("doc", [[1, 2], "plan", 3, None, {}, {"schema": "gemm-ladder/design/0"},
                                 {"protocol": {"roles": []}}], ids=repr)
def test_neither_a_plan_nor_a_protocol_is_refused(doc):
    with pytest.raises(PlanFormatError, match="designer plan"):
        protocol_from_json(doc)


def test_missing_and_mistyped_keys_are_listed_together():
    doc = as_json(plan_gemm(4096, 4096, 256, stages=3))
    del doc["ring"]["pipe_depth"], doc["problem"]["cluster"]
    doc["ring"]["release_mode"] = "later"
    doc["problem"]["tile"] = [128, 128]
    with pytest.raises(PlanFormatError) as exc:
        protocol_from_plan(doc)
    for part in ("ring.pipe_depth (missing", "problem.cluster (missing", "ring.release_mode = 'later'",
                 "problem.tile = [128, 128]"):
        assert part in str(exc.value)


def test_an_sm100a_plan_is_refused_with_the_reason():
    doc = as_json(plan_gemm(4096, 4096, 256, tile=(128, 256, 64), stages=3, arch="sm_100a"))
    with pytest.raises(PlanFormatError, match="sm_90a"):
        protocol_from_plan(doc)


def test_the_release_model_is_the_plans():
    two = protocol_from_plan(as_json(plan_gemm(4096, 4096, 256, stages=2)))
    one = protocol_from_plan(as_json(plan_gemm(4096, 4096, 256, stages=1)))
    releases = [op.note for op in two.roles[0].program if op.op in ("consume", "arrive")]
    assert releases[:3] == ["", "", "consumer_release k#0"]  # previous: k#0 freed after the read of k#1
    assert [op.note for op in one.roles[0].program if op.op in ("consume", "arrive")][:2] == ["", "consumer_release k#0"]
    assert audit(two).ok and audit(one).ok


def test_cli_round_trip_through_files(tmp_path):
    """The documented flow, as a user runs it: design writes plan.json, audit reads it."""
    plan = tmp_path / "plan.json"
    args = ["--shape", "8192x8192x256", "--tile", "128x256x64", "--stages", "4", "--cluster", "2", "--consumers", "2",
            "--persistent", "--c-ring", "2", "--stream-k", "--format", "json"]
    with plan.open("w") as out:
        subprocess.run([sys.executable, "-m", "gemm_ladder", "design", *args], stdout=out, check=True, timeout=120)
    done = subprocess.run([sys.executable, "-m", "gemm_ladder", "audit", str(plan)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK" in done.stdout and "cluster=2" in done.stdout and "consumers=2" in done.stdout


def test_cli_round_trip_in_process(tmp_path, capsys):
    assert main(["design", "--shape", "4096x4096x4096", "--format", "json"]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    assert main(["audit", str(plan)]) == 0
    assert "OK" in capsys.readouterr().out


@pytest.mark.parametrize("a_major,b_major", [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")])
def test_library_bn64_plans_audit_as_the_ring_they_describe(a_major, b_major):
    """The library kernel at BN 64 (library_gemm: 8 stages, one panel buffer per consumer, one panel per
    tile, nothing deferred; an MN-major B split by K lines across the cluster) through its plan's JSON:
    the auditor reads the ring the plan describes (its stages, 2-CTA cluster, 2 consumers, one staging
    buffer each, expect_tx of the whole 128 + 64 rows) and keeps its arithmetic clean."""
    from gemm_ladder.library.gemm import library_gemm

    plan = library_gemm(a_major, b_major, 64).plan(8192, 1024, 128, "bf16")
    assert (plan.stages, plan.cluster, plan.smem.c_ring, plan.smem.c_panels) == (8, 2, 1, 1)
    assert plan.load_protocol.expect_tx_bytes == (128 + 64) * 64 * 2
    b_box = plan.tensor_maps["b"].box_dim
    assert b_box == (64, 32)  # BK x 32 N rows (K-major), or 64 N x 32 K lines (MN-major: the box split by K)
    assert plan.load_protocol.b_boxes_per_stage == 2  # one slice per CTA of the cluster, multicast
    p = protocol_from_plan(as_json(plan))
    b = p.bounds
    # K = 128 is 2 K tiles: 12 tiles use each of the 8 stages three times
    assert (b["stages"], b["cluster"], b["consumers"], b["k_iters"], b["tiles_per_cta"]) == (8, 2, 2, 2, 12)
    staging = [buf for buf in p.buffers if buf.kind == "staging"]
    assert len(staging) == 2  # one panel buffer per consumer
    loads = {op.bytes for r in p.roles for op in r.program if op.op == "issue_load"}
    assert loads == {128 * 64 * 2, 32 * 64 * 2}  # A, and each CTA's 32-row slice of B (multicast)
    assert check_plan(as_json(plan)) == []
    # the search at this depth (8 stages, 2 CTAs x 3 roles, 24 K iterations) is beyond CI's budget:
    # tests/test_audit_designer_plans.py BEYOND_BUDGET


@pytest.mark.parametrize("bm", (128, 64))
@pytest.mark.parametrize("cluster", (2, 1))
@pytest.mark.parametrize("bn", (64, 128, 192, 256))
def test_the_library_kernels_rings_audit(bn, cluster, bm):
    """The general kernel's own plans (library/gemm.py: its stages and panel ring per width, BN 192's
    ring of one panel buffer for three panels among them; one CTA per cluster; the 64-row build's one
    consumer warpgroup and its deeper ring), on a shape with a split tail."""
    from gemm_ladder.library.gemm import library_gemm

    kernel = library_gemm("k", "k", bn, cluster=cluster, bm=bm)
    plan = kernel.plan(8192, 768, 3072, "bf16")
    p = protocol_from_plan(as_json(plan))
    assert (p.bounds["consumers"], p.bounds["cluster"], p.bounds["stages"]) == (bm // 64, cluster, kernel.stages)
    assert p.barrier("empty").arrival_count == plan.ring.empty_init_count == (bm // 64) * cluster
    r = audit_plan(as_json(plan))
    assert r.ok, r.render()


@pytest.mark.parametrize("field,value,kind", [("first_empty_wait_parity", 0, "deadlock"),
                                              ("empty_init_count", 3, "deadlock"),
                                              ("empty_init_count", 1, "early_overwrite")])
def test_a_fault_written_into_the_64_row_builds_ring_is_found(field, value, kind):
    """The 64-row build's ring (one consumer, a 2-CTA cluster: two releases a stage) with a seeded fault:
    small, 3 K tiles and one tile, so the full search reports it."""
    from gemm_ladder.library.gemm import library_gemm

    kernel = library_gemm("k", "k", 128, bm=64)
    plan = plan_gemm(128, 1024, 192, "bf16", tile=kernel.tile, stages=2, cluster=2, consumers=1, persistent=True,
                     producer_warpgroup=True, c_ring=kernel.c_ring)
    doc = as_json(plan)
    assert doc["ring"]["empty_init_count"] == 2
    doc["ring"][field] = value
    assert kind in {v.kind for v in audit(protocol_from_plan(doc)).violations}
