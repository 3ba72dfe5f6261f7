"""What the compiled host path's CPU tests share: the ``host`` fixture (the module built and in use)
and stand-ins for a bound launch (a CUtensorMap's 128 bytes, a kernel, its launch configuration)."""

from __future__ import annotations

import ctypes
import os

import pytest

import gemm_ladder.ops as ops


@pytest.fixture(scope="module")
def host(nvcc_cache):
    """The host module in use (built into the session's private cache: a failed build fails the
    test); the Python kernels are put back afterwards (unless the process used the host already)."""
    saved = {k: os.environ.get(k) for k in ("GEMM_LADDER_CACHE", "GEMM_LADDER_HOST")}
    os.environ["GEMM_LADDER_CACHE"], os.environ["GEMM_LADDER_HOST"] = str(nvcc_cache), "require"
    was = ops.host_module()
    try:
        module = ops.use_host()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert module is not None
    yield module
    if was is None:
        ops.use_python()


class FakeMap:
    """Stands for a cuda.bindings CUtensorMap: 128 bytes behind getPtr()."""

    def __init__(self, fill: int):
        self.storage = (ctypes.c_ubyte * 128)(*([fill] * 128))

    def getPtr(self):
        return ctypes.addressof(self.storage)


class FakeKernel:
    function, threads, dynamic_smem, cluster = 0xABC0, 384, 200000, 2


class FakeConfig:
    gridDimX, gridDimY, gridDimZ = 132, 1, 1


class FakePrepared:
    def __init__(self, args):
        self.args, self.kernel, self._config = args, FakeKernel(), FakeConfig()


class FakeBound:
    def __init__(self, args, roles, workspace=None):
        self.prepared, self.roles, self.workspace = FakePrepared(args), roles, workspace
