"""Every command in the README's ``bash`` blocks that needs no GPU, run as written.

Each block runs in order in a temporary directory that holds the repository's top-level paths (as
links), so ``examples/...`` and ``bench/results/...`` resolve and a later line may read what an
earlier one wrote. ``gemm-ladder`` is a script on PATH that runs ``python -m gemm_ladder`` from this
checkout. An optional part written ``[--flag value]`` runs once without it and once with each of its
``a|b`` alternatives. The expected exit status is 0, or N where the line's comment says "exit N".
No GPU is visible: a line that needs one is skipped with the reason, as are the install and test
lines. A line no rule below knows fails, so that a new README command gets a decision.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import SRC, Outcome
from conftest import have_nvcc

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

#: Lines that are not run, with the reason (first match wins).
NOT_RUN = [
    (r"^python3 -m pip ", "installs packages: not a command of the package"),
    (r"^python3 -m pytest\b", "the test suite itself"),
]

#: Commands that need nvcc (they compile the ladder); skipped without it.
NEEDS_NVCC = re.compile(r"^gemm-ladder (compile|climb)\b")

#: Commands that take tens of seconds: still run by default, deselected by -m "not slow".
SLOW = re.compile(r"^gemm-ladder climb\b")


def _known_defect(reason: str):
    return pytest.mark.xfail(strict=True, reason=reason)


#: README commands known to fail today, with the branch or edit that fixes them (first match wins).
KNOWN_DEFECTS: list = []


@dataclass(frozen=True)
class Command:
    """One command line to run: ``text`` (shell), the README ``block`` it comes from, the exit status expected."""

    text: str
    block: int
    expected: int
    comment: str


def _logical_lines(block: str) -> list[str]:
    return [line for line in re.sub(r"\\\n\s*", " ", block).splitlines() if line.strip()]


def _split_comment(line: str) -> tuple[str, str]:
    m = re.search(r"\s#\s.*$", line)
    return (line[: m.start()].strip(), m.group(0).strip()) if m else (line.strip(), "")


def _expand_optional(text: str) -> list[str]:
    """'cmd [--a] [--b x|y]' -> ['cmd', 'cmd --a', 'cmd --b x', 'cmd --b y'] (spaces normalised).

    Only a bracket that opens with an option is optional syntax ('.[test]' is a pip extra).
    """
    optional = r"(?<=\s)\[(--[^\]]+)\]"
    groups = re.findall(optional, text)
    base = " ".join(re.sub(optional, " ", text).split())
    variants = [base]
    for group in groups:
        flag, _, values = group.partition(" ")
        for value in values.split("|") if values else [""]:
            extra = f"{flag} {value}".strip()
            command, sep, rest = base.partition(" > ")  # an option goes before any redirection
            variants.append(f"{command} {extra}{sep}{rest}".strip())
    return variants


def readme_commands(readme: str) -> list[Command]:
    """Every command of every ```bash block of ``readme``, optional parts expanded."""
    out = []
    for block_no, block in enumerate(re.findall(r"```bash\n(.*?)```", readme, re.S)):
        for line in _logical_lines(block):
            text, comment = _split_comment(line)
            m = re.search(r"\bexit (\d+)\b", comment)
            for variant in _expand_optional(text):
                out.append(Command(variant, block_no, int(m.group(1)) if m else 0, comment))
    return out


def _marks(command: Command) -> list:
    for pattern, reason in NOT_RUN:
        if re.search(pattern, command.text):
            return [pytest.mark.skip(reason=reason)]
    marks = []
    if NEEDS_NVCC.search(command.text) and not have_nvcc():
        marks.append(pytest.mark.skip(reason="compiles the ladder: needs nvcc"))
    if SLOW.search(command.text):
        marks.append(pytest.mark.slow)
    marks += [mark for pattern, mark in KNOWN_DEFECTS if re.search(pattern, command.text)][:1]
    return marks


COMMANDS = readme_commands(README.read_text())


def test_the_readme_parser_reads_what_the_readme_writes():
    text = ("```bash\npython3 -m pip install -e '.[test]'   # the extras\n"
            "gemm-ladder compile --level 9 [--sass]   # resource report, no GPU\n"
            "gemm-ladder design --shape 1x2x3 \\\n    [--cluster 2] [--format md|json] > p.json\n"
            "gemm-ladder gate x.py:f   # a wrong one: fails, exit 1\n```\nprose\n```python\nignored()\n```\n")
    got = [(c.text, c.block, c.expected) for c in readme_commands(text)]
    assert got == [
        ("python3 -m pip install -e '.[test]'", 0, 0),
        ("gemm-ladder compile --level 9", 0, 0), ("gemm-ladder compile --level 9 --sass", 0, 0),
        ("gemm-ladder design --shape 1x2x3 > p.json", 0, 0),
        ("gemm-ladder design --shape 1x2x3 --cluster 2 > p.json", 0, 0),
        ("gemm-ladder design --shape 1x2x3 --format md > p.json", 0, 0),
        ("gemm-ladder design --shape 1x2x3 --format json > p.json", 0, 0),
        ("gemm-ladder gate x.py:f", 0, 1),
    ]
    assert any(c.text.startswith("gemm-ladder climb") for c in COMMANDS)  # the README's own blocks are found


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, nvcc_cache) -> tuple[Path, dict[str, str]]:
    """A directory per README block holding links to the repository's top-level paths, and the environment."""
    bin_dir = tmp_path_factory.mktemp("readme_bin")
    shim = bin_dir / "gemm-ladder"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gemm_ladder "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(SRC), "GEMM_LADDER_CACHE": str(nvcc_cache), "CUDA_VISIBLE_DEVICES": "",
           "MPLBACKEND": "Agg"}
    env.pop("GEMM_LADDER_JIT_DEBUG", None)
    root = tmp_path_factory.mktemp("readme_blocks")
    for block in {c.block for c in COMMANDS}:
        cwd = root / f"block{block}"
        cwd.mkdir()
        for entry in ROOT.iterdir():
            if not entry.name.startswith("."):
                (cwd / entry.name).symlink_to(entry)
    return root, env


_ran: dict[int, Outcome] = {}


def _run(index: int, workspace) -> Outcome:
    """Run the commands of ``index``'s block in order up to ``index`` (each once per session)."""
    root, env = workspace
    command = COMMANDS[index]
    for i, earlier in enumerate(COMMANDS[: index + 1]):
        if earlier.block != command.block or i in _ran or any(m.name == "skip" for m in _marks(earlier)):
            continue
        start = time.monotonic()
        proc = subprocess.run(["bash", "-c", earlier.text], cwd=root / f"block{earlier.block}", env=env,
                              capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
        _ran[i] = Outcome(proc.returncode, proc.stdout.decode("utf-8", "replace"),
                          proc.stderr.decode("utf-8", "replace"), time.monotonic() - start)
    return _ran[index]


@pytest.mark.parametrize("index", [pytest.param(i, marks=_marks(c), id=c.text) for i, c in enumerate(COMMANDS)])
def test_readme_command_runs_as_written(index, workspace):
    command = COMMANDS[index]
    if not command.text.startswith("gemm-ladder "):
        pytest.fail(f"no rule in {Path(__file__).name} says how to run {command.text!r}: add one (NOT_RUN or a runner)")
    outcome = _run(index, workspace)
    assert not outcome.traceback, outcome.describe()
    assert outcome.rc == command.expected, f"{command.text}: expected exit {command.expected}\n{outcome.describe()}"
