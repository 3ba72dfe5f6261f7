"""bench/route_regret.py on the committed forced timings (no GPU): the samples it reads, the table's
regret it reports (every pick one of the row's measured candidates, regret >= 1), and a fit that
recovers a model whose form matches the data exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import route_regret as rr  # noqa: E402


@pytest.fixture(scope="module")
def samples():
    s = rr.load_samples(rr.DEFAULT_GLOB)
    assert len(s) > 1000
    return s


def test_samples_are_rankable_general_builds(samples):
    assert {s.cluster for s in samples} == {1, 2} and {s.bm for s in samples} == {64, 128}
    assert all(s.split in ("none", "tail") for s in samples if s.cluster == 1)
    assert all(s.us > 0 for s in samples)


def test_the_tables_regret_is_a_ratio_over_each_rows_candidates(samples):
    rows = rr.rows_of(samples)
    reg = rr.regret(rows, rr.table_predict(rr.load_table()))
    assert set(reg) == set(rows)
    for name, (r, pick) in reg.items():
        assert pick in rows[name] and r >= 1.0 and r == pytest.approx(pick.us / min(c.us for c in rows[name]))
    sc = rr.score(reg)
    assert 1.0 <= sc["geomean"] <= sc["mean"] <= sc["max"] and 0 < sc["within_3pct"] <= 1


def test_a_fit_on_times_of_its_own_form_picks_every_best(samples):
    builds = sorted({s.build for s in samples})
    rate = {b: 0.1 + 0.01 * i for i, b in enumerate(builds)}
    exact = [rr.Sample(s.shape, s.row, s.bn, s.split, s.cluster, s.bm,
                       3.0 + rate[s.build] * s.work().whole_iters + 1.2 * rate[s.build] * s.work().split_iters)
             for s in samples[:600]]
    reg = rr.regret(rr.rows_of(exact), rr.fit(exact, builds, tiles=False))
    assert max(r for r, _ in reg.values()) == pytest.approx(1.0)
