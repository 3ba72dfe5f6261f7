"""The general kernel's cooperative 256-row tile on the GPU (sm90_gemm.cu at BM 256: two consumer warpgroups of
128 rows on one tile, each holding two 64-row fragments; every unit whole): the TMA store at BN 64-192 in pairs
and on one CTA, the register store at BN 96-192, every operand order; tails in M, N and K, one tile, fewer tiles
than CTAs, many per CTA; held to the correctness gate's bounds against the float64 reference with NaN-poisoned
outputs; repeated launches bitwise identical and equal to the cooperative 128-row build's unsplit (each row's K
order and wgmma steps are the same); a fused bias and activation against float64, and a residual (read by row:
each consumer's and fragment's rows).

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_tall_tile_gpu.py``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_library_gemm_gpu import LAYOUTS, LayoutCall, gate
from fused_cases import check_bias_and_activation, check_repeatable_and_equal, check_residual
from test_pingpong_gpu import SHAPES

from gemm_ladder.library.gemm import TALL_TILE_M, library_gemm

pytestmark = pytest.mark.gpu

#: (BN, register store) built at 256 rows: the TMA store at BN 64, 128 and 192, the register store to 192.
BUILDS = ((64, False), (128, False), (192, False), (96, True), (128, True), (144, True), (192, True))


@pytest.fixture(scope="module", autouse=True)
def _built_in_parallel():
    jobs = [(bn, cl, reg, dt) for bn, reg in BUILDS for cl in (2, 1) for dt in ("bf16", "fp16")]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda j: library_gemm("k", "k", j[0], bm=TALL_TILE_M, cluster=j[1],
                                             c_from_registers=j[2]).build(j[3]), jobs))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("bn,reg", BUILDS, ids=lambda v: str(v))
@pytest.mark.parametrize("cluster", (2, 1))
def test_every_width_and_cluster_on_tail_shapes(bn, reg, cluster):
    fn = LayoutCall("k", "k", bn=bn, split="none", cluster=cluster, bm=TALL_TILE_M, c_from_registers=reg)
    for m, n, k in SHAPES + [(1576, 3072, 1024), (255, 4608, 136), (1000, 4608, 520)]:
        gate(fn, m, n, k, "bf16")
    gate(fn, 777, 1000, 300, "fp16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
@pytest.mark.parametrize("cluster", (2, 1))
def test_every_operand_order(a_major, b_major, cluster):
    fn = LayoutCall(a_major, b_major, bn=128, split="none", bm=TALL_TILE_M, cluster=cluster)
    for m, n, k in [(1000, 520, 200), (2304, 2048, 1000), (8192, 768, 320)]:
        gate(fn, m, n, k, "bf16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bn,reg,cluster", [(128, False, 1), (128, False, 2), (64, False, 1), (144, True, 1),
                                            (192, False, 1)])
def test_bitwise_repeatable_and_equal_to_the_cooperative_128_row_build(bn, reg, cluster):
    tall = LayoutCall("k", "k", bn=bn, split="none", bm=TALL_TILE_M, cluster=cluster, c_from_registers=reg)
    coop = LayoutCall("k", "k", bn=bn, split="none", bm=128, cluster=cluster, c_from_registers=reg)
    check_repeatable_and_equal(tall, coop, (1576, 3072, 1024), seed=bn + cluster)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("activation", (None, "gelu", "gelu_tanh", "silu"))
@pytest.mark.parametrize("bn,reg", [(128, False), (64, False), (192, False), (128, True), (192, True)])
def test_fused_bias_and_activation_against_float64(activation, bn, reg):
    kernel = library_gemm("k", "k", bn, bm=TALL_TILE_M, cluster=1, c_from_registers=reg)
    check_bias_and_activation(kernel, activation, [(1000, 520, 200), (1576, 3072, 1024)], seed=bn)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bn,reg,cluster", [(64, False, 2), (144, True, 1), (128, True, 2), (192, True, 1)])
def test_a_residual_finds_each_fragments_rows(bn, reg, cluster):
    """bias + GELU (tanh) + beta x residual: the residual is read by row, so a fragment's epilogue given the
    wrong rows (its consumer's 128 c or its own 64 r offset) fails here where a bias alone would not; M tails
    in the last tile."""
    kernel = library_gemm("k", "k", bn, bm=TALL_TILE_M, cluster=cluster, c_from_registers=reg)
    check_residual(kernel, [(333, 520, 200), (1576, 1024, 256)], seed=bn + cluster)
