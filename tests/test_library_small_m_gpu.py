"""The small-M library kernel on the GPU (marker gpu; skipped without one, saying why).

Every check draws fresh random operands, poisons the output with NaN before each launch, and compares
with the float64 reference under the correctness gate's bounds (gates.correctness: error_bound,
absolute_cap, check_nonfinite). Shapes have tails: N not a multiple of 128, K a multiple of 8 but not
of 64. Repeated launches must agree bitwise (the split-K partials are added in K order).
"""

from __future__ import annotations

import pytest
import torch

from gemm_ladder.contract import DTYPES, cublas, reference
from gemm_ladder.gates.correctness import (
    absolute_cap, check_correctness, check_nonfinite, error_bound, random_operands,
)
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.small_m import SmallMGemm, small_m_gemm

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

M_VALUES = (1, 2, 7, 16, 64, 100, 128, 256)
#: (N, K) with tails in N and K; the second gives 3-6 contributors per unit on 132 SMs.
SHAPES = ((1000, 520), (2056, 4104))


class _Kernel:
    """The gate's exact protocol for the small-M kernel: ``check(a, b)`` then ``launch(a, b, c)`` into the
    gate's NaN-filled c; a and b are K-major (x (M, K), w (N, K))."""

    def __init__(self, kernel: SmallMGemm, splits: int | None = None):
        self.kernel, self.splits = kernel, splits

    def check(self, a, b):
        c = torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype, device=a.device)
        reason = self.kernel.supports(operand_view(a, k_dim=1), operand_view(b, k_dim=1), c)
        assert reason is None, reason

    def launch(self, a, b, c):
        self.kernel.launch(operand_view(a, k_dim=1), operand_view(b, k_dim=1), c, splits=self.splits)

    def __call__(self, a, b):
        c = torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype, device=a.device)
        self.launch(a, b, c)
        return c


def _poisoned(kernel, x, w, c, splits=None, **kw):
    c.fill_(float("nan"))
    kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, splits=splits, **kw)
    return c


def _assert_close(c, x, w, dtype):
    """c against the float64 reference under the gate's bounds: relative error within 2 x cuBLAS's +
    the dtype's unit roundoff, largest element error under the absolute cap, nothing left unwritten."""
    torch.cuda.synchronize()
    ref = reference(x, w)
    assert not (torch.isnan(c) & torch.isfinite(ref)).any(), "outputs left unwritten (NaN poison)"
    rel = ((c.double() - ref).norm() / ref.norm()).item()
    cublas_rel = ((cublas(x, w).double() - ref).norm() / ref.norm()).item()
    assert rel <= error_bound(cublas_rel, dtype), (rel, cublas_rel)
    assert (c.double() - ref).abs().max().item() <= absolute_cap(x, w, ref.abs().max().item(), dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_correctness_gate_over_m_and_tails(dtype):
    """M in {1, 2, 7, 16, 64, 100, 128, 256} x (N, K) with tails x bf16/fp16 through the gate (value,
    coverage of a NaN-poisoned output, NaN/Inf inputs); then two more launches on the same operands
    agree bitwise with the first."""
    for m in M_VALUES:
        kernel = small_m_gemm(m)
        for n, k in SHAPES:
            result = check_correctness(_Kernel(kernel), m, n, k, dtype, device="cuda")
            assert result.status == "pass", (m, n, k, result)
            x, w = random_operands(m, n, k, dtype, "cuda", seed=m * 7919 + n)
            runs = [_poisoned(kernel, x, w, torch.empty(m, n, dtype=DTYPES[dtype], device="cuda")) for _ in range(3)]
            torch.cuda.synchronize()
            assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2]), (m, n, k)


def test_repeated_runs_are_bitwise_identical_where_units_are_split():
    """The llm shapes' units are split over many CTAs (several contributors per unit): 10 launches into
    poisoned outputs agree bitwise, and each is right."""
    for m, n, k in ((1, 4096, 4096), (16, 4096, 14336), (64, 28672, 1024), (256, 4096, 4096)):
        kernel = small_m_gemm(m)
        sched = kernel.schedule(m, n, k, kernel.ctas(m, n, k, kernel.loaded("bf16", torch.device("cuda"))
                                                     .max_active_clusters(torch.device("cuda"))))
        assert sched.max_contributors > 1, (m, n, k)
        x, w = random_operands(m, n, k, "bf16", "cuda", seed=m + k)
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        first = _poisoned(kernel, x, w, c).clone()
        _assert_close(first, x, w, "bf16")
        for _ in range(9):
            assert torch.equal(_poisoned(kernel, x, w, c), first), (m, n, k)


def test_each_launch_takes_fresh_counters_whatever_the_last_left():
    """The counters a launch counts arrivals on were cleared since any launch used them: counters left
    counted (as an aborted launch would leave them) do not reach the next launch, and an arena cleared
    again and again (three launches' worth) keeps every launch right and bitwise equal."""
    from gemm_ladder.library import small_m

    m, n, k = 16, 4096, 4096
    kernel = small_m_gemm(m)
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=1)
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.current_stream()
    saved = small_m._COUNTERS
    small_m._COUNTERS = small_m.CounterArena(size=2 * 2 * 32)  # fresh (earlier tests used the shared one): two launches
    try:
        first = _poisoned(kernel, x, w, c).clone()
        _assert_close(first, x, w, "bf16")
        buffer, used = small_m._COUNTERS._arenas[(stream.device_index, stream.cuda_stream)][:2]
        assert used == 2 * 32  # 32 units x 2 consumers
        buffer[:used].fill_(5)  # the counters the last launch used, left counted (as an aborted launch leaves them)
        torch.cuda.synchronize()
        assert torch.equal(_poisoned(kernel, x, w, c), first)
    finally:
        small_m._COUNTERS = saved
    arena = small_m.CounterArena(size=3 * 2 * 32)
    saved, small_m._COUNTERS = small_m._COUNTERS, arena
    try:
        for _ in range(10):
            assert torch.equal(_poisoned(kernel, x, w, c), first)
    finally:
        small_m._COUNTERS = saved


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_splits_padded_pitches_and_output_layouts(dtype):
    """splits = 1 (no reduction), 3 and None; x and w with padded pitches and offset bases (16-byte
    aligned); c row-major with ldc > N, column-major (a transposed view), and float32."""
    m, n, k = 13, 1000, 520
    torch_dtype = DTYPES[dtype]
    kernel = small_m_gemm(m)
    x_store = torch.randn(m + 1, k + 24, device="cuda").to(torch_dtype)
    w_store = torch.randn(n, k + 8, device="cuda").to(torch_dtype)
    x, w = x_store[1:, 8:8 + k], w_store[:, :k]  # base 16 bytes in, pitches k + 24 and k + 8
    assert operand_view(x, k_dim=1).ld == k + 24 and operand_view(w, k_dim=1).ld == k + 8
    for splits in (1, 3, None):
        _assert_close(_poisoned(kernel, x, w, torch.empty(m, n, dtype=torch_dtype, device="cuda"), splits), x, w, dtype)
    outputs = {
        "row-major, ldc > N": torch.empty(m, n + 40, dtype=torch_dtype, device="cuda")[:, :n],
        "column-major": torch.empty(n, m, dtype=torch_dtype, device="cuda").T,
        "column-major, padded": torch.empty(n, m + 3, dtype=torch_dtype, device="cuda")[:, :m].T,
    }
    for name, c in outputs.items():
        _assert_close(_poisoned(kernel, x, w, c), x, w, dtype)
    # float32 out: no rounding to 2 bytes, so only the cap's fp32 accumulation term (absolute_cap with
    # the rounding term's max|ref| set to 0) bounds every element.
    c32 = _poisoned(kernel, x, w, torch.empty(m, n, dtype=torch.float32, device="cuda"))
    torch.cuda.synchronize()
    assert (c32.double() - reference(x, w)).abs().max().item() <= absolute_cap(x, w, 0.0, dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mn_major_operands(dtype):
    """x @ W with W (K, N) row-major (B MN-major) in every bucket's class of M, and x column-major
    (A MN-major) from BN = 64 up, with padded pitches and tails; split and unsplit; repeatable."""
    torch_dtype = DTYPES[dtype]
    n, k = 1000, 520
    for m in (1, 16, 40, 100, 256):
        kernel = small_m_gemm(m)
        w = torch.randn(k, n + 8, device="cuda").to(torch_dtype)[:, :n].T  # (N, K), element (n, k) at n + k (N + 8)
        xs = [torch.randn(m, k, device="cuda").to(torch_dtype)]
        if kernel.bn >= 64:
            ld = (m + 15) // 8 * 8  # a padded pitch of whole 16-byte units
            xs.append(torch.randn(k, ld, device="cuda").to(torch_dtype)[:, :m].T)  # MN-major
        for x in xs:
            assert operand_view(w, k_dim=1).major == "mn"
            for splits in (None, 1):
                c = torch.empty(m, n, dtype=torch_dtype, device="cuda")
                first = _poisoned(kernel, x, w, c, splits).clone()
                _assert_close(first, x, w, dtype)
                assert torch.equal(_poisoned(kernel, x, w, c, splits), first)


def test_m_above_the_bucket_and_nonfinite_inputs():
    """A build of a smaller bucket computes any M <= 256 (several M tiles per N tile); NaN/Inf planted in
    x and w come out exactly where the float64 reference has them."""
    x, w = random_operands(100, 1000, 520, "bf16", "cuda", seed=3)
    _assert_close(_poisoned(SmallMGemm(32), x, w, torch.empty(100, 1000, dtype=torch.bfloat16, device="cuda")), x, w,
                  "bf16")
    x[3, 17], w[900, 5], w[10, 33] = float("nan"), float("inf"), float("-inf")
    c = _poisoned(small_m_gemm(100), x, w, torch.empty(100, 1000, dtype=torch.bfloat16, device="cuda"))
    torch.cuda.synchronize()
    assert check_nonfinite(c, reference(x, w)) is None


def test_empty_shapes():
    kernel = small_m_gemm(4)
    for m, n, k in ((0, 100, 64), (4, 0, 64), (4, 100, 0)):
        x, w = random_operands(m, n, k, "bf16", "cuda", seed=4)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c)
        torch.cuda.synchronize()
        assert not c.isnan().any() and (c == 0).all()


def test_side_streams_and_graph_capture():
    """Two streams at once get their own workspaces and agree bitwise with the default stream; a CUDA
    graph captures an unsplit launch (splits = 1: the graph must not keep the workspace) and replays it
    bitwise equal to the eager splits = 1 launch."""
    m, n, k = 16, 4096, 4096
    kernel = small_m_gemm(m)
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=5)
    base = _poisoned(kernel, x, w, torch.empty(m, n, dtype=torch.bfloat16, device="cuda")).clone()
    outs = []
    for stream in (torch.cuda.Stream(), torch.cuda.Stream()):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            outs.append(_poisoned(kernel, x, w, torch.empty(m, n, dtype=torch.bfloat16, device="cuda")))
    torch.cuda.synchronize()
    assert all(torch.equal(o, base) for o in outs)
    unsplit = _poisoned(kernel, x, w, torch.empty(m, n, dtype=torch.bfloat16, device="cuda"), splits=1).clone()
    _assert_close(unsplit, x, w, "bf16")
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c)
    c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, unsplit)
