"""The general kernel's 64-row tile with two CTAs per SM (library_gemm(..., ctas_per_sm=2)) on the GPU: two CTAs
resident on every SM, outputs against float64 (the gates' bound and absolute cap) into NaN-poisoned outputs under
every split policy it ranks, tails in M, N and K, bitwise repeatable.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_two_ctas_per_sm_gpu.py``.
"""

from __future__ import annotations

import secrets

import pytest
import torch
import torch.nn.functional as F

from gemm_ladder.contract import reference
from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view

pytestmark = pytest.mark.gpu


def kernel():
    return library_gemm("k", "k", 64, cluster=1, bm=64, ctas_per_sm=2)


def run(x, w, split):
    m, n = x.shape[0], w.shape[0]
    c = torch.full((m, n), float("nan"), dtype=x.dtype, device=x.device)
    kernel().bind(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, split=split)()
    torch.cuda.synchronize()
    return c


def test_two_ctas_are_resident_on_every_sm():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert kernel().loaded("bf16", torch.device("cuda")).max_active_clusters(torch.device("cuda")) == 2 * sms


@pytest.mark.parametrize("split", ("none", "tail", "all"))
@pytest.mark.parametrize("m,n,k,dtype", [(1576, 3072, 1024, "bf16"), (1023, 768, 3072, "fp16"), (333, 1000, 520, "bf16"),
                                         (70, 136, 72, "bf16")])
def test_against_float64(m, n, k, dtype, split):
    seed = secrets.randbits(31)
    x, w = random_operands(m, n, k, dtype, "cuda", seed)
    ref = reference(x, w)
    bound = error_bound(((F.linear(x, w).double() - ref).norm() / ref.norm()).item(), dtype)
    c = run(x, w, split)
    d = c.double() - ref
    assert not torch.isnan(c).any(), f"unwritten outputs, seed {seed}"
    assert (d.norm() / ref.norm()).item() <= bound, f"seed {seed}"
    assert d.abs().max().item() <= absolute_cap(x, w, ref.abs().max().item(), dtype), f"seed {seed}"
    if split != "none":
        assert torch.equal(c, run(x, w, split)), f"not bitwise repeatable, seed {seed}"
