"""Every level protocol (4..9) audits clean over the bounded matrix: stages 1..4 (level 4: 1),
K iterations 1..5, tiles per CTA 1..3. The two-CTA protocols (level 8, level 9 clustered) are
checked on stages 1..2, K 1..3 (level 9 clustered: 1..2), tiles 1..2 in CI; GEMM_LADDER_AUDIT_FULL=1 runs their whole matrix
(minutes: the two CTAs' interleavings multiply)."""

from __future__ import annotations

import os

import pytest

from gemm_ladder.design.audit import audit
from gemm_ladder.design.level_protocols import protocol_for_level

FULL = os.environ.get("GEMM_LADDER_AUDIT_FULL") == "1"


def matrix(level: int, small: bool, k_max: int = 3):
    stages = [1] if level == 4 else ([1, 2] if small else [1, 2, 3, 4])
    ks = range(1, k_max + 1) if small else range(1, 6)
    tiles = range(1, 3) if small else range(1, 4)
    return [(s, k, t) for s in stages for k in ks for t in tiles]


@pytest.mark.parametrize("level", [4, 5, 6, 7, 9])
def test_single_cta_levels_clean_over_the_matrix(level):
    for s, k, t in matrix(level, small=False):
        r = audit(protocol_for_level(level, k_iters=k, tiles=t, stages=s))
        assert r.ok, f"S={s} K={k} T={t}\n{r.render()}"


@pytest.mark.parametrize("level,cluster", [(8, 2), (9, 2)])
def test_cluster_levels_clean_over_the_matrix(level, cluster):
    for s, k, t in matrix(level, small=not FULL, k_max=3 if level == 8 else 2):
        r = audit(protocol_for_level(level, k_iters=k, tiles=t, stages=s, cluster=cluster), max_states=5_000_000)
        assert r.ok, f"S={s} K={k} T={t}\n{r.render()}"
