"""Level 9's stream-K tail: the split (design/stream_k.py), its agreement with the kernel's own
arithmetic (stream_k.cuh, compiled for the host), and on a GPU the fixup's results."""

from __future__ import annotations

import subprocess

import pytest
import torch

from gemm_ladder.design.stream_k import DEFAULT_MIN_IDLE, INT32_LIMIT, StreamKTail, plan_tail
from gemm_ladder.gates.correctness import check_correctness
from gemm_ladder.levels import LEVELS
from gemm_ladder.runtime.compiler import KERNEL_ROOT, nvcc_path

from conftest import needs_nvcc

#: (units, clusters, k_tiles): H200-like (66 clusters) and small grids; long and one-tile K.
#: (72, 66, 4) has fewer tail iterations (24) than clusters: plan_tail must leave it whole, since
#: split it would count clusters with empty ranges as contributors (9 counted, 4 arrive).
CASES = [(256, 66, 64), (1024, 66, 128), (72, 66, 16), (72, 66, 1000), (272, 66, 9), (1792, 66, 128),
         (7, 3, 5), (11, 4, 3), (9, 8, 8), (100, 7, 1), (13, 5, 2), (72, 66, 4)]


def split(units, clusters, k_tiles) -> StreamKTail:
    return plan_tail(units, clusters, k_tiles, min_idle=0.0)


@pytest.mark.parametrize("units,clusters,k_tiles", CASES)
def test_every_tail_iteration_is_computed_once_and_whole_units_come_first(units, clusters, k_tiles):
    t = split(units, clusters, k_tiles)
    assert t.first_unit == units - units % clusters or t.first_unit == units
    seen = {}
    for c in range(clusters):
        for s in t.segments(c):
            assert t.first_unit <= s.unit < units and 0 <= s.kb < s.ke <= k_tiles
            for kt in range(s.kb, s.ke):
                seen[s.unit, kt] = seen.get((s.unit, kt), 0) + 1
    assert len(seen) == t.tail_units * k_tiles and set(seen.values()) <= {1}


@pytest.mark.parametrize("units,clusters,k_tiles", CASES)
def test_contributors_are_exactly_the_clusters_that_arrive_in_k_order(units, clusters, k_tiles):
    """The kernel counts arrivals up to `contributors` and reduces slots 0..contributors-1: each must be
    written by exactly one cluster, numbered in K order (else a tile is never stored, or stored early)."""
    t = split(units, clusters, k_tiles)
    by_unit: dict[int, list] = {}
    for c in range(clusters):
        for s in t.segments(c):
            by_unit.setdefault(s.unit, []).append(s)
    for unit, segs in by_unit.items():
        segs.sort(key=lambda s: s.kb)
        assert [s.mine for s in segs] == list(range(len(segs))), unit
        assert {s.contributors for s in segs} == {len(segs)}, unit
    if by_unit:
        assert t.max_contributors == max(len(v) for v in by_unit.values())


def test_the_tail_is_split_only_where_it_pays_and_the_kernel_arithmetic_holds():
    assert plan_tail(256, 66, 64).tail_units == 0  # 4096^3 on the H200: 12% idle, splitting measured slower
    assert plan_tail(1024, 66, 128).tail_units == 34  # 8192^3: 48% idle
    assert plan_tail(64, 66, 64).tail_units == 0  # fewer units than clusters: the grid is cut instead
    assert plan_tail(132, 66, 64).tail_units == 0  # whole waves
    assert plan_tail(72, 66, 4, min_idle=0.0).tail_units == 0  # 24 iterations < 66 clusters: empty ranges
    assert plan_tail(72, 66, 1, min_idle=0.0).tail_units == 0
    assert plan_tail(72, 66, 16, min_idle=0.0).tail_units == 6
    assert plan_tail(256, 66, 64, min_idle=0.0).tail_units == 58
    big_k = INT32_LIMIT // (67 * 34) + 1  # (clusters + 1) x tail iterations would overflow int32
    assert plan_tail(1024, 66, big_k).tail_units == 0
    assert plan_tail(1024, 66, big_k - 2).tail_units == 34
    assert 0 < DEFAULT_MIN_IDLE < 1
    for bad in ((0, 66, 1), (10, 0, 1), (10, 66, 0)):
        with pytest.raises(ValueError):
            plan_tail(*bad)


def test_workspace_is_sized_by_slots_and_empty_without_shared_tiles():
    t = split(256, 66, 64)
    assert t.max_contributors == 3
    assert t.workspace_floats(cluster=2, consumers=2, tile_n=256) == 58 * 2 * 2 * 3 * 64 * 256
    assert t.counters(cluster=2, consumers=2) == 58 * 4
    one = split(100, 7, 1)  # 2 tail units x 1 iteration over 7 clusters: refused (empty ranges)
    assert one.tail_units == 0 and one.workspace_floats(2, 2, 256) == 0 and one.max_contributors == 1
    whole_only = plan_tail(1024, 66, 128, min_idle=2.0)
    assert whole_only.tail_units == 0 and whole_only.workspace_floats(2, 2, 256) == 0


HOST_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "gemm_ladder/stream_k.cuh"
int main(int argc, char** argv) {
  for (int a = 1; a + 3 < argc; a += 4) {
    const int first = atoi(argv[a]), units = atoi(argv[a + 1]), k_tiles = atoi(argv[a + 2]), clusters = atoi(argv[a + 3]);
    const gl::StreamKTail t(first, units - first, k_tiles, clusters);
    for (int c = 0; c < clusters; ++c)
      for (int it = t.begin(c), end = t.begin(c + 1); it < end;) {
        const gl::StreamKTail::Segment s = t.segment(c, it, end);
        printf("%d %d %d %d %d %d %d\n", a, c, s.unit, s.kb, s.ke, s.mine, s.contributors);
        it = s.next;
      }
  }
  return 0;
}
"""


@needs_nvcc
def test_python_mirror_matches_the_kernel_header_compiled_for_the_host(tmp_path):
    src = tmp_path / "segments.cu"
    src.write_text(HOST_PROGRAM)
    exe = tmp_path / "segments"
    subprocess.run([nvcc_path(), "-std=c++17", "-DGL_DTYPE_BF16", f"-I{KERNEL_ROOT / 'include'}", str(src), "-o", str(exe)],
                   check=True, capture_output=True, timeout=300)
    args, expected = [], []
    for i, (units, clusters, k_tiles) in enumerate(CASES):
        t = split(units, clusters, k_tiles)
        args += [str(t.first_unit), str(units), str(k_tiles), str(clusters)]
        a = 1 + 4 * i
        expected += [(a, c, s.unit, s.kb, s.ke, s.mine, s.contributors) for c in range(clusters) for s in t.segments(c)]
    out = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True, timeout=60).stdout
    got = [tuple(int(x) for x in line.split()) for line in out.splitlines()]
    assert got == expected and len(expected) > 100


# ---------------------------------------------------------------------------------------------
gpu = pytest.mark.gpu


def _operands(m, n, k, dtype=torch.bfloat16):
    return torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(n, k, device="cuda", dtype=dtype)


def _poisoned_launch(level, a, b):
    c = torch.full((a.shape[0], b.shape[0]), float("nan"), device="cuda", dtype=a.dtype)
    level.launch(a, b, c)
    return c


@gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("min_idle", [None, 0.0])
def test_level9_tail_is_right_and_repeatable(min_idle):
    """Shapes whose last wave is split (the shipped policy, and every tail), up to 11 contributors per
    tile, a K tail, an odd number of M tiles (rank 1's last tile lies below M), and a tail too short to
    split. Two launches on the same operands into poisoned outputs agree bitwise (the partials are
    added in K order whoever arrives last); a third on fresh operands, right after, is checked
    against the reference too (a launch must not depend on how the one before ended)."""
    level = LEVELS[9] if min_idle is None else LEVELS[9].variant(stream_k_min_idle=min_idle)
    shapes = [(2304, 2048, 1000), (4352, 4096, 520), (2176, 2048, 1000), (2304, 2048, 200), (4096, 4096, 4096),
              (8192, 8192, 8192)]
    split_seen = 0
    for m, n, k in shapes:
        result = check_correctness(level, m, n, k, "bf16", device="cuda", domain=level.domain)
        assert result.status == "pass", (m, n, k, result)
        split_seen += level.stream_k_tail(m, n, k, "bf16", torch.device("cuda")).tail_units > 0
        a, b = _operands(m, n, k)
        first, second = _poisoned_launch(level, a, b), _poisoned_launch(level, a, b)
        a2, b2 = _operands(m, n, k)
        third = _poisoned_launch(level, a2, b2)
        torch.cuda.synchronize()
        assert torch.equal(first, second), (m, n, k)
        ref = a2.double() @ b2.double().T
        err = ((third.double() - ref).norm() / ref.norm()).item()
        assert err < 4e-3, (m, n, k, err)  # bf16 output rounding gives ~1.7e-3
    assert split_seen >= 3, "too few shapes split their tail on this GPU: the test would not exercise the fixup"


@gpu
@pytest.mark.timeout(120)
def test_level9_tail_in_fp16_and_under_graph_capture():
    """fp16 through a split tail; and a CUDA graph captured on a tail shape, which runs the tail
    whole (the workspace is not handed to graphs) and replays right."""
    level = LEVELS[9].variant(stream_k_min_idle=0.0)
    m, n, k = 2304, 2048, 1000
    assert level.stream_k_tail(m, n, k, "fp16", torch.device("cuda")).tail_units > 0
    assert check_correctness(level, m, n, k, "fp16", device="cuda", domain=level.domain).status == "pass"
    a, b = _operands(m, n, k)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    level.launch(a, b, c)  # compiled and loaded outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        level.launch(a, b, c)
    c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T
    assert ((c.double() - ref).norm() / ref.norm()).item() < 4e-3


@gpu
def test_workspaces_are_per_stream_and_zero_their_counters():
    from gemm_ladder.runtime.workspace import MAX_STREAMS, StreamWorkspaces

    ws = StreamWorkspaces()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    p1, c1 = ws.get(s1, 1000, 10)
    p2, c2 = ws.get(s2, 1000, 10)
    assert p1.data_ptr() != p2.data_ptr() and c1.data_ptr() != c2.data_ptr()
    c1.fill_(7)
    torch.cuda.synchronize()
    p1b, c1b = ws.get(s1, 500, 10)  # smaller request: the same buffers, counters zeroed again
    torch.cuda.synchronize()
    assert p1b.data_ptr() == p1.data_ptr() and int(c1b[:10].abs().sum()) == 0
    p1c, _ = ws.get(s1, 5000, 10)  # larger: grown
    assert p1c.numel() >= 5000
    for _ in range(MAX_STREAMS + 2):
        ws.get(torch.cuda.Stream(), 10, 1)
    assert len(ws._buffers) == MAX_STREAMS


def test_the_designer_plans_the_tail_and_refuses_it_without_a_persistent_grid():
    from gemm_ladder.design import PlanRefused, describe, plan_gemm

    l9 = dict(dtype="bf16", tile=(128, 256, 64), stages=4, cluster=2, consumers=2, persistent=True, c_ring=2)
    split_plan = plan_gemm(8192, 8192, 8192, stream_k=True, **l9)
    split = split_plan.schedule
    assert split.stream_k["tail_units"] == 34 and split.stream_k["whole_units"] == 990
    assert any(note.startswith("stream-K tail (stream_k.cuh)") for note in describe(split_plan).schedule_notes)
    whole_plan = plan_gemm(4096, 4096, 4096, stream_k=True, **l9)
    whole = whole_plan.schedule
    assert whole.stream_k["tail_units"] == 0 and any("not split" in note for note in describe(whole_plan).schedule_notes)
    assert plan_gemm(8192, 8192, 8192, **l9).schedule.stream_k is None
    assert LEVELS[9].plan(8192, 8192, 8192, "bf16").schedule.stream_k["tail_units"] == 34
    assert LEVELS[9].variant(stream_k_min_idle=0.0).plan(4096, 4096, 4096, "bf16").schedule.stream_k["tail_units"] == 58
    with pytest.raises(PlanRefused, match="stream-K without persistent"):
        plan_gemm(4096, 4096, 4096, tile=(128, 256, 64), stream_k=True)


def test_max_contributors_counts_every_unit_without_walking_them(monkeypatch):
    """max_contributors (the workspace's slots per tile, and the cost model's contributors) equals the count
    over every tail unit, on random schedules with empty ranges, whole units and one-iteration units; and it
    asks owner() about at most two iterations a cluster, so a large layer's "all" split (here 10^6 tail units)
    costs the route O(clusters), not O(units)."""
    import random

    def every_unit(t):
        return 1 if t.total == 0 else max(t.owner(u * t.k_tiles + t.k_tiles - 1) - t.owner(u * t.k_tiles) + 1
                                          for u in range(t.tail_units))

    rng = random.Random(0)
    for _ in range(3000):
        units, clusters, kt = rng.randint(1, 200), rng.randint(1, 140), rng.randint(1, 70)
        t = StreamKTail(units, clusters, kt, rng.randint(0, units))
        assert t.max_contributors == every_unit(StreamKTail(t.units, t.clusters, t.k_tiles, t.first_unit))
    calls = []
    owner = StreamKTail.owner
    monkeypatch.setattr(StreamKTail, "owner", lambda self, it: calls.append(it) or owner(self, it))
    assert StreamKTail(10**6, 66, 48, 0).max_contributors == 2
    assert len(calls) <= 2 * 66


@pytest.mark.parametrize("clusters", [1, 2, 3, 7, 66, 132])
@pytest.mark.parametrize("k_tiles", [1, 2, 3, 12, 224])
def test_the_device_tail_rule_is_plan_tails(clusters, k_tiles):
    """tail_start_unit (stream_k.cuh's, which the grouped kernel runs on its device-side unit count) with
    tail_idle_min's threshold splits exactly where plan_tail does, over every unit count up to three waves
    and a spread of larger ones."""
    from gemm_ladder.design.stream_k import tail_idle_min, tail_start_unit

    idle = tail_idle_min(clusters)
    for units in [*range(1, 3 * clusters + 3), 977, 2048, 4099]:
        assert tail_start_unit(units, clusters, k_tiles, idle) == plan_tail(units, clusters, k_tiles).first_unit


def test_tail_idle_min_is_the_fraction_test_in_clusters():
    """clusters - tail > tail_idle_min(clusters) exactly when (clusters - tail) / clusters > min_idle."""
    from gemm_ladder.design.stream_k import tail_idle_min

    for clusters in range(1, 200):
        for idle in range(clusters + 1):
            for frac in (0.0, 0.25, 0.4, 0.5, 0.75):
                assert (idle > tail_idle_min(clusters, frac)) == (idle / clusters > frac)
    with pytest.raises(ValueError):
        tail_idle_min(0)
    with pytest.raises(ValueError):
        tail_idle_min(4, 1.0)


@pytest.mark.parametrize("clusters", [2, 5, 66, 132])
@pytest.mark.parametrize("k_tiles", [1, 3, 12, 224])
def test_the_grouped_tails_piece_slots_are_distinct_consecutive_and_bounded(clusters, k_tiles):
    """The grouped kernel's workspace layout (piece of tail unit u by cluster c at slot u + c): no two
    pieces share a slot, each unit's contributors take consecutive slots in K order (what
    FragmentPartials reads), and every slot is below 2 x clusters (library/grouped.py tail_workspace)."""
    from gemm_ladder.design.stream_k import tail_piece_slots

    for units in range(clusters + 1, 3 * clusters + 2):
        tail = plan_tail(units, clusters, k_tiles)
        if not tail.tail_units:
            continue
        slots = tail_piece_slots(tail)
        assert len(set(slots.values())) == len(slots)
        assert max(slots.values()) < 2 * clusters
        by_unit = {}
        for (unit, c), slot in slots.items():
            by_unit.setdefault(unit, []).append((c, slot))
        for pieces in by_unit.values():
            pieces.sort()
            cs, ss = [c for c, _ in pieces], [s for _, s in pieces]
            assert cs == list(range(cs[0], cs[0] + len(cs))) and ss == list(range(ss[0], ss[0] + len(ss)))
