"""The general kernel's timeline build on the GPU (sm90_gemm.cu's GL_TIMELINE): its output bit for bit
the shipped build's (the stamps write only their own arrays), and its stamps what the launch's schedule
says (each CTA's whole tiles, stream-K segments and hand-ins counted by consumer 0; every stamped point in
order from entry to exit), read back as bench/experiments/gemm_timeline.py reads them.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_gemm_timeline_gpu.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from gemm_ladder.design.problem import ceil_div
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "experiments"))
import gemm_timeline as bench  # noqa: E402
from l9_timeline import read_global, zero_global  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("cfg,split,shape", [
    (dict(bn=128, cluster=1), "all", (512, 1024, 4096)),  # every unit split: hand-ins and reductions
    (dict(bn=128), "tail", (1576, 1024, 4096)),  # whole tiles and a split tail, 2-CTA clusters
    (dict(bn=64, bm=64, cluster=1), "none", (4096, 1024, 512)),  # about 8 whole tiles per CTA
    (dict(bn=64, bm=64, cluster=1), "none", (16384, 2048, 128)),  # about 62 per CTA: past the 35 stamped ones
    (dict(bn=256, bm=64, pingpong=True, cluster=1), "none", (2048, 2048, 256)),
    (dict(bn=128, bm=64, pingpong=True, cluster=1), "none", (2048, 2048, 512)),  # the wait clock under ping-pong
    (dict(bn=128, pingpong=True, cluster=1), "none", (2000, 2048, 512)),  # the 128-row ping-pong tile, an M tail
    (dict(bn=192, bm=256, c_from_registers=True, cluster=1), "none", (1576, 3072, 1024)),  # the 256-row tile, one wave
])
def test_timeline_build_equals_the_shipped_build_and_stamps_the_schedule(cfg, split, shape):
    m, n, k = shape
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=7)
    a, b = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
    shipped, tl = library_gemm("k", "k", **cfg), library_gemm("k", "k", timeline=True, **cfg)
    outs = {}
    for name, kern in (("shipped", shipped), ("timeline", tl)):
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        if name == "timeline":
            for arr in ("gl_timeline_ns", "gl_timeline_clk"):
                zero_global(kern.loaded("bf16", x.device), arr)
        kern.bind(a, b, c, split=split)()
        torch.cuda.synchronize()
        outs[name] = c
    assert torch.equal(outs["shipped"].view(torch.int16), outs["timeline"].view(torch.int16))
    assert not outs["timeline"].isnan().any()
    loaded = tl.loaded("bf16", x.device)
    slots, tile0, tiles, width = bench.timeline_slots()
    _, whole, segments, hand_ins = bench.schedule_counts(tl, m, n, k, split, loaded.max_active_clusters(x.device))
    ns = read_global(loaded, "gl_timeline_ns", (bench.TIMELINE_CTAS, width), torch.int64)[:len(whole)].tolist()
    clk = read_global(loaded, "gl_timeline_clk", (bench.TIMELINE_CTAS, width), torch.int64)[:len(whole)].tolist()
    out = bench.analyse(ns, slots=slots, tile0=tile0, tiles=tiles, whole=whole, segments=segments, hand_ins=hand_ins,
                        event_us=None, pingpong=tl.pingpong, clk=clk,
                        k_tiles=ceil_div(k, tl.tile[2]))  # raises on a count the schedule does not give
    assert 0 < out["span_us"] < 10_000
    for r in ns:
        assert r[slots["Entry"]] <= r[slots["Setup"]] <= r[slots["WholeEnd"]] <= r[slots["TailEnd"]] <= r[slots["Exit0"]] \
            <= r[slots["Exit"]]
        sums = sum(r[slots[k]] for k in ("TailLoopSum", "HandInSum", "ReduceSum", "TailStoreSum"))
        assert sums <= r[slots["TailEnd"]] - r[slots["WholeEnd"]]
    if split == "all":
        assert sum(r[slots["Reductions"]] for r in ns) > 0 and out["reduce_us"]["max"] > 0
        assert out["tail_loop_us"]["min"] > 0 and out["hand_in_us"]["min"] > 0
    if max(whole) > tiles:
        assert out["unstamped_tiles_us"]["min"] > 0
    if tl.pingpong:
        assert out["turn_wait_us"]["max"] > 0
    # consumer 0's waits for data: stamped wherever it has whole tiles, within its loops' time (up to the
    # cycles-to-ns conversion's error)
    assert all(ns[i][slots["FullWaitClk"]] > 0 for i, w in enumerate(whole) if w)
    if out["full_wait_share"]:
        assert 0 < out["full_wait_share"]["max"] < 1.02
