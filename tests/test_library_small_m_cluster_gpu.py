"""The small-M kernel's cluster build on the GPU (marker gpu; skipped without one, saying why):
split-K reduced through distributed shared memory (library/small_m.py, cluster_k; kernels/include/
gemm_ladder/cluster_fragments.cuh).

Every check draws fresh random operands, poisons the output with NaN before each launch, and compares
with the float64 reference under the correctness gate's bounds. ``cluster_reduce=True`` makes a launch
refuse (ValueError) rather than fall back, so each case below provably ran the cluster build; the same
case with ``cluster_reduce=False`` (the global-memory reduction, same grid) must agree BITWISE: both
add the S partials in K order (slot 0 + 1 + ...), then apply the same epilogue and rounding.

    pytest -m gpu tests/test_library_small_m_cluster_gpu.py
"""

from __future__ import annotations

import pytest
import torch

from gemm_ladder.contract import DTYPES, cublas, reference
from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.small_m import small_m_gemm, small_m_kernel

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

#: (M, N, K, BN, S): M tails 1, 7, 33, 100, 255 in their own bucket (one M tile) and M = 100 in BN = 32
#: (four M tiles); N and K not multiples of 128 and 64; S = 2, 4 and 8 forced with splits = S. Few
#: enough units that their clusters fit on an H200 (at most 32 clusters of 2, 12 of 4, 8 of 8).
CASES = (
    (1, 1000, 4104, 8, 8),      # 8 units x 8: K = 65 tiles, 8 each (+1)
    (7, 1500, 520, 8, 4),       # 12 units x 4: 9 K tiles (2, 2, 2, 3), K tail 8
    (33, 2056, 1000, 64, 2),    # 17 units x 2: K tail 40, N tail 8
    (100, 1000, 4104, 128, 4),  # 8 units x 4
    (255, 776, 2056, 256, 8),   # 7 units x 8: N tail 8, BN = 256 (128 accumulators)
    (100, 1000, 520, 32, 2),    # 4 M tiles x 8 N tiles = 32 units x 2 = 64 CTAs
)


def _launch(kernel, x, w, c, **kw):
    c.fill_(float("nan"))
    kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, **kw)
    return c


def _assert_close(c, x, w, dtype):
    """c against the float64 reference: relative error within the gate's bound (2 x cuBLAS's + the
    dtype's unit roundoff), largest element error under the absolute cap, nothing left unwritten."""
    torch.cuda.synchronize()
    ref = reference(x, w)
    assert not (torch.isnan(c) & torch.isfinite(ref)).any(), "outputs left unwritten (NaN poison)"
    if c.dtype == torch.float32:  # no rounding to 2 bytes: the cap's fp32 accumulation term alone
        assert (c.double() - ref).abs().max().item() <= absolute_cap(x, w, 0.0, dtype)
        return
    rel = ((c.double() - ref).norm() / ref.norm()).item()
    cublas_rel = ((cublas(x, w).double() - ref).norm() / ref.norm()).item()
    assert rel <= error_bound(cublas_rel, dtype), (rel, cublas_rel)
    assert (c.double() - ref).abs().max().item() <= absolute_cap(x, w, ref.abs().max().item(), dtype)


def _fits(kernel, ways, dtype="bf16"):
    dev = torch.device("cuda")
    return kernel.clustered(ways).loaded(dtype, dev).max_active_clusters(dev)


def _check_case(kernel, x, w, make_c, ways, dtype, **kw):
    """The cluster path (forced: it must be taken) is right, bitwise repeatable over 3 runs, and bitwise
    equal to the global-memory reduction of the same grid."""
    m, n = x.shape[0], w.shape[0]
    units = kernel.units(m, n)
    assert _fits(kernel, ways) >= units, f"{units} clusters of {ways} do not fit: pick a smaller case"
    runs = [_launch(kernel, x, w, make_c(), splits=ways, cluster_reduce=True, **kw).clone() for _ in range(3)]
    _assert_close(runs[0], x, w, dtype)
    torch.cuda.synchronize()
    assert all(torch.equal(runs[0], r) for r in runs[1:]), "the cluster path is not bitwise repeatable"
    glob = _launch(kernel, x, w, make_c(), splits=ways, cluster_reduce=False, **kw)
    torch.cuda.synchronize()
    assert torch.equal(runs[0], glob), "cluster and global reductions of the same grid differ"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k,bn,ways", CASES)
def test_the_cluster_path_over_m_n_k_tails(m, n, k, bn, ways, dtype):
    kernel = small_m_kernel(bn)
    x, w = random_operands(m, n, k, dtype, "cuda", seed=int(torch.randint(0, 2**31 - 1, ()).item()))
    _check_case(kernel, x, w, lambda: torch.empty(m, n, dtype=DTYPES[dtype], device="cuda"), ways, dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_cluster_path_with_mn_major_operands_and_output_layouts(dtype):
    """x @ W (B MN-major, padded pitch), x column-major (A MN-major, BN >= 64), c column-major / padded /
    float32, each through the cluster build at S = 2, 4 and 8."""
    torch_dtype = DTYPES[dtype]
    n, k = 1000, 1032
    for m, ways in ((1, 8), (16, 4), (100, 2), (200, 4)):
        kernel = small_m_gemm(m)
        w = torch.randn(k, n + 8, device="cuda").to(torch_dtype)[:, :n].T  # (N, K), MN-major, pitch N + 8
        xs = [torch.randn(m, k, device="cuda").to(torch_dtype)]
        if kernel.bn >= 64:
            ld = (m + 15) // 8 * 8
            xs.append(torch.randn(k, ld, device="cuda").to(torch_dtype)[:, :m].T)  # MN-major
        for x in xs:
            outs = (lambda: torch.empty(m, n, dtype=torch_dtype, device="cuda"),
                    lambda: torch.empty(n, m + 3, dtype=torch_dtype, device="cuda")[:, :m].T,
                    lambda: torch.empty(m, n + 40, dtype=torch.float32, device="cuda")[:, :n])
            for make_c in outs:
                _check_case(kernel, x, w, make_c, ways, dtype)


def test_the_cluster_path_with_a_fused_epilogue():
    """bias + GELU + residual (alpha, beta) after the cluster reduction, bf16 and float32 out: right against
    the float64 reference of the whole epilogue (tests/test_epilogue_gpu.py's bounds), repeatable, and
    bitwise equal to the global reduction's."""
    from test_epilogue_gpu import assert_epilogue_close

    from gemm_ladder.dispatch.validate import linear_call

    for m, n, k, ways, out in ((7, 1000, 4104, 8, torch.bfloat16), (100, 1500, 1032, 4, torch.bfloat16),
                               (255, 776, 520, 2, torch.float32)):
        x, w = torch.randn(m, k, device="cuda").to(torch.bfloat16), torch.randn(n, k, device="cuda").to(torch.bfloat16)
        b, r = torch.randn(n, device="cuda").to(torch.bfloat16), torch.randn(m, n, device="cuda").to(torch.bfloat16)
        for act in ("gelu", "gelu_tanh"):
            call = linear_call(x, w, b, activation=act, residual=r, alpha=0.5, beta=1.5)
            kernel = small_m_gemm(m)
            runs = [_launch(kernel, x, w, torch.empty(m, n, dtype=out, device="cuda"), splits=ways, epilogue=call,
                            cluster_reduce=True).clone() for _ in range(3)]
            assert_epilogue_close(runs[0], x, w, call)
            glob = _launch(kernel, x, w, torch.empty(m, n, dtype=out, device="cuda"), splits=ways, epilogue=call,
                           cluster_reduce=False)
            torch.cuda.synchronize()
            assert all(torch.equal(runs[0], rr) for rr in runs[1:]) and torch.equal(runs[0], glob), (m, n, k, act)


@pytest.mark.parametrize("m", [1, 16, 64, 128, 256])
@pytest.mark.parametrize("k", [4096, 14336])
def test_the_default_rule_on_llm_shapes(m, k):
    """4096 x K (N x K) with no splits given: the cluster rule (cluster_ways) takes S = 4 exactly when the
    occupancy API says all 32 clusters of 4 fit (one M tile); the default launch (cluster_reduce None)
    takes the global reduction whatever the rule says, and the cluster build where the rule allows it
    is right, repeatable and bitwise equal to it."""
    n = 4096
    kernel = small_m_gemm(m)
    dev = torch.device("cuda")
    ctas = kernel.ctas(m, n, k, kernel.loaded("bf16", dev).max_active_clusters(dev))
    ways = kernel.cluster_ways(m, n, k, ctas, lambda s: _fits(kernel, s))
    fit4 = _fits(kernel, 4)
    assert ctas == 128 and (ways == 4) == (fit4 >= 32), (ctas, ways, fit4)
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=m + k)
    default = _launch(kernel, x, w, torch.empty(m, n, dtype=torch.bfloat16, device="cuda")).clone()
    _assert_close(default, x, w, "bf16")
    glob = _launch(kernel, x, w, torch.empty(m, n, dtype=torch.bfloat16, device="cuda"), cluster_reduce=False)
    torch.cuda.synchronize()
    assert torch.equal(default, glob)
    if ways > 1:
        runs = [_launch(kernel, x, w, torch.empty(m, n, dtype=torch.bfloat16, device="cuda"),
                        cluster_reduce=True).clone() for _ in range(3)]
        torch.cuda.synchronize()
        assert all(torch.equal(glob, r) for r in runs)
    print(f"M = {m}, 4096 x {k}: {fit4} clusters of 4 fit; the rule allows S = {ways}")


def test_the_forced_path_refuses_what_it_cannot_do():
    """cluster_reduce=True on an uneven split (stream-K over 132 CTAs at 28672 x 8192, or 3 ways) or on
    clusters that do not all fit raises ValueError naming the rule, before any launch."""
    kernel = small_m_gemm(16)
    for m, n, k, splits in ((16, 28672, 8192, None), (16, 4096, 4096, 3), (16, 4096, 4096, 1)):
        x, w = random_operands(m, n, k, "bf16", "cuda", seed=9)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match="cluster_reduce=True"):
            kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, splits=splits, cluster_reduce=True)
        torch.cuda.synchronize()
        assert torch.isnan(c).all()  # nothing launched
    if _fits(kernel, 8) < 32:  # 32 units x 8 ways: more clusters of 8 than fit on an H200
        x, w = random_operands(16, 4096, 4096, "bf16", "cuda", seed=10)
        with pytest.raises(ValueError, match="cluster_reduce=True"):
            kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1),
                          torch.empty(16, 4096, dtype=torch.bfloat16, device="cuda"), splits=8, cluster_reduce=True)



def test_the_cluster_path_is_captured_in_a_graph_as_it_runs_outside_one():
    """cluster_reduce=True inside a CUDA graph capture launches the cluster build with the caller's split
    (it has no workspace for the graph to keep), instead of refusing: before the fix the capture forced
    splits = 1, which the cluster rule refuses (ValueError). The replay is right against the float64
    reference and bitwise equal to the same launch outside the graph; re-poisoned between replays."""
    m, n, k, bn, ways = 33, 2056, 1000, 64, 2  # 17 units x 2: K tail 40, N tail 8 (CASES)
    kernel = small_m_kernel(bn)
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=int(torch.randint(0, 2**31 - 1, ()).item()))
    assert _fits(kernel, ways) >= kernel.units(m, n)
    eager = _launch(kernel, x, w, torch.empty(m, n, dtype=torch.bfloat16, device="cuda"), splits=ways,
                    cluster_reduce=True).clone()
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    va, vb = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (builds, maps), as torch's graph docs ask
        kernel.launch(va, vb, c, splits=ways, cluster_reduce=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel.launch(va, vb, c, splits=ways, cluster_reduce=True)
    for _ in range(2):
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _assert_close(c, x, w, "bf16")
        assert torch.equal(c, eager), "the captured cluster launch differs from the same launch outside the graph"
