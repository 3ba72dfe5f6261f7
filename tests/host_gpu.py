"""What the compiled host path's GPU tests share: the ``host`` fixture (the module built and in use on the GPU
machine), a fresh seed per test, and the NaN poisoning of the caching allocator's free blocks."""

from __future__ import annotations

import os
import secrets

import pytest
import torch

import gemm_ladder.ops as ops


@pytest.fixture(scope="module")
def host():
    """The host module in use; skipped where the run turned it off, a failure where it did not build."""
    if os.environ.get("GEMM_LADDER_HOST", "").strip() == "0":  # turned off by the run, not a failed build
        pytest.skip("GEMM_LADDER_HOST=0: the compiled host module is turned off in this run")
    module = ops.use_host()
    if module is None:
        pytest.fail("the host module did not build on the GPU machine (see the warning)")
    return module


def seed() -> int:
    """A fresh random seed, set for torch and returned (for the failure message)."""
    s = secrets.randbelow(2**31)
    torch.manual_seed(s)
    return s


def poison(rows: int, cols: int) -> None:
    """Fill the caching allocator's free blocks with NaN (a large one, and several (rows, cols) ones in bf16 and fp32,
    which the small pool hands back for a small output): an output element a kernel does not write stays NaN."""
    blocks = [torch.full((64 << 20,), float("nan"), device="cuda", dtype=torch.float32)]
    blocks += [torch.full((rows, cols), float("nan"), device="cuda", dtype=d) for d in (torch.bfloat16, torch.float32)
               for _ in range(4)]
    del blocks
