"""The stream-K tail's distributed fixup (split "tail_spread"; kernels/include/gemm_ladder/stream_k_spread.cuh)
on the CPU: the designer's participants and shares, the kernel's arithmetic compiled for the host against
them, the protocol audit (and that it catches broken protocols), the builds (compiled, no spills, the
ladder's and the plain library builds untouched), the launch's argument checks, the cost model, the
route, explain and precompile."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import subprocess

import pytest
import torch

from gemm_ladder.audit.stream_k_spread import Step, check, programs
from gemm_ladder.design.stream_k import StreamKTail, plan_tail, spread_share
from gemm_ladder.dispatch.heuristic import CostModel, fit, load_table, rank, work
from gemm_ladder.library.gemm import LAUNCH_SPLITS, SPLITS, SPREAD_SPLITS, library_gemm, split_schedule
from gemm_ladder.runtime.compiler import KERNEL_ROOT, cuobjdump_path, nvcc_path

from conftest import needs_nvcc


def _schedules():
    """Split schedules: level 9's tail at many (units, clusters, K iterations), including the issue's
    4097 x 4096 x 4096 (272 units on 66 clusters, 64 K iterations), tails with 1-2 contributors per unit
    (small K) and many (one tail unit), and "all" splits (every unit split)."""
    out = [plan_tail(272, 66, 64), plan_tail(272, 66, 2), plan_tail(67, 66, 64), plan_tail(67, 66, 1),
           plan_tail(1088, 66, 64), plan_tail(133, 66, 7)]
    for units, clusters, k_tiles in itertools.product((9, 17, 40, 131), (3, 8, 66), (1, 2, 3, 5, 16, 64)):
        t = plan_tail(units, clusters, k_tiles, min_idle=0.0)
        if t.tail_units:
            out.append(t)
        total = units * k_tiles
        for g in {clusters, min(clusters, total)}:
            if total >= g:
                out.append(StreamKTail(units=units, clusters=g, k_tiles=k_tiles, first_unit=0))
    assert sum(1 for t in out if t.tail_units and t.max_contributors > 1) > 70
    return out


SCHEDULES = _schedules()


def test_participants_are_the_contributors_whose_range_ends_with_the_unit():
    """The kernel's formula (StreamKTail.participants: all contributors but the last when its range goes
    on) equals the participants read off the segments (a segment that ends its cluster's range); they
    are the first p contributors in K order, at least one, and all but at most one contributor."""
    seen = 0
    for t in SCHEDULES:
        for u in t.spread_units():
            n, p = len(u.contributors), len(u.participants)
            assert u.participants == u.contributors[:p], u
            assert p == t.participants(u.unit, n), (t, u)
            assert 1 <= p and n - 1 <= p <= n
            assert list(u.contributors) == list(range(u.contributors[0], u.contributors[0] + n))  # K order
            seen += 1
    assert seen > 500


def test_the_issues_shape_spreads_each_tile_over_eight_or_nine_participants():
    t = split_schedule(272, 66, 64, "tail_spread")
    assert t == split_schedule(272, 66, 64, "tail") and t.first_unit == 264
    units = t.spread_units()
    assert len(units) == 8 and all(len(u.contributors) == 9 for u in units)
    # units 267 and 271 end where a range ends (cluster 32's at 256 = begin(33), cluster 65's at the tail's
    # end): their last contributor participates too
    assert [len(u.participants) for u in units] == [8, 8, 8, 9, 8, 8, 8, 9]
    assert t.begin(33) == 4 * 64 and t.begin(66) == 8 * 64
    j = t.spread_json(256)
    assert j == {"split_units": 8, "contributors": [9, 9], "participants": [8, 9],
                 "most_float4s_per_participant": 512, "float4s_per_fragment": 4096}
    assert plan_tail(256, 66, 64).spread_json(256) == {"split_units": 0}  # 4096^3: no tail split


@pytest.mark.parametrize("bn", [64, 128, 256])
def test_shares_cover_a_fragment_once_and_differ_by_at_most_one_float4(bn):
    f4 = 16 * bn
    for p in range(1, 80):
        shares = [spread_share(i, p, f4) for i in range(p)]
        assert shares[0][0] == 0 and shares[-1][1] == f4
        assert all(a[1] == b[0] for a, b in zip(shares, shares[1:]))
        sizes = [hi - lo for lo, hi in shares]
        assert max(sizes) - min(sizes) <= 1
    for bad in ((-1, 3), (3, 3), (0, 0)):
        with pytest.raises(ValueError, match="0 <= share < shares"):
            spread_share(*bad, f4)


HOST_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "gemm_ladder/stream_k_spread.cuh"
int main(int argc, char** argv) {  // per split segment: unit, cluster, mine, contributors, participants, range end
  for (int a = 1; a + 3 < argc; a += 4) {
    const int first = atoi(argv[a]), units = atoi(argv[a + 1]), k_tiles = atoi(argv[a + 2]), g = atoi(argv[a + 3]);
    const gl::StreamKTail t(first, units - first, k_tiles, g);
    for (int c = 0; c < g; ++c)
      for (int it = t.begin(c), end = t.begin(c + 1); it < end;) {
        const gl::StreamKTail::Segment s = t.segment(c, it, end);
        if (s.contributors > 1)
          printf("%d %d %d %d %d %d %d\n", a, s.unit, c, s.mine, s.contributors, gl::spread_participants(t, s),
                 s.next == end);
        it = s.next;
      }
  }
  return 0;
}
"""


@needs_nvcc
def test_the_kernels_participants_are_the_designers(tmp_path):
    """stream_k_spread.cuh's spread_participants and the kernel's test of a range's end (seg.next == end),
    compiled for the host, against design/stream_k.py on every schedule above."""
    src, exe = tmp_path / "spread.cu", tmp_path / "spread"
    src.write_text(HOST_PROGRAM)
    subprocess.run([nvcc_path(), "-std=c++17", "-DGL_DTYPE_BF16", f"-I{KERNEL_ROOT / 'include'}", str(src), "-o",
                    str(exe)], check=True, capture_output=True, timeout=300)
    args, expected = [], []
    for i, t in enumerate(s for s in SCHEDULES if s.tail_units):
        args += [str(t.first_unit), str(t.units), str(t.k_tiles), str(t.clusters)]
        for c in range(t.clusters):
            segs = t.segments(c)
            for j, s in enumerate(segs):
                if s.contributors > 1:
                    expected.append((1 + 4 * i, s.unit, c, s.mine, s.contributors,
                                     t.participants(s.unit, s.contributors), int(j == len(segs) - 1)))
    out = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True, timeout=60).stdout
    got = [tuple(int(x) for x in line.split()) for line in out.splitlines()]
    assert got == expected and len(got) > 1000
    # a participant's share index is its slot: the range-ending contributors are slots 0..p-1
    assert all(mine < p for _, _, _, mine, _, p, ends in got if ends)
    assert all(mine == n - 1 and p == n - 1 for _, _, _, mine, n, p, ends in got if not ends)


# --- the protocol audit ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bn", [64, 256])
def test_the_protocol_is_live_safe_exact_and_ordered_on_every_schedule(bn):
    for t in SCHEDULES:
        assert check(t, bn) == [], t


def _mutate(progs, fn):
    return [[s2 for s in prog for s2 in fn(s)] for prog in progs]


def test_the_audit_catches_broken_protocols():
    t = plan_tail(272, 66, 64)
    base = programs(t, 256)
    # participants that wait before handing in: each waits on the others' hand-ins, forever
    swapped = []
    for prog in base:
        prog = list(prog)
        for i in range(len(prog) - 1):
            if prog[i].kind == "hand_in" and prog[i + 1].kind == "wait":
                prog[i], prog[i + 1] = prog[i + 1], prog[i]
        swapped.append(prog)
    assert any("waits forever" in p for p in check(t, 256, swapped))
    # a wait that passes one hand-in early: a read before the last partial landed
    early = _mutate(base, lambda s: [dataclasses.replace(s, need=s.need - 1)] if s.kind == "wait" else [s])
    assert any("may read unit" in p for p in check(t, 256, early))
    # every contributor counted as a participant (the one whose range goes on never reduces its share): a gap
    wide = []
    for prog in base:
        out, slot, need = [], None, None
        for s in prog:
            if s.kind == "hand_in":
                slot = s.slot
            elif s.kind == "wait":
                need = s.need
            elif s.kind == "reduce":
                lo, hi = spread_share(slot, need, 16 * 256)
                s = dataclasses.replace(s, lo=lo, hi=hi)
            out.append(s)
        wide.append(out)
    assert any("not once" in p for p in check(t, 256, wide))
    # slots added in another order than K's: not bitwise what split "tail" stores
    reordered = _mutate(base, lambda s: [dataclasses.replace(s, order=s.order[::-1])] if s.kind == "reduce" else [s])
    assert any("not K order" in p for p in check(t, 256, reordered))
    # a lost hand-in: its unit's participants never pass, and the audit names the missing slot
    lost = [prog[1:] if prog and prog[0].kind == "hand_in" and i == 8 else prog for i, prog in enumerate(base)]
    problems = check(t, 256, lost)
    assert any("waits forever" in p for p in problems) and any("slots handed in" in p for p in problems)
    # a reduce without its wait
    nowait = _mutate(base, lambda s: [] if s.kind == "wait" else [s])
    assert any("without waiting" in p for p in check(t, 256, nowait))


def test_programs_follow_the_kernels_tail_loop():
    """Cluster 8 of the issue's shape: the last contributor of unit 264 (its range goes on) hands in and
    leaves, then participates in unit 265 as its first contributor."""
    t = plan_tail(272, 66, 64)
    prog = programs(t, 256)[8]
    assert [s.kind for s in prog] == ["hand_in", "hand_in", "wait", "reduce"]
    assert (prog[0].unit, prog[0].slot) == (264, 8) and (prog[1].unit, prog[1].slot) == (265, 0)
    assert prog[2] == Step("wait", 265, need=9) and (prog[3].lo, prog[3].hi) == spread_share(0, 8, 4096)


# --- launch arguments, the cost model, the route, explain, precompile -----------------------------------------


def test_split_names_and_the_sibling_build():
    for spread, base in SPREAD_SPLITS.items():
        assert spread in LAUNCH_SPLITS and spread not in SPLITS  # the swiglu kernel has no spread build
        assert split_schedule(272, 66, 64, spread) == split_schedule(272, 66, 64, base)
        assert split_schedule(30, 66, 64, spread) == split_schedule(30, 66, 64, base)
    with pytest.raises(ValueError, match="tail_spread, all_spread"):
        split_schedule(272, 66, 64, "spread")
    k = library_gemm("k", "k", 128)
    s = k.spread_build()
    assert s is library_gemm("k", "k", 128, sk_spread=True) and s.spread_build() is s
    assert s.name == "sm90_gemm_kk_bn128_spread" and s.build_defines("bf16")["GL_SK_SPREAD"] == 1
    assert "GL_SK_SPREAD" not in k.build_defines("bf16")
    assert s.build_defines("bf16").keys() - {"GL_SK_SPREAD"} == k.build_defines("bf16").keys()
    r = library_gemm("mn", "k", 64, c_from_registers=True, out_fp32=True).spread_build()
    assert (r.c_from_registers, r.out_fp32, r.sk_spread, r.tile[1]) == (True, True, True, 64)
    assert k.splits == ("none", "tail", "all", "tail_spread", "all_spread")


def test_the_dispatchers_split_names_are_the_librarys():
    """dispatch/heuristic.py keeps its own copy of the split names (it imports no torch-heavy module):
    the same policies, in the same order, and the same spread-to-schedule map as library/gemm.py's."""
    from gemm_ladder.dispatch import heuristic
    from gemm_ladder.library.gemm import RANKED_SPLITS

    assert heuristic.SPREAD == SPREAD_SPLITS and heuristic.SPLITS == RANKED_SPLITS


def test_swiglu_refuses_the_spread_split():
    from gemm_ladder.library import swiglu

    assert not set(SPREAD_SPLITS) & set(swiglu.SPLITS)


def test_the_cost_model_prices_tail_spread_only_with_its_parameter():
    table = load_table()
    w_tail, w_spread = work(4097, 4096, 4096, 256, "tail", 66), work(4097, 4096, 4096, 256, "tail_spread", 66)
    assert dataclasses.replace(w_spread, split="tail") == w_tail and w_tail.splits
    if table.spread_fixup_us is None:
        assert not table.prices("tail_spread")
        with pytest.raises(KeyError, match="spread_fixup_us"):
            table.predict_us(w_spread)
    priced = dataclasses.replace(table, spread_fixup_us=1.0)
    assert priced.prices("tail_spread")
    assert priced.predict_us(w_tail) - priced.predict_us(w_spread) == pytest.approx(table.fixup_us - 1.0)
    back = CostModel.from_json(json.loads(json.dumps(priced.to_json())))
    assert back == priced
    assert "spread_fixup_us" not in dataclasses.replace(table, spread_fixup_us=None).to_json()
    bad = priced.to_json() | {"spread_fixup_us": -1}
    with pytest.raises(ValueError, match="finite number >= 0"):
        CostModel.from_json(bad)
    ranked = rank(priced, 4097, 4096, 4096, 66, [(256, "tail"), (256, "tail_spread")])
    assert ranked[0].work.split == "tail_spread"


def test_fit_recovers_the_spread_fixup_and_leaves_it_out_without_samples():
    truth = CostModel({256: 0.6, 128: 0.33}, {256: 0.9, 128: 0.5}, 7.0, 6.0, "truth", spread_fixup_us=2.5)
    shapes = [(m, n, k) for m in (512, 1024, 4097, 4096) for n in (1024, 2048, 4096) for k in (1024, 4096)]
    splits = ("none", "tail", "all", "tail_spread", "all_spread")
    samples = [(w, truth.predict_us(w)) for s in shapes for bn in (256, 128) for sp in splits
               for w in [work(*s, bn, sp, 66)]]
    got = fit(samples, "tuned on test")
    assert got.spread_fixup_us == pytest.approx(2.5, rel=1e-6) and got.fixup_us == pytest.approx(7.0, rel=1e-6)
    assert got.fixed_us == pytest.approx(6.0, rel=1e-6) and "spread_fixup_us" in got.rules
    without = fit([(w, us) for w, us in samples if w.split not in SPREAD_SPLITS], "tuned on test")
    assert without.spread_fixup_us is None and not without.prices("tail_spread") and not without.prices("all_spread")
    assert "spread_fixup_us" not in without.rules


def test_route_and_explain_take_tail_spread_where_the_table_prices_it_cheaper(monkeypatch):
    from test_dispatch import FakeGeneral, meta

    import gemm_ladder
    from gemm_ladder import api, dispatch
    from gemm_ladder.dispatch import kernels as K

    @dataclasses.dataclass(frozen=True)
    class SpreadFake(FakeGeneral):
        splits: tuple[str, ...] = ("none", "tail", "all", "tail_spread", "all_spread")
        spread: bool = False

        @property
        def name(self):
            return super().name + (" spread" if self.spread else "")

        def spread_build(self):
            return dataclasses.replace(self, spread=True)

    monkeypatch.setattr(K, "general", lambda am, bm, bn: SpreadFake(am, bm, bn))
    monkeypatch.setattr(K, "general_from_registers", lambda *a, **kw: None)
    monkeypatch.setattr(K, "general_bns", lambda: (256, 128))
    monkeypatch.setattr(K, "small_m", lambda m, bn=None: None)
    base = load_table()
    unpriced = dataclasses.replace(base, spread_fixup_us=None)
    priced = dataclasses.replace(base, spread_fixup_us=0.0, provenance="tuned on test (spread stand-in)")
    try:
        dispatch.clear_cache()
        monkeypatch.setattr(dispatch, "cost_model", lambda: unpriced)
        monkeypatch.setattr(api, "decide", lambda *a, **kw: dispatch.decide(*a, model=unpriced, **kw))
        e = gemm_ladder.explain(meta(4097, 4096), meta(4096, 4096).T)
        assert e.split not in SPREAD_SPLITS and all(c["split"] not in SPREAD_SPLITS for c in e.heuristic["candidates"])
        assert e.heuristic["unpriced_splits"] == ["tail_spread", "all_spread"]
        assert "split tail_spread, all_spread: built on demand" in str(e)
        dispatch.clear_cache()
        monkeypatch.setattr(dispatch, "cost_model", lambda: priced)
        monkeypatch.setattr(api, "decide", lambda *a, **kw: dispatch.decide(*a, model=priced, **kw))
        # Priced cheaper, yet not ranked while the route leaves the spinning splits alone (ROUTE_SPREAD off)
        assert not K.ROUTE_SPREAD
        e = gemm_ladder.explain(meta(4097, 4096), meta(4096, 4096).T)
        assert e.split not in SPREAD_SPLITS and all(c["split"] not in SPREAD_SPLITS for c in e.heuristic["candidates"])
        monkeypatch.setattr(K, "ROUTE_SPREAD", True)
        dispatch.clear_cache()
        e = gemm_ladder.explain(meta(4097, 4096), meta(4096, 4096).T)
        assert e.split == "tail_spread" and e.kernel["name"].endswith(" spread")
        assert any(x.startswith(e.kernel["name"]) for x in e.launches)
        sp = e.heuristic["spread"]
        assert sp["split_units"] > 0 and sp["participants"][0] >= 1 and "participants" in sp["rule"]
        assert sp["rule"].startswith("the last partial wave") and "unpriced_splits" not in e.heuristic
        text = str(e)
        assert "spread:" in text and "participants" in text and "split tail_spread" in text
        json.dumps(e.to_dict())
    finally:
        dispatch.clear_cache()


def test_precompile_builds_the_spread_siblings_only_where_the_table_lets_them_win(monkeypatch):
    """No spread builds without spread_fixup_us, nor with one at least fixup_us (the spread splits are then
    always predicted slower than their base split: CostModel.may_win); with a cheaper one, a spread
    sibling beside every general build."""
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch.precompile import library_builds

    base = load_table()
    monkeypatch.setattr(dispatch, "cost_model", lambda: dataclasses.replace(base, spread_fixup_us=None))
    plain = [b.label for b in library_builds(("bf16",), ("large", "unaligned", "fp32_out"))]
    assert not any("spread" in label for label in plain)
    from gemm_ladder.dispatch import kernels as K

    monkeypatch.setattr(K, "ROUTE_SPREAD", True)  # the route may rank them (off by default: no spread builds)
    dearer = dataclasses.replace(base, spread_fixup_us=base.fixup_us)
    assert dearer.prices("tail_spread") and not dearer.may_win("tail_spread") and dearer.may_win("tail")
    monkeypatch.setattr(dispatch, "cost_model", lambda: dearer)
    assert [b.label for b in library_builds(("bf16",), ("large", "unaligned", "fp32_out"))] == plain
    cheaper = dataclasses.replace(base, spread_fixup_us=base.fixup_us - 1.0)
    assert cheaper.may_win("tail_spread") and cheaper.may_win("all_spread")
    monkeypatch.setattr(dispatch, "cost_model", lambda: dataclasses.replace(base, spread_fixup_us=1.0))
    labels = [b.label for b in library_builds(("bf16",), ("large", "unaligned", "fp32_out"))]
    spread = [label for label in labels if " spread " in label]
    general = [label for label in plain if label.startswith("general")]
    assert len(spread) == len(general) and set(labels) == set(plain) | set(spread)
    for label in general:
        cut = label.rindex(" ")
        assert f"{label[:cut]} spread{label[cut:]}" in spread


# --- the builds ----------------------------------------------------------------------------------------------


def _local_memory(cubin) -> int:
    sass = subprocess.run([cuobjdump_path(), "--dump-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    return len(re.findall(r"\b(LDL|STL)\b", sass))


@needs_nvcc
@pytest.mark.parametrize("bn,creg,fp32", [(64, False, False), (256, False, False), (128, True, False), (256, True, True)])
def test_spread_builds_compile_without_spills(bn, creg, fp32):
    """Each store build of the spread kernel compiles with no stack, no spills and no local memory (the
    consumers run at 232 registers: a spill would be a slow kernel, and a dynamic index into the
    accumulators would show as local memory)."""
    b = library_gemm("k", "k", bn, c_from_registers=creg, out_fp32=fp32, sk_spread=True).build("bf16")
    log = (b.cubin.parent / "ptxas.log").read_text()
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in log, log
    assert _local_memory(b.cubin) == 0
    sass = subprocess.run([cuobjdump_path(), "--dump-sass", str(b.cubin)], capture_output=True, text=True,
                          check=True).stdout
    assert "LDG.E.STRONG.GPU" in sass  # the acquire spin on the counter (the partials' loads are .128)


@needs_nvcc
def test_the_spread_build_with_a_fused_epilogue_compiles_without_spills():
    from gemm_ladder.library.epilogue import linear_epilogue

    ep = linear_epilogue(bias=True, activation="gelu_tanh", residual=True, alpha=True)
    dts = {"gl_bias_": torch.bfloat16, "gl_residual_": torch.bfloat16}
    src = ep.source(dts, False, wide=False, pairs={n: (True, False) for n in dts})
    for creg in (False, True):
        b = library_gemm("k", "k", 256, c_from_registers=creg, sk_spread=True).build("bf16", epilogue_source=src)
        log = (b.cubin.parent / "ptxas.log").read_text()
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in log, log
        assert _local_memory(b.cubin) == 0


@needs_nvcc
def test_the_plain_build_is_untouched_by_the_spread_code():
    """GL_SK_SPREAD is set only for the spread build: the plain build has no acquire spin (its SASS against
    main's is compared by tools/sass_fingerprint.py and /work/notes/lib_fp.py, not here)."""
    b = library_gemm("k", "k", 256).build("bf16")
    sass = subprocess.run([cuobjdump_path(), "--dump-sass", str(b.cubin)], capture_output=True, text=True,
                          check=True).stdout
    assert "LDG.E.STRONG.GPU" not in sass and "LDG.E.128.STRONG.GPU" in sass  # its partials' loads, no spin


def test_the_designer_describes_contributors_and_participants():
    from gemm_ladder.design.describer import describe
    from gemm_ladder.design.plan import plan_gemm

    l9 = dict(tile=(128, 256, 64), stages=4, cluster=2, consumers=2, persistent=True, producer_warpgroup=True,
              c_ring=2, stream_k=True)
    notes = describe(plan_gemm(4097, 4096, 4096, "bf16", **l9)).schedule_notes
    spread = [n for n in notes if n.startswith("distributed fixup")]
    assert len(spread) == 1 and "8 split units has 9-9 contributors, of which 8-9 participate" in spread[0]
    assert "at most 512 of its 4096 float4s" in spread[0]
    notes = describe(plan_gemm(4096, 4096, 4096, "bf16", **l9)).schedule_notes  # no split tail: no note
    assert not any(n.startswith("distributed fixup") for n in notes)


def test_the_route_leaves_the_spinning_splits_alone_by_default(monkeypatch):
    """ROUTE_SPREAD off (the shipped setting: the spread splits' spin needs a co-residency only a
    cooperative launch would guarantee): even a table pricing them cheaper builds no spread sibling and
    ranks no spread split."""
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.dispatch.precompile import library_builds

    assert K.ROUTE_SPREAD is False
    base = load_table()
    cheaper = dataclasses.replace(base, spread_fixup_us=0.0)
    monkeypatch.setattr(dispatch, "cost_model", lambda: cheaper)
    assert cheaper.may_win("tail_spread")
    assert not any("spread" in b.label for b in library_builds(("bf16",), ("large", "unaligned", "fp32_out")))
