"""``gemm-ladder report``: the HTML page, its Markdown twin and their pictures, from a synthetic result.

tests/data/sample_result.json is hand-written (meta.synthetic = true): its numbers are invented
and only exercise the rendering.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path

import pytest

from gemm_ladder.cli import main
from gemm_ladder.report import MISSING, ResultError, load_result, write_report
from gemm_ladder.report import model, timeline
from gemm_ladder.report.charts import PNG_MAGIC

FIXTURE = Path(__file__).parent / "data" / "sample_result.json"
DATA_PNG = re.compile(r'<img[^>]*\bsrc="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture(autouse=True)
def no_designer(request, monkeypatch):
    """Most tests run without the designer: its timelines take seconds each to draw, and the report
    must not depend on it. Tests that ask for the ``real_designer`` fixture use whatever
    gemm_ladder.design offers."""
    if "real_designer" not in request.fixturenames:
        monkeypatch.setattr(timeline, "find_designer", lambda: (None, None, "designer switched off for this test"))


@pytest.fixture
def real_designer():
    """Requesting this fixture keeps the real gemm_ladder.design (see ``no_designer``)."""


@pytest.fixture(scope="module")
def result() -> dict:
    return load_result(FIXTURE)


@pytest.fixture(scope="module")
def written(result, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as mp:  # the autouse fixture is function-scoped
        mp.setattr(timeline, "find_designer", lambda: (None, None, "designer switched off for this test"))
        files = write_report(result, out)
    return files, files.html.read_text(encoding="utf-8"), files.markdown.read_text(encoding="utf-8")


def test_fixture_is_labelled_synthetic(result):
    assert result["meta"]["synthetic"] is True
    assert "synthetic" in result["meta"]["gpu"]["name"]


def test_html_has_title_tables_and_banner(written):
    _, page, _ = written
    assert "<title>gemm-ladder report — synthetic test fixture</title>" in page
    assert "2026-11-30 12:00 UTC" in page and "000000000000 (dirty)" in page
    assert "None of its numbers are measurements" in page
    assert page.count("<table>") == 2  # ladder and resources
    for header in ("error ÷ cuBLAS", "TFLOP/s", "vs cuBLAS", "vs previous", "roofline", "CTAs/SM", "SASS HGMMA"):
        assert f"<th>{header}</th>" in page
    assert "<td>cuBLAS</td>" in page


def test_html_pictures_are_inline_pngs(written):
    files, page, _ = written
    images = DATA_PNG.findall(page)
    # one bar chart and one roofline per timed dtype (bf16, fp16); timelines: see the real_designer test
    assert len(images) == 4
    assert page.count("<img") == len(images)
    for data in images:
        assert base64.b64decode(data, validate=True).startswith(PNG_MAGIC)


def test_html_loads_nothing_from_outside(written):
    _, page, _ = written
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page)
    assert "<link" not in page
    assert "@import" not in page


def test_failed_rows_are_marked(written):
    _, page, md = written
    failed_rows = re.findall(r'<tr class="failed">(.*?)</tr>', page)
    assert len(failed_rows) == 3  # L5 fail, L5 error (ladder), L5 resources
    assert any("✗ FAIL" in r for r in failed_rows) and any("✗ ERROR" in r for r in failed_rows)
    assert "**✗ FAIL**" in md and "**✗ ERROR**" in md
    # refused is correct behaviour, not a failure
    assert not any("refused" in r for r in failed_rows)


def test_missing_values_render_as_dash(written):
    _, page, md = written
    # L5 8192³ errored: no correctness, no performance
    row = next(r for r in re.findall(r"<tr[^>]*>(.*?)</tr>", page) if "8192×8192×8192" in r and "L5" in r)
    assert row.count(f">{MISSING}<") >= 6
    # Python's None must never leak into the page (the banner's "None of its numbers" is prose)
    assert not re.search(r"\bNone\b(?! of its)", page + md)


def test_markdown_twin_and_its_pngs(written):
    files, _, md = written
    assert files.markdown.exists()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", md)
    assert len(linked) == len(files.pngs) >= 4
    for name in linked:
        path = files.markdown.parent / name
        assert path.is_file() and path.read_bytes().startswith(PNG_MAGIC)
    assert "| kernel | dtype |" in md and "| level | dtype |" in md


def test_cli_report(tmp_path, capsys):
    assert main(["report", str(FIXTURE), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "report.html").is_file()
    assert (tmp_path / "out" / "report.md").is_file()
    assert "report.html" in capsys.readouterr().out


def test_cli_default_dir_and_bad_input(tmp_path, capsys):
    copy_path = tmp_path / "run.json"
    copy_path.write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["report", str(copy_path)]) == 0
    assert (tmp_path / "run-report" / "report.html").is_file()
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something-else"}', encoding="utf-8")
    assert main(["report", str(bad)]) == 2
    assert main(["report", str(tmp_path / "absent.json")]) == 2
    assert "schema" in capsys.readouterr().err


def test_load_result_rejects_non_results(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ResultError):
        load_result(p)
    p.write_text("{", encoding="utf-8")
    with pytest.raises(ResultError, match="not valid JSON"):
        load_result(p)


def test_minimal_result_renders(tmp_path):
    """A result with nothing but the schema id: every section says it is empty, nothing crashes."""
    files = write_report({"schema": model.SCHEMA_ID}, tmp_path)
    page = files.html.read_text(encoding="utf-8")
    assert "no GPU" in page and "No shape was timed." in page and "No entries." in page
    assert files.pngs == []


def test_no_gpu_no_bandwidth(result, tmp_path):
    r = copy.deepcopy(result)
    r["meta"]["gpu"] = None
    r["ceilings"]["dram_gbs"] = None
    files = write_report(r, tmp_path)
    page = files.html.read_text(encoding="utf-8")
    assert "gemm-ladder report — no GPU" in page
    assert "no bandwidth ceiling" in page
    assert len(DATA_PNG.findall(page)) >= 4


def test_nulls_and_odd_values_everywhere(result, tmp_path):
    """Every measurement null, odd types and unknown statuses: the page still renders, with dashes."""
    r = copy.deepcopy(result)
    for row in r["rows"]:
        for part in ("correctness", "performance"):
            if row.get(part):
                row[part] = {key: None for key in row[part]}
        row["status"] = row["status"] if row["status"] != "pass" else "weird-status"
    r["rows"][0]["m"] = None
    r["rows"][1]["performance"] = {"tflops": "fast", "intensity_flop_per_byte": True}
    for e in r["resources"]:
        e["sass"] = None
        e["registers"] = "many"
    r["meta"] = {"gpu": {}}
    r["ceilings"] = None
    r["summary"] = None
    files = write_report(r, tmp_path)
    page = files.html.read_text(encoding="utf-8")
    assert "weird-status" in page and "?×128×1" in page
    assert "No shape was timed." in page
    assert "unknown commit" in page and "Verdict: —" in page


def test_text_is_escaped(result, tmp_path):
    r = copy.deepcopy(result)
    r["rows"][2]["message"] = "<script>alert(1)</script> a|b\nsecond line"
    files = write_report(r, tmp_path)
    page = files.html.read_text(encoding="utf-8")
    md = files.markdown.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "a\\|b second line" in md


def test_formatting():
    assert model.fmt_ratio(None) == MISSING
    assert model.fmt_ratio(0.947) == "0.95×"
    assert model.fmt_pct(0.66) == "66.0 %"
    assert model.fmt_sci(2.1e-3) == "2.10e-03"
    assert model.fmt_float(True) == MISSING  # a stray boolean is not a number
    assert model.fmt_float(float("nan")) == "NaN"
    assert model.error_ratio({"correctness": {"rel_err": 0.0, "cublas_rel_err": 0.0}}) == 1.0
    assert model.error_ratio({"correctness": None}) is None


def test_intensity_falls_back_to_shape():
    row = {"dtype": "bf16", "m": 4096, "n": 4096, "k": 4096, "performance": None}
    assert model.intensity(row) == pytest.approx(2 * 4096**3 / (2 * 3 * 4096**2))
    assert model.intensity({"dtype": "bf16", "m": 0, "n": 1, "k": 1}) is None


# --- timelines: the designer is optional -------------------------------------------------------


def _fake_designer(monkeypatch, plan_gemm, renderer):
    monkeypatch.setattr(timeline, "find_designer", lambda: (plan_gemm, renderer, ""))


def test_timeline_note_when_designer_missing(result, monkeypatch, tmp_path):
    monkeypatch.setattr(timeline, "find_designer", lambda: (None, None, "the pipeline designer is not available"))
    files = write_report(result, tmp_path)
    assert "Timelines not drawn: the pipeline designer is not available" in files.html.read_text(encoding="utf-8")


def test_timeline_drawn_noted_or_refused(result, monkeypatch, tmp_path):
    import matplotlib.pyplot as plt

    calls = []

    def plan_gemm(m, n, k, dtype, *, tile, stages, cluster, consumers):
        calls.append((m, n, k, dtype, tile, stages, cluster, consumers))
        if stages == 4:
            raise ValueError("stages must be at most 3")
        if k % 8:
            raise ValueError("rows are not 16-byte aligned")
        return {"tile": tile}

    def renderer(plan):
        fig, ax = plt.subplots(figsize=(2, 1))
        ax.plot([0, 1], [0, 1])
        return fig

    _fake_designer(monkeypatch, plan_gemm, renderer)
    files = write_report(result, tmp_path)
    page = files.html.read_text(encoding="utf-8")
    # L3: its timed shape of shortest K is refused, the next one (4096³) is drawn;
    # L4 records no pipeline; L5 (stages 4) is refused at every shape, the first refusal is shown
    assert calls[0] == (4097, 4095, 4093, "bf16", (128, 128, 64), 1, 1, 1)
    assert calls[1] == (4096, 4096, 4096, "bf16", (128, 128, 64), 1, 1, 1)
    assert "L3 spatial_tiling: 4096×4096×4096 bf16" in page
    assert "the designer raised ValueError: stages must be at most 3" in page
    assert "does not record this level" in page
    assert len(DATA_PNG.findall(page)) == 5
    assert (tmp_path / "report-timeline-L3.png").read_bytes().startswith(PNG_MAGIC)


def test_real_designer_never_breaks_the_report(result, tmp_path, real_designer):
    """Whatever state gemm_ladder.design is in, the report renders and the section is present;
    where the designer exists, the levels that record a pipeline get a timeline PNG."""
    files = write_report(result, tmp_path)
    page = files.html.read_text(encoding="utf-8")
    assert "<h2>Pipeline timelines</h2>" in page
    plan_gemm, renderer, _ = timeline.find_designer()
    if plan_gemm is not None and renderer is not None:
        drawn = sorted(p.name for p in files.pngs if "timeline" in p.name)
        assert drawn == ["report-timeline-L3.png", "report-timeline-L5.png"], page[-3000:]
        images = DATA_PNG.findall(page)
        assert len(images) == 6 and page.count("<img") == 6
        assert all(base64.b64decode(d).startswith(PNG_MAGIC) for d in images)


def test_fixture_is_valid_json_with_expected_rows():
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    kinds = {r["kind"] for r in data["rows"]}
    statuses = {r["status"] for r in data["rows"]}
    assert kinds == {"level", "cublas"}
    assert statuses == {"pass", "fail", "error", "refused", "skipped"}
