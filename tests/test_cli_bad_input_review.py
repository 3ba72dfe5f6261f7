"""The CLI review's defects (H1-H8, M1-M12, L6): each command keeps the exit statuses of ``gemm-ladder --help``.

0 done, 1 a finding, 2 bad input refused before any compile or launch (one line on stderr), 3 a gate
that applies did not run or a tool is missing, 4 the run's output could not be written, 141 the reader
of the output went away. Never a traceback. No GPU and no compile is needed: cases that would compile
are refused first, and the rest run a CPU callable (``--device cpu``) or stand-ins for the slow parts.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_runner import cli_env, run_many

from gemm_ladder import cli

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "tests" / "data" / "sample_result.json"
EPILOGUE = str(ROOT / "examples" / "scale_clamp.py") + ":epilogue"

USER_FILE = '''\
import sys
import torch

def gemm(a, b):
    return (a.float() @ b.float().T).to(a.dtype)

def exits(a, b):
    raise SystemExit(0)

def exits_1(a, b):
    sys.exit(1)
'''


@pytest.fixture
def user(tmp_path) -> Path:
    """A file of CPU callables: a correct gemm, and two that end the process when called."""
    path = tmp_path / "user.py"
    path.write_text(USER_FILE)
    return path


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def _main(argv, capsys) -> tuple[int, str, str]:
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


# --- H1: a FUNC that exits is a failure of FUNC, never the end of the gate --------------------------------


@pytest.mark.parametrize("func", ["exits", "exits_1"])
def test_h1_a_func_that_raises_systemexit_fails_the_gate(func, user, tmp_path, capsys):
    out_json = tmp_path / "r.json"
    rc, out, _ = _main(["gate", f"{user}:{func}", "--device", "cpu", "--shapes", "7x8x9", "--json", str(out_json)],
                       capsys)
    assert rc == 1
    assert "verdict: FAILED" in out and "SystemExit" in out
    assert json.loads(out_json.read_text())["summary"]["verdict"] == "failed"


def test_h1_keyboard_interrupt_still_interrupts(tmp_path, capsys):
    path = tmp_path / "ki.py"
    path.write_text("def f(a, b):\n    raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        cli.main(["gate", f"{path}:f", "--device", "cpu", "--shapes", "7x8x9"])


# --- H2: gate --epilogue refuses an architecture the library is not built for; a build failure is one line --


def test_h2_gate_epilogue_refuses_an_arch_the_kernels_are_not_built_for(capsys):
    rc, out, err = _main(["gate", "--epilogue", EPILOGUE, "--arch", "sm_100a"], capsys)
    assert rc == 2 and out == ""
    assert "--arch sm_100a: the ladder's kernels are sm_90a" in _one_line(err)


def test_h2_gate_epilogue_build_failure_is_one_line(monkeypatch, capsys):
    from gemm_ladder.commands import gate
    from gemm_ladder.library.epilogue import Epilogue
    from gemm_ladder.runtime.compiler import CompileError

    def fail(*_a, **_k):
        raise CompileError("nvcc failed for sm90_gemm (exit 255)", "ptxas error: a\nmore\nlines")

    monkeypatch.setattr(Epilogue, "compile_check", lambda self, arch="sm_90a": None)
    monkeypatch.setattr(gate, "epilogue_resources", fail)
    monkeypatch.setattr(gate, "epilogue_correctness", lambda *a, **k: [])
    rc, out, err = _main(["gate", "--epilogue", EPILOGUE, "--device", "cpu"], capsys)
    assert rc == 1
    text = " ".join(out.split())  # rich wraps the verdict line at 160 columns
    assert f"x {EPILOGUE} build: CompileError: nvcc failed for sm90_gemm (exit 255)" in text, out
    assert "resources failed (1 of 1 builds failed)" in text and text.endswith("exit 1"), out


def test_h2_gate_epilogue_ends_with_the_verdict_line_naming_each_gate(monkeypatch, capsys, tmp_path):
    """As the plain gate: the last line is the verdict, naming correctness, performance (not run: an epilogue is
    not timed) and resources; the JSON's 'gates' names all three and its summary has the verdict."""
    from gemm_ladder.commands import gate
    from gemm_ladder.library.epilogue import Epilogue

    built = {"kernel": "sm90_gemm_kk_bn256", "dtype": "bf16", "orientation": "direct", "passed": True,
             "messages": [], "registers": 168, "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0}
    monkeypatch.setattr(Epilogue, "compile_check", lambda self, arch="sm_90a": None)
    monkeypatch.setattr(gate, "epilogue_resources", lambda *a, **k: [built, {**built, "orientation": "swapped"}])
    path = tmp_path / "g.json"
    rc, out, err = _main(["gate", "--epilogue", EPILOGUE, "--device", "cpu", "--json", str(path)], capsys)
    assert rc == 3 and err == "", err
    last = " ".join(out.split()).rpartition("wrote ")[2]
    assert last.count("verdict:") == 1 and last.startswith(f"{path} verdict: INCOMPLETE"), out
    for phrase in ("correctness not run: needs a GPU", "performance not run: gate --epilogue times nothing",
                   "resources passed (2 builds)"):
        assert phrase in last, (phrase, out)
    assert last.endswith("exit 3"), out
    written = json.loads(path.read_text())
    assert written["gates"] == {"correctness": "not run", "performance": "not run", "resources": "passed"}
    assert written["summary"]["verdict"] == "incomplete" and len(written["summary"]["not_run"]) == 2


# --- H3, H4: a bad GEMM_LADDER_COMPILER or GEMM_LADDER_CACHE is bad input for every command that compiles ----


def _compiling_commands(user: Path) -> list[list[str]]:
    return [["compile", "--level", "1"],
            ["precompile", "--dtype", "bf16", "--classes", "large", "--epilogues", "none"],
            ["climb", "--levels", "1"],
            ["gate", f"{user}:gemm", "--device", "cpu"],
            ["gate", "--epilogue", EPILOGUE],
            ["advise", "--level", "3"]]


@pytest.mark.parametrize("variable, value, words", [
    ("GEMM_LADDER_COMPILER", "bogus", "GEMM_LADDER_COMPILER='bogus': use nvcc, nvrtc or auto"),
    ("GEMM_LADDER_CACHE", "{tmp}/a_file/cache", "GEMM_LADDER_CACHE={tmp}/a_file/cache: "),
    ("GEMM_LADDER_CACHE", "/proc/gemm-ladder-no-cache", "GEMM_LADDER_CACHE=/proc/gemm-ladder-no-cache: "),
    # the library's own settings, refused as the library refuses them (never read as on or off)
    ("GEMM_LADDER_HOST", "requre", "GEMM_LADDER_HOST='requre': use 0 "),
    ("GEMM_LADDER_AUTOTUNE", "true", "GEMM_LADDER_AUTOTUNE='true': use 1 (autotune on) or 0"),
])
def test_h3_h4_bad_kernel_environment_is_refused_in_one_line(variable, value, words, user, tmp_path):
    (tmp_path / "a_file").write_text("not a folder\n")
    value, words = value.format(tmp=tmp_path), words.format(tmp=tmp_path)
    env = cli_env(**{"GEMM_LADDER_CACHE": str(tmp_path / "cache"), variable: value})
    env.pop("GEMM_LADDER_NVCC")  # the compiler would be found: the refusal must come first
    cases = _compiling_commands(user)
    for argv, outcome in zip(cases, run_many([(argv, tmp_path) for argv in cases], tmp_path / "runs", env,
                                             deadline_s=60)):
        assert outcome.rc == 2 and not outcome.traceback and outcome.stdout == "", (argv, outcome.describe())
        line = _one_line(outcome.stderr)
        assert line.startswith(f"gemm-ladder {argv[0]}: ") and words in line, (argv, line)


def test_h4_an_existing_read_only_cache_is_taken_as_it_is(tmp_path, monkeypatch):
    """A prebuilt cache may be read-only: it serves its builds (a build it lacks fails at that build)."""
    import os

    from gemm_ladder.runtime.compiler import environment_refusal

    cache = tmp_path / "prebuilt"
    cache.mkdir()
    os.chmod(cache, 0o555)
    try:
        monkeypatch.setenv("GEMM_LADDER_CACHE", str(cache))
        monkeypatch.delenv("GEMM_LADDER_COMPILER", raising=False)
        assert environment_refusal() is None
    finally:
        os.chmod(cache, 0o755)


def test_h4_commands_that_do_not_compile_ignore_the_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GEMM_LADDER_CACHE", "/proc/gemm-ladder-no-cache")
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "bogus")
    rc, out, _ = _main(["design", "--shape", "256x256x256"], capsys)
    assert rc == 0 and out


# --- H5: a write that fails after the run --------------------------------------------------------------------


def test_h5_json_pre_check_opens_the_target(user, tmp_path, capsys, monkeypatch):
    import gemm_ladder.dispatch.precompile as P

    monkeypatch.setattr(P, "precompile", _must_not_run)
    (tmp_path / "proc_link.json").symlink_to("/proc/version")
    for target in ("/dev/full", str(tmp_path / "proc_link.json")):
        for argv in (["gate", f"{user}:gemm", "--device", "cpu", "--json", target],
                     ["precompile", "--dtype", "bf16", "--json", target],
                     ["design", "--shape", "256x256x256", "--timeline", target]):
            rc, out, err = _main(argv, capsys)
            assert rc == 2 and out == "", (argv, out)
            assert target in _one_line(err) and "No such file" not in err, (argv, err)


def test_h5_json_pre_check_keeps_an_existing_file(user, tmp_path, capsys):
    kept = tmp_path / "kept.json"
    kept.write_text("keep me")
    os.chmod(kept, 0o644)
    from gemm_ladder.commands.argcheck import output_refusal

    assert output_refusal(kept) is None and kept.read_text() == "keep me"


def _must_not_run(*_a, **_k):
    raise AssertionError("ran: the output should have been refused first")


def _full_disk(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_h5_gate_json_write_failure_after_the_run(user, tmp_path, capsys, monkeypatch):
    import gemm_ladder.results

    monkeypatch.setattr(gemm_ladder.results, "write_json", _full_disk)
    rc, out, err = _main(["gate", f"{user}:gemm", "--device", "cpu", "--shapes", "7x8x9",
                          "--json", str(tmp_path / "r.json")], capsys)
    assert rc == 4
    text = " ".join(out.split())  # rich wraps the verdict line at 160 columns
    assert text.count("verdict:") == 1 and text.endswith("exit 4 (the result was not written)"), out
    assert "verdict: passed" in text
    assert _one_line(err) == f"gemm-ladder gate: cannot write {tmp_path / 'r.json'}: No space left on device"


def test_h5_precompile_json_write_failure_after_the_run(tmp_path, capsys, monkeypatch):
    import gemm_ladder.dispatch.precompile as P
    import gemm_ladder.results

    done = P.Outcomes({"large bf16": "built"})
    done.compiled.add("large bf16")
    monkeypatch.setattr(P, "precompile", lambda *a, **k: done)
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gemm_ladder.results, "write_json", _full_disk)
    rc, out, err = _main(["precompile", "--dtype", "bf16", "--json", str(tmp_path / "b.json")], capsys)
    assert rc == 4 and "large bf16: built" in out
    assert _one_line(err) == f"gemm-ladder precompile: cannot write {tmp_path / 'b.json'}: No space left on device"


# --- H7: the CPU correctness check is bounded by its memory; an allocation failure is a gate error ------------


def test_h7_cpu_check_bounds_the_output_and_inputs(user, capsys, monkeypatch):
    import gemm_ladder.gates.climb as climb

    called = []
    monkeypatch.setattr(climb, "check_correctness", lambda fn, m, n, k, *a, **kw: called.append((m, n, k)))
    for shape, rule in (("32768x32768x1", "M x N > 2^24 outputs"),
                        ("1x1x1073741824", "M x K + N x K > 2^25 inputs")):
        rc, out, _ = _main(["gate", f"{user}:gemm", "--device", "cpu", "--shapes", shape], capsys)
        assert rc == 3 and not called, (shape, called)
        assert "too large to check on a CPU" in out and rule in out, out


def test_h7_allocation_failure_is_a_gate_error(user, capsys, monkeypatch):
    import gemm_ladder.gates.climb as climb

    def oom(*_a, **_k):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 2147483648 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(climb, "check_correctness", oom)
    rc, out, err = _main(["gate", f"{user}:gemm", "--device", "cpu", "--shapes", "64x64x64"], capsys)
    assert rc == 3 and err == ""
    assert "correctness not run: out of memory on this machine: RuntimeError: " in out


# --- H8: the designer refuses a grid CUDA cannot launch -------------------------------------------------------


def test_h8_design_refuses_a_grid_past_cudas_limits(capsys):
    for shape in ("16777216x4096x4096", "4294967296x64x64"):
        rc, out, err = _main(["design", "--shape", shape], capsys)
        assert rc == 2 and out == ""
        assert _one_line(err).startswith("gemm-ladder design: plan refused: grid: "), err
        assert "65535" in err and "--persistent" in err
    rc, out, _ = _main(["design", "--shape", "16777216x4096x4096", "--persistent"], capsys)
    assert rc == 0 and out
    rc, _, _ = _main(["design", "--shape", f"{65535 * 128}x4096x4096"], capsys)
    assert rc == 0


def test_h8_levels_keep_their_domains():
    from gemm_ladder.levels import LEVELS
    from gemm_ladder.levels.tma import TmaLevel

    for level in LEVELS.values():
        if isinstance(level, TmaLevel) and not level.persistent and level.domain.max_m is not None:
            level.plan(level.domain.max_m, 4096, 4096, "bf16")  # the largest M of its domain still plans


# --- M1, M10: a reader that goes away, a full disk on stdout --------------------------------------------------


def _run_with_stdout(argv: list[str], stdout, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemm_ladder", *argv], cwd=cwd, env=cli_env(), stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_m1_a_closed_pipe_ends_the_gate_with_141(user, tmp_path):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        proc = _run_with_stdout(["gate", f"{user}:gemm", "--device", "cpu", "--shapes", "7x8x9"], write, tmp_path)
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("argv", [["criteria", "--level", "3"], ["design", "--shape", "256x256x256"],
                                  ["gate", "{user}:gemm", "--device", "cpu", "--shapes", "7x8x9"]])
def test_m10_stdout_on_a_full_disk(argv, user, tmp_path):
    argv = [a.format(user=user) for a in argv]
    with open("/dev/full", "w") as full:
        proc = _run_with_stdout(argv, full, tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert _one_line(proc.stderr) == f"gemm-ladder {argv[0]}: cannot write the output: No space left on device"


# --- M5: advise needs cuobjdump to read SASS -------------------------------------------------------------------


def test_m5_advise_without_cuobjdump_exits_3(tmp_path, capsys, monkeypatch):
    import gemm_ladder.runtime.compiler as compiler
    from gemm_ladder.errors import CompilerNotFoundError

    def missing():
        raise CompilerNotFoundError("cuobjdump not found: put the CUDA toolkit's bin on PATH")

    monkeypatch.setattr(compiler, "cuobjdump_path", missing)
    fake = tmp_path / "fake.cubin"
    fake.write_text("not a cubin\n")
    for argv in (["advise", str(fake)], ["advise", "--level", "3"]):
        rc, out, err = _main(argv, capsys)
        assert rc == 3 and out == "", argv
        assert _one_line(err) == "gemm-ladder advise: cuobjdump not found: put the CUDA toolkit's bin on PATH"


# --- M6: precompile counts the shipped builds apart ------------------------------------------------------------


def test_m6_shipped_builds_are_not_compiled(tmp_path, monkeypatch):
    import gemm_ladder.dispatch.precompile as P
    from gemm_ladder.runtime.aot import AOT_DIR

    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path / "cache"))
    shipped = SimpleNamespace(key="k" * 32, directory=AOT_DIR / ("k" * 32))
    fresh = SimpleNamespace(key="f" * 32, directory=tmp_path / "cache" / ("f" * 32))
    out = P.run_builds([P.Build("a", lambda: shipped), P.Build("b", lambda: fresh)], load=False)
    assert out.shipped == {"a"} and out.compiled == {"b"}
    assert out.summary() == "2 builds ready, 1 compiled, 0 already cached, 1 shipped with the package"


def test_m6_precompile_names_no_cache_folder_when_every_build_was_shipped(tmp_path, capsys, monkeypatch):
    import gemm_ladder.dispatch.precompile as P

    done = P.Outcomes({"large bf16": "built"})
    done.shipped.add("large bf16")
    monkeypatch.setattr(P, "precompile", lambda *a, **k: done)
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path / "cache"))
    rc, out, _ = _main(["precompile", "--dtype", "bf16"], capsys)
    assert rc == 0
    assert out.splitlines()[-1] == "1 builds ready, 0 compiled, 0 already cached, 1 shipped with the package (of 1)"


# --- M7, L6: gate's files ------------------------------------------------------------------------------------


def test_m7_gate_cubin_that_is_not_a_cubin_is_bad_input(user, capsys):
    rc, out, err = _main(["gate", f"{user}:gemm", "--device", "cpu", "--cubin", str(user)], capsys)
    assert rc == 2 and out == ""
    assert _one_line(err) == f"gemm-ladder gate: --cubin {user}: not a cubin (no ELF header)"


def test_l6_folders_are_named_as_folders(user, tmp_path, capsys):
    (tmp_path / "dir.py").mkdir()
    rc, _, err = _main(["gate", f"{tmp_path / 'dir.py'}:f"], capsys)
    assert rc == 2 and _one_line(err) == f"gemm-ladder gate: {tmp_path / 'dir.py'} is a folder, not a Python file"
    rc, _, err = _main(["gate", f"{user}:gemm", "--cubin", str(tmp_path)], capsys)
    assert rc == 2 and _one_line(err) == f"gemm-ladder gate: --cubin {tmp_path} is a folder, not a cubin"
    rc, _, err = _main(["gate", f"{user}:gemm", "--json", "/proc/version"], capsys)
    assert rc == 2 and "No such file" not in _one_line(err) and "/proc/version" in err


# --- M12: report on hand-edited rows -------------------------------------------------------------------------


@pytest.mark.parametrize("member, field", [("rows", "dtype"), ("rows", "m"), ("rows", "n"), ("rows", "k"),
                                           ("rows", "status"), ("resources", "level"), ("rows", "level")])
@pytest.mark.parametrize("value", [[], {}])
def test_m12_report_refuses_rows_with_lists_or_objects(member, field, value, tmp_path, capsys):
    result = json.loads(RESULT.read_text())
    assert result[member], member
    for entry in result[member]:
        entry[field] = value
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(result))
    rc, out, err = _main(["report", str(path), "-o", str(tmp_path / "out")], capsys)
    assert rc == 2 and out == ""
    assert "not a result" in _one_line(err) and f"{member}[0].{field}" in err
    assert not (tmp_path / "out").exists()
