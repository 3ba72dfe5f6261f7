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
from gemm_ladder.report.charts import PNG_MAGIC, bar_figure, roofline_figure
from gemm_ladder.results import SCHEMA

FIXTURE = Path(__file__).parent / "data" / "sample_result.json"
#: A committed H200 climb (schema 1: it does not record which gates ran).
H200_RESULT = Path(__file__).parent.parent / "bench" / "results" / "2026-11-30_climb_bf16_edge_square_llm_d3b6198.json"
DATA_PNG = re.compile(r'<img[^>]*\bsrc="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture(scope="module")
def result() -> dict:
    return load_result(FIXTURE)


@pytest.fixture(scope="module")
def written(result, tmp_path_factory):
    """The fixture's report without the designer's timelines (each takes about a second to draw;
    test_timelines_* and tests/test_report_browser.py draw them)."""
    files = write_report(result, tmp_path_factory.mktemp("report"), timelines=False)
    return files, files.html.read_text(encoding="utf-8"), files.markdown.read_text(encoding="utf-8")


def with_gates(result: dict, **states) -> dict:
    """A schema-2 copy of ``result`` whose ``gates`` and verdict say ``states`` (gate -> (state, reason))."""
    r = copy.deepcopy(result)
    r["schema"] = SCHEMA
    r["gates"] = {g: {"state": st, "applies": True, "reason": why, "ran": 0 if st == "not run" else 5,
                      "failed": 1 if st == "failed" else 0, "not_run": 5 if st == "not run" else 0}
                  for g, (st, why) in states.items()}
    failed = any(st == "failed" for st, _ in states.values())
    incomplete = any(st == "not run" for st, _ in states.values())
    verdict = "failed" if failed else "incomplete" if incomplete else "passed"
    r["summary"] = {"passed": verdict == "passed", "verdict": verdict, "failures": r["summary"]["failures"] if failed else []}
    return r


def test_fixture_is_labelled_synthetic(result):
    assert result["meta"]["synthetic"] is True
    assert "synthetic" in result["meta"]["gpu"]["name"]


def test_html_has_title_tables_and_banner(written):
    _, page, _ = written
    assert "<title>gemm-ladder report — synthetic test fixture</title>" in page
    assert "2026-11-30 12:00 UTC" in page and "000000000000 (dirty)" in page
    assert "None of its numbers are measurements" in page
    # ladder per timed dtype, correctness on every shape, resources, every row
    assert page.count("<table>") == 5
    for header in ("geomean vs cuBLAS", "max error ÷ cuBLAS", "refused", "CTAs/SM", "HGMMA", "TFLOP/s", "vs previous"):
        assert f"<th>{header}</th>" in page
    assert "<td>cuBLAS</td>" in page


def test_page_order_puts_verdict_ladder_bars_and_roofline_first(written):
    _, page, md = written
    order = [page.index(marker) for marker in ('data-box="verdict"', 'data-box="ladder-bf16"', 'data-box="bars-bf16"',
                                                 'data-box="roofline-bf16"', "<h2>Correctness on every checked shape</h2>",
                                                 "<h2>Resources</h2>", "<h2>Pipeline timelines</h2>", "<h2>Run</h2>",
                                                 "<summary>Every row")]
    assert order == sorted(order)
    md_order = [md.index(m) for m in ("**Gates failed**", "## Ladder, bf16", "report-bars-bf16.png", "## Resources",
                                      "## Every row")]
    assert md_order == sorted(md_order)


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
    every_row = page[page.index("<summary>Every row"):]
    failed_rows = re.findall(r'<tr class="failed">(.*?)</tr>', every_row)
    assert len(failed_rows) == 2  # L5 fail, L5 error
    assert any("✗ FAIL" in r for r in failed_rows) and any("✗ ERROR" in r for r in failed_rows)
    assert "**✗ FAIL**" in md and "**✗ ERROR**" in md
    # refused is correct behaviour, not a failure
    assert not any("refused" in r for r in failed_rows)


def test_missing_values_render_as_dash(written):
    _, page, md = written
    # L5 8192³ errored: no correctness, no performance
    every_row = page[page.index("<summary>Every row"):]
    row = next(r for r in re.findall(r"<tr[^>]*>(.*?)</tr>", every_row) if "8192×8192×8192" in r and "L5" in r)
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
    assert "| kernel | dtype | set |" in md and "| level | dtype |" in md and "| kernel | dtype | shapes |" in md


def test_cli_report(tmp_path, capsys):
    assert main(["report", str(FIXTURE), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "report.html").is_file()
    assert (tmp_path / "out" / "report.md").is_file()
    assert "report.html" in capsys.readouterr().out


def test_cli_default_dir_and_bad_input(tmp_path, capsys, monkeypatch):
    copy_path = tmp_path / "results" / "run.json"
    copy_path.parent.mkdir()
    copy_path.write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["report", str(copy_path)]) == 0  # into the current directory, not beside the result
    assert (work / "run-report" / "report.html").is_file() and list(copy_path.parent.iterdir()) == [copy_path]
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something-else"}', encoding="utf-8")
    assert main(["report", str(bad)]) == 2
    assert main(["report", str(tmp_path / "absent.json")]) == 2
    assert "schema" in capsys.readouterr().err


def test_cli_default_dir_is_never_inside_the_checkout(tmp_path, capsys, monkeypatch):
    """``report X.json`` without -o wrote into bench/results/ (beside X); run from inside the checkout it
    now writes into a new temporary folder, and says where."""
    import subprocess
    import tempfile

    root = H200_RESULT.parents[2]
    before = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=root, capture_output=True, text=True).stdout
    monkeypatch.chdir(H200_RESULT.parent)
    assert main(["report", H200_RESULT.name, "--name", "r"]) == 0
    wrote = Path(capsys.readouterr().out.splitlines()[0].removeprefix("wrote "))
    after = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=root, capture_output=True, text=True).stdout
    assert before == after and Path(tempfile.gettempdir()) in wrote.parents and wrote.is_file()
    assert root not in wrote.parents
    import shutil

    shutil.rmtree(wrote.parent)


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """report's bad inputs: (arguments, what the one line on stderr must say)."""
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"schema": "gemm-ladder/result/1", "meta": {"host": "caf\xe9"}}'.encode("latin-1"))
    array = tmp_path / "array.json"
    array.write_text("[1, 2]")
    bench = tmp_path / "bench.json"
    bench.write_text('{"meta": {"command": "python bench/l9_targets.py"}, "rows": []}')
    rows = tmp_path / "rows.json"
    rows.write_text('{"schema": "gemm-ladder/result/2", "rows": [1, 2]}')
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    good = str(FIXTURE)
    bogus = tmp_path / "bogus_row.json"  # a valid result but for one row that says nothing of what it is
    result = json.loads(FIXTURE.read_text(encoding="utf-8"))
    result["rows"] = [{"bogus": 1}]
    bogus.write_text(json.dumps(result))
    no_status = tmp_path / "no_status.json"
    result = json.loads(FIXTURE.read_text(encoding="utf-8"))
    del result["rows"][1]["status"]
    no_status.write_text(json.dumps(result))
    return {
        "not UTF-8": ([str(latin1)], "not UTF-8"),
        "a JSON array": ([str(array)], "not an object"),
        "a bench JSON": ([str(bench)], "not a result JSON of climb or gate"),
        "rows of numbers": ([str(rows)], "every entry of 'rows' must be a JSON object"),
        "a row without its fields": ([str(bogus)], "rows[0] has no 'kind', 'dtype', 'm', 'n', 'k', 'status'"),
        "a row without a status": ([str(no_status)], "rows[1] has no 'status'"),
        "-o an existing file": ([good, "-o", str(a_file)], "an existing file, not a folder"),
        "-o under a file": ([good, "-o", str(a_file / "sub")], "cannot write the report"),
        "-o unwritable": ([good, "-o", "/proc/gemm-ladder-report"], "cannot write the report"),
        "--name ../../x": ([good, "-o", str(tmp_path / "out"), "--name", "../../x"], "a file-name stem"),
        "--name a/b": ([good, "-o", str(tmp_path / "out"), "--name", "a/b"], "a file-name stem"),
        "--name .hidden": ([good, "-o", str(tmp_path / "out"), "--name", ".hidden"], "a file-name stem"),
    }


@pytest.mark.parametrize("case", ["not UTF-8", "a JSON array", "a bench JSON", "rows of numbers", "a row without its fields",
                                  "a row without a status", "-o an existing file",
                                  "-o under a file", "-o unwritable", "--name ../../x", "--name a/b", "--name .hidden"])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    args, says = _bad_inputs(tmp_path)[case]
    before = sorted(p.name for p in tmp_path.parent.iterdir())
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == before  # nothing written beside the output folder
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


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
    files = write_report({"schema": SCHEMA}, tmp_path)
    page = files.html.read_text(encoding="utf-8")
    assert "no GPU" in page and "No shape was timed." in page and "No entries." in page
    assert "Verdict unknown" in page
    assert files.pngs == []


def test_no_gpu_no_bandwidth(result, tmp_path):
    r = copy.deepcopy(result)
    r["meta"]["gpu"] = None
    r["ceilings"]["dram_gbs"] = None
    files = write_report(r, tmp_path, timelines=False)
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
    r["gates"] = {"correctness": "yes", "performance": {"state": "great"}}
    files = write_report(r, tmp_path)
    page = files.html.read_text(encoding="utf-8")
    assert "weird-status" in page and "?×128×1" in page
    assert "No shape was timed." in page
    assert "unknown commit" in page and "Verdict unknown" in page


def test_text_is_escaped(result, tmp_path):
    r = copy.deepcopy(result)
    r["rows"][2]["message"] = "<script>alert(1)</script> a|b\nsecond line"
    files = write_report(r, tmp_path, timelines=False)
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


# --- the verdict: which gates ran ----------------------------------------------------------------


def test_schema_1_result_gets_its_verdict_from_its_rows(tmp_path):
    """The README's showcase (a schema-1 climb) said "Verdict unknown": its verdict and each gate are now
    read from its rows, on the first screen, saying that they were derived."""
    h200 = load_result(H200_RESULT)
    assert h200["summary"]["passed"] is True and "gates" not in h200
    v = model.verdict(h200)
    assert v.verdict == "passed" and v.headline == "All gates ran and passed" and "schema-1" in v.note
    assert [g.state for g in v.gates] == ["passed"] * 3 and all(g.detail for g in v.gates)
    page = write_report(h200, tmp_path, timelines=False).html.read_text(encoding="utf-8")
    verdict = page[page.index('data-box="verdict"'):page.index("</section>")]
    assert "unknown" not in verdict.lower() and 'class="verdict passed"' in page
    broken = copy.deepcopy(h200)
    row = next(r for r in broken["rows"] if r["kind"] == "level" and r["status"] == "pass")
    row["correctness"]["passed"], row["status"] = False, "fail"
    v = model.verdict(broken)
    assert v.verdict == "failed" and [g.state for g in v.gates] == ["failed", "passed", "passed"]


def test_old_failed_result_says_which_gate_failed(result):
    """The wrong-gemm report showed "Gates failed" above "? unknown": each failed gate is named now."""
    v = model.verdict(result)  # schema 1 with failures recorded
    assert v.verdict == "failed" and v.headline == "Gates failed" and len(v.failures) == 2
    assert {g.state for g in v.gates} == {"failed"}
    wrong = model.verdict(load_result(H200_RESULT.with_name("2026-11-30_gate_examples_wrong_gemm_1c37d0d.json")))
    assert wrong.verdict == "failed" and wrong.gates[0].state == "failed" and "11 of 24" in wrong.gates[0].detail


def test_verdict_names_each_gate_and_why_it_did_not_run(result, tmp_path):
    r = with_gates(result, correctness=("not run", "no GPU: the ladder's levels are sm_90a kernels"),
                   performance=("not run", "no GPU: timing needs a CUDA device"), resources=("passed", None))
    page = write_report(r, tmp_path, timelines=False).html.read_text(encoding="utf-8")
    verdict = page[page.index('data-box="verdict"'):page.index("</section>")]
    assert "Incomplete: nothing failed, but a gate did not run" in verdict and 'class="verdict incomplete"' in page
    assert "○ correctness not run: no GPU: the ladder&#x27;s levels are sm_90a kernels" in verdict
    assert "✓ resources passed: 5 builds" in verdict
    assert "All gates" not in page


def test_verdict_all_passed_and_failed(result):
    ok = with_gates(result, correctness=("passed", None), performance=("passed", None), resources=("passed", None))
    assert model.verdict(ok).headline == "All gates ran and passed"
    bad = with_gates(result, correctness=("failed", None), performance=("passed", None), resources=("passed", None))
    v = model.verdict(bad)
    assert v.headline == "Gates failed" and v.gates[0].text == "✗ correctness failed: 1 of 5 checks failed"


# --- the ladder: timed shapes first, refusals counted ---------------------------------------------


def test_ladder_table_is_levels_by_timed_shapes_and_refusals_collapse():
    h200 = load_result(H200_RESULT)
    table, note = model.ladder_table(h200, "bf16")
    assert table.headers[1:] == ["4096×4096×4096", "8192×8192×8192", "4096×14336×4096", "4096×4096×14336",
                                 "4096×8192×8192", "4096×28672×8192", "4096×8192×28672", "geomean vs cuBLAS"]
    assert [r.cells[0] for r in table.rows] == [f"L{n} {name}" for n, name in (
        (3, "spatial_tiling"), (4, "tma"), (5, "pipeline"), (6, "persistent"), (7, "warp_specialized"),
        (8, "cluster_multicast"), (9, "multi_consumer"))] + ["cuBLAS"]
    assert table.rows[6].cells[2] == "790 · 1.07×"  # L9 at 8192³, as the README's table
    assert note == "L1 single_tile, L2 k_loop: refused every timed shape (outside the declared domain)"
    checked = model.checked_table(h200)
    by_kernel = {r.cells[0]: r.cells for r in checked.rows}
    assert by_kernel["L1 single_tile"][2:7] == ["35", "12", "0", "23", "0"]  # shapes, passed, failed, refused, other
    assert by_kernel["L9 multi_consumer"][5] == "5"  # the unaligned and odd-K shapes a TMA level refuses


def test_bar_chart_and_roofline_labels_do_not_overlap():
    """The bar chart's legend covered its axis label; now no text or legend box of either figure
    overlaps another (matplotlib's own extents, after drawing)."""
    h200 = load_result(H200_RESULT)
    for fig in (bar_figure(h200, "bf16"), roofline_figure(h200, "bf16")[0]):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        boxes = {"legend": ax.get_legend().get_window_extent(renderer), "axes": ax.get_window_extent(renderer),
                 "xlabel": ax.xaxis.label.get_window_extent(renderer),
                 "ylabel": ax.yaxis.label.get_window_extent(renderer)}
        if fig._suptitle is not None:
            boxes["title"] = fig._suptitle.get_window_extent(renderer)
        for i, t in enumerate(ax.get_xticklabels()):
            if t.get_text():
                boxes[f"xtick{i}"] = t.get_window_extent(renderer)
        boxes = {k: b for k, b in boxes.items() if b.width > 0 and b.height > 0}
        names = sorted(boxes)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if "axes" in (a, b) and (a.startswith("xtick") or b.startswith("xtick")):
                    continue  # tick labels sit on the axes' edge
                if a.startswith("xtick") and b.startswith("xtick"):
                    continue  # rotated neighbours: their upright boxes overlap, their glyphs do not
                assert not boxes[a].overlaps(boxes[b]), (a, b)
        import matplotlib.pyplot as plt

        plt.close(fig)


# --- timelines: the designer draws what each level adds -----------------------------------------


def test_timelines_call_the_designer_renderer_once_per_tma_level(monkeypatch, tmp_path):
    h200 = load_result(H200_RESULT)
    calls = []

    def fake_png(plan, path):
        calls.append((plan.m, plan.n, plan.k, plan.stages, plan.cluster, plan.consumers.warpgroups, plan.persistent))
        Path(path).write_bytes(PNG_MAGIC)
        return Path(path)

    monkeypatch.setattr(timeline, "timeline_png", fake_png)
    pictures, note = timeline.timelines(h200, tmp_path)
    assert [p.slug for p in pictures] == [f"timeline-L{n}" for n in range(4, 10)]
    assert all(p.png == PNG_MAGIC for p in pictures)
    # each level replanned as it ran: L9 cluster 2, two consumers, persistent
    assert calls[-1][3:] == (4, 2, 2, True) and calls[0][3:] == (1, 1, 1, False)
    assert note == timeline.NO_STREAM_K  # schema 1 does not record stream_k


def test_timeline_prefers_a_shape_with_a_stream_k_tail_when_the_level_splits_one(monkeypatch, tmp_path):
    h200 = load_result(H200_RESULT)
    h200["levels"] = [copy.deepcopy(lv) for lv in h200["levels"] if lv["number"] == 9]
    h200["levels"][0]["pipeline"]["stream_k"] = True
    plans = []

    def fake_png(plan, path):
        plans.append(plan)
        Path(path).write_bytes(PNG_MAGIC)
        return Path(path)

    monkeypatch.setattr(timeline, "timeline_png", fake_png)
    pictures, note = timeline.timelines(h200, tmp_path)
    assert note == "" and len(plans) == 1 and plans[0].schedule.stream_k["tail_units"] > 0


def test_timeline_refusal_is_a_note(result, tmp_path):
    r = copy.deepcopy(result)
    for lv in r["levels"]:
        if lv.get("pipeline"):
            lv["pipeline"]["stages"] = 0  # the designer refuses a ring without stages
    pictures, _ = timeline.timelines(r, tmp_path)
    assert [p.slug for p in pictures] == ["timeline-L3", "timeline-L5"] and all(p.png is None for p in pictures)
    assert pictures[0].note.startswith("the designer refuses it: PIPE_DEPTH")
    assert pictures[1].note == "no shape of this level passed in the result"  # L5's rows all failed


def test_fixture_is_valid_json_with_expected_rows():
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    kinds = {r["kind"] for r in data["rows"]}
    statuses = {r["status"] for r in data["rows"]}
    assert kinds == {"level", "cublas"}
    assert statuses == {"pass", "fail", "error", "refused", "skipped"}
