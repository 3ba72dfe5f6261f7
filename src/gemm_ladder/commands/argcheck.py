"""Checks of command-line values that end in one line on stderr instead of argparse's usage text.

A command raises :class:`BadArgument` from ``run()``; its message is printed after the command's
name (``gemm-ladder design: --stages 'x' is not an integer``) and the command exits 2. Files a
command will write are checked before any work, so nothing is printed before the refusal.
"""

from __future__ import annotations

from pathlib import Path


class BadArgument(Exception):
    """A bad command-line value; the message names the option and the rule."""


def integer(text: str, flag: str, minimum: int | None = None) -> int:
    """``text`` as an int; raises BadArgument naming ``flag`` when it is not one, or is below ``minimum``."""
    try:
        value = int(text)
    except ValueError:
        raise BadArgument(f"{flag} {text!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise BadArgument(f"{flag} must be >= {minimum}, got {value}")
    return value


def choice(text: str, flag: str, options: tuple[str, ...]) -> str:
    """``text`` when it is one of ``options``; raises BadArgument listing them otherwise."""
    if text not in options:
        raise BadArgument(f"{flag} {text!r}: use one of {', '.join(options)}")
    return text


def writable_file(path: Path, flag: str) -> Path:
    """``path`` when a file can be written there, its missing folders created (as ``climb --json`` and
    ``gate --json`` do: one rule for every file a command writes, :func:`gemm_ladder.results.check_writable`);
    raises BadArgument naming ``flag`` for a folder, a path under a file, or a folder where no file can be
    created. A write can still fail afterwards (a full disk), which the caller reports too."""
    from gemm_ladder.results import check_writable

    if (reason := check_writable(path)) is not None:
        raise BadArgument(f"{flag} {reason}")
    return path
