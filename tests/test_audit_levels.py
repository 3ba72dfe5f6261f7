"""Every level protocol (4..9) audits clean over the bounded matrix: stages 1..4 (level 4: 1; the
one-stage column of levels 5-9 audits the release-after-read form, since their kernels refuse one
stage: see audit.levels.protocol_for_level),
K iterations 1..5, tiles per CTA 1..3, the two-CTA protocols (level 8, level 9 clustered) included.
Level 9 is its shipped epilogue (2 panel buffers per consumer warpgroup, 4 panels per tile).

Measured on the 2-core CPU CI machine: the whole matrix takes about 24 s (level 9 clustered 20 s,
level 8 1.3 s, the single-CTA levels 0.5 s), through the auditor's reduced searches (atomic blocks,
TMA completions in bursts). Before them the full search did not finish the two-CTA part: level 8
and level 9 clustered each ran past pytest's 10-minute limit (level 8 before reaching S=4, K=2, T=2),
so CI ran a reduced matrix and the whole one was opt-in.
"""

from __future__ import annotations

import pytest

from gemm_ladder.audit import audit, protocol_for_level


def matrix(level: int):
    stages = [1] if level == 4 else [1, 2, 3, 4]
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
