"""Every level protocol (4..9) audits clean over the bounded matrix: stages 2..4 (level 4: 1; levels
5-9 refuse one stage, as their kernels do), K iterations 1..5, tiles per CTA 1..3, the two-CTA
protocols (level 8, level 9 clustered) included; and what a level's kernel refuses, its protocol
refuses too, naming the rule.
Level 9 is its shipped epilogue (2 panel buffers per consumer warpgroup, 4 panels per tile).

Measured on the 2-core CPU CI machine: the whole matrix takes about 24 s (level 9 clustered 20 s,
level 8 1.3 s, the single-CTA levels 0.5 s), through the auditor's reduced searches (atomic blocks,
TMA completions in bursts). Before them the full search did not finish the two-CTA part: level 8
and level 9 clustered each ran past pytest's 10-minute limit (level 8 before reaching S=4, K=2, T=2),
so CI ran a reduced matrix and the whole one was opt-in.
"""

from __future__ import annotations

import pytest

from gemm_ladder.audit import LevelRefused, audit, protocol_for_level
from gemm_ladder.runtime.compiler import KERNEL_ROOT


def matrix(level: int):
    stages = [1] if level == 4 else [2, 3, 4]
    return [(s, k, t) for s in stages for k in range(1, 6) for t in range(1, 4)]


@pytest.mark.parametrize("level", [4, 5, 6, 7, 9])
def test_single_cta_levels_clean_over_the_matrix(level):
    for s, k, t in matrix(level):
        r = audit(protocol_for_level(level, k_iters=k, tiles=t, stages=s))
        assert r.ok, f"S={s} K={k} T={t}\n{r.render()}"


@pytest.mark.parametrize("level,cluster", [(8, 2), (9, 2)])
def test_cluster_levels_clean_over_the_matrix(level, cluster):
    for s, k, t in matrix(level):
        r = audit(protocol_for_level(level, k_iters=k, tiles=t, stages=s, cluster=cluster), max_states=5_000_000)
        assert r.ok, f"S={s} K={k} T={t}\n{r.render()}"


def test_level9_audit_constants_are_the_shipped_kernels():
    """The auditor's level-9 epilogue (R buffers, P panels) must be the one the kernel is built with."""
    from gemm_ladder.audit.levels import L9_PANELS_PER_TILE, L9_STAGING_BUFFERS
    from gemm_ladder.levels import LEVELS

    d = LEVELS[9].defines("bf16")
    assert (L9_STAGING_BUFFERS, L9_PANELS_PER_TILE) == (LEVELS[9].c_ring, d["GL_C_PANELS"]) == (d["GL_C_RING"], 4)


@pytest.mark.parametrize("level", [5, 6, 7, 8, 9])
def test_one_stage_is_refused_where_the_kernel_refuses_it(level):
    with pytest.raises(LevelRefused, match=r"2 or more stages, not 1: .*GL_RELEASES_PREVIOUS_STAGE\(\) in"):
        protocol_for_level(level, stages=1)
    # the release-after-read variant stays available to fault searches, said to be one
    assert "no kernel ships" in protocol_for_level(level, stages=1, release_lag=0).notes[-1]


@pytest.mark.parametrize("level,kw,rule", [
    (4, dict(stages=2), "single stage"), (6, dict(cluster=2), "cluster of 1"), (8, dict(cluster=1), "GL_CLUSTER == 2"),
    (9, dict(cluster=3), "multicast slices"), (7, dict(consumers=2), "GL_CONSUMERS == 1"),
    (9, dict(consumers=1), "BM == 64 \\* GL_CONSUMERS"), (9, dict(c_ring=3), "GL_C_PANELS % GL_C_RING"),
    (8, dict(c_ring=2), "whole output tile"), (6, dict(persistent=False), "is persistent"),
    (5, dict(producer_warpgroup=True), "has no producer warpgroup")])
def test_what_a_level_refuses_is_refused_with_its_rule(level, kw, rule):
    with pytest.raises(LevelRefused, match=rule):
        protocol_for_level(level, **kw)


def test_the_rules_quoted_are_in_the_kernels():
    """The static_asserts the refusals quote are the kernels' own."""
    src = {n: (KERNEL_ROOT / "levels" / name).read_text() for n, name in (
        (7, "level7_warp_specialized.cu"), (8, "level8_cluster_multicast.cu"), (9, "level9_multi_consumer.cu"))}
    assert "GL_CLUSTER == 2" in src[8] and "GL_CONSUMERS == 1" in src[7] and "GL_CONSUMERS == 1" in src[8]
    assert "BM == 64 * GL_CONSUMERS" in src[9] and "GL_C_RING >= 1 && GL_C_PANELS % GL_C_RING == 0" in src[9]
    assert "static_assert(gl::STAGES >= 2" in (KERNEL_ROOT / "include/gemm_ladder/tma_tile.cuh").read_text()
    for path in sorted((KERNEL_ROOT / "levels").glob("level[5-9]_*.cu")):
        assert "GL_RELEASES_PREVIOUS_STAGE();" in path.read_text(), path.name
