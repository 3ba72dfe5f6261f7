"""The auditor's symmetry reduction (gemm_ladder.audit.symmetry) finds the renamings the programs admit,
and hides no fault: one that needs two consumers, one that shows only when the ring wraps twice, and
every symmetric single-op deletion of a 2-CTA x 2-consumer protocol are found with it as without it.
CPU only, small protocols (level 9's ring with 2 stages)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gemm_ladder.audit import protocol_from_plan
from gemm_ladder.audit.compiled import CompiledProtocol
from gemm_ladder.audit.explorer import Explorer
from gemm_ladder.audit.levels import protocol_for_level
from gemm_ladder.audit.search import search
from gemm_ladder.audit.symmetry import Symmetry, automorphisms


def _small():
    """2 CTAs x (a producer, 2 consumer warpgroups), 2 stages, 6 K iterations: every stage used 3 times."""
    return protocol_for_level(9, k_iters=6, tiles=1, cluster=2, consumers=2, stages=2)


def _edit_kind(p, kind: str, edit):
    """``p`` with ``edit(program)`` applied to every role of ``kind`` alike (the symmetry kept)."""
    roles = [dataclasses.replace(r, program=edit(list(r.program))) if r.kind == kind else r for r in p.roles]
    return dataclasses.replace(p, roles=roles)


def _found(p, symmetric: bool, max_states: int = 200_000):
    """The violation kinds the first reduced search finds (with or without the symmetry), and the group order."""
    cp = CompiledProtocol(p)
    mode = "bursts" if cp.bursts_why_not is None else "blocks"
    assert cp.blocks_why_not is None, cp.blocks_why_not
    sym = Symmetry(cp) if symmetric else None
    violations, states, _, complete = search(cp, Explorer(cp, False, mode), [], max_states, 20, False, sym)
    assert complete or violations
    return {v.kind for v in violations}, (sym.order if sym else 1), violations


def test_the_renamings_are_found_from_the_programs():
    p = _small()
    group = automorphisms(CompiledProtocol(p))
    assert len(group) == 8  # consumers within each CTA (2 x 2), and the two CTAs
    names = [r.name for r in p.roles]
    swaps = {tuple(names[j] for j in g.roles_src) for g in group}
    assert ("cta1.producer", "cta1.consumer0", "cta1.consumer1",
            "cta0.producer", "cta0.consumer0", "cta0.consumer1") in swaps
    # one consumer edited alone: only the renamings that fix it remain (the other CTA's pair swaps)
    roles = list(p.roles)
    roles[2] = dataclasses.replace(roles[2], program=roles[2].program[:-1])
    assert len(automorphisms(CompiledProtocol(dataclasses.replace(p, roles=roles)))) == 2


def test_the_layouts_kernels_plans_have_the_full_group():
    from gemm_ladder.library.gemm import library_gemm

    for bn in (64, 128):
        doc = json.loads(json.dumps(library_gemm("k", "k", bn).plan(4096, 4096, 4096, "bf16").to_json()))
        assert Symmetry(CompiledProtocol(protocol_from_plan(doc))).order == 8


def test_a_fault_only_two_consumers_show_is_found():
    # the empty barriers count 3 arrivals where 2 CTAs x 2 consumers arrive: the phase completes while
    # the fourth consumer still reads, which only a second consumer can show (one consumer per CTA
    # with the count one short is refused by the count check, not this search)
    p = _small()
    p = dataclasses.replace(p, barriers=[dataclasses.replace(b, arrival_count=3) if b.name == "empty" else b
                                         for b in p.barriers])
    kinds, order, _ = _found(p, True)
    assert order == 8
    assert kinds, "the symmetric search passed an empty barrier that counts 3 of 4 releases"
    assert kinds & _found(p, False)[0]


def _third_fill_early(prog):
    """The producer's wait for stage 0's third fill (empty[0], phase 1) with the parity of phase 0."""
    i = next(i for i, op in enumerate(prog) if op.op == "wait" and op.barrier == "empty" and op.stage == 0
             and op.phase == 1)
    return prog[:i] + [dataclasses.replace(prog[i], parity=1 - prog[i].parity)] + prog[i + 1:]


def test_a_fault_only_the_second_wrap_shows_is_found():
    # every producer waits for stage 0's third fill (the ring wrapping the second time, load #4)
    # with the parity of the phase before: it passes before the consumers released load #2
    p = _edit_kind(_small(), "producer", _third_fill_early)
    kinds, order, violations = _found(p, True)
    assert order == 8
    assert "phase_error" in kinds, kinds
    v = next(v for v in violations if v.kind == "phase_error")
    assert "empty[0]" in v.message and "phase 1" in v.message, v.render()
    assert kinds == _found(p, False)[0]
    # the ring wrapping once (2 uses of each stage) has no such wait: only the second wrap shows it
    once = protocol_for_level(9, k_iters=4, tiles=1, cluster=2, consumers=2, stages=2)
    assert not any(op.op == "wait" and op.barrier == "empty" and op.phase == 1
                   for r in once.roles for op in r.program)


def test_the_trace_is_one_run_in_one_naming():
    # a fault found through canonical states is told as one run: the role the message names is the
    # one whose steps the trace shows reaching it
    p = _edit_kind(_small(), "producer", _third_fill_early)
    _, _, violations = _found(p, True)
    v = next(v for v in violations if v.kind == "phase_error")
    who = v.message.split(" waited")[0]
    assert v.trace[-1].startswith(f"{who}: wait empty[0]"), v.render()


@pytest.mark.parametrize("kind", ["consumer", "producer"])
def test_every_symmetric_single_op_deletion_is_found_alike(kind):
    p = _small()
    n = len(next(r for r in p.roles if r.kind == kind).program)
    differ = []
    checked = found = 0
    for i in range(n):
        q = _edit_kind(p, kind, lambda prog, i=i: prog[:i] + prog[i + 1:])
        cp = CompiledProtocol(q)
        if cp.blocks_why_not is not None:
            continue  # no reduced search (so no symmetry) for this one
        with_sym, order, _ = _found(q, True)
        without, _, _ = _found(q, False)
        checked += 1
        if bool(with_sym) != bool(without):
            differ.append((i, with_sym, without))
        found += bool(without)
    assert checked >= n // 2 and found >= checked // 4, (checked, found)
    assert not differ, differ
