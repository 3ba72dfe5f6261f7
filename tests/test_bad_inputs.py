"""Every subcommand over a corpus of bad inputs: one line on stderr and exit status 2, never a traceback.

The exit statuses are the ones ``gemm-ladder --help`` documents (cli.EXIT_STATUS): 2 is a usage
error or bad input, refused before any compile or launch. Each case runs as its own
``python -m gemm_ladder`` process (tests/cli_runner.py forks them from one warm interpreter, so the
corpus takes seconds), with no GPU visible and GEMM_LADDER_NVCC pointing nowhere: a case that tries
to compile or launch fails instead of being slow.

Cases marked xfail(strict=True) are defects fixed in another branch; the reason names it. Once
that branch is merged the case passes, strict xfail turns that into a failure, and the mark goes.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import Outcome, cli_env, run_many, run_one

from gemm_ladder import cli

ROOT = Path(__file__).resolve().parent.parent
RESULT = str(ROOT / "tests" / "data" / "sample_result.json")


def _fixed_in(branch: str, what: str):
    return pytest.mark.xfail(strict=True, reason=f"fixed in branch {branch}: {what}")


#: (id, argv, marks). Paths are relative to the corpus directory (see ``corpus`` below).
CASES = [
    ("compile-arch-banana", ["compile", "--level", "1", "--arch", "banana"], ()),
    ("compile-arch-sm_100a", ["compile", "--level", "1", "--arch", "sm_100a"], ()),
    ("compile-level-0", ["compile", "--level", "0"], ()),
    ("compile-level-10", ["compile", "--level", "10"], ()),
    ("compile-level-not-a-number", ["compile", "--level", "one"], ()),
    ("compile-dtype-fp8", ["compile", "--level", "1", "--dtype", "fp8"], ()),
    ("design-timeline-under-a-file", ["design", "--shape", "4096x4096x4096", "--timeline", "a_file/t.png"], ()),
    ("design-shape-0x0x0", ["design", "--shape", "0x0x0"], ()),
    ("design-shape-axbxc", ["design", "--shape", "axbxc"], ()),
    ("design-shape-negative", ["design", "--shape", "-1x2x3"], ()),
    ("design-tile-1x1", ["design", "--shape", "4096x4096x4096", "--tile", "1x1"], ()),
    ("design-stages-0", ["design", "--shape", "4096x4096x4096", "--stages", "0"], ()),
    ("design-arch-banana", ["design", "--shape", "4096x4096x4096", "--arch", "banana"], ()),
    ("audit-json-array", ["audit", "array.json"], ()),
    ("audit-not-utf8", ["audit", "latin1.json"], ()),
    ("audit-missing-plan", ["audit", "no_such_plan.json"], ()),
    ("audit-dump-protocol-under-a-file", ["audit", "--dump-protocol", "a_file/x.json", "--level", "5"], ()),
    ("precompile-json-under-a-file", ["precompile", "--dtype", "bf16", "--json", "a_file/x.json"], ()),
    ("audit-level-9-cluster-3", ["audit", "--level", "9", "--cluster", "3"], ()),
    ("audit-level-5-stages-1", ["audit", "--level", "5", "--stages", "1"], ()),
    ("audit-no-arguments", ["audit"], ()),
    ("report-not-utf8", ["report", "latin1.json"], ()),
    ("report-not-a-result", ["report", "not_a_result.json"], ()),
    ("report-missing-file", ["report", "no_such_result.json"], ()),
    ("report-output-unwritable", ["report", RESULT, "-o", "a_file/out"], ()),
    ("report-output-is-a-file", ["report", RESULT, "-o", "existing.txt"], ()),
    ("report-name-escapes", ["report", RESULT, "-o", "nest/deep/out", "--name", "../../x"], ()),
    ("gate-module-fails-to-import", ["gate", "bad_import.py:f"], ()),
    ("gate-module-syntax-error", ["gate", "bad_syntax.py:f"], ()),
    ("gate-no-such-file", ["gate", "nofile.py:f"], ()),
    ("gate-no-such-function", ["gate", str(ROOT / "examples" / "my_gemm.py") + ":nope"], ()),
    ("gate-no-function", ["gate", str(ROOT / "examples" / "my_gemm.py")], ()),
    ("climb-shapes-0x0x0", ["climb", "--shapes", "0x0x0"], ()),
    ("climb-shapes-huge", ["climb", "--shapes", "99999999999x1x1"], ()),
    ("climb-budget-negative", ["climb", "--budget", "-1"], ()),
    ("climb-levels-0", ["climb", "--levels", "0"], ()),
    ("climb-levels-reversed", ["climb", "--levels", "3-1"], ()),
    ("climb-dtype-fp8", ["climb", "--dtype", "fp8"], ()),
    ("climb-arch-banana", ["climb", "--arch", "banana"], ()),
    ("climb-arch-sm_100a", ["climb", "--arch", "sm_100a"], ()),
    # Output paths in a folder where no file can be created (os.access says yes there, as root): refused
    # before any build (GEMM_LADDER_NVCC points nowhere, so a build would end in exit 1, not 2).
    ("precompile-json-in-proc", ["precompile", "--dtype", "bf16", "--json", "/proc/nope.json"], ()),
    ("design-timeline-in-proc", ["design", "--shape", "4096x4096x4096", "--timeline", "/proc/nope.png"], ()),
    ("climb-json-in-proc", ["climb", "--levels", "1", "--json", "/proc/nope.json"], ()),
    # A --json found unwritable before the run (/dev/full: no space) is bad input too: nothing ran (exit 4 is a
    # write that fails once the run ended; cli.EXIT_STATUS, climb --help and the README say so).
    ("climb-json-dev-full", ["climb", "--levels", "1", "--shapes", "16x16x16", "--json", "/dev/full"], ()),
    ("gate-json-in-proc", ["gate", str(ROOT / "examples" / "my_gemm.py") + ":gemm", "--json", "/proc/nope.json"], ()),
    ("report-output-in-proc", ["report", RESULT, "-o", "/proc/nope"], ()),
    ("show-level-0", ["show", "--level", "0"], ()),
    ("show-level-99", ["show", "--level", "99"], ()),
    ("no-subcommand", [], ()),
    ("unknown-subcommand", ["nosuchcommand"], ()),
]


def _write_corpus(root: Path) -> None:
    """The files the cases name, in ``root``."""
    (root / "array.json").write_text("[1, 2, 3]\n")
    (root / "latin1.json").write_bytes(b'{"schema": "caf\xe9"}\n')  # Latin-1, not UTF-8
    (root / "not_a_result.json").write_text('{"hello": "world"}\n')
    (root / "existing.txt").write_text("keep me\n")
    (root / "a_file").write_text("a file where a folder is expected\n")
    (root / "nest" / "deep").mkdir(parents=True)
    (root / "bad_import.py").write_text("import gemm_ladder_no_such_module\n\ndef f(a, b):\n    return a\n")
    (root / "bad_syntax.py").write_text("def f(a, b:\n    return a\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad_inputs")
    _write_corpus(root)
    return root


@pytest.fixture(scope="module")
def outcomes(corpus, tmp_path_factory) -> dict[str, Outcome]:
    """Every case run once (all at once), keyed by id."""
    env = cli_env(GEMM_LADDER_CACHE=str(tmp_path_factory.mktemp("bad_inputs_cache")))
    # A refusal takes well under a second once the modules are imported: 10 s means it went on working.
    ran = run_many([(argv, corpus) for _, argv, _ in CASES], tmp_path_factory.mktemp("bad_inputs_runs"), env,
                   deadline_s=10)
    return {case_id: outcome for (case_id, _, _), outcome in zip(CASES, ran)}


#: Extra promises of some cases, beyond the ones every case keeps.
def _extra_checks(case_id: str, outcome: Outcome, corpus: Path) -> None:
    if case_id == "compile-arch-sm_100a":
        assert "sm_90a (wgmma)" in outcome.stderr and "gemm-ladder design --arch sm_100a" in outcome.stderr
    if case_id == "report-output-is-a-file":
        assert (corpus / "existing.txt").read_text() == "keep me\n"
    if case_id == "report-name-escapes":
        assert not list((corpus / "nest").glob("x.*")), "wrote outside the output folder"


@pytest.mark.parametrize("case_id", [pytest.param(cid, marks=marks, id=cid) for cid, _, marks in CASES])
def test_bad_input_is_refused_in_one_line_with_exit_2(case_id, outcomes, corpus):
    outcome = outcomes[case_id]
    assert not outcome.traceback, outcome.describe()
    assert outcome.rc == 2, outcome.describe()
    lines = outcome.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("gemm-ladder"), outcome.describe()  # the program names itself
    # argparse's refusals too (cli.OneLineParser): the one line, naming the command.
    assert len(lines) == 1 and lines[0].startswith("gemm-ladder"), outcome.describe()
    _extra_checks(case_id, outcome, corpus)


#: A stand-in ``gemm_ladder/__main__.py`` for the runner's own test: each way a process can end.
FAKE_MAIN = """
import sys
how = sys.argv[1]
print("out " + how)
print("err " + how, file=sys.stderr)
if how == "raise":
    raise RuntimeError("raised for the runner test")
if how == "exit-text":
    sys.exit("exited with a text")
if how == "exit-3":
    sys.exit(3)
"""


def test_the_runner_ends_a_command_as_python_m_does(tmp_path):
    """The forking runner against plain ``python -m`` on a stand-in package: same status and output."""
    (tmp_path / "fake" / "gemm_ladder").mkdir(parents=True)
    (tmp_path / "fake" / "gemm_ladder" / "__init__.py").write_text("")
    (tmp_path / "fake" / "gemm_ladder" / "__main__.py").write_text(FAKE_MAIN)
    env = cli_env(PYTHONPATH=str(tmp_path / "fake"))
    hows = ["return", "raise", "exit-text", "exit-3"]
    forked = run_many([([how], tmp_path) for how in hows], tmp_path / "runs", env, preload=False)
    for how, f in zip(hows, forked):
        plain = run_one([how], tmp_path, env)
        assert (f.rc, f.stdout, f.traceback) == (plain.rc, plain.stdout, plain.traceback), (how, f, plain)
        assert f.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1], (how, f, plain)
    assert [f.rc for f in forked] == [0, 1, 1, 3] and forked[1].traceback


def test_the_runner_gives_what_a_plain_subprocess_gives(corpus, tmp_path):
    env = cli_env(GEMM_LADDER_CACHE=str(tmp_path / "cache"))
    argv_sets = [["nosuchcommand"], ["design", "--shape", "axbxc"]]
    forked = run_many([(argv, corpus) for argv in argv_sets], tmp_path / "runs", env, preload=False)
    for argv, f in zip(argv_sets, forked):
        plain = run_one(argv, corpus, env)
        assert (f.rc, f.stdout, f.stderr) == (plain.rc, plain.stdout, plain.stderr), (argv, f, plain)


def test_every_command_in_COMMANDS_imports_and_is_a_subcommand():
    for name in cli.COMMANDS:
        module = importlib.import_module(f"gemm_ladder.commands.{name}")
        assert module.NAME == name and callable(module.run) and callable(module.add_arguments)
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert tuple(sub.choices) == cli.COMMANDS


def test_a_missing_command_module_is_an_error_not_a_silently_missing_command(monkeypatch):
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, "no_such_command_module"))
    with pytest.raises(ModuleNotFoundError, match="no_such_command_module"):
        cli.build_parser()


def test_help_documents_the_exit_statuses(capsys):
    for argv in (["--help"], ["compile", "--help"]):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 0
        text = capsys.readouterr().out
        assert "exit status:" in text and "2  usage error or bad input" in text
        assert "3  incomplete: nothing failed, but a gate that applies did not run" in text


def test_help_says_an_output_refused_before_the_run_is_bad_input_not_exit_4(capsys):
    """climb --json /dev/full is refused before anything runs, with exit 2 (the corpus above): the documented
    statuses say so, and keep 4 for a write that fails once the run ended."""
    assert "--json /dev/full" in cli.EXIT_STATUS and "whose write\n     after the work failed" in cli.EXIT_STATUS
    for argv in (["climb", "--help"], ["gate", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert "a --json found unwritable before the run" in text and "4 the run ended but --json" in text, text
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "2 bad input, nothing run (a `--json` path found unwritable before the run, `/dev/full` included)" in readme
    assert "4 the run ended but its output (stdout, or the file `--json` names) could not be written" in readme


def test_version(capsys):
    import gemm_ladder

    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"gemm-ladder {gemm_ladder.__version__}\n"


def test_building_the_parser_imports_no_torch(tmp_path):
    """``gemm-ladder --help``, ``design`` and ``audit`` need no torch; building the parser must not import it."""
    code = ("import sys; from gemm_ladder import cli; cli.build_parser(); "
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
