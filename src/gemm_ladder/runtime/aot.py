"""Kernels built ahead of time and carried by the package: the default configurations, ready before
anything is compiled.

``tools/build_aot.py`` builds every kernel the dispatcher can pick for bf16 and fp16 in every shape
class (dispatch/precompile.py's ``library_builds``) with NVRTC, and writes them under
``gemm_ladder/aot_kernels/`` (one directory per build, named by its cache key, and a
``manifest.json`` naming the compiler that built them). A wheel or sdist made after it carries them
as package data; a git checkout does not (the directory is ignored), so a source tree compiles at
first use or with ``gemm-ladder precompile``. docs/install.md says why the set is built at release
time rather than at ``pip install`` or at first import, with the measurements.

:func:`gemm_ladder.runtime.compiler.compile_kernel` looks here first, with the manifest's compiler
identity in the key, so a shipped build is found without any compiler installed. It does not when
``GEMM_LADDER_AOT=0``, nor when GEMM_LADDER_COMPILER or GEMM_LADDER_NVCC names a compiler.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

#: Where the builds made ahead of time live inside the installed package.
AOT_DIR = Path(__file__).resolve().parent.parent / "aot_kernels"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Shipped:
    """The kernels the package carries: their directory, the identity of the compiler that built them
    (the cache key's compiler part), and how many there are."""

    directory: Path
    identity: str
    count: int


def shipped() -> Shipped | None:
    """The shipped builds, or None when the package carries none or ``GEMM_LADDER_AOT=0``."""
    if os.environ.get("GEMM_LADDER_AOT", "") == "0":
        return None
    return _read(AOT_DIR)


@functools.lru_cache(maxsize=None)
def _read(directory: Path) -> Shipped | None:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return Shipped(directory=directory, identity=manifest["identity"], count=len(manifest.get("builds", {})))


__all__ = ["AOT_DIR", "MANIFEST", "Shipped", "shipped"]
