"""Checks of command-line values that end in one line on stderr instead of argparse's usage text.

A command raises :class:`BadArgument` from ``run()``; its message is printed after the command's
name (``gemm-ladder design: --stages 'x' is not an integer``) and the command exits 2. Files a
command will write are checked before any work, so nothing is printed before the refusal.
"""

from __future__ import annotations

import os
import tempfile
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
    """``path`` when a file can be written there: raises BadArgument for a folder, a missing folder, or a
    folder where no file can be created. A temporary file is created beside ``path`` and removed at once:
    os.access alone says yes to root in read-only or virtual folders (/proc), where the write fails later.
    A write can still fail afterwards (a full disk), which the caller reports too."""
    folder = path.parent
    if path.is_dir():
        raise BadArgument(f"{flag} {path} is a folder, not a file")
    if not folder.is_dir():
        raise BadArgument(f"{flag} {path}: the folder {folder} does not exist")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise BadArgument(f"{flag} {path}: cannot create a file in {folder} ({exc.strerror or exc})") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise BadArgument(f"{flag} {path}: not writable")
    return path
