"""The general kernel's 192-row tile (three consumer warpgroups, library/gemm.py UNROUTED_TILE_M) on the GPU:
held to the correctness gate's bounds against float64 on fresh random operands, outputs NaN-poisoned and their
padding checked untouched, at every width it is built for (BN 64 and 128 with the TMA store, 96, 144 and 192 from
registers), both cluster sizes, every stream-K policy, tails in M, N and K (an M that is not a whole number of
192-row tiles, and one smaller than a tile), both dtypes; every operand order at BN 128; repeated launches
bitwise identical.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_tall_tiles_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from test_library_gemm_gpu import LAYOUTS, LayoutCall, gate

from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.library.gemm import SPLITS

pytestmark = pytest.mark.gpu

#: (bn, c_from_registers): every width the 192-row tile is built at.
WIDTHS = [(64, False), (128, False), (96, True), (144, True), (192, True)]
#: (M, N, K): an odd number of 192-row tiles with tails in M, N and K (333: two; 1000: six); K = 8; fewer rows
#: than one tile; one row; whole units deferring panels before a split tail (1500 x 3072 x 1024); K = 65.
SHAPES = [(333, 3072, 640), (1000, 520, 200), (300, 200, 8), (64, 72, 64), (1, 24, 40), (1500, 3072, 1024),
          (385, 384, 65)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("bn,creg", WIDTHS)
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("cluster", [2, 1])
def test_192_row_tiles(bn, creg, split, cluster):
    fn = LayoutCall("k", "k", bn=bn, split=split, cluster=cluster, bm=192, c_from_registers=creg)
    for m, n, k in SHAPES:
        gate(fn, m, n, k, "bf16")
    gate(fn, 777, 1000, 300, "fp16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("a_major,b_major", [lay for lay in LAYOUTS if lay != ("k", "k")])
def test_192_row_tiles_read_every_operand_order(a_major, b_major):
    """MN-major A is loaded as three 64-row boxes a stage, MN-major B as the 128-row build loads it."""
    for split in ("tail", "all"):
        fn = LayoutCall(a_major, b_major, bn=128, split=split, bm=192)
        for m, n, k in [(1000, 520, 200), (333, 384, 2048), (2304, 2048, 1000)]:
            gate(fn, m, n, k, "bf16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("split", ["none", "tail", "all", "wave"])
def test_192_row_tiles_are_bitwise_repeatable(split):
    """Five launches into fresh NaN-poisoned outputs agree bit for bit (split partials added in K order,
    whichever CTA arrives last), both stores, both cluster sizes."""
    m, n, k = 1000, 1536, 4096
    a, b = random_operands(m, n, k, "bf16", "cuda", seed=192)
    for bn, creg in ((128, False), (192, True)):
        for cluster in (2, 1):
            fn = LayoutCall("k", "k", bn=bn, split=split, cluster=cluster, bm=192, c_from_registers=creg)
            first = fn(a, b).clone()
            for _ in range(4):
                assert torch.equal(fn(a, b), first)
