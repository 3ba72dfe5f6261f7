"""Compile kernels with NVRTC (``cuda.bindings.nvrtc``): no CUDA toolkit and no host compiler needed.

NVRTC's library comes in the ``nvidia-cuda-nvrtc`` wheel and the CUDA headers the kernels include
(``cuda_bf16.h``, ``cuda_fp16.h``) in ``nvidia-cuda-runtime``; a CUDA build of PyTorch already pulls
in both, and the package depends on them. ``cuda.pathfinder`` (a dependency of cuda-bindings) finds
them in the wheels, a conda environment or a toolkit, in that order.

NVRTC takes nvcc's options in its own spelling; :func:`options_from_nvcc_flags` translates the flags
:func:`gemm_ladder.runtime.compiler.build_flags` makes, so one set of flags describes a build through
either compiler. NVRTC has no C++ standard library and refuses the host declarations of the driver
API's ``cuda.h``: the directory ``nvrtc_include/`` beside this module stands in for the three such
headers the kernels include (``<cstdint>``, ``<type_traits>``, ``<cuda.h>`` for ``CUtensorMap``),
put first on the include path of NVRTC builds only.

What differs from nvcc's build of the same source (same compiler release; docs/install.md measures
it): NVRTC's NVVM keeps shared-memory pointers 64 bits wide where nvcc's uses 32 (no NVRTC option
changes it), so address arithmetic differs by a few percent of the integer instructions; and NVRTC
emits namespace-scope ``constexpr`` variables as (unused) ``.global`` data, which ptxas reports as
``gmem``.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

#: NVRTC-only stand-ins for host headers (see the module docstring).
SHIM_DIR = Path(__file__).resolve().parent / "nvrtc_include"


class NvrtcUnavailableError(RuntimeError):
    """NVRTC's library or the CUDA headers could not be found."""


class NvrtcCompileError(RuntimeError):
    """NVRTC rejected the program; ``log`` is NVRTC's own message."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - cuda-bindings is a dependency
        raise NvrtcUnavailableError(f"cuda.bindings.nvrtc cannot be imported: {exc}") from None
    return nvrtc


def _check(result, what: str):
    """cuda.bindings returns (status, *values); raise on a failed status, else return the values."""
    nvrtc = _nvrtc()
    status, *values = result
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcUnavailableError(f"{what} failed: {status.name}")
    return values[0] if len(values) == 1 else values


@functools.lru_cache(maxsize=None)
def version() -> tuple[int, int]:
    """NVRTC's (major, minor); loads the library. Raises NvrtcUnavailableError without it."""
    nvrtc = _nvrtc()
    try:
        major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    except NvrtcUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - the bindings raise their own types when the .so is missing
        raise NvrtcUnavailableError(
            f"NVRTC's library cannot be loaded ({type(exc).__name__}: {exc}); "
            "pip install nvidia-cuda-nvrtc nvidia-cuda-runtime") from None
    return int(major), int(minor)


@functools.lru_cache(maxsize=None)
def header_dir() -> Path:
    """The directory holding ``cuda_bf16.h`` and ``cuda_fp16.h`` (the nvidia-cuda-runtime wheel, a conda
    environment or a toolkit, as cuda.pathfinder finds it). Raises NvrtcUnavailableError without one."""
    found = None
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
    except (ImportError, AttributeError):  # an older cuda-pathfinder: look in the wheels ourselves
        try:
            import nvidia  # type: ignore[import-not-found]

            found = next((str(h.parent) for root in nvidia.__path__ for h in sorted(Path(root).glob("*/include/cuda_bf16.h"))),
                         None)
        except ImportError:
            pass
    if found is None or not (Path(found) / "cuda_bf16.h").exists():
        raise NvrtcUnavailableError("the CUDA headers (cuda_bf16.h) were not found: pip install nvidia-cuda-runtime")
    return Path(found)


def _distribution_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def identity() -> str:
    """What an NVRTC build depends on besides the source and flags, for the kernel cache key: NVRTC's
    release (and its wheel's version, which names the patch release), and a digest of the CUDA headers
    the kernels include and of the stand-in headers. Loads NVRTC; raises NvrtcUnavailableError."""
    major, minor = version()
    h = hashlib.sha256()
    for path in sorted(SHIM_DIR.iterdir()):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    headers = header_dir()
    for name in ("cuda_bf16.h", "cuda_bf16.hpp", "cuda_fp16.h", "cuda_fp16.hpp"):
        path = headers / name
        if path.exists():
            h.update(name.encode() + b"\0" + path.read_bytes())
    wheel = _distribution_version("nvidia-cuda-nvrtc")
    # "no-cache": builds made with NVRTC's own cache on may lack their ptxas report; a new key rebuilds them.
    return (f"nvrtc {major}.{minor}" + (f" (nvidia-cuda-nvrtc {wheel})" if wheel else "") + f" headers {h.hexdigest()[:16]}"
            + (" no-cache" if cache_options() else ""))


def options_from_nvcc_flags(flags: list[str]) -> list[str]:
    """NVRTC's options for the nvcc ``flags`` of :func:`gemm_ladder.runtime.compiler.build_flags` (plus
    ``-maxrregcount=N`` and ``-Xptxas X``), the stand-in headers' directory first. The CUDA headers'
    directory (:func:`header_dir`) is not among them: :func:`compile_program` appends it.

    ``-O3`` is dropped: it sets nvcc's host optimisation, and NVRTC optimises device code at -O3 by
    default, as nvcc does. Raises ValueError naming a flag that has no NVRTC spelling here.
    """
    opts = [f"-I{SHIM_DIR}"]
    it = iter(flags)
    for flag in it:
        if flag.startswith("-gencode=arch="):
            # "-gencode=arch=compute_90a,code=sm_90a": NVRTC builds a cubin for a real architecture.
            code = flag.rsplit(",code=", 1)[1]
            opts.append(f"--gpu-architecture={code}")
        elif flag == "-O3":
            continue
        elif flag == "-Xptxas":
            opts.append(f"--ptxas-options={next(it)}")
        elif flag.startswith(("-I", "-D", "-std=", "-maxrregcount=")) or flag in ("--use_fast_math", "-lineinfo"):
            opts.append(flag)
        else:
            raise ValueError(f"nvcc flag {flag!r} has no NVRTC translation here (runtime/nvrtc.py)")
    return opts


#: NVRTC's own compile cache (NVRTC guide, "Caching (CUDA 12.9+)") answers a program it has seen without
#: running ptxas, so ``--ptxas-options=-v`` then reports nothing: on the H200, 8 of a GPU suite's 337
#: NVRTC builds came back with no ptxas report (no resources to gate). The kernel cache keeps the cubin
#: and its report already; NVRTC's cache is switched off from the release that has it.
NO_CACHE_FROM = (12, 9)


def cache_options() -> list[str]:
    """``["--no-cache"]`` where NVRTC has its own compile cache (:data:`NO_CACHE_FROM`), else ``[]``."""
    return ["--no-cache"] if version() >= NO_CACHE_FROM else []


#: The spellings NVRTC accepts for ptxas's verbose report (``--ptxas-options=-v`` is the one this module makes).
_VERBOSE = ("--ptxas-options=-v", "--ptxas-options=--verbose", "-Xptxas=-v", "-Xptxas=--verbose")


def _asks_for_report(options: list[str]) -> bool:
    pairs = zip(options, options[1:])
    return any(o in _VERBOSE for o in options) or any(a == "-Xptxas" and b in ("-v", "--verbose") for a, b in pairs)


def check_ptxas_report(log: str, options: list[str]) -> None:
    """Raise NvrtcCompileError when ``options`` ask ptxas for its ``-v`` report and ``log`` names no
    entry function (no "Compiling entry function" line): the resource gates would otherwise read an
    empty report for a kernel that was built. Every program built here has a kernel."""
    if _asks_for_report(options) and "Compiling entry function" not in log:
        raise NvrtcCompileError("NVRTC built the program but its log names no entry function ('Compiling entry "
                                "function'), though ptxas's -v report was asked for (NVRTC's own cache answered, "
                                "or the program has no kernel)", log)


def compile_program(source: str, name: str, options: list[str], *, want_ptx: bool = False) -> tuple[bytes, str, str | None]:
    """Compile ``source`` (file name ``name`` in messages) with NVRTC ``options`` for a real architecture,
    NVRTC's own compile cache off (:func:`cache_options`).

    Returns (cubin bytes, NVRTC's log: with ``--ptxas-options=-v`` it holds ptxas's report in nvcc's
    format, PTX text when ``want_ptx`` else None). Raises NvrtcCompileError with the log when NVRTC
    rejects the program or, asked for ptxas's report, gives none; NvrtcUnavailableError without NVRTC.
    """
    nvrtc = _nvrtc()
    version()  # a clear error when the library is missing
    options = [*options, *cache_options(), f"-I{header_dir()}"]
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        # NVRTC writes into the buffer it is given: always a fresh bytearray. (``b" " * 1`` is CPython's
        # shared one-byte object b" "; an empty log (size 1) written into it turned every b" " in the
        # process into b"\0", so print's separators came out as NUL bytes.)
        buf = bytearray(size)
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = bytes(buf).rstrip(b"\0").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise NvrtcCompileError(f"NVRTC: {status.name}", log)
        check_ptxas_report(log, options)
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = bytearray(size)
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        ptx = None
        if want_ptx:
            size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            buf = bytearray(size)
            _check(nvrtc.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
            ptx = bytes(buf).rstrip(b"\0").decode()
        return bytes(cubin), log, ptx
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


__all__ = ["NO_CACHE_FROM", "NvrtcCompileError", "NvrtcUnavailableError", "SHIM_DIR", "cache_options", "check_ptxas_report",
           "compile_program", "header_dir", "identity", "options_from_nvcc_flags", "version"]
