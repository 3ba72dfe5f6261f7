"""The general kernel's measuring build with two wgmma groups in flight (library_gemm(..., release_lag=2):
cluster_ring.cuh's GL_RELEASE_LAG) on the GPU: the same products in the same order as the shipped build,
so its outputs are bit for bit the shipped build's, whole tiles and split tails, one-iteration tiles
(the range's last stage released alone) included."""

from __future__ import annotations

import pytest
import torch

from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("cfg,split,shape", [
    (dict(bn=64, bm=64, cluster=1), "none", (512, 1024, 4096)),  # one tile a CTA, 64 K iterations
    (dict(bn=64, bm=64, cluster=1), "none", (4096, 1024, 64)),  # one K iteration a tile: its stage released alone
    (dict(bn=128, bm=64, cluster=1), "none", (1023, 768, 3072)),
    (dict(bn=128), "all", (512, 1024, 4096)),  # split over every SM: segments of a few iterations, 2-CTA pairs
    (dict(bn=256), "tail", (1576, 1024, 4096)),
    (dict(bn=256, bm=64, pingpong=True, cluster=1), "none", (2048, 2048, 1024)),
])
def test_release_lag_2_equals_the_shipped_build(cfg, split, shape):
    m, n, k = shape
    x, w = random_operands(m, n, k, "bf16", "cuda", seed=11)
    a, b = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
    outs = []
    for lag in (1, 2):
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        library_gemm("k", "k", release_lag=lag, **cfg).bind(a, b, c, split=split)()
        torch.cuda.synchronize()
        outs.append(c)
    assert not outs[1].isnan().any()
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
    ref = x.double() @ w.double().T
    assert ((outs[1].double() - ref).norm() / ref.norm()).item() < 1e-2
