"""Shared test setup: import from the source tree, a private nvcc cache, and the GPU marker.

Tests marked ``@pytest.mark.gpu`` run only where torch sees a CUDA device; elsewhere (the
development and CI machines) they are skipped with the reason below, never silently passed.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(SRC))

GPU_SKIP_REASON = "needs an NVIDIA GPU (sm_90a)"


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
