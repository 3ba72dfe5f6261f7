"""The runtime's compiler: the cubin cache (key, atomic entries), nvcc's errors, a missing nvcc, JIT debug.

Real nvcc on tiny kernels (``conftest``); never a GPU. Each test that compiles uses its own cache
directory, so what it finds there is what it built.
"""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest
from conftest import PLAIN, WGMMA, needs_nvcc

from gemm_ladder.runtime import compiler

#: A kernel whose whole output is a constant taken from a header, to see a header edit in the cubin.
HEADER_USER = r"""
#include "gl_test_constant.cuh"
extern "C" __global__ void from_header(int* out) { out[threadIdx.x] = GL_TEST_CONSTANT; }
"""


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(cache))
    monkeypatch.delenv("GEMM_LADDER_JIT_DEBUG", raising=False)
    return cache


def _entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


# --- the key ----------------------------------------------------------------------------------


def test_cache_key_changes_with_source_flags_and_compiler():
    base = compiler.cache_key("src", ["-O3"], "nvcc 13.0", "h")
    assert base == compiler.cache_key("src", ["-O3"], "nvcc 13.0", "h")
    assert base != compiler.cache_key("src2", ["-O3"], "nvcc 13.0", "h")
    assert base != compiler.cache_key("src", ["-O2"], "nvcc 13.0", "h")
    assert base != compiler.cache_key("src", ["-O3"], "nvcc 13.1", "h")
    assert base != compiler.cache_key("src", ["-O3"], "nvcc 13.0", "h2")
    # Flag boundaries matter: ["-a", "b"] must not collide with ["-ab"].
    assert compiler.cache_key("s", ["-a", "b"], "v", "h") != compiler.cache_key("s", ["-ab"], "v", "h")


@needs_nvcc
def test_a_header_edit_rebuilds_and_the_cubin_follows_it(private_cache, tmp_path, monkeypatch):
    # A kernel tree of the test's own, so that editing its header touches nothing shipped.
    root = tmp_path / "kernels"
    (root / "include").mkdir(parents=True)
    header = root / "include" / "gl_test_constant.cuh"
    monkeypatch.setattr(compiler, "KERNEL_ROOT", root)
    monkeypatch.setattr(compiler, "INCLUDE_DIR", root / "include")

    header.write_text("#define GL_TEST_CONSTANT 0x1234567\n")
    first = compiler.compile_kernel(HEADER_USER, "from_header")
    built_at = first.cubin.stat().st_mtime_ns
    again = compiler.compile_kernel(HEADER_USER, "from_header")
    assert again.key == first.key and again.cubin.stat().st_mtime_ns == built_at  # a hit, not a rebuild

    header.write_text("#define GL_TEST_CONSTANT 0x7654321\n")
    edited = compiler.compile_kernel(HEADER_USER, "from_header")
    assert edited.key != first.key
    assert _entries(private_cache) == sorted([first.key, edited.key])
    sass_before, sass_after = compiler.disassemble(first.cubin), compiler.disassemble(edited.cubin)
    # The constant is an immediate of one instruction: its hex encoding shows it.
    assert "1234567" in sass_before and "7654321" not in sass_before
    assert "7654321" in sass_after and "1234567" not in sass_after


@needs_nvcc
def test_another_compiler_version_rebuilds(private_cache, tmp_path, monkeypatch):
    real = compiler.nvcc_path()
    keys = []
    for version in ("A", "B"):
        # The real nvcc behind a wrapper that reports another version: only the key's version part moves.
        wrapper = tmp_path / f"nvcc_{version}"
        wrapper.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "wrapped nvcc {version}"; exit 0; }}\n'
                           f'exec "{real}" "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("GEMM_LADDER_NVCC", str(wrapper))
        k = compiler.compile_kernel(PLAIN, "plain")
        assert (k.directory / "meta.json").read_text().count(f"wrapped nvcc {version}") == 1
        keys.append(k.key)
    assert keys[0] != keys[1] and _entries(private_cache) == sorted(keys)


# --- atomic entries ---------------------------------------------------------------------------


def _compile_in_child(cache: str, source: str, queue) -> None:
    os.environ["GEMM_LADDER_CACHE"] = cache
    k = compiler.compile_kernel(source, "plain")
    queue.put(str(k.directory))


@needs_nvcc
def test_concurrent_compiles_leave_one_whole_entry(tmp_path):
    # A source unique to this test so that both processes really compile (no earlier cache hit).
    source = PLAIN + f"\n// concurrent {tmp_path.name}\n"
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_compile_in_child, args=(str(tmp_path), source, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert all(p.exitcode == 0 for p in procs)
    dirs = {queue.get(timeout=5) for _ in procs}
    assert len(dirs) == 1
    entries = sorted(p.name for p in tmp_path.iterdir())
    assert entries == [os.path.basename(dirs.pop())], entries  # no temporary directories left
    entry = tmp_path / entries[0]
    assert sorted(f.name for f in entry.iterdir()) == ["kernel.cu", "kernel.cubin", "meta.json", "ptxas.log"]
    assert (entry / "kernel.cubin").stat().st_size > 0


# --- errors -----------------------------------------------------------------------------------


@needs_nvcc
def test_a_compile_error_carries_nvccs_message_and_leaves_no_entry(private_cache):
    with pytest.raises(compiler.CompileError) as info:
        compiler.compile_kernel('extern "C" __global__ void broken() { undeclared_name = 1; }', "broken")
    assert "undeclared_name" in info.value.log and "undefined" in info.value.log  # nvcc's own words
    assert "nvcc failed for broken" in str(info.value)
    assert _entries(private_cache) == []  # neither an entry nor a temporary directory


@pytest.mark.parametrize("nvcc", ["/nonexistent/bin/nvcc", "relative-name-of-no-nvcc"])
def test_gemm_ladder_nvcc_pointing_nowhere_is_compiler_not_found(nvcc, private_cache, monkeypatch):
    monkeypatch.setenv("GEMM_LADDER_NVCC", nvcc)
    with pytest.raises(compiler.CompilerNotFoundError, match=f"GEMM_LADDER_NVCC='{nvcc}' is not an executable"):
        compiler.compile_kernel(PLAIN, "plain")
    assert _entries(private_cache) == []


def test_an_nvcc_that_cannot_report_its_version_is_compiler_not_found(private_cache, tmp_path, monkeypatch):
    broken = tmp_path / "nvcc"
    broken.write_text("#!/bin/sh\necho 'not a compiler' >&2\nexit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("GEMM_LADDER_NVCC", str(broken))
    with pytest.raises(compiler.CompilerNotFoundError, match=r"--version failed \(exit 3\): not a compiler"):
        compiler.compile_kernel(PLAIN, "plain")


def test_an_unknown_arch_is_refused_before_looking_for_nvcc(monkeypatch):
    monkeypatch.setenv("GEMM_LADDER_NVCC", "/nonexistent/bin/nvcc")
    with pytest.raises(ValueError, match=r"unknown arch 'banana': use one of \['sm_100a', 'sm_90a'\]"):
        compiler.compile_kernel(PLAIN, "plain", arch="banana")


# --- JIT debug --------------------------------------------------------------------------------


def _assert_debug_artefacts(entry: Path) -> None:
    ptx = (entry / "kernel.ptx").read_text()
    assert ".target sm_90a" in ptx and "wgmma.mma_async" in ptx
    assert "HGMMA" in (entry / "kernel.sass").read_text()


@needs_nvcc
def test_jit_debug_keeps_ptx_and_sass_beside_the_cubin_and_prints_each_command(private_cache, monkeypatch, capsys):
    monkeypatch.setenv("GEMM_LADDER_JIT_DEBUG", "1")
    k = compiler.compile_kernel(WGMMA, "tiny_wgmma")
    _assert_debug_artefacts(k.directory)
    assert sorted(f.name for f in k.directory.iterdir()) == [
        "kernel.cu", "kernel.cubin", "kernel.ptx", "kernel.sass", "meta.json", "ptxas.log"]
    assert _entries(private_cache) == [k.key]  # the debug step's temporary directory is gone
    printed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[gemm-ladder] ")]
    assert len(printed) == 2
    assert "-gencode=arch=compute_90a,code=sm_90a" in printed[0] and " -cubin " in printed[0]
    assert " -arch=compute_90a -ptx " in printed[1]


@needs_nvcc
def test_jit_debug_adds_ptx_and_sass_to_an_entry_built_without_it(private_cache, monkeypatch, capsys):
    plain = compiler.compile_kernel(WGMMA, "tiny_wgmma")
    assert not (plain.directory / "kernel.ptx").exists()
    built_at = plain.cubin.stat().st_mtime_ns
    monkeypatch.setenv("GEMM_LADDER_JIT_DEBUG", "1")
    debug = compiler.compile_kernel(WGMMA, "tiny_wgmma")
    assert debug.directory == plain.directory and debug.cubin.stat().st_mtime_ns == built_at  # same cubin
    _assert_debug_artefacts(debug.directory)
    capsys.readouterr()
    compiler.compile_kernel(WGMMA, "tiny_wgmma")  # now a plain hit: nothing runs
    assert "[gemm-ladder]" not in capsys.readouterr().err


def test_prefer_shared_memory_carveout_asks_the_driver_and_refuses_bad_percents(monkeypatch):
    """LoadedKernel.prefer_shared_memory_carveout sets CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT on
    its function with the percent given (the driver faked: no GPU here), refuses a percent outside 0-100
    before any driver call, and turns a driver error into CudaError naming the call."""
    from cuda.bindings import driver

    from gemm_ladder.runtime import module

    calls = []

    class FakeDriver:
        CUresult = driver.CUresult
        CUfunction_attribute = driver.CUfunction_attribute
        result = driver.CUresult.CUDA_SUCCESS

        @staticmethod
        def cuGetErrorName(err):
            return driver.CUresult.CUDA_SUCCESS, err.name.encode()

        @staticmethod
        def cuGetErrorString(err):
            return driver.CUresult.CUDA_SUCCESS, b"faked"

        def cuFuncSetAttribute(self, function, attribute, value):
            calls.append((function, attribute, value))
            return (self.result,)

    fake = FakeDriver()
    monkeypatch.setattr(module, "_drv", fake)
    kernel = module.LoadedKernel(function="fn", module=None, dynamic_smem=0, threads=384, cluster=1)
    kernel.prefer_shared_memory_carveout(100)
    assert calls == [("fn", driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100)]
    for bad in (-1, 101):
        with pytest.raises(ValueError, match="0 to 100 percent"):
            kernel.prefer_shared_memory_carveout(bad)
    assert len(calls) == 1
    fake.result = driver.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(module.CudaError, match="PREFERRED_SHARED_MEMORY_CARVEOUT"):
        kernel.prefer_shared_memory_carveout(50)
