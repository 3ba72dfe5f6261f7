"""The report page in a real browser: headless Chromium loads it offline; every picture decodes; the
first screen shows the verdict, the ladder table, the bars and the roofline; no two labelled
elements overlap; no table is cut off.

The page carries a small script that, on ``load``, writes into ``<body data-images-ok=…
data-images-total=…>`` how many <img> have pixels. For the layout the test loads a copy of the page
with its own measuring script (:data:`MEASURE`), which writes the boxes of the labelled elements as
JSON into ``<body data-layout=…>``; Chromium's ``--dump-dom`` prints the DOM after scripts ran.
Skipped where no Chromium is installed (Debian: ``apt-get install -y chromium``).

To look at the page by eye: ``GEMM_LADDER_REPORT_SCREENSHOT=/tmp/report.png pytest tests/test_report_browser.py``
(the first screen; the whole page goes to the same name with ``-full``).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gemm_ladder.report import load_result, write_report

FIXTURE = Path(__file__).parent / "data" / "sample_result.json"
#: The committed H200 climb of the README (levels 1-9, bf16, edge + square + llm): the page must
#: render real results, with the designer's timeline of each TMA level.
H200_RESULT = (Path(__file__).parent.parent / "bench" / "results"
               / "2026-11-30_climb_bf16_edge_square_llm_d3b6198.json")
#: The first screen: a 1400 x 1000 pixel window.
SCREEN = (1400, 1000)


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
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
        f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


#: Boxes of the labelled elements (data-box, headings, captions, notes), pairs of them that overlap
#: without one holding the other, tables wider than their container, and the page's height.
MEASURE = """
window.addEventListener('load', function () {
  var els = Array.prototype.slice.call(document.querySelectorAll('[data-box], h1, h2, figcaption, p.note, .subtitle'));
  var box = function (e) { var r = e.getBoundingClientRect();
    return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; };
  var name = function (e) { return e.dataset.box || (e.tagName + ': ' + e.textContent.trim().slice(0, 40)); };
  var boxes = {}, overlaps = [], overflow = [];
  els.forEach(function (e) { boxes[name(e)] = box(e); });
  for (var i = 0; i < els.length; i++) for (var j = i + 1; j < els.length; j++) {
    var a = els[i], b = els[j];
    if (a.contains(b) || b.contains(a)) continue;
    var p = box(a), q = box(b);
    if (p[2] * p[3] === 0 || q[2] * q[3] === 0) continue;
    if (p[0] + 0.5 < q[0] + q[2] && q[0] + 0.5 < p[0] + p[2] && p[1] + 0.5 < q[1] + q[3] && q[1] + 0.5 < p[1] + p[3])
      overlaps.push([name(a), name(b)]);
  }
  document.querySelectorAll('.scroll').forEach(function (e) {
    if (e.scrollWidth > e.clientWidth + 1) overflow.push(e.dataset.box || 'table');
  });
  document.body.dataset.layout = JSON.stringify({height: document.documentElement.scrollHeight, boxes: boxes,
                                                 overlaps: overlaps, overflow: overflow});
});
"""


@pytest.fixture(scope="module", params=[FIXTURE, H200_RESULT], ids=["fixture", "h200"])
def page(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("h200" if request.param == H200_RESULT else "fixture")
    return write_report(load_result(request.param), out).html


@pytest.fixture(scope="module")
def loaded(page, tmp_path_factory) -> tuple[str, dict]:
    """(the DOM after the page's scripts ran, the MEASURE script's findings) in a SCREEN-sized window."""
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</head>", f"<script>{MEASURE}</script></head>", 1),
                     encoding="utf-8")
    proc = chromium(["--dump-dom", f"--window-size={SCREEN[0]},{SCREEN[1]}", probe.as_uri()],
                    tmp_path_factory.mktemp("profile"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r'data-layout="([^"]*)"', proc.stdout)
    assert found, "the measuring script did not run:\n" + proc.stdout[:2000]
    return proc.stdout, json.loads(html.unescape(found.group(1)))


def test_every_image_loads(page, loaded):
    dom = loaded[0]
    ok = re.search(r'data-images-ok="(\d+)"', dom)
    total = re.search(r'data-images-total="(\d+)"', dom)
    assert ok and total, "the page's load script did not run:\n" + dom[:2000]
    text = page.read_text(encoding="utf-8")
    n_img = text.count("<img")
    assert n_img >= 2  # at least the bar chart and the roofline
    if "L9 multi_consumer" in text:
        # the H200 run records each TMA level's pipeline: levels 4-9 each get their timeline picture
        alts = re.findall(r'<img[^>]*alt="(L\d) [^"]*×', text)
        assert alts == ["L4", "L5", "L6", "L7", "L8", "L9"], alts
    assert int(total.group(1)) == n_img
    assert int(ok.group(1)) == n_img, f"{ok.group(1)} of {n_img} images decoded"


def test_first_screen_and_no_overlap(loaded):
    """The README climb's page was ~16,000 px tall with its bars and roofline ~12,000 px down, behind
    a table of refused edge shapes; its bar chart's axis label sat under the legend and its resource
    table was cut off at 1400 px."""
    found = loaded[1]
    boxes = found["boxes"]
    for name in ("verdict", "ladder-bf16", "bars-bf16", "roofline-bf16"):
        x, y, w, h = boxes[name]
        assert 0 <= x and x + w <= SCREEN[0] and 0 <= y and y + h <= SCREEN[1], (name, boxes[name])
    assert found["overlaps"] == []
    assert found["overflow"] == []  # no table wider than the page at 1400 px
    assert found["height"] < 6000, found["height"]


def test_tables_fit_a_1280_px_window(page, tmp_path):
    """At 1280 px the ladder table scrolled sideways and cut off its geomean column (headers on one line)."""
    probe = page.with_name("probe1280.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</head>", f"<script>{MEASURE}</script></head>", 1),
                     encoding="utf-8")
    proc = chromium(["--dump-dom", "--window-size=1280,1000", probe.as_uri()], tmp_path / "profile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(html.unescape(re.search(r'data-layout="([^"]*)"', proc.stdout).group(1)))
    assert found["overflow"] == [], found["overflow"]
    x, y, w, h = found["boxes"]["ladder-bf16"]
    assert 0 <= x and x + w <= 1280 and y + h <= 1000, found["boxes"]["ladder-bf16"]
    assert found["overlaps"] == []


def test_screenshot(page, loaded, tmp_path):
    shot = tmp_path / "report.png"
    proc = chromium([f"--screenshot={shot}", f"--window-size={SCREEN[0]},{SCREEN[1]}", page.as_uri()], tmp_path / "profile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    keep = os.environ.get("GEMM_LADDER_REPORT_SCREENSHOT")
    if keep and "h200" in str(page.parent):
        shutil.copyfile(shot, keep)
        full = tmp_path / "full.png"
        chromium([f"--screenshot={full}", f"--window-size={SCREEN[0]},{loaded[1]['height']}", page.as_uri()],
                 tmp_path / "profile")
        shutil.copyfile(full, Path(keep).with_name(Path(keep).stem + "-full.png"))
