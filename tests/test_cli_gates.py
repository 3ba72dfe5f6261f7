"""The climb, compile and gate subcommands, driven in-process and (once) as a real subprocess."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import SPILL, SPILL_FLAGS, WGMMA, needs_nvcc

import gemm_ladder.levels
from gemm_ladder.cli import main
from gemm_ladder.contract import Domain, check_operands
from gemm_ladder.gates.climb import parse_level_range
from gemm_ladder.levels.base import LaunchGeometry, Level
from gemm_ladder.results import SCHEMA
from gemm_ladder.runtime.compiler import compile_kernel

ROOT = Path(__file__).resolve().parent.parent
no_gpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the compile-only path of a machine without a GPU")


def test_parse_level_range():
    assert parse_level_range("1-3,5") == [1, 2, 3, 5]
    assert parse_level_range("3,1-2,2") == [1, 2, 3]
    assert parse_level_range("all", [3, 1, 2]) == [1, 2, 3]
    for bad in ("", " ", "x", "3-1", "1-", "1--2", "1,,2", "1,", ",1"):
        with pytest.raises(ValueError):
            parse_level_range(bad)
    with pytest.raises(ValueError, match=r"no level \[7\]"):
        parse_level_range("6-7", [1, 2, 3, 4, 5, 6])


def test_parse_dtypes_keeps_each_dtype_once():
    from gemm_ladder.contract import parse_dtypes

    assert parse_dtypes("bf16,bf16") == ["bf16"]
    assert parse_dtypes("fp16, bf16,fp16") == ["fp16", "bf16"]  # the order first given
    assert parse_dtypes("all") == ["bf16", "fp16"]
    with pytest.raises(ValueError, match="unknown dtype"):
        parse_dtypes("bf16,fp8")


def test_climb_runs_a_repeated_dtype_once(monkeypatch, tmp_path):
    """--dtype bf16,bf16 is one dtype, as --levels 1,1 is one level: one build per level, not two."""
    import gemm_ladder.gates.climb as climb

    seen = []

    def run_gates(targets, dtypes, shapes, **_kw):
        seen.append(([t.number for t in targets], list(dtypes)))
        raise SystemExit(0)  # the arguments were all this test wanted

    monkeypatch.setattr(climb, "run_gates", run_gates)
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path / "cache"))
    with pytest.raises(SystemExit):
        main(["climb", "--levels", "1,1", "--dtype", "bf16,bf16", "--shapes", "16x16x16"])
    assert seen == [([1], ["bf16"])]


def test_gate_wrong_example_fails_with_exit_1(tmp_path, capsys):
    out = tmp_path / "wrong.json"
    rc = main(["gate", str(ROOT / "examples/wrong_gemm.py") + ":gemm", "--device", "cpu", "--json", str(out)])
    assert rc == 1
    result = json.loads(out.read_text())
    assert result["schema"] == SCHEMA and not result["summary"]["passed"]
    assert result["summary"]["verdict"] == "failed" and result["gates"]["correctness"]["state"] == "failed"
    by_shape = {(r["m"], r["n"], r["k"]): r["status"] for r in result["rows"] if r["kind"] == "user"}
    assert by_shape[(128, 128, 64)] == "pass"  # K a multiple of 64: the bug does not show
    assert by_shape[(128, 128, 65)] == "fail" and by_shape[(7, 8, 9)] == "fail"
    assert all(r["status"] == "pass" for r in result["rows"] if r["kind"] == "cublas")
    text = capsys.readouterr().out
    assert "gate failure" in text and "all gates passed" not in text


def test_gate_without_device_flag_checks_a_cpu_callable(tmp_path, capsys):
    """The README's command as typed: without a GPU the callable runs on CPU tensors, so the wrong
    example fails (it printed "all gates passed" and exited 0 when only the resource gate could run)."""
    out = tmp_path / "wrong.json"
    assert main(["gate", str(ROOT / "examples/wrong_gemm.py") + ":gemm", "--shapes", "7x8x9", "--json", str(out)]) == 1
    result = json.loads(out.read_text())
    assert result["gates"]["correctness"] == {"state": "failed", "applies": True, "reason": None, "ran": 1,
                                              "failed": 1, "not_run": 0}
    assert "all gates passed" not in capsys.readouterr().out


def raises(a, b):
    raise RuntimeError("not written yet")


def needs_cuda(a, b):
    """What a ladder level does first: refuse operands that are not on a CUDA device."""
    check_operands(a, b, device_type="cuda")
    raise AssertionError("unreachable: the operands are on CPU")


def write_module(tmp_path, fn) -> str:
    path = tmp_path / f"{fn.__name__}.py"
    path.write_text(f"from gemm_ladder.contract import check_operands\n\n{inspect.getsource(fn)}")
    return f"{path}:{fn.__name__}"


def test_gate_callable_that_only_raises_fails(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["gate", write_module(tmp_path, raises), "--device", "cpu", "--shapes", "7x8x9,1x1x1",
                 "--json", str(out)]) == 1
    result = json.loads(out.read_text())
    assert result["summary"]["verdict"] == "failed"
    assert {r["status"] for r in result["rows"] if r["kind"] == "user"} == {"error"}
    assert "all gates passed" not in capsys.readouterr().out


def test_gate_callable_that_needs_a_gpu_is_not_run_and_not_passed(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["gate", write_module(tmp_path, needs_cuda), "--device", "cpu", "--shapes", "edge,4096x4096x4096",
               "--json", str(out)])
    assert rc == 3
    result = json.loads(out.read_text())
    assert result["summary"] == {"passed": False, "verdict": "incomplete", "failures": [],
                                 "not_run": result["summary"]["not_run"]}
    gates = result["gates"]
    assert gates["correctness"]["state"] == "not run" and gates["correctness"]["ran"] == 0
    assert "needs a GPU" in gates["correctness"]["reason"] and "cuda device" in gates["correctness"]["reason"]
    assert gates["performance"]["state"] == "not run" and gates["performance"]["applies"]
    assert "no GPU" in gates["performance"]["reason"]
    assert gates["resources"]["state"] == "not run" and not gates["resources"]["applies"]
    assert result["rows"] == []  # nothing ran: no row may look like a result
    text = " ".join(capsys.readouterr().out.split())
    assert "all gates passed" not in text and "INCOMPLETE" in text and "correctness not run: needs_cuda needs a GPU" in text


def test_gate_correct_example_passes(tmp_path, capsys):
    out = tmp_path / "good.json"
    rc = main(["gate", str(ROOT / "examples/my_gemm.py") + ":gemm", "--device", "cpu", "--dtype", "all",
               "--shapes", "edge,5x6x700", "--json", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    rows = [r for r in result["rows"] if r["kind"] == "user"]
    assert {r["dtype"] for r in rows} == {"bf16", "fp16"} and any(r["shape_set"] == "custom" for r in rows)
    assert result["levels"][0]["number"] is None and result["levels"][0]["name"] == "gemm"
    for r in rows:
        assert r["status"] == "pass"
        if r["m"] * r["n"] * r["k"]:
            assert r["correctness"]["rel_err"] <= r["correctness"]["bound"]
    gates = result["gates"]
    assert gates["correctness"]["state"] == "passed" and gates["correctness"]["ran"] == len(rows)
    # nothing to time (5x6x700 is launch-bound) and nothing to build: not run, and said why
    assert gates["performance"]["state"] == "not run" and "no timed shape" in gates["performance"]["reason"]
    assert gates["resources"]["state"] == "not run" and "nothing to inspect" in gates["resources"]["reason"]
    assert result["summary"]["verdict"] == "passed"
    line = " ".join(capsys.readouterr().out.split())
    assert "every gate that applies ran and passed" in line and "performance not run: no timed shape" in line


def test_gate_usage_errors(tmp_path, capsys):
    assert main(["gate", "no_such_file.py:gemm"]) == 2
    assert main(["gate", str(ROOT / "examples/my_gemm.py") + ":nope"]) == 2
    assert main(["gate", str(ROOT / "examples/my_gemm.py")]) == 2
    assert main(["gate", str(ROOT / "examples/my_gemm.py") + ":gemm", "--dtype", "fp8"]) == 2
    assert "expected FILE.py:FUNC" in capsys.readouterr().err


BAD_MODULES = {
    "syntax.py": ("def gemm(a, b:\n    pass\n", "syntax.py:1: SyntaxError"),
    "imports.py": ("import no_such_module_of_gemm_ladder\n", "failed to import: ModuleNotFoundError"),
    "raises.py": ("raise KeyError('at import')\n", "failed to import: KeyError"),
    "exits.py": ("import sys\nsys.exit(4)\n", "failed to import: SystemExit: 4"),
}


@pytest.mark.parametrize("name", sorted(BAD_MODULES))
def test_gate_module_that_does_not_import_is_one_line_exit_2(tmp_path, capsys, name):
    text, says = BAD_MODULES[name]
    (tmp_path / name).write_text(text)
    assert main(["gate", f"{tmp_path / name}:gemm"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("args, says", [
    (["--shapes", "0x0x0"], "between 1 and 2147483647"),
    (["--shapes", "99999999999x1x1"], "between 1 and 2147483647"),
    (["--shapes", "4096x0x64"], "between 1 and 2147483647"),
    (["--budget", "-1"], "positive number of seconds"),
    (["--budget", "0"], "positive number of seconds"),
    (["--budget", "nan"], "positive number of seconds"),
    (["--json", "/dev/null/x.json"], "is not a folder"),
])
@pytest.mark.parametrize("command", ["climb", "gate"])
def test_bad_run_arguments_are_refused_before_anything_runs(command, args, says, tmp_path, capsys):
    spec = [str(ROOT / "examples/my_gemm.py") + ":gemm"] if command == "gate" else ["--levels", "1"]
    assert main([command, *spec, *args]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and len(captured.err.strip().splitlines()) == 1
    assert captured.out == ""  # refused before any build, table or line of the run


def test_climb_refuses_an_unknown_arch_and_a_folder_as_json(tmp_path, capsys):
    assert main(["climb", "--arch", "banana"]) == 2
    assert main(["climb", "--json", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--arch 'banana'" in err and "is a folder" in err


@pytest.mark.parametrize("command", ["climb", "gate"])
def test_help_documents_every_exit_status(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for status in ("0 every gate that applies ran and passed", "1 a gate failed", "2 bad input", "3 nothing failed but a gate did not run"):
        assert status in text, status


@no_gpu_only
@needs_nvcc
def test_climb_without_gpu_is_compile_only_on_the_real_ladder(tmp_path, use_cache, capsys):
    out = tmp_path / "climb.json"
    assert main(["climb", "--levels", "1-2", "--json", str(out)]) == 3
    text = " ".join(capsys.readouterr().out.split())
    assert "no GPU" in text and "L1 single_tile" in text and "L2" in text
    assert "all gates passed" not in text
    assert "INCOMPLETE" in text and "correctness not run: no GPU" in text and "resources passed (2 builds)" in text
    result = json.loads(out.read_text())
    assert result["meta"]["gpu"] is None and result["rows"] == []
    assert [(r["level"], r["dtype"]) for r in result["resources"]] == [(1, "bf16"), (2, "bf16")]
    assert all(r["sass"]["HGMMA"] > 0 and r["passed"] for r in result["resources"])
    assert result["gates"]["resources"]["state"] == "passed"
    assert result["gates"]["correctness"]["state"] == "not run" and result["gates"]["correctness"]["not_run"] == 2 * 24
    assert result["summary"]["verdict"] == "incomplete" and result["summary"]["passed"] is False


@pytest.mark.gpu
@needs_nvcc
def test_climb_on_gpu_runs_every_gate(tmp_path, use_cache):
    out = tmp_path / "climb.json"
    assert main(["climb", "--levels", "3", "--shapes", "7x8x9,4096x4096x4096", "--budget", "0.05",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {g["state"] for g in result["gates"].values()} == {"passed"}, result["gates"]
    assert result["gates"]["performance"]["ran"] == 1 and result["summary"]["verdict"] == "passed"


def test_climb_usage_errors(capsys):
    assert main(["climb", "--levels", "99"]) == 2
    assert main(["climb", "--shapes", "nonsense"]) == 2
    assert "no level" in capsys.readouterr().err


@dataclass(frozen=True, eq=False)
class SourceLevel(Level):
    """A fake level built from an inline source (for a registry the test controls)."""

    text: str = ""
    flags: tuple[str, ...] = ()

    def defines(self, dtype):
        return {}

    def geometry(self, dtype):
        return LaunchGeometry(threads=128, dynamic_smem=0)

    def build(self, dtype, arch="sm_90a"):
        return compile_kernel(self.text, self.kernel_name, arch=arch, extra_flags=list(self.flags))

    def launch(self, a, b, c):  # pragma: no cover - never launched on CPU
        raise NotImplementedError


@no_gpu_only
@needs_nvcc
def test_climb_fails_when_a_level_spills_or_does_not_compile(monkeypatch, use_cache, capsys):
    fake = {
        0: SourceLevel(0, "wgmma", "", "", Domain(), kernel_name="tiny_wgmma", text=WGMMA),
        1: SourceLevel(1, "spills", "", "", Domain(), kernel_name="spill", text=SPILL, flags=tuple(SPILL_FLAGS)),
        2: SourceLevel(2, "broken", "", "", Domain(), kernel_name="k", text="this is not CUDA"),
    }
    monkeypatch.setattr(gemm_ladder.levels, "LEVELS", fake)
    assert main(["climb", "--levels", "0"]) == 3  # builds and passes; no GPU to check it: incomplete
    assert main(["climb", "--levels", "0-1"]) == 1
    assert "spills" in capsys.readouterr().out
    assert main(["climb", "--levels", "2"]) == 1
    assert "CompileError" in capsys.readouterr().out


@needs_nvcc
def test_compile_prints_report_and_census(use_cache, capsys):
    assert main(["compile", "--level", "1", "--sass"]) == 0
    text = capsys.readouterr().out
    assert "SASS census" in text and "HGMMA" in text and "Function : " in text
    assert main(["compile", "--level", "99"]) == 2


def test_entry_point_as_subprocess():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "gemm_ladder", "gate", "examples/wrong_gemm.py:gemm", "--device", "cpu", "--shapes", "7x8x9"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert "fail" in proc.stdout


def test_a_shape_too_large_for_a_cpu_check_is_not_run_not_passed(tmp_path):
    """On a CPU the correctness gate checks M x N x K up to 2^30 (1024^3 takes seconds, 8192^3 minutes):
    a larger shape is reported "not run" with the reason, and the run is incomplete (exit 3), not passed."""
    out = tmp_path / "big.json"
    rc = main(["gate", str(ROOT / "examples/my_gemm.py") + ":gemm", "--device", "cpu",
               "--shapes", "5x6x7,2048x1024x1024", "--json", str(out)])
    assert rc == 3
    result = json.loads(out.read_text())
    corr = result["gates"]["correctness"]
    assert corr["state"] == "not run" or corr["not_run"] >= 1, corr
    assert "too large to check on a CPU" in json.dumps(result["gates"])
    assert {(r["m"], r["n"], r["k"]) for r in result["rows"] if r["kind"] == "user"} == {(5, 6, 7)}


@pytest.mark.parametrize("argv", [["compile", "--level", "1", "--dtype", "bf16"],
                                  ["precompile", "--dtype", "bf16", "--classes", "large", "--no-load"]])
def test_missing_compiler_is_one_line_and_exit_3(argv, tmp_path):
    """compile and precompile, like every command, end a missing compiler with one line and exit 3
    (cli.py's epilog), not 1: no build failed, the tool to build with is absent. In a child: this
    process may hold the builds already."""
    nvcc = tmp_path / "no-nvcc"
    env = {**os.environ, "GEMM_LADDER_CACHE": str(tmp_path / "cache"), "GEMM_LADDER_AOT": "0",
           "GEMM_LADDER_NVCC": str(nvcc)}
    proc = subprocess.run([sys.executable, "-m", "gemm_ladder", *argv], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip() == f"gemm-ladder {argv[0]}: GEMM_LADDER_NVCC='{nvcc}' is not an executable file"
