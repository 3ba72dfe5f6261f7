"""Shared test setup: import from the source tree, a private nvcc cache, the GPU marker, parallel runs.

Tests marked ``@pytest.mark.gpu`` run only where torch sees a CUDA device; elsewhere (the
development and CI machines) they are skipped with the reason below, never silently passed.

The whole suite (``python3 -m pytest -q``, no test files named) on a machine without a GPU runs on
every CPU with pytest-xdist, one test module per worker at a time (``--dist loadscope``: a module's
fixtures are built once), except the modules of independent builds (:data:`_PER_TEST`), whose tests
go out one by one; the longest modules go out first (:data:`_FIRST`). Naming files, ``-n N`` or
``-p no:xdist`` keeps the choice yours; with a GPU the run stays one process (the GPU tests share one
device and time it). The workers share one kernel cache, and a build two workers want at once is
compiled by one while the other waits.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(SRC))

GPU_SKIP_REASON = "needs an NVIDIA GPU (sm_90a)"

# The tests build what they test: kernels shipped prebuilt in the package (runtime/aot.py, present
# after tools/build_aot.py) are not looked up unless a test asks for them.
os.environ.setdefault("GEMM_LADDER_AOT", "0")


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: the long modules first (see _FIRST)
        rank = {name: i for i, name in enumerate(_FIRST)}
        items.sort(key=lambda item: rank.get(_module(item.nodeid), len(rank)))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The whole suite without a GPU: one pytest-xdist worker per CPU, whole modules to a worker (but
    see :data:`_PER_TEST`), the longest first."""
    if getattr(config.option, "numprocesses", "no xdist") is not None:  # -n given, or xdist absent/disabled
        return
    if hasattr(config, "workerinput") or config.args_source == pytest.Config.ArgsSource.ARGS:
        return  # a worker, or files named on the command line: one process, as before
    if config.option.collectonly or config.option.usepdb or torch.cuda.is_available():
        return
    cpus = len(os.sched_getaffinity(0))
    if cpus > 1:
        config.option.numprocesses = cpus
        if config.option.dist == "no":
            config.option.dist = "loadscope"
            # the order of _FIRST, not xdist's default (most tests first, which sends the long modules last)
            config.option.loadscopereorder = False


#: The modules that take longest without a GPU (nvcc builds, the auditor's proofs, the host module's
#: C++ build), longest first: the workers start on them, so the run does not end with one worker busy
#: on a long module while the others idle. The rest follow in file order. The modules that run
#: ``gemm-ladder`` in subprocesses come after the in-process builds of the same kernels: a subprocess
#: does not take the build lock (_one_compile_per_build), it finds them in the cache instead of
#: compiling them a second time. (A module missing from this list runs later, nothing more.)
_FIRST = ("test_library_gemm_build.py", "test_epilogue.py", "test_audit_designer_plans.py", "test_host.py",
          "test_levels.py", "test_library_small_m.py", "test_grouped.py", "test_fp8_cpu.py",
          "test_library_swiglu.py", "test_nvrtc.py", "test_fp8_store_cpu.py", "test_cli_gates.py",
          "test_advise_levels.py", "test_show.py",
          "test_readme_commands.py", "test_bench_scripts.py", "test_bench_shapes_real.py")

#: Modules whose tests are independent builds (no module- or class-scoped state): each test is a scope
#: of its own, so their compiles spread over every worker instead of queueing on one.
_PER_TEST = ("test_epilogue.py", "test_levels.py", "test_library_small_m.py", "test_grouped.py",
             "test_fp8_cpu.py", "test_library_swiglu.py", "test_cli_gates.py", "test_nvrtc.py", "test_fp8_store_cpu.py")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: unknown without it
def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope, with the tests of :data:`_PER_TEST` scheduled one by one."""
    if config.option.dist != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduler(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return nodeid if _module(nodeid) in _PER_TEST else super()._split_scope(nodeid)

    return Scheduler(config, log)


def _run_root(tmp_path_factory) -> Path:
    """The run's temporary root: the session's own, or the one all xdist workers of the run share."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def nvcc_cache(tmp_path_factory) -> Path:
    """One nvcc cache for the run (shared by its xdist workers), so each kernel is compiled once."""
    path = _run_root(tmp_path_factory) / "gemm_ladder_cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session", autouse=True)
def _one_compile_per_build(tmp_path_factory):
    """Two workers asking for one uncached build: the first compiles it, the second waits and reads it.

    The compiler's entries are atomic, so without this both would compile (correct, twice the work).
    """
    from gemm_ladder.runtime import compiler

    build = getattr(compiler, "_build_entry", None)
    if build is None:
        yield
        return
    locks = _run_root(tmp_path_factory) / "gemm_ladder_build_locks"
    locks.mkdir(exist_ok=True)

    def build_once(nvcc, source, kernel_name, flags, final):
        name = hashlib.sha256(str(final).encode()).hexdigest()[:32]
        with open(locks / name, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (Path(final) / "kernel.cubin").exists():
                build(nvcc, source, kernel_name, flags, final)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiler, "_build_entry", build_once)
        yield


@pytest.fixture
def use_cache(nvcc_cache, monkeypatch) -> Path:
    """Point GEMM_LADDER_CACHE at the session's private cache (never the user's ~/.cache)."""
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(nvcc_cache))
    return nvcc_cache


def gate_reports(nvcc_cache: Path, jobs, kernel_of) -> dict:
    """{job: (ResourceReport, SASS)}: gates.resources.check_level_resources(kernel_of(job), job[-1]) for every
    job (its last item the dtype), built in parallel in the session's nvcc cache: for module fixtures,
    which the function-scoped use_cache cannot serve. GEMM_LADDER_CACHE is put back as it was after."""
    from concurrent.futures import ThreadPoolExecutor

    from gemm_ladder.gates.resources import check_level_resources

    before = os.environ.get("GEMM_LADDER_CACHE")
    os.environ["GEMM_LADDER_CACHE"] = str(nvcc_cache)
    try:
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            return dict(zip(jobs, pool.map(lambda j: check_level_resources(kernel_of(j), j[-1]), jobs)))
    finally:
        if before is None:
            del os.environ["GEMM_LADDER_CACHE"]
        else:
            os.environ["GEMM_LADDER_CACHE"] = before


def have_nvcc() -> bool:
    try:
        from gemm_ladder.runtime.compiler import nvcc_path

        nvcc_path()
        return True
    except Exception:  # noqa: BLE001
        return shutil.which("nvcc") is not None


needs_nvcc = pytest.mark.skipif(not have_nvcc(), reason="needs nvcc (CUDA toolkit) on PATH")


# --- tiny real CUDA kernels for the resource-gate tests (compiled with nvcc, never launched) ---
#: One wgmma (HGMMA in SASS), 128 threads, no shared memory declared.
WGMMA = r"""
extern "C" __global__ void __launch_bounds__(128) tiny_wgmma(float* out, unsigned long long da, unsigned long long db) {
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "l"(da), "l"(db), "r"(1));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  out[threadIdx.x * 4 + 0] = d0; out[threadIdx.x * 4 + 1] = d1;
  out[threadIdx.x * 4 + 2] = d2; out[threadIdx.x * 4 + 3] = d3;
}
"""

#: A plain kernel: 1024 bytes of static shared memory, one barrier, no tensor cores.
PLAIN = r"""
extern "C" __global__ void plain(float* x, const float* y, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? y[i] : 0.f;
  __syncthreads();
  if (i < n) x[i] += s[255 - threadIdx.x];
}
"""

#: 48 live floats under -maxrregcount=24: ptxas must spill to local memory.
SPILL = r"""
extern "C" __global__ void spill(float* x, int n) {
  float v[48];
#pragma unroll
  for (int t = 0; t < 48; ++t) v[t] = x[t * n + threadIdx.x];
  float acc = 0.f;
#pragma unroll
  for (int t = 0; t < 48; ++t) acc += v[t] * v[47 - t] * acc + v[(t * 7) % 48];
#pragma unroll
  for (int t = 0; t < 48; ++t) x[t * n + threadIdx.x] = v[t] * acc;
}
"""
SPILL_FLAGS = ["-maxrregcount=24"]
