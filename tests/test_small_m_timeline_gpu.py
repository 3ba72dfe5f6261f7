"""The small-M kernel's timeline build on the GPU (marker gpu; skipped without one, saying why).

The stamps must not change the result: the timeline build's output equals the shipped build's bitwise
(same grid, same K order of the partials), each launch into a NaN-poisoned output, checked against the
float64 reference under the gate's bounds. Its stamps must describe the launch: per CTA in the
order the kernel passes the points, the segment and hand-in counts the host's schedule gives, one
reduction per split unit, and a span inside the launch's event-timed duration
(bench/small_m_timeline.py's trace and analyse). A two-CTA build (``ctas_per_sm=2``) must be resident
twice on every SM (the occupancy API) and pass the same checks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from gemm_ladder.contract import cublas, reference
from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands
from gemm_ladder.gpu import l2_bytes
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.small_m import SmallMGemm, bucket

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import small_m_timeline as tl  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

#: (M, N, K, splits, stages, CTAs per SM): the rule's grid, classic split-K, tails in M, N and K, a half
#: ring, stream-K over more units than CTAs, two CTAs per SM (the rule's grid and split-K).
CASES = ((1, 4096, 4096, None, None, 1), (100, 1000, 520, 3, None, 1), (16, 2056, 4104, None, None, 1),
         (256, 1000, 520, 2, None, 1), (7, 4096, 4096, None, 6, 1), (16, 28672, 1024, None, None, 1),
         (16, 4096, 4096, None, None, 2), (50, 1000, 520, 3, None, 2))


def _launch(kernel: SmallMGemm, x, w, splits) -> torch.Tensor:
    c = torch.full((x.shape[0], w.shape[0]), float("nan"), dtype=x.dtype, device=x.device)
    kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, splits=splits)
    torch.cuda.synchronize()
    return c


@pytest.mark.parametrize("m,n,k,splits,stages,per_sm", CASES)
def test_the_timeline_build_computes_what_the_shipped_one_does(m, n, k, splits, stages, per_sm):
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=int(torch.randint(0, 2**31 - 1, ()).item()))
    bn = bucket(m)
    shipped = _launch(SmallMGemm(bn, stages=stages, ctas_per_sm=per_sm), x, w, splits)
    traced = _launch(SmallMGemm(bn, stages=stages, timeline=True, ctas_per_sm=per_sm), x, w, splits)
    assert not torch.isnan(traced).any()
    assert torch.equal(shipped, traced), "the stamps changed the result"
    ref = reference(x, w)
    base = ((cublas(x, w).double() - ref).norm() / ref.norm()).item()
    err = ((traced.double() - ref).norm() / ref.norm()).item()
    assert err <= error_bound(base, "bf16")
    assert (traced.double() - ref).abs().max().item() <= absolute_cap(x, w, ref.abs().max().item(), "bf16")


@pytest.mark.parametrize("m,n,k,splits,stages,per_sm", CASES)
def test_the_stamps_describe_the_launch(m, n, k, splits, stages, per_sm):
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=int(torch.randint(0, 2**31 - 1, ()).item()))
    kernel = SmallMGemm(bucket(m), stages=stages, timeline=True, ctas_per_sm=per_sm)
    c = torch.full((m, n), float("nan"), dtype=x.dtype, device=x.device)
    buf = torch.empty(2 * l2_bytes(x.device), dtype=torch.uint8, device=x.device)
    slots = tl.timeline_slots()
    readings = tl.trace(kernel, x, w, c, splits, buf, ["write", "read"], 2, slots)  # asserts the segment counts
    assert len(readings) == 4 and not torch.isnan(c).any()
    resident = kernel.loaded("bf16", x.device).max_active_clusters(x.device)
    sched = kernel.schedule(m, n, k, kernel.ctas(m, n, k, resident, splits))
    split_units = {s.unit for i in range(sched.clusters) for s in sched.segments(i) if s.contributors > 1}
    for r in readings:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        assert resident == per_sm * sms, f"{resident} CTAs resident on {sms} SMs, expected {per_sm} per SM"
        assert r["ctas"] == sched.clusters and r["ctas_per_sm_max"] <= per_sm
        assert 0 < r["span_us"] and r["outside_us"] > -1.0, "a span longer than its launch: clocks misread"
        assert r["stream_window_us"] > 0 and r["weight_gbs_window"] > 0
        assert r["ctas_reducing"] <= len(split_units)
    raw = readings[0]["raw"]
    s, ns = raw["slots"], raw["ns"]
    order = ("Entry", "Setup", "Ready", "FirstFull", "LoopEnd", "Exit0")
    for i, row in enumerate(ns):
        stamps = [row[s[p]] for p in order]
        assert stamps == sorted(stamps) and stamps[0] > 0, f"CTA {i}: stamps out of order {dict(zip(order, stamps))}"
        assert row[s["Setup"]] <= row[s["FirstLoad"]] <= row[s["LastLoad"]] and row[s["Exit1"]] > 0
        segs = sched.segments(i)
        assert row[s["HandIns"]] == sum(seg.contributors > 1 for seg in segs)
        if len(segs) == 1 and row[s["HandIns"]]:  # one segment: loop end, hand-in, reduction, store in turn
            assert row[s["LoopEnd"]] <= row[s["HandIn"]] <= row[s["Exit0"]]
            if row[s["Reductions"]]:
                assert row[s["HandIn"]] <= row[s["ReduceEnd"]] <= row[s["StoreEnd"]] <= row[s["Exit0"]]
    assert sum(row[s["Reductions"]] for row in ns) == len(split_units), "each split unit is reduced exactly once"
    assert raw["iters"] == [sched.begin(i + 1) - sched.begin(i) for i in range(sched.clusters)]
