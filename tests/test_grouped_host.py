"""The grouped ops on the compiled host path, without a GPU: their C++ CUDA kernels registered over the Python ones
(and removed again), the fakes and meta kernels still answering, the signature key changing with everything the
grouped checks read, the launch template of a grouped bind placing offs and w_up (the op's tensors 8 and 9) and
C++ patching their addresses, and the public functions' rule for skipping their checks.

The GPU side (launches against the Python path, one planner call per signature, capture, autograd) is
tests/test_grouped_host_gpu.py.
"""

from __future__ import annotations

import ctypes
import struct

import pytest
import torch

import gemm_ladder.ops as ops
import gemm_ladder.ops_grouped as ops_grouped
import gemm_ladder.ops_grouped_swiglu  # noqa: F401 - registers grouped_swiglu_fused's kernel on the host
from gemm_ladder.contract import GemmInputError
from gemm_ladder.host import templates
from host_fakes import FakeBound, FakeMap, host  # noqa: F401 - host: the module fixture

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
GROUPED = ("grouped_mm", "grouped_linear", "grouped_linear_act", "grouped_swiglu_fused")
#: launch.cpp's PlannedOp numbers: 11 + the op's place in the module's PLANNED_OPS.
CODE = {name: 11 + i for i, name in enumerate(GROUPED)}


def _t(*shape, dtype=BF16, offset=0):
    base = torch.empty(offset + torch.Size(shape).numel(), dtype=dtype)
    return base[offset:].view(shape)


def _cuda_kernel_line(name: str) -> str | None:
    lines = torch._C._dispatch_dump(f"gemm_ladder::{name}").splitlines()
    return next((line for line in lines if line.startswith("CUDA:")), None)


def test_the_grouped_ops_get_cpp_cuda_kernels_and_lose_them_with_the_host(host):
    assert tuple(host.PLANNED_OPS) == (*GROUPED, "swiglu")
    for name in GROUPED:
        line = _cuda_kernel_line(name)
        assert line is not None and "launch.cpp" in line, (name, line)
        dump = torch._C._dispatch_dump(f"gemm_ladder::{name}")
        assert "Autograd[alias]" in dump and "Meta" in dump  # custom_op's, unchanged
    assert ops.host_module() is host
    ops.use_python()
    try:
        assert ops.host_module() is None
        assert all(_cuda_kernel_line(name) is None for name in GROUPED)  # custom_op's Python kernel answers
    finally:
        assert ops.use_host() is not None
    assert all("launch.cpp" in _cuda_kernel_line(name) for name in GROUPED) and ops.host_module() is host


def test_fakes_and_meta_still_answer_and_refuse(host):
    import gemm_ladder

    x = torch.empty(40, 64, dtype=BF16, device="meta")
    w = torch.empty(4, 96, 64, dtype=BF16, device="meta")
    offs = torch.empty(4, dtype=torch.int32, device="meta")
    assert gemm_ladder.grouped_linear(x, w, offs).shape == (40, 96)
    assert gemm_ladder.grouped_linear(x, w, offs, activation="gelu").shape == (40, 96)
    assert gemm_ladder.grouped_swiglu(x, w, w, offs).shape == (40, 96)
    assert gemm_ladder.grouped_mm(x, w.transpose(-2, -1), offs, out_dtype=FP32).dtype == FP32
    with pytest.raises(GemmInputError, match="offs"):
        gemm_ladder.grouped_linear(x, w, offs.to(torch.int64))


def test_public_calls_skip_their_checks_only_for_plain_cuda_tensors_on_the_host(host, monkeypatch):
    meta = torch.empty(2, 8, dtype=BF16, device="meta")
    assert not ops_grouped.host_call(meta, None)  # not CUDA: the Python checks run (and the fake)
    assert not ops_grouped.host_call(torch.empty(2, 8))
    monkeypatch.setitem(ops._HOST, "module", None)
    assert not ops_grouped.host_call()
    monkeypatch.setitem(ops._HOST, "module", host)
    assert ops_grouped.host_call(None)  # nothing against it (no tensor given)


def test_signature_changes_with_everything_the_grouped_checks_read(host):
    sig = host.op_signature
    x, w, offs, bias = _t(40, 64), _t(4, 96, 64), _t(4, dtype=torch.int32), _t(4, 96)
    code = CODE["grouped_linear"]
    k = sig(code, x, w, offs, None, None, None, None, False)
    assert k == sig(code, _t(40, 64), _t(4, 96, 64), _t(4, dtype=torch.int32), None, None, None, None, False)
    assert k == sig(code, _t(40, 64, offset=8), w, offs, None, None, None, None, False)  # same residue mod 16
    variants = [
        sig(CODE["grouped_mm"], x, w, offs, None, None, None, None, False),  # another op
        sig(code, _t(40, 64, offset=1), w, offs, None, None, None, None, False),  # x's alignment
        sig(code, x, w, _t(4, dtype=torch.int32, offset=1), None, None, None, None, False),  # offs' alignment
        sig(code, x, w, _t(5, dtype=torch.int32), None, None, None, None, False),  # groups in offs
        sig(code, x, w, _t(4, dtype=torch.int64), None, None, None, None, False),  # offs' dtype
        sig(code, _t(41, 64), w, offs, None, None, None, None, False),  # rows
        sig(code, x, _t(4, 64, 96).transpose(1, 2), offs, None, None, None, None, False),  # w's strides
        sig(code, x, w, offs, bias, None, None, None, False),  # a bias
        sig(code, x, w, offs, _t(4, 96, dtype=FP16), None, None, None, False),  # its dtype
        sig(code, x, w, offs, None, None, "gelu", None, False),  # an activation
        sig(code, x, w, offs, None, None, "relu", None, False),
        sig(code, x, w, offs, None, None, None, FP32, False),  # out_dtype
        sig(code, x, w, offs, None, None, None, None, True),  # a capture under way
        sig(code, x, w, offs, None, _t(4, 96, 64), None, None, False),  # w_up given
        sig(code, x, w, None, None, None, None, None, False),  # no offs (batched)
    ]
    assert len({k, *variants}) == len(variants) + 1


def test_a_grouped_template_places_offs_and_w_up_and_cpp_patches_them(host):
    args = [FakeMap(1), FakeMap(2), FakeMap(3), FakeMap(1), ctypes.c_void_p(0), ctypes.c_longlong(96),
            ctypes.c_void_p(0), ctypes.c_int(4), ctypes.c_int(40), ctypes.c_int(96), ctypes.c_int(64),
            ctypes.c_void_p(0), ctypes.c_int(0)]
    kw = {"tensorDataType": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "tensorRank": 2, "globalAddress": 0x1000,
          "globalDim": [64, 40], "globalStrides": [128], "boxDim": [64, 128], "elementStrides": [1, 1],
          "interleave": "CU_TENSOR_MAP_INTERLEAVE_NONE", "swizzle": "CU_TENSOR_MAP_SWIZZLE_128B",
          "l2Promotion": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B", "oobFill": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"}
    roles = [("map", "x", kw), ("map", "w", kw), ("map", "w_up", kw), ("map", "x", kw), ("ptr", "out"), ("value",),
             ("ptr", "offs"), *[("value",)] * 6]
    t = templates.template_from_bound(FakeBound(args, roles), out_shape=(40, 96), out_dtype=BF16,
                                      enum=lambda key, name: 1, sources=templates.GROUPED_SOURCES)
    assert [m[1] for m in t.maps] == [0, 1, 9, 0]  # x, w, w_up, x again (the fused build's unread map_c)
    assert t.pointers == [(t.arg_offsets[4], 2), (t.arg_offsets[6], 8)]  # out, offs
    ptrs = [0x7000_0000_0000 + 256 * i for i in range(10)]
    out = host.patched_buffer(t, ptrs, 1.0, 1.0)
    assert struct.unpack_from("<Q", out, t.arg_offsets[4])[0] == ptrs[2]
    assert struct.unpack_from("<Q", out, t.arg_offsets[6])[0] == ptrs[8]
    with pytest.raises(templates.TemplateError):  # a role over a tensor the op does not have
        templates.template_from_bound(FakeBound(args[:1], [("ptr", "scales")]), out_shape=(1,), out_dtype=BF16,
                                      sources=templates.GROUPED_SOURCES)


def test_every_grouped_op_has_its_callbacks_and_an_unknown_one_is_refused(host):
    assert set(ops_grouped.HOST_CALLBACKS) | {"grouped_swiglu_fused"} == set(GROUPED)
    with pytest.raises(ValueError, match="no planned op"):
        host.register_op_kernel("grouped_nothing")
    with pytest.raises(ValueError, match="no planned op"):
        host.set_op_callbacks("grouped_nothing", None, None)


def test_explain_says_who_launches_each_grouped_call(host, monkeypatch):
    import gemm_ladder

    meta = dict(dtype=BF16, device="meta")
    x, w, offs = torch.empty(40, 64, **meta), torch.empty(4, 96, 64, **meta), torch.empty(4, dtype=torch.int32,
                                                                                           device="meta")
    cpp = "C++ (planned once per signature"
    assert gemm_ladder.explain_grouped_mm(x, w.transpose(-2, -1), offs)["host"].startswith(cpp)
    assert gemm_ladder.explain_grouped_mm(x.T, torch.empty(40, 96, **meta), offs)["host"].startswith(cpp)  # along K
    assert gemm_ladder.explain_grouped_swiglu(x, w, w, offs)["host"].startswith(cpp)
    batched = gemm_ladder.explain_grouped_mm(torch.empty(4, 10, 64, **meta), w.transpose(-2, -1))
    assert batched["host"] == "python (a batched call makes its offs per call)"
    masked = gemm_ladder.explain_grouped_mm(torch.empty(4, 10, 64, **meta), w.transpose(-2, -1), offs, masked=True)
    assert masked["host"].startswith("python (the masked layout")
    empty = gemm_ladder.explain_grouped_mm(torch.empty(40, 0, **meta), torch.empty(4, 0, 96, **meta), offs)
    assert empty["host"].startswith("python (an empty problem or K = 0")
    w_grad = torch.empty(4, 96, 64, dtype=BF16, device="meta", requires_grad=True)
    assert gemm_ladder.explain_grouped_swiglu(x, w_grad, w_grad, offs)["host"].startswith("python (the two-GEMM")
    strided = torch.empty(96, 4, **meta).T
    assert gemm_ladder.explain_grouped_mm(x, w.transpose(-2, -1), offs, bias=strided)["host"].startswith(
        "python (a bias that is not contiguous")
    monkeypatch.setitem(ops._HOST, "module", None)
    assert gemm_ladder.explain_grouped_mm(x, w.transpose(-2, -1), offs)["host"].startswith("python (the host module's")


def test_a_changed_grouped_setting_drops_the_planned_templates(host, monkeypatch):
    """host_call (every public grouped call on plain CUDA tensors) clears the host module's templates when a
    library/grouped.py setting a plan reads changed since they were planned."""
    from gemm_ladder.library import grouped

    cleared = []
    fake_cuda = type("T", (), {"is_cuda": True})
    monkeypatch.setattr(ops_grouped, "_PLAIN", (fake_cuda,))
    monkeypatch.setitem(ops._HOST, "module", type("M", (), {"clear": lambda self: cleared.append(1)})())
    monkeypatch.setattr(ops_grouped._PLANNED, "settings", ops_grouped._settings())  # a template planned under them
    t = fake_cuda()
    assert ops_grouped.host_call(t) and cleared == []
    monkeypatch.setattr(grouped, "STORE_DEFAULT", "registers" if grouped.STORE_DEFAULT == "tma" else "tma")
    assert ops_grouped.host_call(t) and cleared == [1]
    assert ops_grouped.host_call(t) and cleared == [1]  # once per change
