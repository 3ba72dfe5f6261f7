"""Checks of command-line values that end in one line on stderr instead of argparse's usage text.

A command raises :class:`BadArgument` from ``run()``; its message is printed after the command's
name (``gemm-ladder design: --stages 'x' is not an integer``) and the command exits 2. Files a
command will write are checked before any work, so nothing is printed before the refusal.
"""

from __future__ import annotations

import os
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


def output_refusal(path: str | Path) -> str | None:
    """None when a file can be written at ``path``, else a one-line reason: one rule for every file a
    command writes (``--json``, ``--timeline``), checked before any work.

    An existing target is opened itself, for appending (nothing truncated), and written zero bytes: that
    refuses /dev/full, a /proc file (or a link to one) and a read-only file, which
    :func:`gemm_ladder.results.check_writable`'s temporary file beside the target cannot tell (and names
    the target's own error, not the folder's). Then check_writable: a folder, a path under a file, a
    folder where no file can be created; missing folders are created. A write can still fail afterwards
    (a disk that fills during the run), which the caller reports too."""
    from gemm_ladder.results import check_writable

    path = Path(path)
    if path.exists() and not path.is_dir():
        try:
            with open(path, "ab", buffering=0) as f:
                os.write(f.fileno(), b"")  # /dev/full says ENOSPC even to an empty write
        except OSError as exc:
            return f"cannot write {path}: {exc.strerror or exc}"
    return check_writable(path)


def writable_file(path: Path, flag: str) -> Path:
    """``path`` when a file can be written there (:func:`output_refusal`, its missing folders created);
    raises BadArgument naming ``flag`` otherwise."""
    if (reason := output_refusal(path)) is not None:
        raise BadArgument(f"{flag} {reason}")
    return path
