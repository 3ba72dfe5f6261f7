"""The compiled host path: builds and loads ``launch.cpp`` (and ``autograd.cpp``) at first use.

``launch.cpp`` registers the CUDA kernels of ``gemm_ladder::mm`` and ``gemm_ladder::linear`` (their
schemas, fakes and the Python paths stay in :mod:`gemm_ladder.ops`): a call is planned once per
signature in Python (:mod:`gemm_ladder.host.planner`) and launched per call in C++ (tensor maps
encoded for the call's addresses, one cuLaunchKernelEx). ``autograd.cpp`` registers their Autograd
kernels (a ``torch::autograd::Function`` per op).

Built with ``torch.utils.cpp_extension.load`` into the kernel cache (``$GEMM_LADDER_CACHE/host/<key>``,
the key hashing torch's version, the sources, the compiler's version and the flags), so a second
process loads the built module. On a CUDA build of torch the module reads the current stream through
c10::cuda; on a CPU build it builds against c10 alone (the launch code compiles and is never called).
libcuda is opened at run time (dlopen), never linked.

Environment: ``GEMM_LADDER_HOST_CACHE`` puts the builds there instead of ``$GEMM_LADDER_CACHE/host``
(a module shared by processes whose kernel caches differ). ``GEMM_LADDER_HOST=0`` keeps the Python path (nothing is built); ``GEMM_LADDER_HOST=1``
(or unset) builds and loads, falling back to the Python path with a warning when the build fails;
``GEMM_LADDER_HOST=require`` raises :class:`HostBuildError` instead. Any other value is refused
(ValueError, :func:`mode`), as a bad ``GEMM_LADDER_COMPILER`` is.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
import time
import warnings
from pathlib import Path

from gemm_ladder.errors import HostBuildError  # the package's errors live in one light module (re-exported here)

HERE = Path(__file__).resolve().parent
#: The C++ sources, in build order.
SOURCES = ("launch.cpp", "autograd.cpp")
_lock = threading.Lock()
_state: dict = {}


#: The values ``GEMM_LADDER_HOST`` takes (case and surrounding blanks ignored; unset or empty is "1"), by mode.
MODES = {"0": "off", "off": "off", "python": "off", "false": "off", "no": "off",
         "1": "on", "on": "on", "true": "on", "yes": "on", "require": "require"}


def mode() -> str:
    """'off', 'on' or 'require' (``GEMM_LADDER_HOST``: 0, 1 or unset, require; :data:`MODES`). Raises ValueError
    naming the variable and the values it takes for any other value (a typo such as ``requre`` is refused, never
    taken as on)."""
    v = os.environ.get("GEMM_LADDER_HOST", "1").strip().lower() or "1"
    if v not in MODES:
        raise ValueError(f"GEMM_LADDER_HOST={os.environ['GEMM_LADDER_HOST']!r}: use 0 (the Python host path, nothing "
                         "built), 1 (the default: the compiled host module, the Python path with a warning if its "
                         "build fails) or require (a failed build raises HostBuildError)")
    return MODES[v]


def _compiler_version() -> str:
    cxx = os.environ.get("CXX", "c++")
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return f"{cxx}: unknown"


def _use_c10_cuda() -> bool:
    """Whether to build against c10::cuda (a CUDA build of torch with the CUDA headers at hand)."""
    import torch
    from torch.utils import cpp_extension

    home = cpp_extension.CUDA_HOME
    root = Path(torch.__file__).parent
    return (torch.backends.cuda.is_built() and home is not None and (root / "lib" / "libc10_cuda.so").exists()
            and (root / "include" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists()
            and (Path(home) / "include" / "cuda_runtime_api.h").exists())


def build_key() -> str:
    """The cache key of this build: torch's version, the sources, the compiler, the flags."""
    import torch

    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    h.update(torch.__version__.encode() + b"\0" + _compiler_version().encode() + b"\0")
    h.update(repr(_flags()).encode())
    return h.hexdigest()[:16]


def _flags() -> tuple[list[str], bool]:
    cuda = _use_c10_cuda()
    return (["-O3"] + (["-DGL_HOST_C10_CUDA"] if cuda else []), cuda)


def _build():
    from torch.utils import cpp_extension

    from gemm_ladder.runtime.compiler import cache_root

    key = build_key()
    root = os.environ.get("GEMM_LADDER_HOST_CACHE")
    directory = (Path(root) if root else cache_root() / "host") / key
    directory.mkdir(parents=True, exist_ok=True)
    cflags, cuda = _flags()
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        raise HostBuildError("no C++ compiler (c++ or $CXX) on PATH to build gemm-ladder's host module")
    try:
        return cpp_extension.load(name=f"gemm_ladder_host_{key}", sources=[str(HERE / s) for s in SOURCES],
                                  extra_cflags=cflags, build_directory=str(directory), with_cuda=cuda,
                                  # no .cu source: an explicit arch keeps torch from asking a GPU for one
                                  extra_cuda_cflags=["-arch=sm_90"],
                                  verbose=os.environ.get("GEMM_LADDER_JIT_DEBUG") == "1")
    except Exception as exc:  # the compiler's or the loader's message, whatever torch raised it as
        raise HostBuildError(f"building gemm-ladder's host module in {directory} failed: {exc}") from exc


def load():
    """The loaded host module, or None (``GEMM_LADDER_HOST=0``, or the build failed: a warning says
    why and the Python path runs). Built once per process (and once per key on disk). Raises
    HostBuildError when the build fails under ``GEMM_LADDER_HOST=require``."""
    with _lock:
        if "module" in _state:
            return _state["module"]
        module = None
        how = mode()
        if how != "off":
            start = time.perf_counter()
            try:
                module = _build()
            except HostBuildError as exc:
                if how == "require":
                    raise
                _state["error"] = str(exc)
                warnings.warn(f"{exc}\ngemm-ladder runs its Python host path instead (slower per call, same "
                              "kernels); GEMM_LADDER_HOST=0 skips the build", RuntimeWarning, stacklevel=2)
            _state["seconds"] = time.perf_counter() - start
        _state["module"] = module
        return module


def load_seconds() -> float | None:
    """Wall seconds :func:`load` spent building or loading the module in this process (a loaded build:
    torch's extension loader checking it and the import), None before it ran or with the host path off."""
    return _state.get("seconds")


def loaded():
    """The host module if :func:`load` loaded it, else None (never builds)."""
    return _state.get("module")


def describe() -> str:
    """'C++' when the compiled host path is loaded, else 'python' (and why)."""
    if loaded() is not None:
        return "C++"
    if "error" in _state:
        return "python (the host module did not build: see the warning)"
    return "python (GEMM_LADDER_HOST=0)" if mode() == "off" else "python"


__all__ = ["HostBuildError", "build_key", "describe", "load", "load_seconds", "loaded", "mode"]
