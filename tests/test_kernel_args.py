"""The library kernels' argument lists without a GPU: what ``bind()`` packs (every launch of the
general and small-M kernels goes through it: ``launch()`` is ``bind()()``) against the parameters of
the cubin it would launch, read from the cubin's ELF (``cuobjdump -elf``: EIATTR_KPARAM_INFO gives
each parameter's ordinal, offset and size).

cuLaunchKernelEx copies each parameter from the pointer it is given, by the size the kernel declares:
one argument too few or too many, or of another size, is a silent wrong launch on the GPU. A fused
epilogue (GL_EPILOGUE) adds one parameter, EpilogueParams, last; without one the kernel has none.
"""

from __future__ import annotations

import ctypes
import re
import subprocess

import pytest
import torch

from conftest import needs_nvcc
from gemm_ladder.library import gemm as gemm_mod
from gemm_ladder.library import small_m as small_m_mod
from gemm_ladder.library.epilogue import EpilogueParams, linear_epilogue
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import OperandView
from gemm_ladder.library.small_m import small_m_gemm
from gemm_ladder.runtime.compiler import cuobjdump_path

BF16 = torch.bfloat16
#: sizeof(CUtensorMap): cuda.h's CU_TENSOR_MAP_NUM_QWORDS (16) x 8 bytes.
TENSOR_MAP_BYTES = 128

_PARAM = re.compile(r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x([0-9a-f]+)\s+Size\s*:\s*0x([0-9a-f]+)")


def kernel_params(cubin) -> list[tuple[int, int]]:
    """(offset, size) of each parameter of the cubin's one kernel, by ordinal (cuobjdump -elf)."""
    text = subprocess.run([cuobjdump_path(), "-elf", str(cubin)], capture_output=True, text=True, check=True).stdout
    found = {}
    for ordinal, offset, size in _PARAM.findall(text):
        assert int(ordinal, 16) not in found, "one kernel per cubin expected"
        found[int(ordinal, 16)] = (int(offset, 16), int(size, 16))
    assert found and sorted(found) == list(range(len(found))), found
    return [found[i] for i in range(len(found))]


def packed_sizes(args: list) -> list[int]:
    """The bytes the driver would copy for each packed argument: ctypes values by their size, tensor
    maps (objects with getPtr, as cuda.bindings' CUtensorMap) by CUtensorMap's."""
    return [TENSOR_MAP_BYTES if hasattr(a, "getPtr") else ctypes.sizeof(a) for a in args]


class FakeMap:
    def getPtr(self):
        return 0


class FakeKernel:
    """Stands for a LoadedKernel: records what bind() would launch."""

    def __init__(self):
        self.prepared = []

    def max_active_clusters(self, device):
        return 66

    def prepare(self, grid, args, stream_handle):
        self.prepared.append(list(args))
        return lambda: None


class FakeStream:
    cuda_stream = 0


def epilogue_call(m, n, *, swap=False, bias=True, residual=True, alpha=True, activation="gelu"):
    ep = linear_epilogue(bias=bias, activation=activation, residual=residual, alpha=alpha)
    values = {"gl_alpha_": 2.0, "gl_bias_": torch.empty(n, dtype=BF16),
              "gl_residual_": torch.empty(m, n, dtype=torch.float32), "gl_beta_": 0.5}
    return ep.bind({k: v for k, v in values.items() if k in ep.inputs}, m, n, torch.device("cpu")).oriented(swap)


@pytest.fixture
def fake_gpu(monkeypatch):
    """bind() on CPU tensors: no device, no driver. Returns the fake kernel and the sources loaded."""
    kernel, sources = FakeKernel(), []
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream())
    for mod in (gemm_mod, small_m_mod):
        monkeypatch.setattr(mod, "device_index", lambda device: 0)
    for cls in (gemm_mod.LibraryGemm, small_m_mod.SmallMGemm):
        monkeypatch.setattr(cls, "supports", lambda self, *a, **k: None)
    monkeypatch.setattr(gemm_mod.LibraryGemm, "view_maps", lambda self, a, b, c, kw=None: [FakeMap(), FakeMap(), FakeMap()])
    monkeypatch.setattr(small_m_mod.SmallMGemm, "_tensor_map", lambda self, *a: FakeMap())

    def loaded(self, dtype, device, epilogue_source=None, **kw):
        sources.append((self, dtype, epilogue_source, kw))
        return kernel

    for cls in (gemm_mod.LibraryGemm, small_m_mod.SmallMGemm):
        monkeypatch.setattr(cls, "loaded", loaded)
    return kernel, sources


def views(m, n, k):
    a, b = torch.empty(m, k, dtype=BF16), torch.empty(n, k, dtype=BF16)
    return OperandView(a, m, k, k, "k"), OperandView(b, n, k, k, "k"), torch.empty(m, n, dtype=BF16)


@needs_nvcc
@pytest.mark.parametrize("with_epilogue", [False, True])
@pytest.mark.parametrize("swap", [False, True])
def test_general_kernel_gets_exactly_its_parameters(use_cache, fake_gpu, with_epilogue, swap):
    if swap and not with_epilogue:
        pytest.skip("orientation matters only with an epilogue")
    kernel, sources = fake_gpu
    m, n, k = 512, 768, 256
    va, vb, c = views(m, n, k)
    ep = epilogue_call(n, m, swap=True) if swap else epilogue_call(m, n) if with_epilogue else None
    lib = library_gemm("k", "k", 256)
    lib.bind(va, vb, c, epilogue=ep)
    args = kernel.prepared[-1]
    _, dtype, source, _ = sources[-1]
    assert (source is not None) == with_epilogue
    params = kernel_params(lib.build(dtype, epilogue_source=source).cubin)
    assert packed_sizes(args) == [size for _, size in params]
    assert len(params) == (11 if with_epilogue else 10)  # 3 maps, M N K, first unit, contributors, 2 pointers
    if with_epilogue:
        assert isinstance(args[-1], EpilogueParams) and params[-1][1] == ctypes.sizeof(EpilogueParams)
        assert params[-1][0] % ctypes.alignment(EpilogueParams) == 0


@needs_nvcc
@pytest.mark.parametrize("with_epilogue", [False, True])
@pytest.mark.parametrize("out_fp32", [False, True])
def test_small_m_kernel_gets_exactly_its_parameters(use_cache, fake_gpu, with_epilogue, out_fp32):
    kernel, sources = fake_gpu
    m, n, k = 48, 1024, 512
    va, vb, _ = views(m, n, k)
    c = torch.empty(m, n, dtype=torch.float32 if out_fp32 else BF16)
    ep = epilogue_call(m, n, residual=False, alpha=False, activation="silu") if with_epilogue else None
    sm = small_m_gemm(m)
    sm.bind(va, vb, c, epilogue=ep)
    args = kernel.prepared[-1]
    inst, dtype, source, kw = sources[-1]
    assert (source is not None) == with_epilogue and kw["out_fp32"] == out_fp32
    params = kernel_params(inst.build(dtype, out_fp32=out_fp32, a_major=kw["a_major"], b_major=kw["b_major"],
                                      epilogue_source=source).cubin)
    assert packed_sizes(args) == [size for _, size in params]
    assert len(params) == (12 if with_epilogue else 11)  # 2 maps, C, ldc x 2, M N K, contributors, 2 pointers
    if with_epilogue:
        assert isinstance(args[-1], EpilogueParams)


def test_the_bound_epilogue_argument_is_the_one_refreshed(fake_gpu):
    """set_scalars writes alpha/beta into the very EpilogueParams the prepared launch holds."""
    kernel, _ = fake_gpu
    va, vb, c = views(512, 768, 256)
    bound = library_gemm("k", "k", 256).bind(va, vb, c, epilogue=epilogue_call(512, 768))
    assert bound.params is kernel.prepared[-1][-1]
    assert tuple(bound.params.scalar[:2]) == (2.0, 0.5)  # alpha, beta in slot order
    bound.set_scalars((3.0, -1.5))
    assert tuple(kernel.prepared[-1][-1].scalar[:2]) == (3.0, -1.5)
    plain = library_gemm("k", "k", 256).bind(va, vb, c)
    assert plain.params is None and not isinstance(kernel.prepared[-1][-1], EpilogueParams)
