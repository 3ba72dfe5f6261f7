"""``gemm-ladder advise`` on the other targets: a user's callable (with and without build()), a .cu file,
a cubin, a results JSON (the stopping rule); and every bad input: one line on stderr, exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import PLAIN, WGMMA, needs_nvcc

from gemm_ladder.cli import main

ROOT = Path(__file__).resolve().parent.parent
CLIMB = ROOT / "bench/results/2026-11-30_climb_bf16_edge_square_llm_d3b6198.json"
USER_GATE = ROOT / "bench/results/2026-11-30_gate_examples_my_gemm_1c37d0d.json"


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_my_gemm_has_no_wgmma_and_gets_level_1s_contract(capsys):
    """A torch function (examples/my_gemm.py): no SASS, said so; not on the ladder; level 1's contract."""
    assert main(["advise", str(ROOT / "examples/my_gemm.py") + ":gemm", "--format", "json", "--results", str(CLIMB)]) == 0
    out = _json(capsys)
    ev = {e["key"]: e for e in out["evidence"]}
    assert ev["sass.available"]["value"] is False and "no SASS" in ev["sass.available"]["statement"]
    assert ev["callable.own_kernel"]["value"] is False and ev["callable.own_kernel"]["label"] == "inferred"
    assert "torch" in ev["callable.own_kernel"]["statement"]
    assert ev["measured.gpu"]["label"] == "not run"
    assert out["position"]["level"] == 0 and out["conclusion"]["action"] == "climb"
    assert out["conclusion"]["next_level"] == 1 and "not on the ladder yet" in out["conclusion"]["text"]
    c = out["contract"]
    assert c["kind"] == "thread_copy" and c["shape"] == [128, 128, 64]  # clipped to level 1's domain
    assert c["descriptors"]["A"]["layout_type"] == 1 and c["descriptors"]["A"]["swizzle_bytes"] == 128
    assert "level 1 is never timed" in json.dumps(out) or "never timed" in out["conclusion"]["text"]


def test_my_gemm_markdown_has_the_five_outputs(capsys):
    from gemm_ladder.advise.render import SECTIONS

    assert main(["advise", str(ROOT / "examples/my_gemm.py") + ":gemm"]) == 0
    md = capsys.readouterr().out
    assert [s for s in SECTIONS if f"\n## {s}\n" in md] == list(SECTIONS)
    assert "**Next step: level 1 (single_tile).**" in md and "| inferred |" in md


def test_a_callable_that_launches_something_unseen_is_not_placed(tmp_path, capsys):
    f = tmp_path / "opaque.py"
    f.write_text("import ctypes\n\ndef gemm(a, b):\n    return launch(a, b)\n")
    assert main(["advise", f"{f}:gemm", "--format", "json"]) == 0
    out = _json(capsys)
    assert out["conclusion"]["action"] == "unplaced" and "--cubin" in out["conclusion"]["text"] + json.dumps(out["evidence"])


def test_the_stopping_rule_on_a_climb_json(capsys):
    """A results JSON where levels 6 and 8 did not beat the level below: the verdict says stop, and why."""
    assert main(["advise", str(CLIMB)]) == 0
    md = capsys.readouterr().out
    assert "Stop where a level did not beat the one below" in md
    assert "level 6 ran 0.69x" in md and "against level 5" in md and "level 8 ran 0.95x" in md
    assert "| 6 | persistent | not earned | no | 0.69x L5 |" in md
    assert "| 9 | multi_consumer | earned | yes | 1.12x L8 | 1.06x L7 |" in md
    assert main(["advise", str(CLIMB), "--format", "json"]) == 0
    out = _json(capsys)
    assert out["conclusion"]["action"] == "stop" and out["stopping"]["not_earned"] == [6, 8]
    assert out["stopping"]["kept"] == 9


def test_a_climb_json_is_judged_in_its_own_dtype(capsys):
    fp16 = ROOT / "bench/results/2026-11-30_climb_fp16_edge_square_llm_d3b6198.json"
    assert main(["advise", str(fp16), "--format", "json"]) == 0
    out = _json(capsys)
    assert out["target"]["dtype"] == "fp16" and out["stopping"]["not_earned"] == [6, 8]
    assert main(["advise", str(fp16), "--dtype", "bf16"]) == 0  # asked for a dtype it does not hold: said so
    assert "Nothing to judge: no timed level rows" in capsys.readouterr().out
    untimed = ROOT / "bench/results/2026-11-30_climb_edge_all_v1.json"  # compile and correctness only
    assert main(["advise", str(untimed)]) == 0
    assert "no timed, passing level rows" in capsys.readouterr().out


def test_a_users_gate_json_is_placed_as_far_as_its_census_goes(capsys):
    assert main(["advise", str(USER_GATE), "--format", "json", "--results", str(CLIMB)]) == 0
    out = _json(capsys)
    ev = {e["key"]: e for e in out["evidence"]}
    assert ev["measured.vs_cublas"]["label"] == "measured" and ev["measured.vs_cublas"]["value"]["gain"] < 0.5
    assert 0 < ev["measured.roofline"]["value"] < 1
    assert out["conclusion"]["action"] == "unplaced"


@pytest.mark.parametrize("argv, message", [
    ([], "give either TARGET or --level N"),
    (["--level", "3", "x.json"], "give either TARGET or --level N"),
    (["--level", "10"], "the ladder has levels"),
    (["--level", "x"], "the ladder has levels"),
    (["notes.txt"], "expected FILE.py:FUNC"),
    (["missing.py:gemm"], "no such file"),
    ([str(ROOT / "examples/my_gemm.py") + ":nothing"], "no callable 'nothing'"),
    (["missing.cubin"], "no such file"),
    (["missing.cu"], "no such file"),
    (["missing.json"], "cannot read missing.json"),
    (["--level", "2", "--dtype", "fp8"], "unknown dtype"),
    (["--level", "2", "--dtype", "all"], "one dtype at a time"),
    (["--level", "2", "--shape", "4x4"], "--shape"),
    # climb's and gate's rule for a shape given as MxNxK (design refuses 0x1x1 too): 1 <= M, N, K < 2^31
    (["--level", "9", "--shape", "0x0x0"], "--shape 0x0x0: each of M, N and K must be between 1 and 2147483647"),
    (["--level", "9", "--shape", "99999999999x1x1"], "--shape 99999999999x1x1: each of M, N and K"),
    (["--level", "9", "--measure-shapes", "0x1x1"], "--measure-shapes 0x1x1: each of M, N and K must be between 1"),
    (["--level", "9", "--measure-shapes", "edge,banana"], "neither a shape set"),
    (["--level", "2", "--format", "html"], "--format"),
    (["--level", "2", "--results", "missing.json"], "cannot read missing.json"),
    (["--level", "2", "--cubin", "k.cubin"], "--cubin goes with a FILE.py:FUNC"),
    (["--level", "2", "--arch", "sm_100a"], "planning model"),
    (["k.cu", "--arch", "banana"], "unknown architecture"),
])
def test_bad_inputs_give_one_line_and_exit_2(argv, message, capsys):
    assert main(["advise", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("gemm-ladder advise: ")


def test_a_build_that_raises_is_a_failed_build(tmp_path, capsys):
    mod = tmp_path / "raises.py"
    mod.write_text("def gemm(a, b):\n    return a @ b.T\n"
                   "def _build(dtype, arch='sm_90a'):\n    raise TypeError('no such toolchain')\n"
                   "gemm.build = _build\n")
    assert main(["advise", f"{mod}:gemm"]) == 1  # its build failed: a finding (cli.EXIT_STATUS), in one line
    err = capsys.readouterr().err
    assert "build() or geometry() raised TypeError: no such toolchain" in err and err.count("\n") == 1


def test_a_json_that_is_not_a_result_and_a_module_that_fails_to_import(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema": "gemm-ladder/design/1"}))
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    for argv, message in (([str(plan)], "is not a result JSON of climb or gate"), ([f"{broken}:gemm"], "RuntimeError: boom")):
        assert main(["advise", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1


@needs_nvcc
def test_a_cu_file_is_compiled_and_placed(tmp_path, use_cache, capsys):
    cu = tmp_path / "two.cu"
    cu.write_text(PLAIN + WGMMA)
    assert main(["advise", str(cu)]) == 2  # two entry functions: which one?
    assert "name one with --kernel-name" in capsys.readouterr().err
    assert main(["advise", str(cu), "--kernel-name", "tiny_wgmma", "--format", "json"]) == 0
    out = _json(capsys)
    assert out["position"]["level"] == 1 and out["conclusion"]["next_level"] == 2
    ev = {e["key"]: e for e in out["evidence"]}
    assert ev["sass.hgmma"]["value"] >= 1 and ev["elf.max_threads"]["value"] == 128
    assert ev["measured.gpu"]["label"] == "not run"
    assert main(["advise", str(cu), "--kernel-name", "plain", "--format", "json"]) == 0
    out = _json(capsys)
    assert out["position"]["level"] == 0 and out["conclusion"]["next_level"] == 1
    assert "no HGMMA and no HMMA" in out["position"]["rungs"][0]["because"]


@needs_nvcc
def test_a_file_that_is_not_a_cubin_is_one_line(tmp_path, capsys):
    fake = tmp_path / "fake.cubin"
    fake.write_text("not an ELF file\n")
    assert main(["advise", str(fake)]) == 2
    err = capsys.readouterr().err
    assert "cannot be read as a cubin" in err and err.count("\n") == 1


@needs_nvcc
def test_a_cu_file_nvcc_rejects_is_one_line(tmp_path, use_cache, capsys):
    cu = tmp_path / "bad.cu"
    cu.write_text('extern "C" __global__ void k(float* x) { x[0] = undeclared; }\n')
    assert main(["advise", str(cu)]) == 1  # a failed build, as climb and gate count one
    err = capsys.readouterr().err
    assert "nvcc failed" in err and "undeclared" in err and err.count("\n") == 1


@needs_nvcc
def test_a_cubin_and_a_callable_with_build(tmp_path, use_cache, capsys, monkeypatch):
    from gemm_ladder.runtime.compiler import compile_kernel

    built = compile_kernel(PLAIN + WGMMA, "tiny_wgmma")
    assert main(["advise", str(built.cubin), "--kernel-name", "tiny_wgmma", "--format", "json"]) == 0
    out = _json(capsys)
    assert out["target"]["kind"] == "cubin" and out["position"]["level"] == 1
    ev = {e["key"]: e for e in out["evidence"]}
    assert "dump-resource-usage" in ev["ptxas.registers"]["source"]  # a bare cubin has no ptxas log
    mod = tmp_path / "mine.py"
    mod.write_text(
        "from gemm_ladder.runtime.compiler import compile_kernel\n"
        "from gemm_ladder.levels.base import LaunchGeometry\n"
        f"SRC = {WGMMA!r}\n"
        "def gemm(a, b):\n    raise NotImplementedError\n"
        "gemm.build = lambda dtype, arch='sm_90a': compile_kernel(SRC, 'tiny_wgmma', arch=arch)\n"
        "gemm.geometry = lambda dtype: LaunchGeometry(threads=128, dynamic_smem=0)\n")
    assert main(["advise", f"{mod}:gemm", "--format", "json"]) == 0
    out = _json(capsys)
    ev = {e["key"]: e for e in out["evidence"]}
    assert out["position"]["level"] == 1 and "ptxas -v" in ev["ptxas.registers"]["source"]
    assert ev["callable.attributes"]["value"] == ["build", "geometry"]
    assert any(e["key"] == "assumption.same_as_ladder" and e["label"] == "assumed" for e in out["evidence"])


@pytest.mark.gpu
def test_my_gemm_is_measured_on_a_gpu(capsys):
    assert main(["advise", str(ROOT / "examples/my_gemm.py") + ":gemm", "--format", "json",
                 "--measure-shapes", "4096x4096x4096"]) == 0
    out = _json(capsys)
    ev = {e["key"]: e for e in out["evidence"]}
    assert ev["measured.vs_cublas"]["label"] == "measured" and ev["measured.correctness"]["value"].get("pass")


def test_without_nvcc_a_level_is_not_placed_and_says_why(monkeypatch, capsys, tmp_path):
    """No compiler: no SASS to read. The answer says so (not run) instead of guessing the rungs."""
    from gemm_ladder.levels import LEVELS

    monkeypatch.setenv("GEMM_LADDER_NVCC", str(tmp_path / "no_nvcc_here"))
    monkeypatch.setitem(LEVELS, 5, LEVELS[5].variant())  # fresh caches: no build from an earlier test
    assert main(["advise", "--level", "5", "--format", "json", "--results", str(CLIMB)]) == 0
    out = _json(capsys)
    ev = {e["key"]: e for e in out["evidence"]}
    assert ev["sass.available"]["value"] is False and ev["sass.available"]["label"] == "not run"
    assert ev["build.stages"]["value"] == LEVELS[5].stages  # the flags its build would use, read without nvcc
    assert out["conclusion"]["action"] == "unplaced" and out["position"]["rungs"][0]["present"] is None
