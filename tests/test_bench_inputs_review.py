"""The bench scripts' bad input and verdicts a review found wrong, without a GPU: an unwritable ``-o``,
a bad shape list, budget or comma list is one line and exit status 2 before the GPU check (never "needs a
CUDA GPU", never a traceback after the run); a target whose row did not run or was wrong is "not run",
never met; fp8's rows are judged against a usable bound; a failed row is recorded and the run goes on."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from cli_runner import cli_env, run_scripts

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
GPU_REFUSAL = "needs a CUDA GPU"


def load(monkeypatch, rel: str):
    """bench/<rel> loaded as a module (bench/ on sys.path for its imports, for the test only)."""
    monkeypatch.syspath_prepend(str(BENCH))
    path = BENCH / rel
    spec = importlib.util.spec_from_file_location(f"gl_review_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def outputs(monkeypatch):
    return load(monkeypatch, "outputs.py")


# --- bench/outputs.py -----------------------------------------------------------------------------

def test_output_problem_names_each_unwritable_path(outputs, tmp_path):
    afile = tmp_path / "a.json"
    afile.write_text("{}")
    assert "folder" in outputs.output_problem(tmp_path)
    assert "not a folder" in outputs.output_problem(afile / "x.json")
    assert "not a regular file" in outputs.output_problem("/dev/full")
    assert outputs.output_problem("/proc/nope/x.json")  # unwritable even as root
    assert outputs.output_problem(tmp_path / "new" / "x.json") is None
    assert outputs.output_problem(afile) is None and outputs.output_problem(None) is None


def test_bad_numbers_lists_and_shapes_are_refused(outputs, capsys):
    for value in (0, -1, float("nan"), float("inf"), float("-inf")):
        with pytest.raises(SystemExit) as e:
            outputs.positive("bench/x.py", "--budget", value)
        assert e.value.code == 2
    assert outputs.positive("x", "--budget", 0.5) == 0.5 and outputs.positive("x", "--budget", None) is None
    for text in (",", "", " , "):
        with pytest.raises(SystemExit):
            outputs.comma_list("x", "--classes", text)
    assert outputs.comma_list("x", "--c", " a, b,") == ["a", "b"]
    for text in ("axb", "64x0x128", "-5", "1x2", "1x2x3x4", ",", "1x-2x3"):
        with pytest.raises(SystemExit):
            outputs.parse_shapes("x", "--shapes", text)
    assert outputs.parse_shapes("x", "--shapes", "1x2x3, 4X5X6") == [(1, 2, 3), (4, 5, 6)]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 5 + 3 + 7 and all(line.endswith(("> 0", "at least one", "not MxNxK", "extent < 1"))
                                           for line in lines)


def test_a_wrong_or_unmeasured_row_is_never_met(outputs):
    assert outputs.judged(1.2, 1.1, True) == {"met": True, "not_run": None}
    assert outputs.judged(1.0, 1.1, True)["met"] is False
    assert outputs.judged(1.2, 1.1, False)["met"] is None and outputs.judged(1.2, 1.1, False)["not_run"]
    assert outputs.judged(None, 1.1, True)["met"] is None


# --- command lines: one line, status 2, before the GPU check ---------------------------------------

#: Scripts that write a result through ``-o``, each with arguments that would otherwise pass.
WITH_OUTPUT = ["fp8.py", "swiglu.py", "epilogues.py", "grouped.py", "library.py", "quantized_linear.py",
               "models.py", "route_tables.py", "shapes_real.py", "experiments/fp8_epilogue_cost.py",
               "experiments/fp8_variants.py", "experiments/k_sweep.py"]


def _bad_cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(script, argv, text the one line must hold)."""
    afile = tmp / "file.json"
    afile.write_text("[1, 2]")
    (tmp / "rows5.json").write_text('{"rows": 5}')
    (tmp / "bad.json").write_text("{not json")
    cases = []
    for s in WITH_OUTPUT:
        cases += [(s, ["-o", str(tmp)], "folder"), (s, ["-o", str(afile / "x.json")], "not a folder"),
                  (s, ["-o", "/dev/full"], "regular"), (s, ["-o", "/proc/nope/x.json"], "cannot write")]
    for s in ("fp8.py", "swiglu.py"):
        cases += [(s, ["--shapes", t], "--shapes") for t in ("axb", "64x0x128", "-5", ",")]
    cases += [("fp8.py", ["--wave-efficiency", v], "--wave-efficiency") for v in ("nan", "1.5", "-0.1")]
    cases += [("fp8.py", ["--alt", v], "--alt") for v in ("SPLIT_ALIGNED", "NOPE=1", "SPLIT_ALIGNED=maybe",
                                                          "MIN_SPLIT_K_BLOCKS=x", "TMA_STORE_OUT=1", "math=1")]
    cases += [("swiglu.py", ["--rounds", "-1"], "--rounds"), ("swiglu.py", ["--rounds", "0"], "--rounds"),
              ("epilogues.py", ["--budget", "nan"], "--budget"), ("epilogues.py", ["--budget", "-1"], "--budget"),
              ("route_tables.py", ["--budget", "inf"], "--budget"),
              ("experiments/fp8_epilogue_cost.py", ["--budget", "0"], "--budget"),
              ("experiments/fp8_epilogue_cost.py", ["--k0", "-5"], "--k0"),
              ("experiments/fp8_variants.py", ["--budget", "nan"], "--budget"),
              ("experiments/fp8_variants.py", ["--schemes", ","], "--schemes"),
              ("experiments/k_sweep.py", ["--budget", "-1"], "--budget"),
              ("experiments/bias_cost.py", ["--budget", "nan"], "--budget"),
              ("experiments/bias_cost.py", ["--shapes", "0x1x1"], "--shapes"),
              ("experiments/k_sweep.py", ["--deadline", "nan"], "--deadline"),
              ("grouped.py", ["--swiglu", "foo"], "--swiglu"), ("grouped.py", ["--swiglu", ","], "--swiglu"),
              ("grouped.py", ["--cases", ","], "--cases"), ("grouped.py", ["--directions", ","], "--directions"),
              ("library.py", ["--classes", ","], "--classes"),
              ("library.py", ["--forced", "--forced-shapes", ","], "--forced-shapes"),
              ("library.py", ["--refit", "/nonexistent.json"], "--refit"),
              ("library.py", ["--refit", str(tmp / "bad.json")], "--refit"),
              ("library.py", ["--refit", str(afile)], "--refit"), ("library.py", ["--refit", str(tmp)], "--refit"),
              ("route_regret.py", ["--json", str(tmp)], "--json"),
              ("route_regret.py", ["--json", "/dev/full"], "--json"),
              ("route_regret.py", ["--json", str(afile / "x.json")], "--json"),
              ("route_regret.py", ["--results", str(afile)], "--results"),
              ("route_regret.py", ["--results", str(tmp / "rows5.json")], "--results")]
    return cases


@pytest.fixture(scope="module")
def bad_outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad_input")
    cases = _bad_cases(tmp)
    results = run_scripts([(BENCH / s, argv) for s, argv, _ in cases], ROOT, tmp_path_factory.mktemp("runs"),
                          cli_env(), deadline_s=120)
    return list(zip(cases, results))


def test_bad_input_is_one_line_and_status_2_before_the_gpu_check(bad_outcomes):
    failures = []
    for (script, argv, text), r in bad_outcomes:
        lines = (r.stdout + r.stderr).strip().splitlines()
        if not (r.rc == 2 and not r.traceback and len(lines) == 1 and lines[0].startswith(f"bench/{script}: ")
                and text in lines[0] and GPU_REFUSAL not in lines[0]):
            failures.append(f"{script} {argv}: {r.describe()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("script", ["fp8.py", "swiglu.py", "epilogues.py", "grouped.py", "library.py",
                                    "quantized_linear.py", "route_regret.py"])
def test_help_states_the_exit_statuses(script):
    text = (BENCH / script).read_text()
    module_doc = text.split('"""')[1]
    assert "exit status" in module_doc.lower() and " 2" in module_doc, script
    assert "__doc__.splitlines()[0]" not in text and '__doc__.split("\\n\\n")[0]' not in text, \
        f"{script}: --help shows only the docstring's first line or paragraph"


# --- verdicts ------------------------------------------------------------------------------------

def test_swiglu_target_not_run_when_its_shape_did_not_run_or_was_wrong(monkeypatch):
    sw = load(monkeypatch, "swiglu.py")
    other = {"m": 256, "n": 512, "k": 256, "ok": True}
    s = sw.summary([other])
    assert s["met"] is None and "not run" in s["not_run"] and s["correct"] is True
    mlp = {"m": 4096, "n": 14336, "k": 4096, "ok": False, "vs_eager": 2.0}
    s = sw.summary([other, mlp])
    assert s["met"] is None and s["correct"] is False
    s = sw.summary([{**mlp, "ok": True}])
    assert s["met"] is True and s["not_run"] is None
    assert sw.summary([{**mlp, "ok": True, "vs_eager": 1.0}])["met"] is False


def test_epilogues_a_wrong_epilogue_meets_no_target(monkeypatch):
    ep = load(monkeypatch, "epilogues.py")
    fast = {"fused_vs_plain": 2.0, "vs_eager": 2.0, "vs_compiled": 2.0}
    res = [{"shape": [4096, 4096, 4096], "epilogues": {"silu": {**fast, "check": {"passed": False}},
                                                       "bias": {**fast, "check": {"passed": True}}}}]
    targets = ep.judge(res)
    assert all(t["met"] is None and t["not_run"] for t in targets if t["epilogue"] == "silu")
    assert all(t["met"] is True for t in targets if t["epilogue"] == "bias")


def test_fp8_verdict_falls_back_to_its_own_bound(monkeypatch):
    f8 = load(monkeypatch, "fp8.py")
    floor = 2**-9
    own = 1.5 * floor + 1e-4
    v = f8.verdict(1e-3, 4892.07, floor)  # torch's own result wrong: its error bounds nothing
    assert v["bound"] == "own" and v["err_bound"] == pytest.approx(own) and v["correct"] is True
    assert f8.verdict(100.0, 4892.07, floor)["correct"] is False
    assert f8.verdict(1e-3, None, floor)["bound"] == "own"  # torch refused
    assert f8.verdict(float("nan"), None, floor)["correct"] is False
    assert f8.verdict(float("nan"), 1e-3, floor)["correct"] is False
    v = f8.verdict(1e-3, 1e-3, floor)
    assert v["bound"] == "torch" and v["correct"] is True and v["err_bound"] == pytest.approx(1.5e-3 + 1e-6)


def test_fp8_quantized_output_checked_against_float64(monkeypatch):
    f8 = load(monkeypatch, "fp8.py")
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(8, 256, generator=gen, dtype=torch.float64)
    values, scales = f8.quantize_fp8(ref.float(), (1, 128))
    good = f8.quantized_verdict(values, scales, ref)
    assert good["correct"] is True and good["bound"] == "own" and good["err"] <= 1
    bad = values.float().clone()
    bad[3, 17] = -bad[3, 17] if bad[3, 17] != 0 else 1.0
    v = f8.quantized_verdict(bad.to(values.dtype), scales, ref)
    assert v["correct"] is False and v["err"] > 1
    nan = values.float().clone()
    nan[0, 0] = float("nan")
    assert f8.quantized_verdict(nan.to(values.dtype), scales, ref)["correct"] is False


# --- a failed row recorded, the run going on -----------------------------------------------------

def test_library_a_wrong_row_is_recorded_and_fails_the_run(monkeypatch):
    lib = load(monkeypatch, "library.py")

    def bench_shape(cls, layout, shape, target, *args, **kw):
        if shape == (2048, 2048, 2048):
            raise RuntimeError("gemm_ladder.mm is wrong here: relative error 0.5")
        return {"class": cls, "layout": layout, "m": shape[0], "n": shape[1], "k": shape[2], "ours_tflops": 1.0,
                "cublas_tflops": 1.0, "vs_cublas": 1.0, "target_vs_cublas": target, "met": True, "ok": True}

    monkeypatch.setattr(lib, "bench_shape", bench_shape)
    rows = lib.run_class("mid", "bf16", False, 0.1, None)
    assert len(rows) == 3
    bad = [r for r in rows if r["ok"] is False]
    assert len(bad) == 1 and "wrong" in bad[0]["error"] and bad[0]["met"] is None
    assert lib.exit_status({"rows": rows, "build_failures": []}) == 1
    good = [r for r in rows if r["ok"]]
    assert lib.exit_status({"rows": good, "build_failures": []}) == 0
    assert lib.exit_status({"rows": good, "build_failures": ["BN 128: boom"]}) == 1
    assert lib.exit_status({"rows": [{**good[0], "met": False}], "build_failures": []}) == 1


def test_grouped_a_refused_fused_swiglu_case_is_not_run_and_the_run_goes_on(monkeypatch):
    gr = load(monkeypatch, "grouped.py")

    def run_swiglu(name, direction, budget):
        if name == gr.SWIGLU[0]:
            raise gr.FusedRefused(f"{name}: the fused swiglu build refuses these tensors: too wide")
        return {"case": name, "layout": "swiglu", "direction": direction, "correct": True}

    monkeypatch.setattr(gr, "run_swiglu", run_swiglu)
    rows = gr.swiglu_rows(gr.SWIGLU[:2], 0.1, quick=True)
    assert [r["case"] for r in rows] == list(gr.SWIGLU[:2])
    assert rows[0]["correct"] is None and "refuses" in rows[0]["not_run"]
    assert gr.exit_status(rows) == 0 and gr.exit_status([*rows, {"correct": False}]) == 1


def test_route_regret_json_carries_meta(monkeypatch, tmp_path):
    rr = load(monkeypatch, "route_regret.py")
    out = tmp_path / "scores.json"
    assert rr.main(["--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert {"date", "git_commit"} <= set(saved["meta"]) and "table" in saved
    assert math.isfinite(saved["table"]["geomean"])


def test_fp8_prebuild_lists_the_builds_a_split_sweep_launches(monkeypatch):
    """bench/fp8.py --prebuild compiles what the run launches: with --split both and a wave split, the split
    and the unsplit build of each scheme (and of the quantized output), no GPU needed to list them."""
    f8 = load(monkeypatch, "fp8.py")
    monkeypatch.setattr(f8.fp8, "MAX_WAVE_EFFICIENCY", 0.999)
    kernels = f8.run_builds_of([(4096, 576, 7168)], both=True, both_tile_m=False)
    assert {(k.scale_mode, k.out_dtype, k.split) for k in kernels} == {
        (s, o, split) for s in ("tensorwise", "rowwise", "blockwise") for o in ("bf16",) for split in (True, False)
    } | {("blockwise", "fp8", True), ("blockwise", "fp8", False)}
    monkeypatch.setattr(f8.fp8, "MAX_WAVE_EFFICIENCY", 0.0)
    assert not any(k.split for k in f8.run_builds_of([(4096, 576, 7168)], both=True, both_tile_m=False))
    # --alt adds the altered launch's builds: the wave split at 4096 x 576 x 7168
    assert f8.parse_alt("MAX_WAVE_EFFICIENCY=0.9") == ("MAX_WAVE_EFFICIENCY", 0.9)
    altered = f8.run_builds_of([(4096, 576, 7168)], False, False, alt=("MAX_WAVE_EFFICIENCY", 0.9))
    assert {k.split for k in altered} == {True, False}


def test_bias_cost_prebuild_lists_the_builds_its_run_launches(monkeypatch):
    """bench/experiments/bias_cost.py --prebuild asks precompile.route_builds for each variant's route and
    epilogue as the run decides them, no GPU: the small-M kernel where M is small, the epilogue oriented as a
    transposed route runs it (GL_EPI_SWAP 1), and the plain call, the bias and the six user epilogues."""
    from gemm_ladder.dispatch import precompile

    bc = load(monkeypatch, "experiments/bias_cost.py")
    seen = []
    monkeypatch.setattr(precompile, "route_builds",
                        lambda route, dtype, src, name: seen.append((route, src, name)) or [])
    monkeypatch.setattr(precompile, "run_builds", lambda builds, load: type("O", (), {"failed": [], "summary": lambda s: ""})())
    assert bc.prebuild([(64, 1024, 4096), (4096, 64, 4096)]) == 0
    names = {name for _, _, name in seen}
    assert names == {"plain", "bias", "scalar", "col", "row", "col_f32", "col_bcast", "tile_bcast"}
    assert any(r.kind == "small_m" for r, _, _ in seen)
    for route, src, name in seen:
        assert (src is None) == (name == "plain")
        if src is not None:
            assert f"#define GL_EPI_SWAP {int(route.c_path.transposed)}" in src, (name, route.kind)
    assert any(r.c_path.transposed and src for r, src, _ in seen)


def test_bias_mma_split_forces_the_general_builds_split_only_where_it_has_it(monkeypatch):
    """bench/experiments/bias_mma.py --split: the route's general build launched with the asked split (what
    --sanitize needs to reach the stream-K piece that ends a unit's K); a ping-pong build (whole units only), the
    small-M kernel and the route's own split leave the route as decided."""
    bm = load(monkeypatch, "experiments/bias_mma.py")

    def route(m, n, k, act=None):
        x, w = torch.empty((m, k), dtype=torch.bfloat16, device="meta"), torch.empty((n, k), dtype=torch.bfloat16, device="meta")
        return bm.route_of(x, w, torch.empty((m, n), dtype=torch.bfloat16, device="meta"), act)

    general = route(1000, 4608, 3584)
    assert general.kind == "general" and dict(general.options)["split"] != "all"
    forced = bm.forced_split(general, "all")
    assert dict(forced.options)["split"] == "all" and forced.config == general.config
    assert bm.forced_split(general, None) is general
    assert bm.forced_split(general, dict(general.options)["split"]) is general
    pingpong = route(1576, 4096, 1024, "gelu")
    assert pingpong.config.pingpong and bm.forced_split(pingpong, "all") is pingpong
    small = route(16, 4096, 4096)
    assert small.kind == "small_m" and bm.forced_split(small, "all") is small
    with pytest.raises(SystemExit) as bad:
        bm.main(["--split", "half"])
    assert bad.value.code == 2
