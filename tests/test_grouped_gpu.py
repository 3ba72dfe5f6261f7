"""gemm_ladder.grouped_mm / grouped_linear on the GPU, against a float64 reference per group.

Fresh random normal operands each check (the seed printed on failure); outputs poisoned (a NaN-filled
block of the output's size freed just before the call, which the caching allocator hands back; and the
kernel-level checks launch into a NaN-filled output whose rows past offs[-1] must stay NaN). The error
rule per group is the correctness gate's: relative Frobenius error at most 2 x torch's own bf16/fp16
result's (one mm per group) + the unit roundoff, and the largest element error under a cap.
Covered: empty groups, one-row groups, unaligned group sizes, a group ending mid-tile, all rows in one
group, rows past offs[-1], K not a multiple of 64, N not a multiple of BN, both tile widths, the
N-major weight (grad_x), fp32 output, bias, batched 3-D x 3-D, NaN/Inf propagation, bitwise
repeatability, CUDA-graph capture, torch.compile(fullgraph=True), autograd; and the cluster build
(cluster=2, forced whatever the default: pairs of M tiles sharing B) on each mode, groups of odd M-tile
counts (pairs straddling two groups), one-row and empty groups, against float64 and bit for bit against
the cluster-1 build.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_grouped_gpu.py``.
"""

from __future__ import annotations

import secrets

import pytest
import torch

import gemm_ladder
from gemm_ladder.api_grouped import grouped_mm_direct
from gemm_ladder.gates.correctness import UNIT_ROUNDOFF

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float16]


def _seed() -> int:
    s = secrets.randbelow(2**31)
    torch.manual_seed(s)
    return s


def _offs(sizes, device="cuda") -> torch.Tensor:
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).to(device)


def _poison(shape, dtype):
    torch.full(shape, float("nan"), dtype=dtype, device="cuda")  # freed at once: the output reuses the block


def _check(out, x, w_nk, offs_list, dtype, seed, bias=None, tag=""):
    """out (R, N) against x[rows_e] @ w_nk[e].T (+ bias[e]) in float64, per group, within twice torch's own
    error plus a unit roundoff of the output's dtype: a float32 output against torch's float32 product and
    2^-24 (so an fp32 output that was rounded to 16 bits on the way fails)."""
    fp32 = out.dtype == torch.float32
    start = 0
    for e, end in enumerate(offs_list):
        if end == start:
            continue
        xs = x[start:end]
        ref = xs.double() @ w_nk[e].double().T
        xl, wl = (xs.float(), w_nk[e].float()) if fp32 else (xs, w_nk[e])
        low = (xl @ wl.T).double()  # torch's own result in the output's dtype (cuBLAS)
        if bias is not None:
            ref = ref + bias[e].double()
            low = (xl @ wl.T + (bias[e].float() if fp32 else bias[e])).double()
        got = out[start:end].double()
        assert not torch.isnan(got).any(), f"{tag} group {e}: NaN in output (seed {seed})"
        err = (got - ref).norm() / ref.norm().clamp_min(1e-30)
        base = (low - ref).norm() / ref.norm().clamp_min(1e-30)
        u = 2.0**-24 if fp32 else UNIT_ROUNDOFF[{torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "bf16")]
        # fp32: the tensor core's accumulation measured 2-3x cuBLAS's fp32 error (H100, e67c05c), far below a
        # 16-bit rounding (2^-9): 4x torch's plus 8 roundoffs still catches an output rounded to 16 bits.
        bound = 4 * base + 8 * u if fp32 else 2 * base + u
        assert err <= bound, f"{tag} group {e} rows {start}:{end}: rel err {err:.3g} vs torch {base:.3g} (seed {seed})"
        cap = 8 * u * (xs.double().abs() @ w_nk[e].double().abs().T).max() + 1e-6
        assert (got - ref).abs().max() <= cap, f"{tag} group {e}: max abs err over cap (seed {seed})"
        start = end


SIZES = [
    [128, 128, 128, 128],  # whole tiles
    [0, 5, 0, 1, 300, 0],  # empty, one-row, unaligned; empty groups at both ends
    [1, 1, 1, 1, 1, 1, 1, 1],  # one row each
    [257],  # one group
    [37, 129, 64, 255, 3, 0, 511],  # groups ending mid-tile
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("n,k", [(256, 128), (200, 72), (384, 1000)])
def test_grouped_mm_matches_reference(dtype, sizes, n, k):
    seed = _seed()
    e = len(sizes)
    rows = sum(sizes) + 7  # rows past offs[-1]: not written
    x = torch.randn(rows, k, dtype=dtype, device="cuda")
    w = torch.randn(e, n, k, dtype=dtype, device="cuda")
    offs = _offs(sizes)
    ends = offs.tolist()
    for bn in (128, 256):
        out = torch.full((rows, n), float("nan"), dtype=dtype, device="cuda")
        from gemm_ladder.library.grouped import grouped_gemm
        grouped_gemm(bn, "k").launch(x, w, offs, out)
        _check(out, x, w, ends, dtype, seed, tag=f"bn {bn}")
        assert torch.isnan(out[ends[-1]:]).all(), f"rows past offs[-1] were written (seed {seed})"
    _poison((rows, n), dtype)
    out = gemm_ladder.grouped_mm(x, w.transpose(1, 2), offs)
    _check(out, x, w, ends, dtype, seed, tag="api")


@pytest.mark.parametrize("dtype", DTYPES)
def test_n_major_weight_and_fp32_out(dtype):
    seed = _seed()
    sizes = [33, 0, 200, 1, 90]
    e, n, k = len(sizes), 192, 136
    x = torch.randn(sum(sizes), k, dtype=dtype, device="cuda")
    b = torch.randn(e, k, n, dtype=dtype, device="cuda")  # (E, K, N) row-major: N-major per group
    offs = _offs(sizes)
    out = gemm_ladder.grouped_mm(x, b, offs)
    _check(out, x, b.transpose(1, 2), offs.tolist(), dtype, seed, tag="n-major")
    out32 = gemm_ladder.grouped_mm(x, b, offs, out_dtype=torch.float32)
    assert out32.dtype == torch.float32
    _check(out32, x, b.transpose(1, 2), offs.tolist(), dtype, seed, tag="fp32 out")


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_linear_bias_activation(dtype):
    seed = _seed()
    sizes = [10, 0, 130, 7]
    e, n, k = len(sizes), 136, 64
    x = torch.randn(sum(sizes), k, dtype=dtype, device="cuda")
    w = torch.randn(e, n, k, dtype=dtype, device="cuda")
    bias = torch.randn(e, n, dtype=dtype, device="cuda")
    offs = _offs(sizes)
    out = gemm_ladder.grouped_linear(x, w, offs, bias)
    _check(out, x, w, offs.tolist(), dtype, seed, bias=bias, tag="bias")
    act = gemm_ladder.grouped_linear(x, w, offs, bias, activation="silu")
    # Fused (no backward): silu of the fp32 accumulators, rounded once; silu(out) rounds twice. Within two roundings.
    u = UNIT_ROUNDOFF[{torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]]
    torch.testing.assert_close(act, torch.nn.functional.silu(out), rtol=4 * u, atol=4 * u * float(out.abs().max()),
                               msg=f"seed {seed}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_3d(dtype):
    seed = _seed()
    e, m, n, k = 5, 77, 144, 200
    a = torch.randn(e, m, k, dtype=dtype, device="cuda")
    b = torch.randn(e, k, n, dtype=dtype, device="cuda")
    out = gemm_ladder.grouped_mm(a, b)
    assert out.shape == (e, m, n)
    _check(out.reshape(e * m, n), a.reshape(e * m, k), b.transpose(1, 2), [m * (i + 1) for i in range(e)], dtype, seed,
           tag="batched")


def test_nan_inf_propagate_within_their_group_only():
    seed = _seed()
    sizes = [64, 64, 64]
    x = torch.randn(192, 128, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(3, 128, 128, dtype=torch.bfloat16, device="cuda")
    x[10, 5] = float("nan")  # group 0, row 10: NaN across the row
    w[1, 7, 3] = float("inf")  # group 1, column 7: +-Inf (or NaN) down the column
    out = gemm_ladder.grouped_mm(x, w.transpose(1, 2), _offs(sizes))
    ref = torch.cat([x[64 * i:64 * (i + 1)].double() @ w[i].double().T for i in range(3)])
    assert torch.isnan(out[10]).all(), f"NaN row lost (seed {seed})"
    assert (torch.isnan(out[64:128, 7]) == torch.isnan(ref[64:128, 7])).all()
    assert (torch.isinf(out[64:128, 7]) == torch.isinf(ref[64:128, 7])).all(), f"Inf column (seed {seed})"
    # group 2's rows are the tile after group 1's: no NaN or Inf borrowed from a neighbour
    assert torch.isfinite(out[128:]).all() and torch.isfinite(out[:10]).all(), f"leak across groups (seed {seed})"


def test_bitwise_repeatable():
    _seed()
    sizes = [300, 0, 17, 900, 1]
    x = torch.randn(sum(sizes), 512, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(len(sizes), 640, 512, dtype=torch.bfloat16, device="cuda")
    offs = _offs(sizes)
    first = gemm_ladder.grouped_mm(x, w.transpose(1, 2), offs)
    for _ in range(3):
        assert torch.equal(gemm_ladder.grouped_mm(x, w.transpose(1, 2), offs), first)


def test_cuda_graph_replays_new_routing():
    seed = _seed()
    e, n, k, rows = 8, 256, 256, 1024
    x = torch.randn(rows, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda")
    offs = _offs([128] * e)
    gemm_ladder.grouped_mm(x, w.transpose(1, 2), offs)  # build and load outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = gemm_ladder.grouped_mm(x, w.transpose(1, 2), offs)
    for sizes in ([128] * e, [0, 1, 500, 3, 0, 200, 20, 300], [1024, 0, 0, 0, 0, 0, 0, 0]):
        offs.copy_(_offs(sizes))  # new routing, same graph: sizes never reached the host
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        _check(out, x, w, offs.tolist(), torch.bfloat16, seed, tag=f"graph {sizes}")


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(dynamic):
    seed = _seed()
    e, n, k = 4, 128, 192

    @torch.compile(fullgraph=True, dynamic=dynamic)
    def f(x, w, offs):
        return torch.relu(gemm_ladder.grouped_mm(x, w.transpose(1, 2), offs)) * 2

    for rows in (400, 1000) if dynamic else (400,):  # a second row count: the same graph when dynamic
        x = torch.randn(rows, k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda")
        offs = _offs([100, 0, rows - 150, 50])
        got = f(x, w, offs)
        want = torch.relu(grouped_mm_direct(x, w.transpose(1, 2), offs)) * 2
        assert torch.equal(got, want), f"rows {rows} (seed {seed})"


def test_autograd_grad_x_and_grad_w():
    seed = _seed()
    sizes = [40, 0, 130, 1, 85]
    e, n, k = len(sizes), 192, 128
    x = torch.randn(sum(sizes), k, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    w = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    bias = torch.randn(e, n, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    offs = _offs(sizes)
    gy = torch.randn(sum(sizes), n, dtype=torch.bfloat16, device="cuda")
    gemm_ladder.grouped_linear(x, w, offs, bias).backward(gy)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, bias))
    ends = offs.tolist()
    outs, start = [], 0
    for i, end in enumerate(ends):
        outs.append(xr[start:end] @ wr[i].T + br[i])
        start = end
    torch.cat(outs).backward(gy.double())
    for name, got, ref in (("grad_x", x.grad, xr.grad), ("grad_w", w.grad, wr.grad), ("grad_bias", bias.grad, br.grad)):
        err = (got.double() - ref).norm() / ref.norm().clamp_min(1e-30)
        assert err < 2e-2, f"{name}: rel err {err:.3g} (seed {seed})"


def test_empty_problems_launch_nothing():
    x = torch.randn(0, 64, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(3, 32, 64, dtype=torch.bfloat16, device="cuda")
    offs = torch.zeros(3, dtype=torch.int32, device="cuda")
    assert gemm_ladder.grouped_mm(x, w.transpose(1, 2), offs).shape == (0, 32)
    x = torch.randn(10, 0, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(3, 32, 0, dtype=torch.bfloat16, device="cuda")
    out = gemm_ladder.grouped_mm(x, w.transpose(1, 2), _offs([4, 0, 6]))
    assert torch.equal(out, torch.zeros_like(out))


KSIZES = [
    [64, 64, 64],  # whole K tiles
    [0, 5, 0, 1, 300, 0],  # empty (zeros), one-row, unaligned
    [37, 129, 70, 255, 3],  # K ranges starting and ending mid-tile
    [1000],
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sizes", KSIZES)
@pytest.mark.parametrize("m,n", [(128, 256), (200, 136)])
def test_grouped_along_k_matches_reference(dtype, sizes, m, n):
    """2-D x 2-D: out[e] = a[:, K_e] @ b[K_e, :] with a = x.t() (x (R, M) row-major) and b (R, N)."""
    seed = _seed()
    rows = sum(sizes) + 9  # rows past offs[-1]: in no group
    x = torch.randn(rows, m, dtype=dtype, device="cuda")
    b = torch.randn(rows, n, dtype=dtype, device="cuda")
    offs = _offs(sizes)
    for bn in (128, 256):
        _poison((len(sizes), m, n), dtype)
        out = grouped_mm_direct(x.t(), b, offs, bn=bn)
        assert out.shape == (len(sizes), m, n)
        start = 0
        for e, end in enumerate(offs.tolist()):
            if end == start:
                assert torch.equal(out[e], torch.zeros_like(out[e])), f"empty group {e} not zeros (seed {seed})"
                continue
            _check(out[e], x[start:end].t().contiguous(), b[start:end].t().contiguous()[None], [m], dtype, seed,
                   tag=f"k-grouped bn {bn} group {e}")
            start = end


def test_grouped_along_k_masks_the_neighbours_rows():
    """Inf and NaN in the rows of group 1 never reach groups 0 and 2 (their last K tiles share its rows)."""
    seed = _seed()
    sizes = [70, 10, 100]
    x = torch.randn(180, 128, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(180, 128, dtype=torch.bfloat16, device="cuda")
    x[75, :] = float("inf")
    b[72, :] = float("nan")
    out = gemm_ladder.grouped_mm(x.t(), b, _offs(sizes))
    assert torch.isfinite(out[0]).all() and torch.isfinite(out[2]).all(), f"seed {seed}"
    assert torch.isnan(out[1]).all(), f"group 1's NaN row and Inf column must reach every element (seed {seed})"


def test_autograd_grouped_mm_2d3d():
    seed = _seed()
    sizes = [50, 0, 140, 1]
    e, n, k = len(sizes), 136, 192
    x = torch.randn(sum(sizes), k, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    w = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda")
    b = w.transpose(1, 2).detach().requires_grad_()
    offs = _offs(sizes)
    gy = torch.randn(sum(sizes), n, dtype=torch.bfloat16, device="cuda")
    gemm_ladder.grouped_mm(x, b, offs).backward(gy)
    xr, br = x.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    outs, start = [], 0
    for i, end in enumerate(offs.tolist()):
        outs.append(xr[start:end] @ br[i])
        start = end
    torch.cat(outs).backward(gy.double())
    for name, got, ref in (("grad_a", x.grad, xr.grad), ("grad_b", b.grad, br.grad)):
        err = (got.double() - ref).norm() / ref.norm().clamp_min(1e-30)
        assert err < 2e-2, f"{name}: rel err {err:.3g} (seed {seed})"


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_layout_writes_only_the_counted_rows(dtype):
    seed = _seed()
    e, m_max, n, k = 6, 40, 136, 256
    counts = torch.tensor([3, 0, 40, 1, 77, -2], dtype=torch.int32, device="cuda")  # clamped to [0, M_max]
    a = torch.randn(e, m_max, k, dtype=dtype, device="cuda")
    w = torch.randn(e, n, k, dtype=dtype, device="cuda")
    from gemm_ladder.api_grouped import grouped_mm_masked_direct

    for call in (grouped_mm_masked_direct, gemm_ladder.grouped_mm_masked):
        _poison((e, m_max, n), dtype)
        got = call(a, w.transpose(1, 2), counts)
        for i, c in enumerate(counts.clamp(0, m_max).tolist()):
            if c:
                _check(got[i, :c], a[i, :c], w[i:i + 1], [c], dtype, seed, tag=f"masked expert {i}")


def test_masked_layout_under_a_cuda_graph():
    seed = _seed()
    e, m_max, n, k = 8, 16, 256, 512
    a = torch.randn(e, m_max, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda")
    counts = torch.full((e,), 4, dtype=torch.int32, device="cuda")
    gemm_ladder.grouped_mm_masked(a, w.transpose(1, 2), counts)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = gemm_ladder.grouped_mm_masked(a, w.transpose(1, 2), counts)
    for cs in ([4] * e, [0, 16, 1, 0, 0, 3, 9, 2]):
        counts.copy_(torch.tensor(cs, dtype=torch.int32))
        g.replay()
        torch.cuda.synchronize()
        for i, c in enumerate(cs):
            if c:
                _check(out[i, :c], a[i, :c], w[i:i + 1], [c], torch.bfloat16, seed, tag=f"graph expert {i}")


def test_a_moe_layer_trains_like_torch():
    """A top-1 mixture-of-experts MLP (router, sort by expert, grouped up and down projections with SiLU)
    trained for a few SGD steps through grouped_linear, and the same layer through a loop of torch
    matmuls per expert: the losses match step by step."""
    seed = _seed()
    e, d, h, tokens = 4, 64, 128, 512
    router = torch.randn(d, e, device="cuda") / d**0.5
    params = [torch.randn(e, h, d, device="cuda") / d**0.5, torch.randn(e, h, device="cuda") * 0.1,
              torch.randn(e, d, h, device="cuda") / h**0.5]
    ours = [p.to(torch.bfloat16).requires_grad_() for p in params]
    ref = [p.to(torch.bfloat16).requires_grad_() for p in params]
    x = torch.randn(tokens, d, device="cuda").to(torch.bfloat16)
    target = torch.randn(tokens, d, device="cuda").to(torch.bfloat16)
    expert = (x.float() @ router).argmax(1)
    order = expert.argsort(stable=True)
    xs, ts = x[order], target[order]
    offs = torch.bincount(expert, minlength=e).cumsum(0).to(torch.int32)
    ends = [0] + offs.tolist()

    def ours_step():
        hid = gemm_ladder.grouped_linear(xs, ours[0], offs, ours[1], activation="silu")
        return ((gemm_ladder.grouped_linear(hid, ours[2], offs) - ts).float() ** 2).mean()

    def ref_step():
        outs = []
        for i in range(e):
            s, t = ends[i], ends[i + 1]
            hid = torch.nn.functional.silu(xs[s:t] @ ref[0][i].T + ref[1][i])
            outs.append(hid @ ref[2][i].T)
        return ((torch.cat(outs) - ts).float() ** 2).mean()

    for step in range(5):
        losses = []
        for params_, fn in ((ours, ours_step), (ref, ref_step)):
            loss = fn()
            loss.backward()
            with torch.no_grad():
                for p in params_:
                    p -= 0.5 * p.grad
                    p.grad = None
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 2e-2 * abs(losses[1]), f"step {step}: {losses} (seed {seed})"


# --- the cluster build (cluster=2: pairs of M tiles sharing the weight tile by multicast) ---------------
# Forced through grouped_mm_direct(cluster=2) whatever the route's rule says; each output checked against
# float64 per group and, bit for bit, against the cluster-1 build (the same wgmma sequence on the same
# data per tile: sharing B changes where its bytes come from, not what they are).
CSIZES = [
    [129, 1, 300, 0, 128, 257],  # odd M-tile counts (2, 1, 3, 0, 1, 3): pairs straddle two groups
    [0, 5, 0, 1, 300, 0],  # empty and one-row groups, empty at both ends
    [1, 1, 1, 1, 1, 1, 1],  # one row each: every pair straddles, the last rank has no tile
    [512, 256],  # every pair shared
    [37, 129, 64, 255, 3, 0, 511],  # groups ending mid-tile
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sizes", CSIZES)
@pytest.mark.parametrize("n,k", [(256, 128), (200, 72), (384, 1000)])
def test_cluster_build_matches_reference(dtype, sizes, n, k):
    seed = _seed()
    e = len(sizes)
    rows = sum(sizes) + 7  # rows past offs[-1]: not written
    x = torch.randn(rows, k, dtype=dtype, device="cuda")
    w = torch.randn(e, n, k, dtype=dtype, device="cuda")
    offs = _offs(sizes)
    ends = offs.tolist()
    for bn in (128, 256):
        for major in ("k", "mn"):  # the weight K-major (forward) or N-major (grad_x = grad_y @ w[e])
            b = w.transpose(1, 2) if major == "k" else w.transpose(1, 2).contiguous()
            from gemm_ladder.library.grouped import grouped_gemm

            out = torch.full((rows, n), float("nan"), dtype=dtype, device="cuda")
            grouped_gemm(bn, major, cluster=2).launch(x, b.transpose(1, 2), offs, out)
            tag = f"cluster 2 bn {bn} {major}-major"
            _check(out, x, w, ends, dtype, seed, tag=tag)
            assert torch.isnan(out[ends[-1]:]).all(), f"{tag}: rows past offs[-1] were written (seed {seed})"
            one = grouped_mm_direct(x, b, offs, bn=bn, cluster=1)
            assert torch.equal(out[:ends[-1]], one[:ends[-1]]), f"{tag}: differs from the cluster-1 build (seed {seed})"
            again = grouped_mm_direct(x, b, offs, bn=bn, cluster=2)
            assert torch.equal(again[:ends[-1]], out[:ends[-1]]), f"{tag}: not bitwise repeatable (seed {seed})"


@pytest.mark.parametrize("dtype", DTYPES)
def test_cluster_build_bias_and_fp32_out(dtype):
    seed = _seed()
    sizes = [10, 0, 130, 7, 129]
    e, n, k = len(sizes), 136, 200
    x = torch.randn(sum(sizes), k, dtype=dtype, device="cuda")
    w = torch.randn(e, n, k, dtype=dtype, device="cuda")
    bias = torch.randn(e, n, dtype=dtype, device="cuda")
    offs = _offs(sizes)
    _poison((sum(sizes), n), dtype)
    got = grouped_mm_direct(x, w.transpose(1, 2), offs, bias=bias, cluster=2)
    _check(got, x, w, offs.tolist(), dtype, seed, bias=bias, tag="cluster 2 bias")
    got32 = grouped_mm_direct(x, w.transpose(1, 2), offs, out_dtype=torch.float32, cluster=2)
    assert got32.dtype == torch.float32
    _check(got32, x, w, offs.tolist(), dtype, seed, tag="cluster 2 fp32 out")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m_max,counts", [(40, [3, 0, 40, 1, 77, -2]), (300, [129, 0, 300, 1, 257, 200])])
def test_cluster_build_masked_layout(dtype, m_max, counts):
    seed = _seed()
    e, n, k = len(counts), 136, 256
    counts = torch.tensor(counts, dtype=torch.int32, device="cuda")
    a = torch.randn(e, m_max, k, dtype=dtype, device="cuda")
    w = torch.randn(e, n, k, dtype=dtype, device="cuda")
    from gemm_ladder.api_grouped import grouped_mm_masked_direct

    for bn in (128, 256):
        _poison((e, m_max, n), dtype)
        got = grouped_mm_masked_direct(a, w.transpose(1, 2), counts, bn=bn, cluster=2)
        one = grouped_mm_masked_direct(a, w.transpose(1, 2), counts, bn=bn, cluster=1)
        for i, c in enumerate(counts.clamp(0, m_max).tolist()):
            if c:
                _check(got[i, :c], a[i, :c], w[i:i + 1], [c], dtype, seed, tag=f"cluster 2 masked bn {bn} expert {i}")
                assert torch.equal(got[i, :c], one[i, :c]), f"masked expert {i}: differs from cluster 1 (seed {seed})"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sizes", KSIZES)
@pytest.mark.parametrize("m,n", [(128, 256), (200, 136), (384, 136)])
def test_cluster_build_grouped_along_k(dtype, sizes, m, n):
    """The weight gradient on the cluster build: M = 384 is three M tiles (the last pair's rank 1 has no
    tile: B loaded whole by rank 0), 128 one (never shared), 200 two (always shared)."""
    seed = _seed()
    rows = sum(sizes) + 9
    x = torch.randn(rows, m, dtype=dtype, device="cuda")
    b = torch.randn(rows, n, dtype=dtype, device="cuda")
    offs = _offs(sizes)
    for bn in (128, 256):
        _poison((len(sizes), m, n), dtype)
        out = grouped_mm_direct(x.t(), b, offs, bn=bn, cluster=2)
        one = grouped_mm_direct(x.t(), b, offs, bn=bn, cluster=1)
        assert torch.equal(out, one), f"k-grouped cluster 2 bn {bn}: differs from cluster 1 (seed {seed})"
        start = 0
        for e, end in enumerate(offs.tolist()):
            if end == start:
                assert torch.equal(out[e], torch.zeros_like(out[e])), f"empty group {e} not zeros (seed {seed})"
                continue
            _check(out[e], x[start:end].t().contiguous(), b[start:end].t().contiguous()[None], [m], dtype, seed,
                   tag=f"k-grouped cluster 2 bn {bn} group {e}")
            start = end
        assert torch.equal(grouped_mm_direct(x.t(), b, offs, bn=bn, cluster=2), out), f"not repeatable (seed {seed})"


def test_cluster_build_along_k_masks_the_neighbours_rows():
    """As test_grouped_along_k_masks_the_neighbours_rows, on the cluster build: each CTA masks its own
    copy of a stage whose B half came from the peer."""
    seed = _seed()
    sizes = [70, 10, 100]
    x = torch.randn(180, 256, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(180, 256, dtype=torch.bfloat16, device="cuda")
    x[75, :] = float("inf")
    b[72, :] = float("nan")
    for bn in (128, 256):
        out = grouped_mm_direct(x.t(), b, _offs(sizes), bn=bn, cluster=2)
        assert torch.isfinite(out[0]).all() and torch.isfinite(out[2]).all(), f"bn {bn} (seed {seed})"
        assert torch.isnan(out[1]).all(), f"bn {bn}: group 1's NaN row must reach every element (seed {seed})"


def test_the_route_takes_the_cluster_build_at_long_k():
    """The public call at K = 2048 with a K-major weight runs the cluster build (library/grouped.py
    choose_cluster), checked against float64 and bit for bit against the forced cluster-1 build."""
    seed = _seed()
    sizes = [300, 0, 129, 1, 640]
    e, n, k = len(sizes), 256, 2048
    x = torch.randn(sum(sizes), k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda")
    offs = _offs(sizes)
    assert gemm_ladder.explain_grouped_mm(x, w.transpose(1, 2), offs)["cluster"] == 2
    out = gemm_ladder.grouped_mm(x, w.transpose(1, 2), offs)
    _check(out, x, w, offs.tolist(), torch.bfloat16, seed, tag="route at K 2048")
    assert torch.equal(out, grouped_mm_direct(x, w.transpose(1, 2), offs, cluster=1)), f"seed {seed}"


# --- the panel ring's TMA store (bf16/fp16 outputs) against the register store -------------------------
# Groups of whole 64-row slices (TMA), partial ones (registers), empty and one-row groups. Those tests'
# tiles are fewer than the SMs; the carried panel (a CTA's next tile storing its last panel) has its own
# tests below, with more tiles than CTAs.
STORE_SIZES = [0, 64, 1, 128, 200, 0, 256, 63, 640, 7, 384, 129]


def _both_stores(monkeypatch, run) -> dict:
    """run() under grouped.STORE_DEFAULT "tma" and "registers" (the same build): the two outputs."""
    from gemm_ladder.library import grouped

    outs = {}
    for store in grouped.STORES:
        monkeypatch.setattr(grouped, "STORE_DEFAULT", store)
        outs[store] = run()
    return outs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bn,major,cluster", [(128, "k", 1), (256, "k", 1), (256, "k", 2), (256, "mn", 1),
                                              (128, "k", 2)])
@pytest.mark.parametrize("bias", [False, True])
def test_tma_store_equals_the_register_store_along_m(monkeypatch, dtype, bn, major, cluster, bias):
    """Bit for bit the register store's output (a bias added while packing), float64-right per group, rows
    past offs[-1] left NaN."""
    from gemm_ladder.library.grouped import grouped_gemm

    seed = _seed()
    n, k, e = 384, 520, len(STORE_SIZES)
    offs_list = torch.tensor(STORE_SIZES).cumsum(0).tolist()
    rows = offs_list[-1] + 5
    x = torch.randn(rows, k, dtype=dtype, device="cuda")
    w_nk = torch.randn(e, n, k, dtype=dtype, device="cuda") / k**0.5
    w = w_nk if major == "k" else w_nk.transpose(1, 2).contiguous().transpose(1, 2)  # N-major: stride(1) == 1
    b = torch.randn(e, n, dtype=dtype, device="cuda") if bias else None
    kern = grouped_gemm(bn, major, bias=bias, cluster=cluster)
    offs = _offs(STORE_SIZES)

    def run():
        out = torch.full((rows, n), float("nan"), dtype=dtype, device="cuda")
        kern.launch(x, w, offs, out, b)
        return out

    outs = _both_stores(monkeypatch, run)
    end = offs_list[-1]
    assert torch.equal(outs["tma"][:end].view(torch.int16), outs["registers"][:end].view(torch.int16)), f"seed {seed}"
    assert outs["tma"][end:].isnan().all() and outs["registers"][end:].isnan().all()
    _check(outs["tma"], x, w_nk, offs_list, dtype, seed, bias=b, tag=f"tma bn {bn} {major} c{cluster}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bn,cluster", [(128, 1), (256, 1), (128, 2)])
@pytest.mark.parametrize("m,n", [(200, 384), (128, 136)])
def test_tma_store_equals_the_register_store_along_k(monkeypatch, dtype, bn, cluster, m, n):
    """Grouped along K (the weight gradient): the rank-3 output map clips M and N; empty groups zeros."""
    from gemm_ladder.library.grouped import grouped_gemm

    seed = _seed()
    sizes = [0, 64, 1, 300, 0, 129, 512]
    total = sum(sizes)
    a = torch.randn(total, m, dtype=dtype, device="cuda").T  # (M, total K), stride(0) == 1
    bk = torch.randn(total, n, dtype=dtype, device="cuda")
    kern = grouped_gemm(bn, "mn", k_grouped=True, cluster=cluster)
    offs = _offs(sizes)

    def run():
        out = torch.full((len(sizes), m, n), float("nan"), dtype=dtype, device="cuda")
        kern.launch_k(a, bk, offs, out)
        return out

    outs = _both_stores(monkeypatch, run)
    assert torch.equal(outs["tma"].view(torch.int16), outs["registers"].view(torch.int16)), f"seed {seed}"
    start = 0
    for g, z in enumerate(sizes):
        ref = a[:, start:start + z].double() @ bk[start:start + z].double()
        got = outs["tma"][g].double()
        assert not got.isnan().any(), f"group {g} (seed {seed})"
        if z == 0:
            assert (got == 0).all()
        else:
            assert (got - ref).norm() / ref.norm() <= 2e-2 * 0.25, f"group {g} (seed {seed})"
        start += z


def test_an_output_tma_cannot_write_goes_from_registers(monkeypatch):
    """A pitch of 385 elements (770 bytes): the launch passes tma_store 0; the result is right."""
    from gemm_ladder.library.grouped import grouped_gemm

    seed = _seed()
    n, k = 384, 256
    offs_list = torch.tensor(STORE_SIZES).cumsum(0).tolist()
    x = torch.randn(offs_list[-1], k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(len(STORE_SIZES), n, k, dtype=torch.bfloat16, device="cuda") / k**0.5
    out = torch.full((offs_list[-1], n + 1), float("nan"), dtype=torch.bfloat16, device="cuda")[:, :n]
    grouped_gemm(256).launch(x, w, _offs(STORE_SIZES), out)
    _check(out, x, w, offs_list, torch.bfloat16, seed, tag="pitch 385")
    assert out.stride(0) == n + 1


@pytest.mark.parametrize("bn,cluster,ring", [(128, 1, 1), (256, 1, 1), (128, 2, 1), (256, 2, 1), (256, 1, 4),
                                             (128, 1, 2)])  # a pair with a deeper ring is refused along M (PAIR_RING_HANG)
def test_the_carried_panel_along_m(monkeypatch, bn, cluster, ring):
    """More tiles than CTAs (each CTA stores its tile's last panel during its next tile's first K
    iteration, and after its last tile; with a ring of a buffer per panel, all at the tile's end): bit for
    bit the register store into NaN-poisoned outputs, rows past offs[-1] left NaN, float64-right per
    group; groups of whole and partial slices, empty ones between."""
    from gemm_ladder.library.grouped import grouped_gemm

    seed = _seed()
    sizes = [256, 0, 200, 64, 1, 0, 640, 129, 384, 63, 512, 0, 1000, 77, 256, 300] * 3
    n, k = 1024, 192
    offs_list = torch.tensor(sizes).cumsum(0).tolist()
    rows = offs_list[-1] + 3
    x = torch.randn(rows, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(len(sizes), n, k, dtype=torch.bfloat16, device="cuda") / k**0.5
    kern = grouped_gemm(bn, "k", cluster=cluster, ring=ring)
    # A unit is `cluster` tiles; the grid holds at most 132 // cluster clusters on the H200's 132 SMs.
    assert sum(-(-z // 128) for z in sizes) * (n // bn) // cluster > 132 // cluster, "more units than clusters"

    def run():
        out = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        kern.launch(x, w, _offs(sizes), out)
        return out

    outs = _both_stores(monkeypatch, run)
    end = offs_list[-1]
    assert torch.equal(outs["tma"][:end].view(torch.int16), outs["registers"][:end].view(torch.int16)), f"seed {seed}"
    assert outs["tma"][end:].isnan().all()
    _check(outs["tma"], x, w, offs_list, torch.bfloat16, seed, tag=f"carried bn {bn} c{cluster} r{ring}")


@pytest.mark.parametrize("bn,cluster,ring", [(128, 1, 1), (256, 1, 1), (256, 2, 1), (256, 1, 4), (128, 1, 2),
                                             (256, 2, 4)])
def test_the_carried_panel_along_k(monkeypatch, bn, cluster, ring):
    """Grouped along K with more units than CTAs and empty groups between held slices (finish_held with
    no K tile), on the one-buffer ring and the deeper ones (library/grouped.py RINGS): bit for bit the
    register store, float64-right per group, empty groups zeros."""
    from gemm_ladder.library.grouped import grouped_gemm

    seed = _seed()
    sizes = [300, 0, 64, 129, 0, 0, 512, 1, 200, 0, 77, 256]
    m, n = 512, 768
    total = sum(sizes)
    a = torch.randn(total, m, dtype=torch.bfloat16, device="cuda").T
    bk = torch.randn(total, n, dtype=torch.bfloat16, device="cuda")
    kern = grouped_gemm(bn, "mn", k_grouped=True, cluster=cluster, ring=ring)
    assert len(sizes) * (m // 128) * -(-n // bn) // cluster > 132 // cluster, "more units than clusters"

    def run():
        out = torch.full((len(sizes), m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        kern.launch_k(a, bk, _offs(sizes), out)
        return out

    outs = _both_stores(monkeypatch, run)
    assert torch.equal(outs["tma"].view(torch.int16), outs["registers"].view(torch.int16)), f"seed {seed}"
    start = 0
    for g, z in enumerate(sizes):
        got = outs["tma"][g].double()
        if z == 0:
            assert (got == 0).all(), f"group {g} (seed {seed})"
        else:
            ref = a[:, start:start + z].double() @ bk[start:start + z].double()
            assert (got - ref).norm() / ref.norm() <= 5e-3, f"group {g} (seed {seed})"
        start += z


def test_an_output_row_tma_would_overrun_goes_from_registers():
    """N = 100 in a 104-element pitch: a TMA store would write columns 100-103 (a row's last 16-byte chunk
    whole); the launch stores from registers and the padding keeps its values."""
    from gemm_ladder.library.grouped import grouped_gemm

    seed = _seed()
    n, k = 100, 256
    offs_list = torch.tensor(STORE_SIZES).cumsum(0).tolist()
    x = torch.randn(offs_list[-1], k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(len(STORE_SIZES), n, k, dtype=torch.bfloat16, device="cuda") / k**0.5
    big = torch.full((offs_list[-1], 104), 7.0, dtype=torch.bfloat16, device="cuda")
    grouped_gemm(128).launch(x, w, _offs(STORE_SIZES), big[:, :n])
    assert (big[:, n:] == 7.0).all(), f"the padding was written (seed {seed})"
    _check(big[:, :n], x, w, offs_list, torch.bfloat16, seed, tag="N 100")


@pytest.mark.parametrize("case", ["2d3d", "linear", "batched"])
def test_backward_on_layouts_whose_gradients_break_the_pitch_rule(case):
    """N = 12 (a gradient's row pitch of 24 bytes) and 3 rows per batch (a batched contraction of 6 bytes):
    the forward takes them, the backward pads (api_grouped.with_aligned_pitch, _batched_mm); grads against float64
    autograd of the same values (tests/test_grouped_backward_layouts.py checks the same on the CPU stand-in)."""
    seed = _seed()
    sizes = [5, 0, 7, 1, 131]
    offs = _offs(sizes)
    e, n, k = len(sizes), 12, 64
    if case == "batched":
        a = torch.randn(e, 3, k, dtype=torch.bfloat16, device="cuda").requires_grad_()
    else:
        a = torch.randn(sum(sizes), k, dtype=torch.bfloat16, device="cuda").requires_grad_()
    w = (torch.randn(e, n, k, device="cuda") / 8).to(torch.bfloat16).requires_grad_()
    if case == "2d3d":
        y = gemm_ladder.grouped_mm(a, w.transpose(-2, -1), offs)
    elif case == "linear":
        y = gemm_ladder.grouped_linear(a, w, offs)
    else:
        y = gemm_ladder.grouped_mm(a, w.transpose(-2, -1))
    ar, wr = (t.detach().double().requires_grad_() for t in (a, w))
    if case == "batched":
        ref = ar @ wr.transpose(-2, -1)
    else:
        ends = [0] + offs.tolist()
        ref = torch.cat([ar[s:t] @ wr[i].T for i, (s, t) in enumerate(zip(ends, ends[1:]))])
    gy = torch.randn(y.shape, dtype=torch.float64, device="cuda")
    y.backward(gy.to(torch.bfloat16))
    ref.backward(gy)
    for name, got, want in (("a", a, ar), ("w", w, wr)):
        err = ((got.grad.double() - want.grad).norm() / want.grad.norm()).item()
        assert err < 2e-2, f"{case} grad_{name}: rel err {err:.3g}, seed {seed}"
