"""The ladder's levels: registry facts and compiles on CPU; correctness, refusals and hangs on a GPU."""

from __future__ import annotations

import pytest
import torch

from gemm_ladder.contract import GemmInputError, OutsideDomainError
from gemm_ladder.gates.correctness import check_correctness
from gemm_ladder.gates.resources import check_level_resources
from gemm_ladder.levels import LEVELS, get_level
from gemm_ladder.shapes import SHAPE_SETS


def test_registry_has_nine_levels_each_with_its_own_source():
    assert sorted(LEVELS) == list(range(1, 10))
    sources = [lvl.source_path for lvl in LEVELS.values()]
    assert len(set(sources)) == 9 and all(p.exists() for p in sources)
    with pytest.raises(KeyError, match="levels"):
        get_level(10)


@pytest.mark.parametrize("number", sorted(LEVELS))
def test_every_level_compiles_and_passes_the_resource_gate(number, use_cache):
    # use_cache: into the run's cache, where the advisor's, show's, climb's and the library's tests find
    # the same builds (not the user's cache, and not compiled twice)
    for dtype in ("bf16", "fp16"):
        result, _ = check_level_resources(LEVELS[number], dtype, "sm_90a")
        assert result.passed, result.messages
        assert result.sass["HGMMA"] > 0 and result.sass["LDL"] == 0 and result.sass["STL"] == 0
        if number >= 4:
            assert result.sass["UTMALDG"] > 0


@pytest.mark.parametrize("number", sorted(LEVELS))
def test_bad_input_is_refused_before_any_launch(number):
    level = LEVELS[number]
    a = torch.randn(64, 64, dtype=torch.bfloat16)
    with pytest.raises(GemmInputError, match="a must be on a cuda device"):
        level(a, a)  # CPU tensors: refused by the device rule, nothing compiled or launched


# ---------------------------------------------------------------------------------------------
gpu = pytest.mark.gpu
EDGE = SHAPE_SETS["edge"]


@gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("number", sorted(LEVELS))
def test_edge_shapes(number, dtype):
    level = LEVELS[number]
    for m, n, k in EDGE:
        result = check_correctness(level, m, n, k, dtype, device="cuda", domain=level.domain)
        assert result.status in ("pass", "refused"), (m, n, k, result)


@gpu
@pytest.mark.timeout(120)
@pytest.mark.parametrize("number", [4, 5, 6, 7, 8, 9])
def test_ring_corner_cases_finish_and_are_right(number):
    """K = one K tile (the warp-specialized levels must not hang), K tiles fewer than and not a multiple
    of the stage count, more tiles than SMs, and odd / prime tile counts for the clusters; one K tile
    (K = 64, K = 8) with more tiles than SMs, where level 9 stores a tile's deferred panels after the
    next tile's main loop instead of inside it."""
    level = LEVELS[number]
    bm, bn, _ = level.tile
    shapes = [(bm, bn, 64), (bm, bn, 128), (bm, bn, 64 * (level.stages + 1)), (bm * 3, bn, 200),
              (bm * 13, bn * 11, 72), (bm * 7 + 8, bn * 3 + 8, 64 * 5), (bm * 13, bn * 11, 64),
              (bm * 13 + 8, bn * 11, 8)]
    for m, n, k in shapes:
        result = check_correctness(level, m, n, k, "bf16", device="cuda", domain=level.domain)
        assert result.status == "pass", (m, n, k, result)


@gpu
def test_tma_levels_refuse_unaligned_rows_naming_the_rule():
    a = torch.randn(256, 100, device="cuda", dtype=torch.bfloat16)[:, :99].contiguous()
    b = torch.randn(256, 99, device="cuda", dtype=torch.bfloat16)
    for number in range(4, 10):
        with pytest.raises(OutsideDomainError, match="16 bytes"):
            LEVELS[number](a, b)
    assert LEVELS[3](a, b).shape == (256, 256)  # the thread-copy path takes any K


@gpu
@pytest.mark.parametrize("number", sorted(LEVELS))
def test_bad_cuda_input_names_the_argument_and_rule(number):
    level = LEVELS[number]
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    cases = [
        ((a.float(), a.float()), "dtype"),
        ((a, a.half()), "share a dtype"),
        ((a[None], a), "2-D"),
        ((a, a[:, :32].contiguous()), "K differs"),
        ((a.t(), a), "contiguous"),
        ((a[:1].expand(64, 64), a), "contiguous"),  # stride-0 rows overlap
    ]
    for (x, y), rule in cases:
        with pytest.raises(GemmInputError, match=rule):
            level(x, y)


@gpu
def test_empty_dimensions_launch_nothing():
    for number in (3, 5, 9):
        a = torch.randn(0, 64, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
        assert LEVELS[number](a, b).shape == (0, 32)
        a = torch.randn(16, 0, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(32, 0, device="cuda", dtype=torch.bfloat16)
        assert torch.count_nonzero(LEVELS[number](a, b)) == 0
