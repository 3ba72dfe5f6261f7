"""The ``gemm-ladder`` command: one subcommand per module in :mod:`gemm_ladder.commands`.

Each command module exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``
(the exit status), so a subcommand lives beside nothing but its own code. Every name in COMMANDS
must import: a missing module is a broken installation, and says so.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys

from gemm_ladder import __version__

COMMANDS = ("climb", "compile", "design", "audit", "report", "gate", "show", "advise", "criteria", "precompile")

#: The exit statuses every subcommand keeps to (tests/test_bad_inputs.py holds them to it).
EXIT_STATUS = """\
exit status:
  0  done: every gate that applies ran and passed, the plan was made, the audit proved the protocol
  1  a finding: a gate failed, a build failed, the audit found a violation or did not finish
  2  usage error or bad input, refused before any compile or launch with one line on stderr
     ("gemm-ladder COMMAND: ..."), a file an option names that is found unwritable before the work
     starts included (--json /dev/full, a folder, a path under a file)
  3  incomplete: nothing failed, but a gate that applies did not run (climb and gate without a GPU:
     correctness and timing need one; the summary line names each gate and why), or a tool the
     command needs is missing (no kernel compiler, no cuobjdump): one line on stderr names it
  4  the output could not be written: stdout, or a file an option names (such as --json) whose write
     after the work failed (a full disk); one line on stderr names it; a run that finished says its
     verdict above it
  141 the reader of the output went away (a closed pipe, as `| head`): stopped quietly
"""

#: What a write that finds no room or a failing device raises (stdout on a full disk, ``> /dev/full``).
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, refusing a command line as every other refusal is made: one line on stderr,
    naming the command, and exit status 2 (argparse's own refusal prints the whole usage first)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; each subparser's ``_run`` default is its module's ``run``."""
    parser = OneLineParser(
        prog="gemm-ladder",
        description="A ladder of Hopper GEMM kernels, the gates that prove them, and a TMA pipeline designer.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gemm-ladder {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"gemm_ladder.commands.{name}")
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP, epilog=EXIT_STATUS,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        # COMPILES: the command builds kernels (or reads their cache): its environment is checked first
        p.set_defaults(_run=module.run, _parser=p, _compiles=getattr(module, "COMPILES", False))
    return parser


def _settings_refusal() -> str | None:
    """None, or the one-line reason the library's own settings would refuse the command's calls: a bad
    GEMM_LADDER_HOST (:func:`gemm_ladder.host.mode`) or GEMM_LADDER_AUTOTUNE
    (:func:`gemm_ladder.dispatch.autotune.environment_setting`)."""
    from gemm_ladder import host

    try:
        host.mode()
        from gemm_ladder.dispatch import autotune  # its import reads GEMM_LADDER_AUTOTUNE: a bad value raises there

        autotune.environment_setting()  # and here, where the module was imported before
    except ValueError as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: sys.argv[1:]) and run the subcommand; returns its exit status.

    A reader that closes stdout early (``gemm-ladder audit plan.json | head -2``) ends the command
    quietly with status 141 (128 + SIGPIPE, what a shell reports for a command stopped that way); a
    stdout that cannot be written (a full disk) ends it with one line and status 4 (gates.verdict's
    EXIT_UNWRITTEN). A
    command that compiles (its module's ``COMPILES``) is refused first, with one line and status 2,
    when GEMM_LADDER_COMPILER, GEMM_LADDER_HOST, GEMM_LADDER_AUTOTUNE or GEMM_LADDER_CACHE is unusable.
    """
    from gemm_ladder.errors import CompilerNotFoundError

    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # refused by the subcommand's parser, which names it (argparse's would name the top level)
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args._compiles:
            from gemm_ladder.runtime.compiler import environment_refusal

            if (refusal := environment_refusal() or _settings_refusal()) is not None:
                print(f"gemm-ladder {args.command}: {refusal}", file=sys.stderr)
                return 2
        status = int(args._run(args) or 0)
        sys.stdout.flush()  # a full disk shows here, not in the interpreter's last flush
        return status
    except CompilerNotFoundError as exc:  # the machine lacks a tool: say which, no traceback
        print(f"gemm-ladder {args.command}: {exc}", file=sys.stderr)
        return 3
    except BrokenPipeError:
        _silence_stdout()
        return 128 + signal.SIGPIPE
    except OSError as exc:
        # A write that failed without naming a file: stdout's (commands catch their own files' errors).
        if exc.errno not in _WRITE_ERRNOS or exc.filename is not None:
            raise
        from gemm_ladder.gates.verdict import EXIT_UNWRITTEN

        _silence_stdout()
        print(f"gemm-ladder {args.command}: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNWRITTEN


def _silence_stdout() -> None:
    """Point stdout at /dev/null: its reader is gone or its disk is full, and the interpreter's final
    flush of what is still buffered must not print a second error."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file descriptor (captured in-process): nothing to silence
        pass


if __name__ == "__main__":
    sys.exit(main())
