"""The protocol auditor: each classic stage-ring bug, seeded into a good protocol, is caught with a
readable trace; the level protocols audit clean. CPU only."""

from __future__ import annotations

import json

import pytest

from gemm_ladder.audit import (PLAN_SCHEMA, AuditResult, PlanFormatError, ProtocolError, RingConfig, audit,
                               build_ring_protocol, protocol_for_level, protocol_from_plan)
from gemm_ladder.audit.protocol import Barrier, Buffer, Op, Protocol, Role
from gemm_ladder.design import plan_gemm


def kinds(result: AuditResult) -> set[str]:
    return {v.kind for v in result.violations}


def first(result: AuditResult, *wanted: str):
    for v in result.violations:
        if v.kind in wanted:
            return v
    raise AssertionError(f"none of {wanted} in {kinds(result)}:\n{result.render()}")


# ---------------------------------------------------------------------------------------- good designs


@pytest.mark.parametrize("level", [4, 5, 6, 7, 8, 9])
def test_default_level_protocols_audit_clean(level):
    r = audit(protocol_for_level(level))
    assert r.ok and r.complete, r.render()
    assert r.states_explored > 1 and r.bounds["level"] == level
    assert "OK" in r.render() and "states" in r.render()


def test_level9_cluster_variant_audits_clean():
    p = protocol_for_level(9, k_iters=2, tiles=1, stages=2, cluster=2)
    assert p.barrier("empty").arrival_count == 4  # 2 consumers x 2 CTAs
    r = audit(p)
    assert r.ok, r.render()


def test_level9_epilogue_is_the_shipped_panel_ring():
    # per consumer warpgroup: its own ring of 2 panel buffers, 4 panels (bulk groups) per tile
    p = protocol_for_level(9, k_iters=2, tiles=2, stages=2)
    staging = {b.name: b.bytes for b in p.buffers if b.kind == "staging"}
    assert staging == {"D0.0": 8192, "D0.1": 8192, "D1.0": 8192, "D1.1": 8192}  # 64 rows x 128 B
    for i, role in enumerate(r for r in p.roles if r.kind == "consumer"):
        ops = [op for op in role.program if op.op in ("write_staging", "store_commit", "store_wait")]
        commits = [op for op in ops if op.op == "store_commit"]
        assert [(op.buffers[0], op.tag, op.panel) for op in commits] == \
            [(f"D{i}.{q % 2}", q // 4, q % 4) for q in range(8)]
        waits = [op.pending for op in ops if op.op == "store_wait"]
        assert waits == [1] * 7 + [0]  # before every panel but the first; wait_group.read 0 at exit
        # overlap: panels 2 and 3 of tile 0 go out in tile 1's K iterations 0 and 1 (global 2, 3),
        # right after the wgmma is issued; in iteration 1 the release of stage k#2 follows (iteration 0
        # releases nothing: tile 0's last stage was released at its end, after wait_group 0)
        prog = [op.op if op.op != "store_commit" else ("store", op.tag, op.panel) for op in role.program]
        for g, panel, then in ((2, 2, "wait"), (3, 3, "arrive")):
            at = next(j for j, op in enumerate(role.program) if op.op == "consume" and op.tag == g)
            assert prog[at + 1:at + 5] == ["store_wait", "write_staging", ("store", 0, panel), then]
    assert audit(p).ok


def test_level9_shipped_epilogue_clean_with_cluster_and_deeper_ring():
    r = audit(protocol_for_level(9, k_iters=3, tiles=2, stages=4, cluster=2))
    assert r.ok, r.render()


def test_json_round_trip_audits_the_same():
    p = protocol_for_level(8, k_iters=2, tiles=1, stages=2)
    q = Protocol.from_json(json.loads(p.dumps()))
    assert q.to_json() == p.to_json()
    a, b = audit(p), audit(q)
    assert a.ok and b.ok and a.states_explored == b.states_explored


def test_role_counts_and_barrier_counts():
    p = protocol_for_level(9, stages=2, k_iters=1, tiles=1)
    assert p.role_counts() == {"producer": 1, "consumer": 2}
    assert p.barrier("full").arrival_count == 1 and p.barrier("empty").initial_phase == 1
    assert protocol_for_level(4).barrier("empty").arrival_count == 128  # the __syncthreads form


# ---------------------------------------------------------------------------------------- seeded faults
# (stages=1 with release_lag=0 at levels 5-9: the one-stage, release-after-read variant no kernel ships,
# kept because its state spaces are the smallest; protocol_for_level refuses one stage without it)


def test_missing_full_wait_reads_before_the_load_lands():
    p = protocol_for_level(5, k_iters=3, stages=2, full_wait=False)
    r = audit(p)
    assert not r.ok
    v = first(r, "read_before_landed")
    assert "before load #0 landed" in v.message
    assert any("issue TMA load #0" in s for s in v.trace) and "wgmma reads" in v.trace[-1]


def test_wrong_initial_phase_on_empty_deadlocks():
    p = protocol_for_level(7, k_iters=2, tiles=1, stages=2, empty_initial_phase=0)
    r = audit(p)
    v = first(r, "deadlock")
    assert "cta0.producer blocked at 'wait empty[0] parity 0'" in v.message
    assert "in phase 0" in v.message


def test_empty_count_two_with_one_arriver_deadlocks():
    p = protocol_for_level(7, k_iters=3, tiles=1, stages=2, empty_count=2)
    r = audit(p)
    v = first(r, "deadlock")
    assert "wait empty[0] parity 0" in v.message and "1 arrival(s)" in v.message
    assert any("arrive empty[0]" in s for s in v.trace)


def test_empty_count_one_with_two_consumers_reuses_early():
    p = protocol_for_level(9, k_iters=3, tiles=1, stages=2, empty_count=1)
    r = audit(p)
    v = first(r, "early_overwrite")
    assert "still unread by cta0.consumer" in v.message
    assert "issue TMA load" in v.trace[-1]


def test_staging_reused_before_wait_group():
    p = protocol_for_level(6, k_iters=1, tiles=2, stages=2, drain_staging_before_reuse=False)
    r = audit(p)
    v = first(r, "staging_overwrite")
    assert "TMA store of tile 0 still reads it" in v.message
    assert any("commit_group" in s for s in v.trace) and "epilogue writes D" in v.trace[-1]


def test_missing_final_wait_group_exits_with_store_in_flight():
    r = audit(protocol_for_level(7, k_iters=1, tiles=1, stages=1, release_lag=0, final_store_wait=False))
    assert "exit_in_flight" in kinds(r)


def test_level9_staging_wait_leaving_r_groups_reuses_a_buffer_still_read():
    # wait_group.read 2 (R) instead of 1 (R - 1): panel q - 2's store may still read buffer q % 2
    r = audit(protocol_for_level(9, k_iters=1, tiles=1, stages=1, release_lag=0, staging_wait_pending=2))
    v = first(r, "staging_overwrite")
    assert "for tile 0 panel 2 while the TMA store of tile 0 panel 0 still reads it" in v.message
    writer = v.trace[-1].split(":")[0]
    buf = v.trace[-1].split("epilogue writes ")[1].split(" ")[0]
    assert buf.endswith(".0") and v.trace[-1].endswith("(tile0 panel2)  [st.shared; fence.proxy.async; named barrier]")
    mine = [s for s in v.trace if s.startswith(writer + ":")]
    assert f"{writer}: TMA store from {buf} (tile0 panel0) + commit_group" in mine
    assert sum("wait_group.read 2" in s for s in mine) == 2  # before panels 1 and 2: neither waited


def test_level9_missing_final_wait_group_exits_with_a_panel_store_in_flight():
    r = audit(protocol_for_level(9, k_iters=1, tiles=1, stages=1, release_lag=0, final_store_wait=False))
    v = first(r, "exit_in_flight")
    assert "TMA store from D" in v.message and "never waited" in v.message


def test_level9_consumers_sharing_one_staging_ring_race():
    # one ring D.0, D.1 for both consumer warpgroups, each with its own issuer and bulk groups:
    # a consumer's wait_group covers only its own stores, so the other's writes race with them
    p = protocol_for_level(9, k_iters=1, tiles=1, stages=1, release_lag=0, shared_staging=True)
    assert {b.name for b in p.buffers if b.kind == "staging"} == {"D.0", "D.1"}
    r = audit(p)
    v = first(r, "staging_overwrite")
    assert "of cta0.consumer" in v.message and "still reads it" in v.message
    assert "store_of_unwritten_staging" in kinds(r)  # the other's data stored in place of its own


def test_phase_not_carried_across_persistent_tiles():
    # K=3, S=2: tile 1 restarts at stage 0 parity 0 while full[0] has completed two phases... or one.
    p = protocol_for_level(6, k_iters=3, tiles=2, stages=2, carry_phase=False)
    r = audit(p)
    assert not r.ok
    assert kinds(r) & {"phase_error", "read_before_landed", "stale_read", "deadlock"}, r.render()
    # the same bound with phases carried is clean: the checks over several tiles catch the reset
    assert audit(protocol_for_level(6, k_iters=3, tiles=2, stages=2)).ok


@pytest.mark.parametrize("level", [7, 8])
def test_phase_reset_caught_in_warp_specialized_levels(level):
    p = protocol_for_level(level, k_iters=1, tiles=2, stages=2, carry_phase=False)
    assert not audit(p).ok


def test_cluster_empty_counting_only_the_local_cta_overwrites_the_peer():
    p = protocol_for_level(8, k_iters=2, tiles=1, stages=1, release_lag=0, remote_release=False, empty_count=1)
    r = audit(p)
    v = first(r, "early_overwrite")
    assert "@cta" in v.message and "still unread by" in v.message
    # the overwrite is a multicast by one CTA's producer into the other CTA's stage
    assert "multicast" in v.trace[-1]
    writer = v.trace[-1].split(":")[0].split(".")[0]
    victim = v.message.split("still unread by ")[1].split(".")[0]
    assert writer != victim, v.render()


def test_static_rule_one_producer_and_one_consumer_kind():
    p = protocol_for_level(7, k_iters=1, tiles=1, stages=1, release_lag=0)
    # a second consumer kind also waiting on full
    p.roles.append(Role("cta0.spy", "spy", 0, 32, [Op("wait", "full", 0, parity=0)]))
    r = audit(p)
    v = first(r, "handoff_roles")
    assert "['consumer', 'spy']" in v.message


def _aliasing_protocol(annotated: bool) -> Protocol:
    """A signaller completes two phases of `flag` before the waiter looks (it waits for phase 0)."""
    phase = 0 if annotated else None
    signaller = Role("signaller", "signaller", 0, 1, [Op("arrive", "flag"), Op("arrive", "flag")])
    waiter = Role("waiter", "waiter", 0, 1, [Op("wait", "flag", parity=0, phase=phase)])
    return Protocol("aliasing", 1, [signaller, waiter], [Barrier("flag", 1, 0, 1)], [], bounds={"hand": 1})


@pytest.mark.parametrize("annotated", [True, False])
def test_phase_aliasing_is_reported(annotated):
    r = audit(_aliasing_protocol(annotated))
    v = first(r, "phase_aliasing")
    assert "2 phases behind" in v.message and "cannot tell" in v.message
    assert [s.startswith("signaller: arrive flag[0]") for s in v.trace] == [True, True]


def test_extra_arrival_on_a_pending_tx_overflows():
    role = Role("t", "t", 0, 1, [Op("expect_tx", "full", bytes=16), Op("arrive", "full")])
    p = Protocol("overflow", 1, [role], [Barrier("full", 1)], [])
    assert "arrival_overflow" in kinds(audit(p))


def test_unknown_barrier_is_a_protocol_error():
    p = Protocol("bad", 1, [Role("t", "t", 0, 1, [Op("arrive", "nope")])], [], [])
    with pytest.raises(ProtocolError, match="no barrier nope"):
        audit(p)


def test_state_bound_makes_the_result_incomplete_not_ok():
    r = audit(protocol_for_level(7, k_iters=3, tiles=2, stages=2), max_states=5)
    assert not r.ok and not r.complete and not r.violations
    assert "INCOMPLETE" in r.render()


def test_reduced_search_proves_large_bounds_quickly():
    r = audit(protocol_for_level(8, k_iters=5, tiles=3, stages=4))
    assert r.ok and r.reduction == "bursts" and r.states_explored < 5000, r.render()
    assert "atomic blocks" in r.render()


def test_faulty_protocol_is_reported_by_the_full_search():
    # the reduced search finds the fault, the report is the full search's (shortest traces)
    r = audit(protocol_for_level(7, k_iters=3, tiles=1, stages=2, empty_count=2))
    assert not r.ok and r.reduction == "none"
    assert audit(protocol_for_level(7, k_iters=3, tiles=1, stages=2, empty_count=2), reduce=False).to_json() \
        | {"seconds": 0} == r.to_json() | {"seconds": 0}


def _verdicts(p: Protocol) -> dict:
    """Whether each search (full, and each reduced one whose preconditions hold) finds a violation."""
    from gemm_ladder.audit.compiled import CompiledProtocol
    from gemm_ladder.audit.explorer import Explorer
    from gemm_ladder.audit.reductions import ReductionVoid
    from gemm_ladder.audit.search import search
    cp, static = CompiledProtocol(p), []  # dynamic violations only
    out = {}
    for mode, why_not in (("none", None), ("blocks", cp.blocks_why_not), ("bursts", cp.bursts_why_not)):
        if why_not is not None:
            continue
        try:
            found, _, _, complete = search(cp, Explorer(cp, False, mode), static, 200_000, 1, True)
        except ReductionVoid:
            continue
        assert complete or len(found) > len(static)
        out[mode] = len(found) > len(static)
    return out


@pytest.mark.parametrize("level,kw", [(7, dict(k_iters=3, tiles=2, stages=2)),
                                      (8, dict(k_iters=2, tiles=1, stages=1, release_lag=0)),
                                      (9, dict(k_iters=2, tiles=1, stages=2))])
def test_reduced_searches_agree_with_the_full_search_on_dropped_ops(level, kw):
    # every single-op deletion of a level protocol (a missing wait, arrive, expect, load, read, store,
    # wait_group): each reduced search finds a violation exactly when the full search does
    base = protocol_for_level(level, **kw)
    n_faulty = 0
    for ri, role in enumerate(base.roles):
        for i in range(len(role.program)):
            q = Protocol.from_json(base.to_json())
            del q.roles[ri].program[i]
            v = _verdicts(q)
            assert len(set(v.values())) == 1, (role.name, i, role.program[i].describe(), v)
            n_faulty += v["none"]
    assert n_faulty > 0


@pytest.mark.parametrize("level,kw,faulty", [
    (5, dict(full_wait=False), True), (7, dict(empty_initial_phase=0), True), (7, dict(empty_count=2), True),
    (9, dict(empty_count=1), True), (6, dict(drain_staging_before_reuse=False), True),
    (7, dict(final_store_wait=False), True), (6, dict(carry_phase=False, k_iters=3), True),
    (8, dict(remote_release=False, empty_count=1, stages=1, release_lag=0), True),
    (9, dict(staging_wait_pending=2, tiles=1), True), (9, dict(shared_staging=True, tiles=1), True),
    (8, dict(full_count=2), True), (9, dict(full_initial_phase=1, tiles=1), True),
    # two clean protocols beside them: every search must find nothing there
    (8, dict(), False), (9, dict(cluster=2, stages=1, release_lag=0, tiles=1), False)])
def test_reduced_searches_agree_with_the_full_search_on_seeded_faults(level, kw, faulty):
    kw = dict(dict(k_iters=2, tiles=2, stages=2), **kw)
    v = _verdicts(protocol_for_level(level, **kw))
    # The full search and at least one reduced one ran, all found the seeded fault (or, clean, none): an
    # agreement of searches that all miss a fault would prove nothing.
    assert "none" in v and len(v) >= 2, v
    assert set(v.values()) == {faulty}, v


def test_trace_is_short():
    p = protocol_for_level(6, k_iters=5, tiles=3, stages=2, drain_staging_before_reuse=False)
    v = first(audit(p), "staging_overwrite")
    assert len(v.trace) <= 20 and v.omitted_steps > 0
    assert "earlier steps" in v.render()


# ---------------------------------------------------------------------------------------- plans


def plan_json(**ring_over) -> dict:
    """A designer plan (3 stages, K = 256: 4 K tiles), as JSON, with ``ring_over`` written into its ring."""
    doc = json.loads(json.dumps(plan_gemm(256, 256, 256, stages=3).to_json()))
    doc["ring"].update(ring_over)
    return doc


def test_protocol_from_plan_good_and_faulty():
    p = protocol_from_plan(plan_json())
    assert p.bounds["k_iters"] == 9 and p.bounds["stages"] == 3  # 3 x stages: every stage reused twice
    assert audit(p).ok
    bad = protocol_from_plan(plan_json(first_empty_wait_parity=0))
    assert "deadlock" in kinds(audit(bad))


def test_protocol_from_plan_reads_the_designers_ring_spelling():
    plan = plan_gemm(4096, 4096, 128, tile=(128, 256, 64), stages=2, consumers=2, persistent=True)
    p = protocol_from_plan(json.loads(json.dumps(plan.to_json())))
    # K = 128 is 2 K tiles per tile: 3 tiles reuse each of the 2 stages twice
    assert p.role_counts() == {"producer": 1, "consumer": 2} and p.bounds["tiles_per_cta"] == 3
    assert audit(p).ok


def test_protocol_from_plan_lists_missing_keys():
    with pytest.raises(PlanFormatError) as exc:
        protocol_from_plan({"schema": PLAN_SCHEMA, "ring": {"pipe_depth": 2}})
    msg = str(exc.value)
    for key in ("ring.full_init_count", "ring.empty_init_count", "problem.consumers", "problem.k", "problem.tile"):
        assert key in msg


def test_build_rejects_non_ws_multi_consumer():
    with pytest.raises(ValueError, match="consumers must be 1"):
        RingConfig(stages=2, k_iters=1, consumers=2)


@pytest.mark.parametrize("warp_specialized", [False, True])
def test_release_after_the_next_wgmma_needs_two_stages(warp_specialized):
    """Levels 5-9 release stage k only after issuing the wgmma of k + 1 (release_lag=1). With one stage
    that is a deadlock, which is why their kernels static_assert STAGES >= 2; with two it is clean."""
    one = audit(build_ring_protocol(RingConfig(stages=1, k_iters=2, release_lag=1, warp_specialized=warp_specialized)))
    v = first(one, "deadlock")
    assert "full" in v.message, one.render()
    two = audit(build_ring_protocol(RingConfig(stages=2, k_iters=3, tiles=2, release_lag=1,
                                               warp_specialized=warp_specialized)))
    assert two.ok, two.render()


def test_level_protocols_release_as_the_kernels_do():
    """The consumer's release of stage k comes after its read of stage k + 1 (levels 5-9, two or more
    stages), and a tile's last stage is released before its epilogue's first staging write."""
    p = protocol_for_level(7, k_iters=3, tiles=2, stages=2)
    cons = next(r for r in p.roles if r.kind == "consumer")
    seq = [(op.op, op.tag if op.op == "consume" else op.note) for op in cons.program
           if op.op in ("consume", "arrive", "write_staging")]
    assert seq[:5] == [("consume", 0), ("consume", 1), ("arrive", "consumer_release k#0"), ("consume", 2),
                       ("arrive", "consumer_release k#1")]
    assert seq[5:7] == [("arrive", "consumer_release k#2"), ("write_staging", "")]



def test_release_two_wgmma_groups_behind():
    """release_lag=2 (the library kernel's measuring build): stage k is released after the wgmma of k + 2
    is issued and a tile's last two (or, in a one-iteration tile, its one) after its wait_group 0; clean
    with three stages or more, at one and two consumers, one CTA and a multicast pair, tiles of one and
    of several K iterations; with two stages the consumer holds both while it waits for a third: deadlock
    (the kernel's static_assert STAGES > GL_RELEASE_LAG). Not modelled without warp specialization."""
    for stages, k_iters, tiles, cluster, consumers in [(3, 2, 3, 1, 1), (4, 1, 3, 1, 1), (5, 7, 2, 1, 1),
                                                       (4, 3, 2, 2, 2), (13, 15, 2, 1, 1)]:
        r = audit(protocol_for_level(9, k_iters=k_iters, tiles=tiles, stages=stages, cluster=cluster,
                                     consumers=consumers, c_ring=1, tile=(64 * consumers, 64, 64), release_lag=2),
                  max_states=5_000_000)
        assert r.ok, r.render()
    assert "deadlock" in kinds(audit(protocol_for_level(9, k_iters=3, tiles=2, stages=2, cluster=1, consumers=1,
                                                        c_ring=1, tile=(64, 64, 64), release_lag=2)))
    p = protocol_for_level(9, k_iters=4, tiles=2, stages=4, cluster=1, consumers=1, c_ring=1, tile=(64, 64, 64),
                           release_lag=2)
    cons = next(r for r in p.roles if r.kind == "consumer")
    seq = [(op.op, op.tag if op.op == "consume" else op.note) for op in cons.program if op.op in ("consume", "arrive")]
    assert seq[:6] == [("consume", 0), ("consume", 1), ("consume", 2), ("arrive", "consumer_release k#0"),
                       ("consume", 3), ("arrive", "consumer_release k#1")]
    assert seq[6:8] == [("arrive", "consumer_release k#2"), ("arrive", "consumer_release k#3")]  # the tile's end
    # seeded: a pair whose empty barrier counts one release, not both CTAs' consumers
    assert "early_overwrite" in kinds(audit(protocol_for_level(
        9, k_iters=5, tiles=1, stages=3, cluster=2, consumers=1, c_ring=1, tile=(64, 64, 64), release_lag=2,
        empty_count=1), max_states=5_000_000))
    with pytest.raises(ValueError, match="warp-specialized"):
        RingConfig(stages=3, k_iters=2, release_lag=2)


@pytest.mark.parametrize("stages,lengths,cluster,consumers", [(3, (3, 1, 2), 1, 1), (3, (1, 1, 4), 2, 1),
                                                                (4, (2, 1, 3), 2, 2), (3, (1, 2, 1), 1, 2)])
def test_release_two_wgmma_groups_behind_over_stream_k_segments(stages, lengths, cluster, consumers):
    """release_lag=2 over a stream-K CTA's segments (consume_k_range over [kb, ke) of any length): a
    segment of one K iteration releases its one stage at its end, a longer one its last two; clean."""
    p = protocol_for_level(9, k_iters=max(lengths), tiles=len(lengths), stages=stages, cluster=cluster,
                           consumers=consumers, c_ring=1, tile=(64 * consumers, 64, 64), release_lag=2,
                           tile_k_iters=lengths)
    r = audit(p, max_states=5_000_000)
    assert r.ok and r.complete, r.render()


def test_tiles_of_different_lengths():
    """tile_k_iters: equal lengths unroll exactly as k_iters does; different lengths (a stream-K CTA's
    segments) audit clean on level 9's ring, and the phase-reset fault (carry_phase=False) is caught on
    them; malformed entries are refused."""
    from gemm_ladder.audit import audit, build_ring_protocol
    from gemm_ladder.audit.ring import RingConfig

    base = dict(stages=2, consumers=2, warp_specialized=True, release_lag=1, tiles=3)
    same = build_ring_protocol(RingConfig(k_iters=5, **base))
    listed = build_ring_protocol(RingConfig(k_iters=5, tile_k_iters=(5, 5, 5), **base))
    assert [r.program for r in same.roles] == [r.program for r in listed.roles]
    for lengths in ((3, 1, 2), (1, 2, 1)):
        assert audit(build_ring_protocol(RingConfig(k_iters=3, tile_k_iters=lengths, **base))).ok, lengths
    assert not audit(build_ring_protocol(RingConfig(k_iters=3, tile_k_iters=(3, 2, 1), carry_phase=False, **base))).ok
    for bad in ((5, 5), (5, 0, 5), (5, True, 5), [5, 5, 5]):
        with pytest.raises(ValueError, match="tile_k_iters"):
            RingConfig(k_iters=5, tile_k_iters=bad, **base)
