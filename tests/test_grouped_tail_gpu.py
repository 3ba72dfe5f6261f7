"""The grouped kernel's stream-K tail (library/grouped.py tail=True) on the GPU.

The device counts the units from the group sizes and splits the last partial wave by K when plan_tail's
rule says so (stream_k.cuh tail_start_unit). Each case is built so that it does split on this GPU (its
clusters read from the occupancy API, the rule's Python mirror asked first), and checked against float64
per group (tests/test_grouped_gpu.py's bound), rows past offs[-1] left NaN, bit for bit over repeats (the
last contributor adds the partials in K order whoever arrives last); beside it, the same build not
splitting (under CUDA-graph capture the launch passes no workspace) must give the whole-unit build's bits.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_grouped_tail_gpu.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from test_grouped_gpu import DTYPES, _check, _offs, _seed

from gemm_ladder.design.stream_k import tail_idle_min, tail_start_unit
from gemm_ladder.library.grouped import BK, BM, TAIL_MIN_IDLE, grouped_gemm

pytestmark = pytest.mark.gpu


def _units(sizes, n, bn, cluster) -> int:
    tiles_m = sum(math.ceil(s / BM) for s in sizes)
    return math.ceil(tiles_m / cluster) * math.ceil(n / bn)


def _splitting_sizes(kernel, dtype, n, k, ragged: bool, gen: torch.Generator) -> list[int]:
    """Group sizes whose units make one whole wave on this GPU and a short second one that the rule splits."""
    clusters = grouped_gemm(kernel.bn, kernel.b_major, cluster=kernel.cluster).loaded(
        "bf16" if dtype == torch.bfloat16 else "fp16", torch.device("cuda")).max_active_clusters(torch.device("cuda"))
    k_tiles = math.ceil(k / BK)
    extra = max(math.ceil(clusters / k_tiles), 3)  # tail units: a K iteration per cluster at least
    sizes = []
    while _units(sizes, n, kernel.bn, kernel.cluster) < clusters + extra:
        if ragged:  # empty, one-row, mid-tile and multi-tile groups
            sizes.append(int(torch.randint(0, 5, (1,), generator=gen)) * 97 % 300 + int(torch.randint(0, 2, (1,), generator=gen)))
        else:
            sizes.append(BM)
    units = _units(sizes, n, kernel.bn, kernel.cluster)
    assert tail_start_unit(units, clusters, k_tiles, tail_idle_min(clusters, TAIL_MIN_IDLE)) < units, (
        f"the case does not split: {units} units on {clusters} clusters")
    return sizes


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bn,cluster", [(128, 1), (256, 1), (128, 2), (256, 2)])
@pytest.mark.parametrize("ragged,n,k", [(False, None, 3072), (True, 200, 1000)])
def test_the_tail_matches_float64_and_repeats_bit_for_bit(dtype, bn, cluster, ragged, n, k):
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    n = bn if n is None else n
    kernel = grouped_gemm(bn, "k", cluster=cluster, tail=True)
    sizes = _splitting_sizes(kernel, dtype, n, k, ragged, gen)
    e, rows = len(sizes), sum(sizes) + 5  # rows past offs[-1]: never written
    x = torch.randn(rows, k, dtype=dtype, device="cuda")
    w = torch.randn(e, n, k, dtype=dtype, device="cuda")
    offs = _offs(sizes)
    ends = offs.tolist()
    tag = f"tail bn {bn} cluster {cluster} {'ragged' if ragged else 'one tile a group'} ({e} groups)"
    outs = []
    for _ in range(3):
        out = torch.full((rows, n), float("nan"), dtype=dtype, device="cuda")
        kernel.launch(x, w, offs, out)
        outs.append(out)
    _check(outs[0], x, w, ends, dtype, seed, tag=tag)
    assert torch.isnan(outs[0][ends[-1]:]).all(), f"{tag}: rows past offs[-1] were written (seed {seed})"
    for again in outs[1:]:
        assert torch.equal(again[:ends[-1]], outs[0][:ends[-1]]), f"{tag}: not bitwise repeatable (seed {seed})"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cluster", [1, 2])
def test_the_tail_with_bias_fp32_out_and_an_n_major_weight(dtype, cluster):
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    n, k = 136, 1000
    for major, bias_on, fp32 in (("k", True, False), ("k", False, True), ("mn", False, False)):
        kernel = grouped_gemm(128, major, fp32, bias_on, cluster=cluster, tail=True)
        sizes = _splitting_sizes(kernel, dtype, n, k, True, gen)
        e, rows = len(sizes), sum(sizes)
        x = torch.randn(rows, k, dtype=dtype, device="cuda")
        w = torch.randn(e, n, k, dtype=dtype, device="cuda")
        bias = torch.randn(e, n, dtype=dtype, device="cuda") if bias_on else None
        b = w if major == "k" else w.transpose(1, 2).contiguous().transpose(1, 2)  # (E, N, K), N contiguous
        out = torch.full((rows, n), float("nan"), dtype=torch.float32 if fp32 else dtype, device="cuda")
        kernel.launch(x, b, _offs(sizes), out, bias)
        tag = f"tail {major}-major bias {bias_on} fp32 {fp32}"
        if fp32:
            _check_fp32_against_whole(out, x, b, w, sizes, cluster, seed, tag)
        else:
            _check(out, x, w, _offs(sizes).tolist(), dtype, seed, bias=bias, tag=tag)


def _check_fp32_against_whole(out, x, b, w, sizes, cluster, seed, tag):
    """A float32 output at K = 1000 against float64, group by group, within twice the error of the whole-unit
    build (tail=False) on the same operands plus 8 fp32 roundoffs: what the split adds (its pieces' partials
    added in fp32) stays near the tensor core's own accumulation error. _check's float32 bound (4 x torch's
    float32 error + 8 roundoffs) was set at K <= 200; at K = 1000 on an H100 (ee62a06,
    logs/2026-12-06_device_smoke_gtail_h100_ee62a06.log) the tail build's groups, whole units among them, were at
    0.97-1.24e-6 against torch's 0.9-1.9e-7 and failed it. The whole build's error is the baseline here; an output
    rounded to 16 bits (about 2^-9) still fails."""
    offs = _offs(sizes)
    whole = torch.full_like(out, float("nan"))
    grouped_gemm(128, "k", True, False, cluster=cluster).launch(x, b, offs, whole, None)
    start = 0
    for e, end in enumerate(offs.tolist()):
        if end == start:
            continue
        ref = x[start:end].double() @ w[e].double().T
        norm = ref.norm().clamp_min(1e-30)
        err = (out[start:end].double() - ref).norm() / norm
        base = (whole[start:end].double() - ref).norm() / norm
        assert not torch.isnan(out[start:end]).any(), f"{tag} group {e}: NaN in output (seed {seed})"
        assert err <= 2 * base + 8 * 2.0**-24, (f"{tag} group {e} rows {start}:{end}: rel err {err:.3g} vs the whole "
                                                 f"build's {base:.3g} (seed {seed})")
        start = end


def test_no_split_under_capture_gives_the_whole_unit_builds_bits():
    """While a CUDA graph is captured the tail build passes no workspace: the device splits nothing and
    computes what the whole-unit build does, bit for bit, on replay."""
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    kernel = grouped_gemm(256, "k", cluster=2, tail=True)
    n, k = 256, 1024
    sizes = _splitting_sizes(kernel, torch.bfloat16, n, k, True, gen)
    x = torch.randn(sum(sizes), k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(len(sizes), n, k, dtype=torch.bfloat16, device="cuda")
    offs = _offs(sizes)
    whole = torch.empty(sum(sizes), n, dtype=torch.bfloat16, device="cuda")
    grouped_gemm(256, "k", cluster=2).launch(x, w, offs, whole)
    out = torch.full_like(whole, float("nan"))
    kernel.launch(x, w, offs, out)  # warm: loaded and planned before the capture
    out.fill_(float("nan"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        kernel.launch(x, w, offs, out)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, whole), f"no split under capture: differs from the whole-unit build (seed {seed})"
