"""``gemm-ladder design`` end to end on the CPU: formats, exit codes and the timeline picture."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gemm_ladder.cli import main
from gemm_ladder.design.render import SECTIONS


def test_json_format_parses_and_has_keys(capsys):
    rc = main(["design", "--shape", "4096x4096x4096", "--dtype", "bf16", "--tile", "128x128x64", "--stages", "4",
               "--format", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("suitability", "tensor_maps", "smem", "wgmma_descriptors", "issuer", "consumers", "load_protocol",
                "store_protocol", "ring", "timeline", "kernel_defines", "schedule"):
        assert key in doc, key
    assert doc["tensor_maps"]["a"]["box_dim"] == [64, 128]
    assert doc["smem"]["total_bytes"] == 164928
    assert doc["ring"]["ledger"][0] == {"iteration": 0, "stage": 0, "round": 0, "full_wait_parity": 0,
                                        "empty_wait_parity": 1, "empty_passes_immediately": True}


def test_markdown_has_sections(capsys):
    rc = main(["design", "--shape", "1000x1032x520", "--dtype", "fp16", "--tile", "128x256x64", "--stages", "3",
               "--cluster", "2", "--consumers", "2", "--persistent"])
    assert rc == 0
    out = capsys.readouterr().out
    for section in SECTIONS:
        assert f"\n## {section}\n" in out, section
    assert "| boxDim | (64, 128) | (64, 128) | (64, 128) |" in out
    assert "-DGL_B_BOX_ROWS=128" in out


def test_refused_plan_exits_2(capsys):
    rc = main(["design", "--shape", "4096x4096x4093", "--dtype", "bf16"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "refused" in err and "8186" in err
    assert main(["design", "--shape", "4096x4096", "--dtype", "bf16"]) == 2


def test_sm100a(capsys):
    assert main(["design", "--shape", "4096x4096x4096", "--tile", "128x256x64", "--stages", "3",
                 "--arch", "sm_100a", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tmem"]["columns_used"] == 256
    assert doc["wgmma_descriptors"]["b"]["instruction"] == "tcgen05.mma"


def test_timeline_png(tmp_path, capsys):
    path = tmp_path / "plan.png"
    rc = main(["design", "--shape", "256x256x320", "--stages", "3", "--timeline", str(path)])
    assert rc == 0
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 2000
    # IHDR: width and height are positive
    assert data[12:16] == b"IHDR" and int.from_bytes(data[16:20], "big") > 100 and int.from_bytes(data[20:24], "big") > 100


def test_c_aliases_stages_flag(capsys):
    rc = main(["design", "--shape", "4096x4096x4096", "--tile", "128x128x64", "--stages", "3", "--c-aliases-stages",
               "--format", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["smem"]["total_bytes"] == 99376 and doc["smem"]["c_offset"] == 0 and doc["smem"]["c_aliases_stages"]
    assert doc["kernel_defines"]["GL_SMEM_C_OFFSET"] == 0
    assert main(["design", "--shape", "4096x4096x4096", "--stages", "3", "--c-aliases-stages"]) == 0
    assert "overlays the operand stages" in capsys.readouterr().out
    rc = main(["design", "--shape", "4096x4096x4096", "--stages", "3", "--c-aliases-stages", "--persistent"])
    assert rc == 2
    assert "output staging alias" in capsys.readouterr().err


def test_issuer_threads_in_json(capsys):
    assert main(["design", "--shape", "4096x4096x4096", "--tile", "128x256x64", "--stages", "3", "--cluster", "2",
                 "--consumers", "2", "--persistent", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["issuer"]["thread"], doc["issuer"]["store_thread"]) == (0, 128)
    assert doc["consumers"]["first_warpgroup"] == 1 and doc["consumers"]["release_threads"] == [128, 256]
    assert doc["schedule"]["cluster_dims"] == [2, 1, 1] and doc["schedule"]["grid"] == [132, 1, 1]


def test_stream_k_tail_is_planned_in_json_and_refused_without_persistent(capsys):
    l9 = ["--tile", "128x256x64", "--stages", "4", "--cluster", "2", "--consumers", "2", "--c-ring", "2"]
    assert main(["design", "--shape", "8192x8192x8192", *l9, "--persistent", "--stream-k", "--format", "json"]) == 0
    tail = json.loads(capsys.readouterr().out)["schedule"]["stream_k"]
    assert tail["tail_units"] == 34 and tail["max_contributors"] == 3
    assert main(["design", "--shape", "8192x8192x8192", "--tile", "128x256x64", "--stream-k"]) == 2
    assert "stream-K without persistent" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("args", [
    ["--arch", "banana"], ["--dtype", "fp32"], ["--format", "yaml"], ["--stages", "abc"], ["--stages", "-1"],
    ["--stages", "0"], ["--cluster", "0"], ["--cluster", "3", "--persistent"], ["--cluster", "-2"],
    ["--consumers", "0"], ["--consumers", "x"], ["--c-ring", "-1"], ["--c-ring", "x"], ["--shape", "4096x4096"],
    ["--shape", "axbxc"], ["--shape", "0x0x0"], ["--shape", "99999999999x1x1"], ["--shape=-1x2x3"],
    ["--tile", "0x0x0"], ["--tile", "128x128"], ["--tile", "1x1x1"], ["--stages", "1000"],
    ["--timeline", "A_FILE/t.png"], ["--timeline", "FOLDER"], ["NO_SHAPE"]], ids=repr)
def test_bad_arguments_end_in_one_line_and_exit_2_before_any_output(args, tmp_path, capsys):
    shape = [] if any(a.startswith("--shape") or a == "NO_SHAPE" for a in args) else ["--shape", "4096x4096x4096"]
    a_file = tmp_path / "a_file"
    a_file.write_text("a file where a folder is expected\n")
    names = {"FOLDER": str(tmp_path), "A_FILE/t.png": str(a_file / "t.png")}
    argv = ["design", *shape, *[names.get(a, a) for a in args if a != "NO_SHAPE"]]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and err.startswith("gemm-ladder design: "), (out[:200], err)
    assert [p.name for p in tmp_path.iterdir()] == ["a_file"]


def test_timeline_creates_its_missing_folders(tmp_path, capsys):
    """--timeline creates a missing folder, as climb --json and gate --json do (one rule, results.check_writable)."""
    path = tmp_path / "new" / "dir" / "plan.png"
    assert main(["design", "--shape", "256x256x320", "--stages", "3", "--timeline", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv", [
    ["design", "--shape", "axbxc", "--timeline", "NEW/t.png"],
    ["design", "--shape", "4096x4096x4096", "--tile", "7x7x7", "--timeline", "NEW/t.png"],  # plan refused
    ["audit", "--level", "42", "--dump-protocol", "NEW/x.json"],
    ["precompile", "--dtype", "bf16", "--epilogues", "bogus", "--json", "NEW/x.json"],
    ["gate", "--json", "NEW/x.json"],  # no spec
    ["gate", "no_such_file.py:f", "--json", "NEW/x.json"],
], ids=lambda argv: " ".join(argv[:3]))
def test_a_refused_command_creates_no_folder_for_its_output(argv, tmp_path, capsys):
    """The output's missing folder is created only once every other argument passed: a refused command
    leaves the file system as it was."""
    assert main([a.replace("NEW", str(tmp_path / "new")) for a in argv]) == 2
    assert not any(tmp_path.iterdir())


def test_the_readme_design_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """README's `gemm-ladder design ...` line, every bracketed option taken (the first of a|b)."""
    lines = (Path(__file__).resolve().parent.parent / "README.md").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("gemm-ladder design "))
    command = lines[at]
    while command.endswith("\\"):
        at += 1
        command = command[:-1] + " " + lines[at].strip()
    words = re.sub(r"[\[\]]", " ", command.split("#")[0]).split()
    words = [w.split("|")[0] for w in words]
    assert words[:2] == ["gemm-ladder", "design"] and "--cluster" in words, words
    monkeypatch.chdir(tmp_path)
    assert main(words[1:]) == 0, capsys.readouterr().err
    assert "# TMA pipeline plan" in capsys.readouterr().out
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
