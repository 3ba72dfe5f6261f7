"""Shared test setup: import from the source tree, a private nvcc cache, and the GPU marker.

Tests marked ``@pytest.mark.gpu`` run only where torch sees a CUDA device; elsewhere (the
development and CI machines) they are skipped with the reason below, never silently passed.
"""

from __future__ import annotations

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
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def nvcc_cache(tmp_path_factory) -> Path:
    """One nvcc cache for the session, so each tiny kernel is compiled once."""
    return tmp_path_factory.mktemp("gemm_ladder_cache")


@pytest.fixture
def use_cache(nvcc_cache, monkeypatch) -> Path:
    """Point GEMM_LADDER_CACHE at the session's private cache (never the user's ~/.cache)."""
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(nvcc_cache))
    return nvcc_cache


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
