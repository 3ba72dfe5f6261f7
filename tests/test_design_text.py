"""Text in the designer and the auditor points somewhere: no citation of files the repository does not
hold, every bench/results path cited exists, and refusals name what both the API and the command
line call the option. CPU only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemm_ladder.design import PlanRefused, plan_gemm
from gemm_ladder.design.render import plan_markdown

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "src" / "gemm_ladder"
SOURCES = sorted([*(PKG / "design").glob("*.py"), *(PKG / "audit").glob("*.py"), PKG / "commands" / "design.py",
                  PKG / "commands" / "audit.py", PKG / "kernels" / "include" / "gemm_ladder" / "tile_scheduler.cuh"])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_citation_of_documents_outside_the_repository(path):
    text = path.read_text()
    for gone in ("DESIGN.md", "HOPPER.md", "seed's list", "the seed's"):
        assert gone not in text, f"{path.name} cites {gone!r}, which is not in the repository"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_bench_result_cited_exists(path):
    for cited in re.findall(r"bench/results/[\w\-./*]*", path.read_text()):
        cited = cited.rstrip(".")
        assert list(ROOT.glob(cited)) or (ROOT / cited).exists(), f"{path.name} cites {cited}, which is not there"


def test_the_plan_names_its_sources_inside_the_repository():
    md = plan_markdown(plan_gemm(4096, 4096, 4096, persistent=True))
    assert "DESIGN.md" not in md and "bench/results" in md


@pytest.mark.parametrize("kw,rule", [(dict(cluster=2), "cluster without persistent"),
                                     (dict(stream_k=True), "stream-K without persistent")])
def test_refusals_name_the_option_for_the_api_and_the_command_line(kw, rule):
    with pytest.raises(PlanRefused, match=rule) as exc:
        plan_gemm(4096, 4096, 4096, **kw)
    assert "persistent=True" in str(exc.value) and "--persistent" in str(exc.value)
