"""The climb, compile and gate subcommands, driven in-process and (once) as a real subprocess."""

from __future__ import annotations

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
from gemm_ladder.contract import Domain
from gemm_ladder.gates.climb import parse_level_range
from gemm_ladder.levels.base import LaunchGeometry, Level
from gemm_ladder.runtime.compiler import compile_kernel

ROOT = Path(__file__).resolve().parent.parent
no_gpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the compile-only path of a machine without a GPU")


def test_parse_level_range():
    assert parse_level_range("1-3,5") == [1, 2, 3, 5]
    assert parse_level_range("3,1-2,2") == [1, 2, 3]
    assert parse_level_range("all", [3, 1, 2]) == [1, 2, 3]
    for bad in ("", "x", "3-1", "1-", "1--2"):
        with pytest.raises(ValueError):
            parse_level_range(bad)
    with pytest.raises(ValueError, match=r"no level \[7\]"):
        parse_level_range("6-7", [1, 2, 3, 4, 5, 6])


def test_gate_wrong_example_fails_with_exit_1(tmp_path, capsys):
    out = tmp_path / "wrong.json"
    rc = main(["gate", str(ROOT / "examples/wrong_gemm.py") + ":gemm", "--device", "cpu", "--json", str(out)])
    assert rc == 1
    result = json.loads(out.read_text())
    assert result["schema"] == "gemm-ladder/result/1" and not result["summary"]["passed"]
    by_shape = {(r["m"], r["n"], r["k"]): r["status"] for r in result["rows"] if r["kind"] == "user"}
    assert by_shape[(128, 128, 64)] == "pass"  # K a multiple of 64: the bug does not show
    assert by_shape[(128, 128, 65)] == "fail" and by_shape[(7, 8, 9)] == "fail"
    assert all(r["status"] == "pass" for r in result["rows"] if r["kind"] == "cublas")
    assert "gate failure" in capsys.readouterr().out


def test_gate_correct_example_passes(tmp_path):
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


def test_gate_usage_errors(tmp_path, capsys):
    assert main(["gate", "no_such_file.py:gemm"]) == 2
    assert main(["gate", str(ROOT / "examples/my_gemm.py") + ":nope"]) == 2
    assert main(["gate", str(ROOT / "examples/my_gemm.py")]) == 2
    assert main(["gate", str(ROOT / "examples/my_gemm.py") + ":gemm", "--dtype", "fp8"]) == 2
    assert "expected FILE.py:FUNC" in capsys.readouterr().err


@no_gpu_only
@needs_nvcc
def test_climb_without_gpu_is_compile_only_on_the_real_ladder(tmp_path, use_cache, capsys):
    out = tmp_path / "climb.json"
    assert main(["climb", "--levels", "1-2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "no GPU: compile-only" in text and "L1 single_tile" in text and "L2" in text
    result = json.loads(out.read_text())
    assert result["meta"]["gpu"] is None and result["rows"] == []
    assert [(r["level"], r["dtype"]) for r in result["resources"]] == [(1, "bf16"), (2, "bf16")]
    assert all(r["sass"]["HGMMA"] > 0 and r["passed"] for r in result["resources"])


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
    assert main(["climb", "--levels", "0"]) == 0
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
