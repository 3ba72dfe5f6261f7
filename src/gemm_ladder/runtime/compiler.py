"""Compile CUDA C++ kernel sources to sm_90a cubins with nvcc or NVRTC, cached on disk.

Two compilers build the same source from the same flags (:func:`build_flags`, in nvcc's spelling):
a CUDA toolkit's ``nvcc``, or NVRTC from the ``nvidia-cuda-nvrtc`` wheel (runtime/nvrtc.py), which
needs no toolkit and no host compiler. ``GEMM_LADDER_COMPILER`` picks one; by default (``auto``) nvcc
where one is found, else NVRTC (docs/install.md says why, with the measurements).

The cache key hashes the generated source, every header under the package's kernel tree (a superset
of what the source includes, so an edited header always rebuilds), the flags and the compiler's
identity (``nvcc --version``, or NVRTC's release, wheel version and CUDA headers). An entry is a directory built under a temporary name and renamed into place, so a
reader never sees half a cubin and two processes compiling the same kernel both end with one whole
entry.

Environment:
    GEMM_LADDER_CACHE: cache root (default ``~/.cache/gemm_ladder``).
    GEMM_LADDER_JIT_DEBUG=1: print each compile command and keep ``kernel.ptx`` and ``kernel.sass``
        next to the cubin.
    GEMM_LADDER_COMPILER: ``auto`` (default), ``nvcc`` or ``nvrtc``.
    GEMM_LADDER_NVCC: the nvcc to use (default: on PATH, then ``$CUDA_HOME/bin``); setting it asks for nvcc.
    GEMM_LADDER_BUILD_LOG: a file to which each :func:`compile_kernel` call appends one line (tab
        separated: ``built`` or ``cached``, seconds, kernel name, cache key, the ``-D`` flags), to see
        what a test run compiles and what it costs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from gemm_ladder.errors import CompileError, CompilerNotFoundError  # noqa: F401 - the public classes (re-exported here)

#: Root of the kernel sources shipped in the package (levels and PTX headers).
KERNEL_ROOT = Path(__file__).resolve().parent.parent / "kernels"
INCLUDE_DIR = KERNEL_ROOT / "include"

#: Real architecture -> the virtual architecture its PTX is written for. The "a" targets carry the
#: architecture-specific features, such as wgmma and setmaxnreg on sm_90a (PTX ISA, the .target
#: directive, and each instruction's "Target ISA notes").
VIRTUAL_ARCH = {"sm_90a": "compute_90a", "sm_100a": "compute_100a"}

#: One -gencode per target names exactly one virtual and one real architecture (NVCC documentation,
#: "Options for Steering GPU Code Generation", --generate-code). The -arch=sm_90a shorthand is not
#: used: nvcc 13.0 compiling an object with it also runs a compute_90 pass that rejects wgmma
#: (``nvcc -arch=sm_90a -c --dryrun`` lists it).
ARCH_FLAGS = {real: [f"-gencode=arch={virtual},code={real}"] for real, virtual in VIRTUAL_ARCH.items()}
BASE_FLAGS = ["-O3", "-std=c++17", "--use_fast_math", "-Xptxas", "-v", "-lineinfo"]


#: The compilers GEMM_LADDER_COMPILER may name ("auto" picks one of them).
COMPILERS = ("nvcc", "nvrtc")


@dataclass(frozen=True)
class CompiledKernel:
    """A cached build: ``cubin`` is the loadable module, ``ptxas_log`` is ptxas's -v report."""

    key: str
    directory: Path
    kernel_name: str
    flags: tuple[str, ...]

    @property
    def cubin(self) -> Path:
        return self.directory / "kernel.cubin"

    @property
    def ptxas_log(self) -> str:
        return (self.directory / "ptxas.log").read_text()

    @property
    def source(self) -> str:
        return (self.directory / "kernel.cu").read_text()


def cache_root() -> Path:
    return Path(os.environ.get("GEMM_LADDER_CACHE", Path.home() / ".cache" / "gemm_ladder"))


def debug_enabled() -> bool:
    return os.environ.get("GEMM_LADDER_JIT_DEBUG", "") not in ("", "0")


def _find_tool(name: str, env_var: str | None = None) -> str:
    if env_var and os.environ.get(env_var):
        chosen = os.environ[env_var]
        found = shutil.which(chosen)
        if found is None:
            raise CompilerNotFoundError(f"{env_var}={chosen!r} is not an executable file")
        return found
    found = shutil.which(name)
    if found:
        return found
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = Path(cuda_home) / "bin" / name
    if candidate.exists():
        return str(candidate)
    # The pip wheels nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm put their tools under nvidia/*/bin.
    try:
        import nvidia  # type: ignore[import-not-found]

        for root in getattr(nvidia, "__path__", []):
            for hit in sorted(Path(root).glob(f"*/bin/{name}")):
                return str(hit)
    except ImportError:
        pass
    raise CompilerNotFoundError(
        f"{name} not found: put the CUDA toolkit's bin on PATH, set CUDA_HOME"
        + (f" or {env_var}" if env_var else "")
        + (", or pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm" if name != "nvcc" else "")
    )


def nvcc_path() -> str:
    return _find_tool("nvcc", "GEMM_LADDER_NVCC")


def asked_compiler() -> str:
    """What GEMM_LADDER_COMPILER asks for: 'nvcc', 'nvrtc' or 'auto' (unset or empty); ValueError for
    another value. Looks for no compiler, so a command can refuse a bad value before it starts."""
    asked = os.environ.get("GEMM_LADDER_COMPILER", "auto").strip().lower() or "auto"
    if asked not in (*COMPILERS, "auto"):
        raise ValueError(f"GEMM_LADDER_COMPILER={asked!r}: use nvcc, nvrtc or auto")
    return asked


def environment_refusal() -> str | None:
    """None when this environment can build kernels into the cache, else a one-line reason: a bad
    GEMM_LADDER_COMPILER (:func:`asked_compiler`), or a kernel cache (:func:`cache_root`) that is no
    folder and cannot be made one (a path under a file, under /proc). An existing folder is taken as it
    is, read-only included (a prebuilt cache serves its builds; one it lacks fails at its build, naming
    it). Creates a missing cache folder, as the first build would; a command that compiles asks this
    before any work, so that a bad setting is one line, not a traceback or a failed build per kernel."""
    try:
        asked_compiler()
    except ValueError as exc:
        return str(exc)
    root = cache_root()
    name = f"GEMM_LADDER_CACHE={root}" if os.environ.get("GEMM_LADDER_CACHE") else f"the kernel cache {root}"
    above = next((p for p in (root, *root.parents) if p.exists()), None)
    if above is not None and not above.is_dir():
        return f"{name}: {above} is not a folder"
    if root.is_dir():
        return None
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{name}: cannot create the folder: {exc.strerror or exc}"
    return None


def compiler_choice() -> str:
    """The compiler kernels are built with: 'nvcc' or 'nvrtc'.

    ``GEMM_LADDER_COMPILER=nvcc|nvrtc`` asks for one; ``auto`` (the default) takes nvcc where one is
    found (GEMM_LADDER_NVCC, PATH, ``$CUDA_HOME/bin``, /usr/local/cuda/bin), else NVRTC. Raises
    ValueError for another value, CompilerNotFoundError when the one asked for (or, under auto, either)
    cannot be found.
    """
    asked = asked_compiler()
    if asked == "nvcc" or (asked == "auto" and os.environ.get("GEMM_LADDER_NVCC")):
        nvcc_path()
        return "nvcc"
    if asked == "auto":
        try:
            nvcc_path()
            return "nvcc"
        except CompilerNotFoundError:
            pass
    from gemm_ladder.runtime import nvrtc

    try:
        nvrtc.version()
        nvrtc.header_dir()
    except nvrtc.NvrtcUnavailableError as exc:
        hint = "" if asked == "nvrtc" else "no nvcc (CUDA toolkit) on PATH or in $CUDA_HOME, and "
        raise CompilerNotFoundError(f"no kernel compiler: {hint}{exc}") from None
    return "nvrtc"


def compiler_identity(compiler: str) -> str:
    """The text that names ``compiler``'s build in the cache key: ``nvcc --version``, or NVRTC's
    release, wheel version and CUDA headers (runtime/nvrtc.py identity)."""
    if compiler == "nvcc":
        return nvcc_version(nvcc_path())
    from gemm_ladder.runtime import nvrtc

    try:
        return nvrtc.identity()
    except nvrtc.NvrtcUnavailableError as exc:
        raise CompilerNotFoundError(str(exc)) from None


def cuobjdump_path() -> str:
    return _find_tool("cuobjdump")


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    """``nvcc --version`` text (part of every cache key); CompilerNotFoundError if it does not run."""
    try:
        proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
    except OSError as exc:
        raise CompilerNotFoundError(f"{nvcc} cannot run: {exc}") from exc
    if proc.returncode != 0:
        raise CompilerNotFoundError(f"{nvcc} --version failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


def _headers_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(KERNEL_ROOT.rglob("*")):
        if path.suffix in (".cuh", ".cu", ".h") and path.is_file():
            h.update(str(path.relative_to(KERNEL_ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def cache_key(source: str, flags: list[str], compiler_version: str, headers_digest: str) -> str:
    """sha256 over the source, the kernel tree's headers, the flags and the compiler's version."""
    h = hashlib.sha256()
    for part in (source, headers_digest, "\0".join(flags), compiler_version):
        h.update(part.encode())
        h.update(b"\0\0")
    return h.hexdigest()[:32]


def key_flags(flags: list[str]) -> list[str]:
    """``flags`` as the cache key sees them: the package's own kernel directory written as ``$KERNELS``,
    so that a build made in one checkout or install serves another (the kernels ahead of time, aot.py)."""
    root = str(KERNEL_ROOT)
    return [f.replace(root, "$KERNELS") for f in flags]


def _shipped_entry(source: str, flags: list[str], kernel_name: str) -> CompiledKernel | None:
    """The build of ``source`` among the kernels the package carries, built ahead of time (runtime/aot.py),
    or None: when none was shipped, when ``GEMM_LADDER_AOT=0``, or when GEMM_LADDER_COMPILER or
    GEMM_LADDER_NVCC asks for a compiler (its builds are then the ones wanted)."""
    if os.environ.get("GEMM_LADDER_COMPILER", "auto").strip().lower() not in ("", "auto") or os.environ.get("GEMM_LADDER_NVCC"):
        return None
    from gemm_ladder.runtime import aot

    shipped = aot.shipped()
    if shipped is None:
        return None
    key = cache_key(source, key_flags(flags), shipped.identity, _headers_digest())
    directory = shipped.directory / key
    if not (directory / "kernel.cubin").exists():
        return None
    return CompiledKernel(key=key, directory=directory, kernel_name=kernel_name, flags=tuple(flags))


def build_flags(arch: str, defines: dict[str, int | str] | None = None, extra: list[str] | None = None) -> list[str]:
    """The nvcc flags for one kernel: arch, optimisation, includes and ``-D`` defines in sorted order."""
    if arch not in ARCH_FLAGS:
        raise ValueError(f"unknown arch {arch!r}: use one of {sorted(ARCH_FLAGS)}")
    flags = [*ARCH_FLAGS[arch], *BASE_FLAGS, f"-I{INCLUDE_DIR}", f"-I{KERNEL_ROOT}"]
    flags += [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    return flags + list(extra or [])


def nvcc_command(nvcc: str, flags: list[str], source: Path | str, cubin: Path | str) -> list[str]:
    """The command line that compiles ``source`` to ``cubin`` with ``flags`` (from :func:`build_flags`);
    runs nothing, so it can be printed without nvcc (``gemm-ladder show``)."""
    return [nvcc, *flags, "-cubin", "-o", str(cubin), str(source)]


def compile_kernel(
    source: str,
    kernel_name: str,
    *,
    arch: str = "sm_90a",
    defines: dict[str, int | str] | None = None,
    extra_flags: list[str] | None = None,
) -> CompiledKernel:
    """Compile ``source`` (CUDA C++ text) to a cubin, or return the cached build.

    Args:
        source: the translation unit, usually a few lines that include a level's ``.cu`` file.
        kernel_name: the ``extern "C"`` entry point to load later.
        arch: 'sm_90a' (H100/H200) or 'sm_100a' (B200).
        defines: compile-time constants, passed as ``-DNAME=VALUE``.

    With GEMM_LADDER_JIT_DEBUG=1, the entry also holds ``kernel.ptx`` and ``kernel.sass`` (added to
    an entry built earlier without them).

    Raises:
        ValueError: an architecture not in ARCH_FLAGS, a bad GEMM_LADDER_COMPILER.
        CompilerNotFoundError: no compiler (or, with JIT debug, no cuobjdump).
        CompileError: the compiler failed; carries its message (nvcc's stderr, NVRTC's log).
        CaptureBuildError: the build is not cached and a CUDA graph is being captured (runtime.capture).
    """
    flags = build_flags(arch, defines, extra_flags)
    shipped = _shipped_entry(source, flags, kernel_name)
    if shipped is not None:
        return shipped
    compiler = compiler_choice()
    key = cache_key(source, key_flags(flags), compiler_identity(compiler), _headers_digest())
    final = cache_root() / key
    entry = CompiledKernel(key=key, directory=final, kernel_name=kernel_name, flags=tuple(flags))
    if not (final / "kernel.cubin").exists():
        from gemm_ladder.runtime.capture import refuse_during_capture

        refuse_during_capture(f"building kernel {kernel_name} (not in the kernel cache {cache_root()})")
        t0 = time.perf_counter()
        _build_entry(compiler, source, kernel_name, flags, final)
        _log_build("built", time.perf_counter() - t0, kernel_name, key, flags)
    else:
        _log_build("cached", 0.0, kernel_name, key, flags)
    if debug_enabled() and not (final / "kernel.sass").exists():
        _keep_ptx_and_sass(compiler, arch, flags, final)
    return entry


def _log_build(what: str, seconds: float, kernel_name: str, key: str, flags: list[str]) -> None:
    """One line per compile_kernel call to ``GEMM_LADDER_BUILD_LOG`` (unset: nothing)."""
    path = os.environ.get("GEMM_LADDER_BUILD_LOG")
    if not path:
        return
    defines = " ".join(f for f in flags if f.startswith("-D"))
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    with open(path, "a") as f:  # one short write per line: concurrent appenders do not interleave
        f.write(f"{what}\t{seconds:.2f}\t{kernel_name}\t{key}\t{defines}\t{test}\n")


def _build_entry(compiler: str, source: str, kernel_name: str, flags: list[str], final: Path) -> None:
    """Compile into a temporary directory beside ``final``, then rename it into place."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        (tmp / "kernel.cu").write_text(source)
        if compiler == "nvcc":
            nvcc = nvcc_path()
            cmd = nvcc_command(nvcc, flags, tmp / "kernel.cu", tmp / "kernel.cubin")
            _run_nvcc(cmd, f"nvcc failed for {kernel_name}", tmp / "ptxas.log")
        else:
            cubin, log, _ = _run_nvrtc(source, flags, f"NVRTC failed for {kernel_name}")
            (tmp / "kernel.cubin").write_bytes(cubin)
            (tmp / "ptxas.log").write_text(log)
        (tmp / "meta.json").write_text(json.dumps({"kernel": kernel_name, "flags": flags, "compiler": compiler,
                                                   compiler: compiler_identity(compiler)}))
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process renamed a whole entry into place first; theirs is as good as ours.
            if not (final / "kernel.cubin").exists():
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_nvcc(cmd: list[str], failure: str, log: Path) -> None:
    """Run one nvcc command (printed under JIT debug); its output goes to ``log``; CompileError on failure."""
    if debug_enabled():
        print("[gemm-ladder] " + " ".join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"{failure} (exit {proc.returncode})", proc.stderr + proc.stdout)
    log.write_text(proc.stderr + proc.stdout)


def _run_nvrtc(source: str, flags: list[str], failure: str, *, want_ptx: bool = False):
    """Compile with NVRTC (the options printed under JIT debug): (cubin, log, ptx); CompileError on failure."""
    from gemm_ladder.runtime import nvrtc

    try:
        options = nvrtc.options_from_nvcc_flags(flags)
    except nvrtc.NvrtcUnavailableError as exc:
        raise CompilerNotFoundError(str(exc)) from None
    if debug_enabled():
        print("[gemm-ladder] nvrtc " + " ".join(options), file=sys.stderr)
    try:
        return nvrtc.compile_program(source, "kernel.cu", options, want_ptx=want_ptx)
    except nvrtc.NvrtcCompileError as exc:
        raise CompileError(failure, exc.log) from None
    except nvrtc.NvrtcUnavailableError as exc:
        raise CompilerNotFoundError(str(exc)) from None


def _keep_ptx_and_sass(compiler: str, arch: str, flags: list[str], entry: Path) -> None:
    """Add ``kernel.ptx`` (nvcc -ptx for ``arch``'s virtual architecture, or NVRTC's PTX of the build)
    and ``kernel.sass`` to ``entry``.

    Both are made in a temporary directory and moved in, the SASS last: its presence means both are whole.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.debug.", dir=entry.parent))
    try:
        if compiler == "nvcc":
            ptx_flags = [f for f in flags if f not in ARCH_FLAGS[arch]]
            cmd = [nvcc_path(), *ptx_flags, f"-arch={VIRTUAL_ARCH[arch]}", "-ptx", "-o", str(tmp / "kernel.ptx"),
                   str(entry / "kernel.cu")]
            _run_nvcc(cmd, "nvcc -ptx failed", tmp / "ptx.log")
        else:
            _, _, ptx = _run_nvrtc((entry / "kernel.cu").read_text(), flags, "NVRTC failed", want_ptx=True)
            (tmp / "kernel.ptx").write_text(ptx or "")
        (tmp / "kernel.sass").write_text(disassemble(entry / "kernel.cubin"))
        os.replace(tmp / "kernel.ptx", entry / "kernel.ptx")
        os.replace(tmp / "kernel.sass", entry / "kernel.sass")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def disassemble(cubin: Path) -> str:
    """SASS text of a cubin (``cuobjdump --dump-sass``); raises CompilerNotFoundError without cuobjdump."""
    proc = subprocess.run([cuobjdump_path(), "--dump-sass", str(cubin)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"cuobjdump failed on {cubin}", proc.stderr)
    return proc.stdout
