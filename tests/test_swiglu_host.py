"""swiglu on the compiled host path, without a GPU: its C++ CUDA kernel registered in place of the Python one (and
the Python one back with the Python path), the fake still answering, the signature key changing with everything the
checks read (and with grad mode and requires_grad, which the kernel refuses), the launch templates of the fused
kernel's and the small-M gated build's roles placing x, w_gate, w_up and out (the op's tensors 0, 1, 9 and 2), and
``explain_swiglu``'s ``host`` saying who launches a call.

The GPU side (launches against the Python path, one planner call per signature, capture, refusals) is
tests/test_swiglu_host_gpu.py.
"""

from __future__ import annotations

import ctypes
import struct

import pytest
import torch

import gemm_ladder
import gemm_ladder.ops as ops
from gemm_ladder.contract import GemmInputError
from gemm_ladder.host import templates
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.swiglu_small_m import swiglu_small_m_kernel
from host_fakes import FakeBound, FakeMap, host  # noqa: F401 - host: the module fixture

BF16, FP16 = torch.bfloat16, torch.float16
SWIGLU = 15  # launch.cpp's PlannedOp number: 11 + its place in PLANNED_OPS


def _t(*shape, dtype=BF16, offset=0):
    base = torch.empty(offset + torch.Size(shape).numel(), dtype=dtype)
    return base[offset:].view(shape)


def _cuda_kernel_line() -> str | None:
    lines = torch._C._dispatch_dump("gemm_ladder::swiglu").splitlines()
    return next((line for line in lines if line.startswith("CUDA:")), None)


def test_swiglu_gets_the_cpp_cuda_kernel_and_the_python_one_back_without_the_host(host):
    assert host.PLANNED_OPS.index("swiglu") + 11 == SWIGLU
    assert "launch.cpp" in _cuda_kernel_line()
    ops.use_python()
    try:
        line = _cuda_kernel_line()
        assert line is not None and "launch.cpp" not in line  # ops.py's Python kernel
    finally:
        assert ops.use_host() is host
    assert "launch.cpp" in _cuda_kernel_line()


def test_the_fake_still_answers_and_cpu_tensors_get_the_library_error(host):
    x, w = torch.empty(3, 5, 64, dtype=BF16, device="meta"), torch.empty(96, 64, dtype=BF16, device="meta")
    assert gemm_ladder.swiglu(x, w, w).shape == (3, 5, 96)
    with pytest.raises(GemmInputError, match="must be on a cuda device"):
        gemm_ladder.swiglu(torch.empty(4, 64, dtype=BF16), torch.empty(96, 64, dtype=BF16),
                           torch.empty(96, 64, dtype=BF16))


def test_signature_changes_with_everything_the_checks_read_and_with_grad(host):
    def sig(x, wg, wu, capturing=False):
        return host.op_signature(SWIGLU, x, wg, None, None, wu, None, None, capturing)

    x, wg, wu = _t(40, 64), _t(96, 64), _t(96, 64)
    k = sig(x, wg, wu)
    assert k == sig(_t(40, 64), _t(96, 64), _t(96, 64))
    assert k == sig(_t(40, 64, offset=8), wg, wu)  # the same residue mod 16
    p = torch.nn.Parameter(_t(96, 64))
    with torch.no_grad():
        assert sig(x, p, wu) == k  # a Parameter under no_grad: the same signature
    variants = [
        sig(_t(40, 64, offset=1), wg, wu),  # x's alignment
        sig(_t(41, 64), wg, wu),  # rows
        sig(_t(2, 20, 64), wg, wu),  # batch dimensions
        sig(_t(40, 128)[:, :64], wg, wu),  # x's pitch
        sig(x.to(FP16), wg.to(FP16), wu.to(FP16)),  # dtype
        sig(x, _t(97, 64), wu),  # N
        sig(x, wg, _t(96, 64, offset=4)),  # w_up's alignment
        sig(x, wg, wu, capturing=True),  # a capture under way
        sig(x, p, wu),  # grad mode on, an input requiring grad: refused by the planner, never a template
    ]
    assert len({k, *variants}) == len(variants) + 1


KW = {"tensorDataType": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "tensorRank": 2, "globalAddress": 0x1000,
      "globalDim": [64, 40], "globalStrides": [128], "boxDim": [64, 128], "elementStrides": [1, 1],
      "interleave": "CU_TENSOR_MAP_INTERLEAVE_NONE", "swizzle": "CU_TENSOR_MAP_SWIZZLE_128B",
      "l2Promotion": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B", "oobFill": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"}


def test_the_fused_kernels_template_places_its_maps_and_workspace(host):
    # library/swiglu.py SwigluKernel.launch_args's order: x, w_gate, w_up, out maps; M, N, K, first unit,
    # contributors; partials, counters
    args = [FakeMap(1), FakeMap(2), FakeMap(3), FakeMap(4), *[ctypes.c_int(7)] * 5, ctypes.c_void_p(0),
            ctypes.c_void_p(0)]
    roles = [("map", n, KW) for n in ("x", "w_gate", "w_up", "out")] + [("value",)] * 5 + [("partials",),
                                                                                           ("counters",)]
    t = templates.template_from_bound(FakeBound(args, roles, workspace=(4096, 12)), out_shape=(40, 96),
                                      out_dtype=BF16, enum=lambda key, name: 1, sources=templates.SWIGLU_SOURCES)
    assert [m[1] for m in t.maps] == [0, 1, 9, 2]
    assert t.partials == (t.arg_offsets[9], 4096) and t.counters == (t.arg_offsets[10], 12)
    assert t.pointers == [] and t.out_shape == (40, 96)


def test_the_small_m_gated_builds_roles_make_a_template_cpp_patches(host):
    x, wg = torch.empty(7, 256, dtype=BF16), torch.empty(384, 256, dtype=BF16)
    wu = torch.empty(384, 320, dtype=BF16)[:, :256]  # a padded pitch of its own: w_up's map has it, not w_gate's
    views = [operand_view(t, k_dim=1) for t in (x, wg, wu)]
    roles = swiglu_small_m_kernel(64).roles(*views)
    assert roles[0][2]["globalStrides"] == [512] and roles[-1][2]["globalStrides"] == [640]
    # SwigluSmallM.bind's order: w_gate's map, x's, out's pointer, six values, partials, counters, w_up's map
    assert [r[0] for r in roles] == ["map", "map", "ptr", *["value"] * 6, "partials", "counters", "map"]
    assert [r[1] for r in roles if r[0] != "value" and len(r) > 1] == ["w_gate", "x", "out", "w_up"]
    assert roles[0][2]["globalAddress"] == wg.data_ptr() and roles[-1][2]["globalAddress"] == wu.data_ptr()
    args = [FakeMap(1), FakeMap(2), ctypes.c_void_p(0), *[ctypes.c_longlong(1)] * 2, *[ctypes.c_int(1)] * 4,
            ctypes.c_void_p(0), ctypes.c_void_p(0), FakeMap(3)]
    t = templates.template_from_bound(FakeBound(args, roles), out_shape=(7, 384), out_dtype=BF16,
                                      sources=templates.SWIGLU_SOURCES)
    assert [m[1] for m in t.maps] == [1, 0, 9] and t.pointers == [(t.arg_offsets[2], 2)]
    assert t.maps[0][4] == [256, 384]  # w_gate's extents (K, N), from the plan
    ptrs = [0x7000_0000_0000 + 256 * i for i in range(10)]
    out = host.patched_buffer(t, ptrs, 1.0, 1.0)
    assert struct.unpack_from("<Q", out, t.arg_offsets[2])[0] == ptrs[2]
    assert t.partials is None and t.counters is None  # unsplit: no workspace


def test_explain_says_who_launches_each_swiglu_call(host, monkeypatch):
    meta = dict(dtype=BF16, device="meta")
    w = torch.empty(4096, 1024, **meta)
    cpp = "C++ (planned once per signature"
    assert gemm_ladder.explain_swiglu(torch.empty(4096, 1024, **meta), w, w)["host"].startswith(cpp)  # fused
    assert gemm_ladder.explain_swiglu(torch.empty(8, 512, 1024, **meta), w, w)["host"].startswith(cpp)  # batched view
    odd = torch.empty(1001, 1024, **meta)
    assert "16-byte" in gemm_ladder.explain_swiglu(torch.empty(4096, 1024, **meta), odd, odd)["host"]
    assert "empty" in gemm_ladder.explain_swiglu(torch.empty(0, 1024, **meta), w, w)["host"]
    copied = torch.empty(4, 4096, 1024, **meta).transpose(0, 1)  # (4096, 4, 1024): merges only by a copy
    assert "copy" in gemm_ladder.explain_swiglu(copied, w, w)["host"]
    from gemm_ladder import api

    monkeypatch.setattr(api, "_HOST_OPS", None)
    assert gemm_ladder.explain_swiglu(torch.empty(4096, 1024, **meta), w, w)["host"].startswith("python (the host")


def test_a_signature_without_w_up_is_refused_not_a_crash(host):
    with pytest.raises(ValueError, match="needs w_up"):
        host.op_signature(SWIGLU, _t(4, 64), _t(96, 64), None, None, None, None, None, False)


def test_a_settings_change_drops_the_planned_templates_once(monkeypatch):
    from gemm_ladder import api
    from gemm_ladder.dispatch import swiglu_small_m

    cleared = []
    monkeypatch.setattr(api.SWIGLU_PLANNED, "settings", None)
    api.SWIGLU_PLANNED.fresh(lambda: cleared.append(1))
    assert cleared == []  # nothing planned yet
    api.SWIGLU_PLANNED.planned()
    api.SWIGLU_PLANNED.fresh(lambda: cleared.append(1))
    assert cleared == []  # unchanged
    monkeypatch.setattr(swiglu_small_m, "ONE_LAUNCH", not swiglu_small_m.ONE_LAUNCH)
    api.SWIGLU_PLANNED.fresh(lambda: cleared.append(1))
    api.SWIGLU_PLANNED.fresh(lambda: cleared.append(1))
    assert cleared == [1]  # dropped once; the next plan records the new settings
    api.SWIGLU_PLANNED.planned()
    monkeypatch.setitem(swiglu_small_m.SMALL_M_MAX_BY_DEVICE, "some GPU", 64)  # a device's threshold changed
    api.SWIGLU_PLANNED.fresh(lambda: cleared.append(2))
    assert cleared == [1, 2]


def test_the_fused_kernels_map_roles_name_each_tensor_at_its_own_pitch():
    from gemm_ladder.library.swiglu import MAP_NAMES, swiglu_kernel

    x, wg = torch.empty(300, 256, dtype=BF16), torch.empty(384, 256, dtype=BF16)
    wu, out = torch.empty(384, 320, dtype=BF16)[:, :256], torch.empty(300, 384, dtype=BF16)
    kw = swiglu_kernel().map_kwargs(*(operand_view(t, k_dim=1) for t in (x, wg, wu)), out)
    assert [name for name, _ in kw] == list(MAP_NAMES) == ["x", "w_gate", "w_up", "out"]
    assert [k["globalAddress"] for _, k in kw] == [t.data_ptr() for t in (x, wg, wu, out)]
    assert [k["globalStrides"][0] for _, k in kw] == [512, 512, 640, 768]
