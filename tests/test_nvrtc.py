"""Building kernels without a CUDA toolkit: NVRTC's backend, the compiler choice, the same SASS through
nvcc and NVRTC, and the kernels shipped built ahead of time. CPU only (nothing is launched).

The NVRTC tests need the nvidia-cuda-nvrtc and nvidia-cuda-runtime wheels (package dependencies); the
comparisons also need nvcc. Each skips, saying which is missing, where it is not there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import PLAIN, SPILL, SPILL_FLAGS, WGMMA, have_nvcc

from gemm_ladder.gates.resources import parse_ptxas_log, sass_census
from gemm_ladder.runtime import aot, compiler, nvrtc


def have_nvrtc() -> bool:
    try:
        nvrtc.version()
        nvrtc.header_dir()
        return True
    except nvrtc.NvrtcUnavailableError:
        return False


needs_nvrtc = pytest.mark.skipif(not have_nvrtc(), reason="needs NVRTC and the CUDA headers "
                                 "(pip install nvidia-cuda-nvrtc nvidia-cuda-runtime)")
needs_both = pytest.mark.skipif(not (have_nvrtc() and have_nvcc()), reason="needs both nvcc and NVRTC")


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(cache))
    monkeypatch.delenv("GEMM_LADDER_JIT_DEBUG", raising=False)
    monkeypatch.delenv("GEMM_LADDER_NVCC", raising=False)
    return cache


# --- options and the compiler choice (no compiler needed) ------------------------------------------

def test_nvcc_flags_map_to_nvrtc_options_and_unknown_ones_are_refused():
    flags = compiler.build_flags("sm_90a", {"GL_BM": 128, "GL_DTYPE_BF16": 1}, ["-maxrregcount=24"])
    opts = nvrtc.options_from_nvcc_flags(flags)
    assert opts[0] == f"-I{nvrtc.SHIM_DIR}"  # the stand-ins come before any other include directory
    assert "--gpu-architecture=sm_90a" in opts and "--ptxas-options=-v" in opts
    assert {"-std=c++17", "--use_fast_math", "-lineinfo", "-DGL_BM=128", "-DGL_DTYPE_BF16=1", "-maxrregcount=24",
            f"-I{compiler.INCLUDE_DIR}", f"-I{compiler.KERNEL_ROOT}"} <= set(opts)
    assert "-O3" not in opts and not any(o.startswith("-gencode") or o == "-Xptxas" for o in opts)
    with pytest.raises(ValueError, match="--expt-relaxed-constexpr"):
        nvrtc.options_from_nvcc_flags(["--expt-relaxed-constexpr"])


def test_compiler_choice_follows_the_environment(monkeypatch):
    monkeypatch.delenv("GEMM_LADDER_NVCC", raising=False)
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "banana")
    with pytest.raises(ValueError, match="nvcc, nvrtc or auto"):
        compiler.compiler_choice()
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvcc")
    monkeypatch.setenv("GEMM_LADDER_NVCC", "/nonexistent/nvcc")
    with pytest.raises(compiler.CompilerNotFoundError, match="GEMM_LADDER_NVCC"):
        compiler.compiler_choice()


def test_auto_takes_nvrtc_without_nvcc_and_names_both_remedies_without_either(monkeypatch):
    monkeypatch.delenv("GEMM_LADDER_NVCC", raising=False)
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "auto")

    def no_nvcc():
        raise compiler.CompilerNotFoundError("nvcc not found")
    monkeypatch.setattr(compiler, "nvcc_path", no_nvcc)
    monkeypatch.setattr(nvrtc, "version", lambda: (13, 0))
    monkeypatch.setattr(nvrtc, "header_dir", lambda: Path("/h"))
    assert compiler.compiler_choice() == "nvrtc"

    def no_nvrtc():
        raise nvrtc.NvrtcUnavailableError("NVRTC's library cannot be loaded; pip install nvidia-cuda-nvrtc")
    monkeypatch.setattr(nvrtc, "version", no_nvrtc)
    with pytest.raises(compiler.CompilerNotFoundError, match="no nvcc .* pip install nvidia-cuda-nvrtc"):
        compiler.compiler_choice()


# --- NVRTC builds ----------------------------------------------------------------------------------

@needs_nvrtc
def test_nvrtc_builds_a_cubin_with_ptxas_report_and_names_itself_in_the_entry(private_cache, monkeypatch):
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvrtc")
    k = compiler.compile_kernel(PLAIN + WGMMA, "tiny_wgmma")
    assert k.cubin.read_bytes()[:4] == b"\x7fELF"
    report = parse_ptxas_log(k.ptxas_log)["tiny_wgmma"]
    assert report.registers > 0 and report.spill_stores == 0
    assert sass_census(compiler.disassemble(k.cubin))["tiny_wgmma"].counts["HGMMA"] == 1
    meta = json.loads((k.directory / "meta.json").read_text())
    assert meta["compiler"] == "nvrtc" and meta["nvrtc"].startswith(f"nvrtc {nvrtc.version()[0]}.")
    again = compiler.compile_kernel(PLAIN + WGMMA, "tiny_wgmma")
    assert again.key == k.key and len(list(private_cache.iterdir())) == 1


@needs_nvrtc
def test_an_empty_nvrtc_log_leaves_pythons_shared_bytes_alone():
    """A program NVRTC compiles with an empty log (size 1): the log, cubin and PTX buffers must be the
    compiler's own. ``b" " * 1`` is CPython's shared one-byte object: NVRTC's NUL written into it made
    every b" " in the process b"\\0" (print's separators came out as NUL bytes on the H200). Run in a
    child process so that a failure cannot corrupt this one."""
    import subprocess
    import sys

    code = ("from gemm_ladder.runtime import nvrtc\n"
            "cubin, log, ptx = nvrtc.compile_program('extern \"C\" __global__ void k() {}', 'k.cu', "
            "['--gpu-architecture=sm_90a'], want_ptx=True)\n"
            "assert cubin and ptx and log == '', (len(cubin), log)\n"
            "print(repr(b' '), repr(' '.encode()))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "b' ' b' '", run.stdout


def test_nvrtcs_own_compile_cache_is_off_where_it_has_one(monkeypatch):
    """NVRTC 12.9+ caches compiles itself and, on a hit, skips ptxas: the -v report is then empty (8 of 337
    builds of a GPU suite on the H200). Its cache is switched off from 12.9 on, not before (no option)."""
    for release, want in (((12, 8), []), ((12, 9), ["--no-cache"]), ((13, 0), ["--no-cache"])):
        monkeypatch.setattr(nvrtc, "version", lambda release=release: release)
        assert nvrtc.cache_options() == want, release


def test_a_build_without_the_ptxas_report_it_asked_for_is_an_error():
    report = ("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
              "ptxas info    : Used 8 registers, used 0 barriers\n")
    nvrtc.check_ptxas_report(report, ["--ptxas-options=-v"])
    nvrtc.check_ptxas_report("", ["--gpu-architecture=sm_90a"])  # no report asked for
    warning_only = 'generated epilogue code(1000009): warning #177-D: variable "gl_in0" was declared but never referenced\n'
    for log in ("", warning_only):
        for asked in (["--ptxas-options=-v"], ["-Xptxas", "-v"], ["-Xptxas=--verbose"]):
            with pytest.raises(nvrtc.NvrtcCompileError, match="names no entry function"):
                nvrtc.check_ptxas_report(log, ["--gpu-architecture=sm_90a", *asked])
    nvrtc.check_ptxas_report("", ["-Xptxas", "-O3"])  # another ptxas option: no report asked for


def test_the_ptxas_census_names_builds_without_their_report(tmp_path):
    """tools/ptxas_census.py: the diagnosis that found NVRTC's cache on the H200, on a made-up cache."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ptxas_census", Path(__file__).resolve().parent.parent / "tools" / "ptxas_census.py")
    census = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(census)
    report = ("ptxas info    : Compiling entry function 'gemm_kernel' for 'sm_90a'\n"
              "ptxas info    : Function properties for gemm_kernel\n"
              "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
              "ptxas info    : Used 168 registers, used 16 barriers\n")
    logs = {"good": report, "warnings": 'kernel.cu(9): warning #177-D: variable "x" was declared but never referenced\n',
            "empty": "", "absent": None}
    for key, log in logs.items():
        (tmp_path / key).mkdir()
        (tmp_path / key / "meta.json").write_text(json.dumps({"kernel": "gemm_kernel", "compiler": "nvrtc"}))
        if log is not None:
            (tmp_path / key / "ptxas.log").write_text(log)
    count, missing = census.missing_reports(tmp_path)
    assert count == 4 and sorted(m["key"] for m in missing) == ["absent", "empty", "warnings"]
    assert census.main([str(tmp_path)]) == 1 and census.main([str(tmp_path / "good")]) == 0
    assert census.main([str(tmp_path / "nowhere")]) == 2


class _SpyNvrtc:
    """cuda.bindings' nvrtc with the compile's options recorded and, with ``empty_log``, the log NVRTC's
    cache gives on a hit (no ptxas report): the real compiler underneath."""

    def __init__(self, real, empty_log: bool = False):
        self._real, self._empty_log, self.options = real, empty_log, []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def nvrtcCompileProgram(self, prog, count, options):
        self.options = [o.decode() for o in options]
        return self._real.nvrtcCompileProgram(prog, count, options)

    def nvrtcGetProgramLogSize(self, prog):
        return (self._real.nvrtcResult.NVRTC_SUCCESS, 1) if self._empty_log else self._real.nvrtcGetProgramLogSize(prog)

    def nvrtcGetProgramLog(self, prog, buf):
        if self._empty_log:
            buf[:] = b"\0"
            return (self._real.nvrtcResult.NVRTC_SUCCESS,)
        return self._real.nvrtcGetProgramLog(prog, buf)


@needs_nvrtc
def test_compile_program_passes_no_cache_and_refuses_a_build_without_its_report(monkeypatch):
    """The wiring, not the helpers: compile_program hands NVRTC --no-cache (12.9+) and raises when a build
    asked for ptxas's report comes back without one (the H200's cache hits), on the CPU."""
    source = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }'
    options = ["--gpu-architecture=sm_90a", "--ptxas-options=-v"]
    spy = _SpyNvrtc(nvrtc._nvrtc())
    monkeypatch.setattr(nvrtc, "_nvrtc", lambda: spy)
    cubin, log, _ = nvrtc.compile_program(source, "k.cu", options)
    assert cubin and "Compiling entry function 'k'" in log
    assert ("--no-cache" in spy.options) == (nvrtc.version() >= nvrtc.NO_CACHE_FROM), spy.options
    hit = _SpyNvrtc(spy._real, empty_log=True)
    monkeypatch.setattr(nvrtc, "_nvrtc", lambda: hit)
    with pytest.raises(nvrtc.NvrtcCompileError, match="names no entry function"):
        nvrtc.compile_program(source, "k.cu", options)


@needs_nvrtc
def test_the_cache_key_names_nvrtcs_cache_off():
    """Builds made with NVRTC's cache on may lack their report: the identity (part of every key) changes."""
    assert nvrtc.identity().endswith(" no-cache") == (nvrtc.version() >= nvrtc.NO_CACHE_FROM)


@needs_nvrtc
def test_nvrtc_reports_spills_through_ptxas_options(private_cache, monkeypatch):
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvrtc")
    k = compiler.compile_kernel(SPILL, "spill", extra_flags=SPILL_FLAGS)
    report = parse_ptxas_log(k.ptxas_log)["spill"]
    assert report.registers <= 24 and report.spill_stores > 0


@needs_nvrtc
def test_nvrtc_rejection_is_a_compile_error_with_its_message_and_leaves_no_entry(private_cache, monkeypatch):
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvrtc")
    with pytest.raises(compiler.CompileError, match="undeclared_name") as info:
        compiler.compile_kernel('extern "C" __global__ void broken() { undeclared_name = 1; }', "broken")
    assert "NVRTC failed for broken" in str(info.value)
    assert not list(private_cache.glob("*/kernel.cubin")) and not list(private_cache.glob(".*"))


@needs_nvrtc
def test_jit_debug_keeps_nvrtc_ptx_and_sass(private_cache, monkeypatch, capsys):
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvrtc")
    monkeypatch.setenv("GEMM_LADDER_JIT_DEBUG", "1")
    k = compiler.compile_kernel(WGMMA, "tiny_wgmma")
    assert ".target sm_90a" in (k.directory / "kernel.ptx").read_text()
    assert "HGMMA" in (k.directory / "kernel.sass").read_text()
    assert "[gemm-ladder] nvrtc " in capsys.readouterr().err


@needs_nvrtc
def test_the_stand_in_tensor_map_has_cuda_hs_size_and_alignment(private_cache, monkeypatch):
    """The NVRTC-only cuda.h defines CUtensorMap as the real one does: checked in the real header's text
    and by the compiler itself."""
    real = (nvrtc.header_dir() / "cuda.h")
    if real.exists():
        text = real.read_text()
        assert re.search(r"#define CU_TENSOR_MAP_NUM_QWORDS 16\b", text)
        body = text[text.index("typedef struct CUtensorMap_st"):][:400]
        assert "alignas(128)" in body and "cuuint64_t opaque[CU_TENSOR_MAP_NUM_QWORDS]" in body
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvrtc")
    compiler.compile_kernel('#include <cuda.h>\n#include <cstdint>\n'
                            'static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) == 128, "tensor map");\n'
                            'static_assert(sizeof(uint64_t) == 8 && sizeof(uintptr_t) == sizeof(void*), "widths");\n'
                            'extern "C" __global__ void tm(const __grid_constant__ CUtensorMap m, uint64_t* o) '
                            '{ *o = m.opaque[threadIdx.x & 15]; }\n', "tm")


@needs_both
def test_the_two_compilers_make_separate_cache_entries(private_cache, monkeypatch):
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvcc")
    a = compiler.compile_kernel(PLAIN, "plain")
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvrtc")
    b = compiler.compile_kernel(PLAIN, "plain")
    assert a.key != b.key and a.cubin.exists() and b.cubin.exists()


# --- the same source, the same machine code ---------------------------------------------------------

#: Opcodes that carry a kernel's design (tensor cores, TMA, barriers, warpgroup register moves, memory
#: traffic): equal in both compilers' builds. The rest (integer and address arithmetic) may differ: NVRTC
#: keeps shared-memory pointers 64 bits wide (runtime/nvrtc.py; docs/install.md measures it).
DESIGN_OPCODES = ("HGMMA", "WARPGROUP", "UTMALDG", "UTMASTG", "SYNCS", "BAR", "USETMAXREG", "LDG", "STG", "ST", "LDS",
                  "STS", "LDL", "STL", "ATOMG", "MEMBAR", "FENCE", "F2FP", "FADD", "FMUL", "FFMA", "MUFU", "EXIT")


def _built(target, compiler_name, cache: Path, monkeypatch):
    """The build by ``compiler_name``: the cache key names the compiler, so the two builds are two entries
    of one cache (the run's: nvcc's is the one the level and library tests compile)."""
    monkeypatch.setenv("GEMM_LADDER_COMPILER", compiler_name)
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(cache))
    _forget_builds(target)
    kernel = target.build("bf16")
    _forget_builds(target)
    return (parse_ptxas_log(kernel.ptxas_log)[kernel.kernel_name],
            sass_census(compiler.disassemble(kernel.cubin))[kernel.kernel_name])


def _forget_builds(target) -> None:
    """Drop the in-process builds (a level keeps its own; the library's are kept per KernelConfig), so
    that the next build asks the compiler in force."""
    from gemm_ladder.library import kernel as library_kernel

    getattr(target, "_builds", {}).clear()
    library_kernel.clear()


def _targets():
    from gemm_ladder.levels import LEVELS
    from gemm_ladder.library.gemm import library_gemm

    return {"level 9": LEVELS[9], "library general BN 256": library_gemm("k", "k", 256)}


def _same_release() -> bool:
    m = re.search(r"release (\d+)\.(\d+)", compiler.nvcc_version(compiler.nvcc_path()))
    return m is not None and (int(m.group(1)), int(m.group(2))) == nvrtc.version()


@needs_both
@pytest.mark.parametrize("name", ["level 9", "library general BN 256"])
def test_nvcc_and_nvrtc_give_the_same_resources_and_design_opcodes(name, nvcc_cache, monkeypatch):
    if not _same_release():  # another release's ptxas makes other code (13.5: half level 9's HGMMA, docs/install.md)
        pytest.skip(f"NVRTC {nvrtc.version()} is not nvcc's release: the comparison holds within one release")
    monkeypatch.delenv("GEMM_LADDER_NVCC", raising=False)
    target = _targets()[name]
    (p1, c1), (p2, c2) = (_built(target, c, nvcc_cache, monkeypatch) for c in ("nvcc", "nvrtc"))
    for field in ("registers", "barriers", "smem_static", "stack_bytes", "spill_stores", "spill_loads"):
        assert getattr(p1, field) == getattr(p2, field), (field, p1, p2)
    for op in DESIGN_OPCODES:
        assert c1.counts.get(op, 0) == c2.counts.get(op, 0), (op, c1.counts.get(op), c2.counts.get(op))
    # The rest: a few percent of integer arithmetic (3535 against 3577 instructions for level 9, nvcc and
    # NVRTC 13.0.88 alike, docs/install.md).
    assert abs(c1.total - c2.total) <= 0.03 * c1.total, (c1.total, c2.total)


# --- kernels shipped built ahead of time -------------------------------------------------------------

@needs_nvrtc
def test_a_shipped_build_is_found_without_any_compiler(tmp_path, monkeypatch):
    """tools/build_aot.py's layout (a directory per key, a manifest naming the compiler), made here for one
    tiny kernel; compile_kernel then returns it with no compiler at all, and builds again when told not
    to use it (GEMM_LADDER_AOT=0) or when a compiler is asked for."""
    shipped, cache = tmp_path / "aot_kernels", tmp_path / "cache"
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path / "build"))
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvrtc")
    monkeypatch.delenv("GEMM_LADDER_NVCC", raising=False)
    built = compiler.compile_kernel(PLAIN, "plain")
    shipped.mkdir()
    (shipped / built.key).mkdir()
    for name in ("kernel.cubin", "ptxas.log", "kernel.cu", "meta.json"):
        (shipped / built.key / name).write_bytes((built.directory / name).read_bytes())
    (shipped / aot.MANIFEST).write_text(json.dumps({"identity": compiler.compiler_identity("nvrtc"),
                                                    "builds": {"plain": "built"}}))
    monkeypatch.setattr(aot, "AOT_DIR", shipped)
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(cache))
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "auto")
    monkeypatch.setenv("GEMM_LADDER_AOT", "1")

    def no_compiler():
        raise compiler.CompilerNotFoundError("no kernel compiler")
    monkeypatch.setattr(compiler, "compiler_choice", no_compiler)
    found = compiler.compile_kernel(PLAIN, "plain")
    assert found.directory == shipped / built.key and found.cubin.read_bytes() == built.cubin.read_bytes()
    assert not cache.exists()  # nothing built
    monkeypatch.setenv("GEMM_LADDER_AOT", "0")
    with pytest.raises(compiler.CompilerNotFoundError):
        compiler.compile_kernel(PLAIN, "plain")
    monkeypatch.setenv("GEMM_LADDER_AOT", "1")
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvrtc")
    with pytest.raises(compiler.CompilerNotFoundError):  # a compiler asked for: its own build is wanted
        compiler.compile_kernel(PLAIN, "plain")


def test_no_shipped_builds_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(aot, "AOT_DIR", tmp_path / "nothing")
    monkeypatch.setenv("GEMM_LADDER_AOT", "1")
    assert aot.shipped() is None


def test_the_grouped_and_fp8_families_build_with_nvrtc(private_cache, monkeypatch):
    """The grouped and fp8 families compile through NVRTC's stand-in headers too (the fp8 kernel's
    std::is_same_v / conditional_t once failed there, and every fp8 GPU test with it)."""
    monkeypatch.setenv("GEMM_LADDER_COMPILER", "nvrtc")
    _forget_builds(None)  # their builds are kept per KernelConfig in this process
    from gemm_ladder.library.fp8 import Fp8Kernel
    from gemm_ladder.library.grouped import grouped_gemm

    builds = [Fp8Kernel(scale_mode="blockwise", out_dtype="fp8"), Fp8Kernel(scale_mode="rowwise", bias=True),
              Fp8Kernel(scale_mode="blockwise", out_dtype="fp16", bias=True, store="tma"),  # the TMA-store epilogue
              Fp8Kernel(scale_mode="blockwise", bn=64, store="tma", split=True)]  # the split-K tail (stream_k.cuh)
    for kernel in builds:
        log = kernel.build().ptxas_log
        assert "0 bytes spill stores" in log, log
    assert "0 bytes spill stores" in grouped_gemm(128, "k").build("bf16").ptxas_log
    meta = json.loads((next(private_cache.glob("*/meta.json"))).read_text())
    assert meta["compiler"].startswith("nvrtc"), meta
