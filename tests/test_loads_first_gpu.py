"""The bias epilogue with its loads first (library/epilogue.py VECTOR_LOADS_FIRST, sm90_gemm.cu's
epilogue_fragment) on the GPU: the same per-element math as panel by panel, so the two builds' outputs must
be bitwise equal, and both within the float64 bound, over the general kernel's builds, every split, both
orientations, and tails in M and N."""

from __future__ import annotations

import pytest
import torch

from test_epilogue_gpu import BF16, assert_epilogue_close, rnd

from gemm_ladder.dispatch.validate import linear_call
from gemm_ladder.library import epilogue as epilogue_module
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view

pytestmark = pytest.mark.gpu

#: (BN, BM, cluster, orientations): the builds a bias-only linear takes on the issue's shapes (BN 256 and
#: 192, the 64 x 128 one-consumer tile) and the narrowest (BN 64, one panel: nothing to reorder).
BUILDS = [(256, 128, 2, (False, True)), (192, 128, 2, (False,)), (128, 64, 1, (False, True)), (64, 128, 2, (False,))]
#: Tails in M and N (N and M multiples of 8: 16-byte rows for the TMA store), a K tail, and a short K.
SHAPES = [(1000, 520, 264), (304, 1200, 4096), (129, 1032, 776)]


def _launch(kernel, x, w, call, swap: bool, split: str, loads_first: bool, monkeypatch) -> torch.Tensor:
    monkeypatch.setattr(epilogue_module, "VECTOR_LOADS_FIRST", loads_first)  # read where the source is made
    m, n = x.shape[0], w.shape[0]
    assert call.oriented(swap).loads_first() is loads_first
    if swap:
        c = torch.full((n, m), float("nan"), device="cuda", dtype=BF16).T
        kernel.launch(operand_view(w, k_dim=1), operand_view(x, k_dim=1), c.T, split=split, epilogue=call.oriented(True))
    else:
        c = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
        kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, split=split, epilogue=call)
    torch.cuda.synchronize()
    return c


@pytest.mark.parametrize("bn, bm, cluster, orientations", BUILDS, ids=[f"bn{b[0]}_bm{b[1]}" for b in BUILDS])
@pytest.mark.parametrize("alpha", [1.0, 0.5], ids=["bias", "alpha_bias"])
def test_loads_first_matches_panel_by_panel_bitwise(monkeypatch, bn, bm, cluster, orientations, alpha):
    kernel = library_gemm("k", "k", bn, bm=bm, cluster=cluster)
    for m, n, k in SHAPES:
        x, w, b = rnd(m, k), rnd(n, k), rnd(n)
        call = linear_call(x, w, b, alpha=alpha)
        for swap in orientations:
            for split in ("none", "tail", "all"):
                outs = [_launch(kernel, x, w, call, swap, split, lf, monkeypatch) for lf in (False, True)]
                for c in outs:
                    assert_epilogue_close(c, x, w, call)
                assert torch.equal(outs[0], outs[1]), (bn, bm, m, n, k, swap, split)
