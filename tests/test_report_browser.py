"""The report page in a real browser: headless Chromium loads it offline and every picture decodes.

The page carries a small script that, on ``load``, writes into ``<body data-images-ok=… 
data-images-total=…>`` how many <img> have pixels; Chromium's ``--dump-dom`` prints the DOM after
scripts ran, so the test reads the count from there. Skipped where no Chromium is installed
(Debian: ``apt-get install -y chromium``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gemm_ladder.report import load_result, write_report

FIXTURE = Path(__file__).parent / "data" / "sample_result.json"
#: A committed measurement from the H200 (not a fixture): the page must render real results too,
#: including the designer's timeline of each TMA level (the run records each level's pipeline).
H200_RESULT = (Path(__file__).parent.parent / "bench" / "results"
               / "2026-11-29_climb_bf16_edge_square_llm_hidden_launch.json")


def find_chromium() -> str | None:
    """/usr/bin/chromium, or a Chromium (or Chrome) on PATH; None when there is none."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium (/usr/bin/chromium or chromium on PATH); apt-get install -y chromium"
)


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    """Run headless Chromium isolated from the network and from any user profile."""
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module", params=[FIXTURE, H200_RESULT], ids=["fixture", "h200"])
def page(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("browser")
    return write_report(load_result(request.param), out).html


def test_every_image_loads(page, tmp_path):
    proc = chromium(["--dump-dom", page.as_uri()], tmp_path / "profile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    ok = re.search(r'data-images-ok="(\d+)"', dom)
    total = re.search(r'data-images-total="(\d+)"', dom)
    assert ok and total, "the page's load script did not run:\n" + dom[:2000]
    n_img = page.read_text(encoding="utf-8").count("<img")
    assert n_img >= 2  # at least the bar chart and the roofline
    if page.parent.name.startswith("browser") and "L9 multi_consumer" in page.read_text(encoding="utf-8"):
        # the H200 run records each TMA level's pipeline: levels 4-9 each get their timeline picture
        alts = re.findall(r'<img[^>]*alt="(L\d) [^"]*stage', page.read_text(encoding="utf-8"))
        assert alts == ["L4", "L5", "L6", "L7", "L8", "L9"], alts
    assert int(total.group(1)) == n_img
    assert int(ok.group(1)) == n_img, f"{ok.group(1)} of {n_img} images decoded"


def test_screenshot(page, tmp_path):
    shot = tmp_path / "report.png"
    proc = chromium([f"--screenshot={shot}", "--window-size=1400,3000", page.as_uri()], tmp_path / "profile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    keep = os.environ.get("GEMM_LADDER_REPORT_SCREENSHOT")
    if keep:  # to look at the page by eye: GEMM_LADDER_REPORT_SCREENSHOT=/tmp/report.png pytest …
        shutil.copyfile(shot, keep)
