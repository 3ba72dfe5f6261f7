"""The ``gemm-ladder`` command: one subcommand per module in :mod:`gemm_ladder.commands`.

Each command module exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``
(the exit status), so a subcommand lives beside nothing but its own code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("climb", "compile", "design", "audit", "report", "gate", "advise", "criteria")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gemm-ladder",
        description="A ladder of Hopper GEMM kernels, the gates that prove them, and a TMA pipeline designer.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"gemm_ladder.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"gemm_ladder.commands.{name}":
                raise
            continue  # not built yet
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
