"""The ping-pong build of the layouts kernel on the GPU (sm90_gemm.cu's GL_PINGPONG: two consumer
warpgroups take the 64-row tiles in turn): every width and cluster size, TMA panels and the register
store, every operand order at one width, tails in M, N and K, shapes with one tile, with fewer tiles
than CTAs, and with many per consumer; held to the correctness gate's bounds against the float64
reference with NaN-poisoned outputs (padding checked untouched); repeated launches bitwise identical
and equal to the cooperative 64-row build's (each tile's K order is the same); a fused bias + GELU
against float64; and gemm_ladder.linear routing a fused GELU there (dispatch/pingpong.py), through the
host path, out= and a residual.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_pingpong_gpu.py``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F
from test_library_gemm_gpu import LAYOUTS, LayoutCall, gate

from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view

pytestmark = pytest.mark.gpu

WIDTHS = (64, 128, 192, 256)
#: (M, N, K): tails in M, N and K; one tile; fewer tiles than CTAs (each consumer at most one); one row;
#: K of one partial block; many tiles per consumer with short K (8192 x 768 x 320: 128 x 6 tiles of
#: 64 x 128 on 132 CTAs); M tails in the last 64-row tile (333: six tiles, the last 13 rows; 1000: sixteen).
SHAPES = [(1000, 520, 200), (64, 128, 64), (300, 200, 8), (1, 24, 40), (2304, 2048, 1000), (8192, 768, 320),
          (333, 4104, 640), (256, 384, 65)]


@pytest.fixture(scope="module", autouse=True)
def _built_in_parallel():
    jobs = [(bn, cl, reg, dt) for bn in WIDTHS for cl in (2, 1) for reg in (False, True) for dt in ("bf16", "fp16")]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda j: library_gemm("k", "k", j[0], bm=64, pingpong=True, cluster=j[1],
                                             c_from_registers=j[2]).build(j[3]), jobs))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("bn", WIDTHS)
@pytest.mark.parametrize("cluster", (2, 1))
@pytest.mark.parametrize("reg", (False, True), ids=("tma", "registers"))
def test_every_width_and_cluster_on_tail_shapes(bn, cluster, reg):
    fn = LayoutCall("k", "k", bn=bn, split="none", cluster=cluster, bm=64, pingpong=True, c_from_registers=reg)
    for m, n, k in SHAPES:
        gate(fn, m, n, k, "bf16")
    gate(fn, 777, 1000, 300, "fp16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
@pytest.mark.parametrize("bn,cluster", [(128, 2), (256, 1)])
def test_every_operand_order(a_major, b_major, bn, cluster):
    """Every operand order at BN 128 in pairs, and at BN 256 with one CTA (what the route runs)."""
    fn = LayoutCall(a_major, b_major, bn=bn, split="none", bm=64, pingpong=True, cluster=cluster)
    for m, n, k in [(1000, 520, 200), (2304, 2048, 1000), (8192, 768, 320)]:
        gate(fn, m, n, k, "bf16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("activation,m,n,k", [("gelu", 2048, 3072, 768), ("gelu", 2048, 4096, 768),
                                               ("gelu_tanh", 1023, 3072, 768)])
def test_linear_routes_a_fused_gelu_to_pingpong_and_is_right(activation, m, n, k):
    """The public call (the compiled host path, the op's out= variant, a 3-D x, bias + GELU + residual x alpha):
    explain names the ping-pong build, and every output is within twice eager torch's error of float64. 2048 x
    3072 x 768 takes the 128-row build (dispatch/pingpong.py's 128-row rule); the other two the 64-row one."""
    import gemm_ladder
    import gemm_ladder.ops

    x, w = random_operands(m, n, k, "bf16", "cuda", seed=m)
    bias = torch.randn(n, device="cuda").to(x.dtype)
    res = torch.randn(m, n, device="cuda").to(x.dtype)
    approx = "none" if activation == "gelu" else "tanh"
    e = gemm_ladder.explain(x, w.T, activation=activation).to_dict()
    assert e["kernel"]["consumers"] == "ping-pong" and "consumer_schedule" in e["heuristic"]

    def check(out, ref, eager):
        rel = ((out.double() - ref).norm() / ref.norm()).item()
        rel_eager = ((eager.double() - ref).norm() / ref.norm()).item()
        assert rel <= 2 * rel_eager + 2 ** -8, (rel, rel_eager)

    ref = F.gelu(x.double() @ w.double().T + bias.double(), approximate=approx)
    eager = F.gelu(F.linear(x, w, bias), approximate=approx)
    for _ in range(2):  # planned, then replayed by the host path
        check(gemm_ladder.linear(x, w, bias, activation=activation), ref, eager)
    check(gemm_ladder.linear(x.view(2, m // 2, k) if m % 2 == 0 else x.view(1, m, k), w, bias,
                             activation=activation).view(m, n), ref, eager)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=x.dtype)
    gemm_ladder.ops.linear(x, w, bias, activation=activation, out=out)  # linear_out: the uncached fused path
    check(out, ref, eager)
    ref_r = F.gelu(0.5 * (x.double() @ w.double().T) + bias.double(), approximate=approx) + res.double()
    eager_r = F.gelu(0.5 * F.linear(x, w) + bias, approximate=approx) + res
    check(gemm_ladder.linear(x, w, bias, activation=activation, residual=res, alpha=0.5), ref_r, eager_r)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bn", (128, 256))
def test_bitwise_repeatable_and_equal_to_the_cooperative_64_row_build(bn):
    m, n, k = 8192, 768, 320
    a, b = random_operands(m, n, k, "bf16", "cuda", seed=bn)
    pp = LayoutCall("k", "k", bn=bn, split="none", bm=64, pingpong=True)
    first = pp(a, b).clone()
    for _ in range(4):
        assert torch.equal(pp(a, b), first)
    assert torch.equal(LayoutCall("k", "k", bn=bn, split="none", bm=64)(a, b), first)


def test_a_split_other_than_none_is_refused_before_launch():
    kernel = library_gemm("k", "k", 128, bm=64, pingpong=True)
    a = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    c = torch.full((256, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="ping-pong"):
        kernel.launch(operand_view(a, k_dim=1), operand_view(a, k_dim=1), c, split="tail")
    assert torch.isnan(c).all()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("activation", ("gelu", "gelu_tanh"))
@pytest.mark.parametrize("bn,reg", [(128, False), (256, False), (128, True)])
def test_fused_bias_and_activation_against_float64(activation, bn, reg):
    from gemm_ladder.dispatch.validate import linear_call

    kernel = library_gemm("k", "k", bn, bm=64, pingpong=True, c_from_registers=reg)
    for m, n, k in [(1000, 520, 200), (4096, 3072, 768)]:
        x, w = random_operands(m, n, k, "bf16", "cuda", seed=m + bn)
        bias = torch.randn(n, device="cuda").to(x.dtype)
        ref = F.gelu(x.double() @ w.double().T + bias.double(), approximate="none" if activation == "gelu" else "tanh")
        c = torch.full((m, n), float("nan"), device="cuda", dtype=x.dtype)
        ep = linear_call(x, w, bias, activation=activation)
        kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, epilogue=ep)
        eager = F.gelu(F.linear(x, w, bias), approximate="none" if activation == "gelu" else "tanh")
        rel = ((c.double() - ref).norm() / ref.norm()).item()
        rel_eager = ((eager.double() - ref).norm() / ref.norm()).item()
        assert rel <= 2 * rel_eager + 2 ** -8, (m, n, k, rel, rel_eager)
