"""``gemm-ladder show``: a level's idea, -D constants and nvcc command, and its diff against the level below.

Everything but the last two tests runs without nvcc; those compile with the printed command, to prove
it is the command a build runs.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess

import pytest
from conftest import needs_nvcc

from gemm_ladder.commands import show
from gemm_ladder.levels import LEVELS
from gemm_ladder.runtime import compiler


def _main(argv: list[str]) -> int:
    """The subcommand as the CLI wires it (argparse usage errors raise SystemExit)."""
    parser = argparse.ArgumentParser(prog="gemm-ladder show")
    show.add_arguments(parser)
    return show.run(parser.parse_args(argv))


def _command_line(out: str) -> list[str]:
    lines = out.splitlines()
    return shlex.split(lines[lines.index(next(l for l in lines if l.startswith("nvcc command"))) + 1])


@pytest.mark.parametrize("number", sorted(LEVELS))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_show_prints_idea_source_defines_and_command(number, dtype, capsys):
    assert _main(["--level", str(number), "--dtype", dtype]) == 0
    out = capsys.readouterr().out
    level = LEVELS[number]
    assert out.startswith(f"{level.title}: {level.idea}\n")
    assert f"source:   {level.source_path}" in out
    defines = level.build_defines(dtype)
    for name, value in defines.items():
        assert f"-D{name}={value}" in _command_line(out)
    assert f"GL_DTYPE_{dtype.upper()}" in defines
    cmd = _command_line(out)
    assert cmd[-4:] == ["-cubin", "-o", "kernel.cubin", "kernel.cu"]
    assert cmd[1:-4] == compiler.build_flags("sm_90a", defines)
    assert f'#include "levels/{level.source_path.name}"' in out


def test_show_needs_no_nvcc(monkeypatch, capsys):
    def missing():
        raise compiler.CompilerNotFoundError("nvcc not found")

    monkeypatch.setattr(compiler, "nvcc_path", missing)
    assert _main(["--level", "9", "--diff"]) == 0
    assert _command_line(capsys.readouterr().out)[0] == "nvcc"


@pytest.mark.parametrize("argv, says", [
    (["--level", "0"], "no level 0: the ladder has levels 1-9"),
    (["--level", "99"], "no level 99: the ladder has levels 1-9"),
    (["--level", "-1", "--diff"], "no level -1"),
    (["--level", "1", "--diff"], "level 1 is the first level, there is no level 0"),
])
def test_bad_level_is_one_line_and_exit_2(argv, says, capsys):
    assert _main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and says in captured.err and captured.err.startswith("gemm-ladder show: ")


@pytest.mark.parametrize("argv", [["--level", "2", "--dtype", "fp32"], ["--level", "x"], []])
def test_malformed_arguments_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        _main(argv)
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("number", range(2, 10))
def test_diff_is_against_the_level_below(number, capsys):
    assert _main(["--level", str(number), "--diff"]) == 0
    out = capsys.readouterr().out
    below, level = LEVELS[number - 1], LEVELS[number]
    assert f"=== {level.title} against {below.title} ===" in out
    assert f"--- {below.source}\n+++ {level.source}\n" in out


def test_diff_of_level_9_shows_what_it_adds(capsys):
    assert _main(["--level", "9", "--diff"]) == 0
    out = capsys.readouterr().out
    assert '+#include "gemm_ladder/stream_k.cuh"' in out
    assert "new header gemm_ladder/stream_k.cuh:\n--- /dev/null\n+++ include/gemm_ladder/stream_k.cuh" in out
    assert "+struct StreamKTail {" in out  # the new header in full
    assert re.search(r"^  GL_CONSUMERS +1 -> 2$", out, re.MULTILINE)
    assert "new header gemm_ladder/cluster_ring.cuh" not in out  # level 8 includes it too: no diff


def test_diff_of_level_4_names_the_header_it_drops(capsys):
    assert _main(["--level", "4", "--diff"]) == 0
    out = capsys.readouterr().out
    assert "no longer included: gemm_ladder/thread_copy.cuh" in out
    for header in ("gemm_ladder/ptx/mbarrier.cuh", "gemm_ladder/ptx/tma.cuh", "gemm_ladder/tma_tile.cuh"):
        assert f"new header {header}:" in out


def test_included_headers_follow_includes_transitively(tmp_path):
    (tmp_path / "local.cuh").write_text('#pragma once\n#include "gemm_ladder/ptx/mbarrier.cuh"\n')
    unit = tmp_path / "unit.cu"
    unit.write_text('#include <cstdint>\n#include "local.cuh"\n  #  include "gemm_ladder/ptx/fence.cuh"\n')
    found = show.included_headers(unit)
    include = compiler.INCLUDE_DIR
    assert found[0] == (tmp_path / "local.cuh").resolve()
    assert include / "gemm_ladder/ptx/mbarrier.cuh" in found
    assert include / "gemm_ladder/ptx/common.cuh" in found  # through mbarrier.cuh
    assert include / "gemm_ladder/ptx/fence.cuh" in found
    assert len(found) == len(set(found))


def test_missing_include_is_named(tmp_path):
    unit = tmp_path / "unit.cu"
    unit.write_text('#include "gemm_ladder/no_such_header.cuh"\n')
    with pytest.raises(FileNotFoundError, match="no_such_header.cuh"):
        show.included_headers(unit)


@needs_nvcc
@pytest.mark.parametrize("number", [1, 4])
def test_printed_command_is_what_a_build_runs(number, use_cache, tmp_path, capsys):
    assert _main(["--level", str(number)]) == 0
    out = capsys.readouterr().out
    cmd = _command_line(out)
    assert tuple(cmd[1:-4]) == LEVELS[number].variant().build("bf16").flags
    (tmp_path / "kernel.cu").write_text(LEVELS[number].translation_unit("bf16"))
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "kernel.cubin").stat().st_size > 0
