"""The compiled host path (gemm_ladder/host) without a GPU: the module builds and loads, its kernels
are registered for mm and linear, the fakes and meta kernels still answer, refusals are the
library's errors, the signature key changes with everything the checks read (and only with that),
and a launch template packs and patches the kernel arguments exactly as the bound launch holds them.

The GPU side (launches, Parameters and fresh activations, autograd, torch.compile, CUDA-graph trees)
is tests/test_host_gpu.py.
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys

import pytest
import torch

import gemm_ladder.ops as ops
from gemm_ladder.contract import GemmInputError
from gemm_ladder.host import planner, templates
from gemm_ladder.library.epilogue import EpilogueParams, linear_epilogue
from host_fakes import FakeBound, FakeMap, host  # noqa: F401 - host: the module fixture

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
OPS = torch.ops.gemm_ladder


def test_module_builds_loads_and_registers_the_cuda_kernels(host):
    from gemm_ladder import host as host_pkg

    assert host_pkg.loaded() is host and host_pkg.describe() == "C++"
    assert host_pkg.load_seconds() > 0  # the cold start reports it apart from the rest of the import
    for name in ("mm", "linear"):
        qualname = f"gemm_ladder::{name}"
        for key in ("CUDA", "Autograd", "Meta"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key), (name, key)
        dump = torch._C._dispatch_dump(qualname)
        cuda = [line for line in dump.splitlines() if line.startswith("CUDA")]
        assert cuda and "launch.cpp" in cuda[0], dump  # C++'s kernel, not the Python one it replaced
        autograd = [line for line in dump.splitlines() if line.startswith("Autograd[alias]")]
        assert autograd and "autograd.cpp" in autograd[0], dump
    assert ops.host_module() is host and ops.use_host() is host  # once per process


def test_fakes_and_meta_still_answer(host):
    x = torch.empty(3, 5, 64, dtype=BF16, device="meta")
    w = torch.empty(48, 64, dtype=BF16, device="meta")
    y = OPS.linear(x, w, None, None, activation="gelu")
    assert y.shape == (3, 5, 48) and y.dtype == BF16 and y.device.type == "meta"
    assert OPS.mm(x[0], w.T, out_dtype=FP32).dtype == FP32
    with pytest.raises(GemmInputError, match="must equal"):
        OPS.linear(x, torch.empty(48, 63, dtype=BF16, device="meta"))


def test_direct_entries_dispatch_like_the_op_and_raise_the_library_errors(host):
    """host.mm / host.linear (what gemm_ladder.mm / linear call on CUDA tensors): a typed dispatcher
    call from the top, so meta tensors reach the fakes; a Python kernel's exception comes back as
    itself (HANDLE_TH_ERRORS), not as a RuntimeError."""
    x = torch.empty(3, 5, 64, dtype=BF16, device="meta")
    w = torch.empty(48, 64, dtype=BF16, device="meta")
    y = host.linear(x, w, None, None, "gelu", 1.0, 1.0, None)
    assert y.shape == (3, 5, 48) and y.dtype == BF16 and y.device.type == "meta"
    assert host.mm(x[0], w.T, FP32).dtype == FP32 and host.mm(x[0], w.T, None).shape == (5, 48)
    with pytest.raises(GemmInputError, match="must equal"):
        host.linear(x, torch.empty(48, 63, dtype=BF16, device="meta"), None, None, None, 1.0, 1.0, None)
    with pytest.raises(GemmInputError, match="must equal"):
        host.mm(x[0], w, None)


def test_planner_refuses_with_the_library_errors(host):
    cpu = torch.randn(8, 16, dtype=BF16)
    with pytest.raises(GemmInputError):
        planner.plan_mm(cpu, cpu.T, None)
    with pytest.raises(GemmInputError):
        planner.plan_linear(cpu, cpu, None, None, "tanh", 1.0, 1.0, None)


def _t(*shape, dtype=BF16, offset=0):
    base = torch.empty(offset + torch.Size(shape).numel(), dtype=dtype)
    return base[offset:].view(shape)


def test_signature_changes_with_everything_the_checks_read(host):
    x, w = _t(16, 64), _t(32, 64)
    sig = host.mm_signature
    k = sig(x, w.T, None, False)
    assert k == sig(_t(16, 64), _t(32, 64).T, None, False)  # new addresses, same class: same key
    assert k == sig(_t(16, 64, offset=8), w.T, None, False)  # 16 bytes further: the same residue mod 16
    assert k != sig(_t(16, 64, offset=1), w.T, None, False)  # 2 bytes off: another alignment class
    assert k != sig(_t(17, 64), w.T, None, False)  # shape
    assert k != sig(_t(64, 16).T, w.T, None, False)  # strides (column-major x)
    assert k != sig(_t(16, 64, dtype=FP16), w.T, None, False)  # dtype
    assert k != sig(x, w.T, FP32, False)  # out_dtype
    assert k != sig(x, w.T, None, True)  # a capture under way

    lin = host.linear_signature
    b, r = _t(32), _t(16, 32)
    base = lin(x, w, None, None, None, 1.0, 1.0, None, False)
    assert base != k  # another op
    variants = [
        lin(x, w, b, None, None, 1.0, 1.0, None, False),  # bias present
        lin(x, w, _t(32, dtype=FP32), None, None, 1.0, 1.0, None, False),  # its dtype
        lin(x, w, None, r, None, 1.0, 1.0, None, False),  # residual read
        lin(x, w, None, r, None, 1.0, 0.0, None, False),  # beta = 0: not read
        lin(x, w, None, _t(32, 16).T, None, 1.0, 1.0, None, False),  # residual strides
        lin(x, w, None, None, "relu", 1.0, 1.0, None, False),
        lin(x, w, None, None, "gelu", 1.0, 1.0, None, False),
        lin(x, w, None, None, None, 2.0, 1.0, None, False),  # alpha != 1
        lin(x, w, None, None, None, 1.0, 1.0, FP32, False),
        lin(x, w, None, None, None, 1.0, 1.0, None, True),
        lin(_t(16, 64, offset=1), w, None, None, None, 1.0, 1.0, None, False),
        lin(x, _t(32, 64, offset=4), None, None, None, 1.0, 1.0, None, False),
    ]
    assert len({base, *variants}) == len(variants) + 1
    # Values of alpha and beta are written per call: not part of the key.
    assert lin(x, w, None, r, None, 2.0, 0.5, None, False) == lin(x, w, None, r, None, 3.0, 2.0, None, False)


def _kw(addr):
    return {"tensorDataType": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "tensorRank": 2, "globalAddress": addr,
            "globalDim": [64, 16], "globalStrides": [128], "boxDim": [64, 128], "elementStrides": [1, 1],
            "interleave": "CU_TENSOR_MAP_INTERLEAVE_NONE", "swizzle": "CU_TENSOR_MAP_SWIZZLE_128B",
            "l2Promotion": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B", "oobFill": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"}


def test_template_packs_the_bound_arguments_and_patches_addresses_and_scalars(host):
    ep = linear_epilogue(bias=True, activation="gelu", residual=True, alpha=True)
    params = EpilogueParams()
    params.stride_row[1], params.stride_col[1], params.pair_ok = 32, 1, 2
    args = [FakeMap(1), FakeMap(2), FakeMap(3), ctypes.c_int(16), ctypes.c_int(32), ctypes.c_int(64),
            ctypes.c_int(5), ctypes.c_int(2), ctypes.c_void_p(0), ctypes.c_void_p(0), params]
    roles = [("map", "A", _kw(0x1000)), ("map", "B", _kw(0x2000)), ("map", "C", _kw(0x3000)),
             *[("value",)] * 5, ("partials",), ("counters",), ("epilogue",)]
    enums = {}
    t = templates.template_from_bound(FakeBound(args, roles, (4096, 64)), transposed=True, epilogue=ep,
                                      out_shape=(16, 32), out_dtype=BF16,
                                      enum=lambda key, name: enums.setdefault((key, name), len(enums) + 1))
    # Each argument at its alignment, its bytes those PreparedLaunch would point the driver at.
    assert [o % 64 for o in t.arg_offsets[:3]] == [0, 0, 0]
    for arg, off in zip(args, t.arg_offsets):
        data, align = templates._arg_bytes(arg)
        assert off % align == 0 and t.buffer[off:off + len(data)] == data
    assert t.arg_offsets[3] == 384 and t.arg_offsets[8] == 408 and t.arg_offsets[10] % 8 == 0
    # Transposed route: the kernel's A is the second operand, B the first, C the output.
    assert [m[1] for m in t.maps] == [1, 0, 2]
    assert t.maps[0][2:8] == (enums[("tensorDataType", "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16")], 2, [64, 16], [128],
                              [64, 128], [1, 1])
    assert t.partials == (t.arg_offsets[8], 4096) and t.counters == (t.arg_offsets[9], 64)
    ep_off = t.arg_offsets[10]
    assert t.pointers == [(ep_off, 3), (ep_off + 8, 4)]  # slots: bias, residual
    assert t.scalars == [(ep_off + EpilogueParams.scalar.offset, 0), (ep_off + EpilogueParams.scalar.offset + 4, 1)]
    assert (t.grid, t.threads, t.dynamic_smem, t.cluster, t.function) == ((132, 1, 1), 384, 200000, 2, 0xABC0)

    # C++ writes the pointers and the fp32 scalars there, and nothing else (maps are encoded on the GPU).
    ptrs = [0x7000_0000_0000 + 16 * i for i in range(5)]
    out = host.patched_buffer(t, ptrs, 0.5, -2.25)
    assert len(out) == len(t.buffer)
    changed = {i for i in range(len(out)) if out[i] != t.buffer[i]}
    assert struct.unpack_from("<QQ", out, ep_off) == (ptrs[3], ptrs[4])
    assert struct.unpack_from("<ff", out, ep_off + EpilogueParams.scalar.offset) == (0.5, -2.25)
    allowed = set(range(ep_off, ep_off + 16)) | set(range(ep_off + 192, ep_off + 200))
    assert changed <= allowed


def test_template_needs_roles_and_known_slots(host):
    args = [ctypes.c_int(1)]
    with pytest.raises(templates.TemplateError):
        templates.template_from_bound(FakeBound(args, None), transposed=False, out_shape=(1, 1), out_dtype=BF16)
    with pytest.raises(templates.TemplateError):
        templates.template_from_bound(FakeBound(args, [("what",)]), transposed=False, out_shape=(1, 1), out_dtype=BF16)


def test_library_roles_mirror_the_maps_the_binders_encode():
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.library.operand import OperandView

    a = torch.empty(256, 512, dtype=BF16, device="meta")
    b = torch.empty(384, 512, dtype=BF16, device="meta")
    c = torch.empty(256, 384, dtype=BF16, device="meta")
    va, vb = OperandView(a, 256, 512, 512, "k"), OperandView(b, 384, 512, 512, "k")
    roles = library_gemm("k", "k", 128).arg_roles(va, vb, c, epilogue=True)
    assert [r[1] for r in roles if r[0] == "map"] == ["A", "B", "C"]
    assert [r[0] for r in roles[3:]] == ["value"] * 5 + ["partials", "counters", "epilogue"]
    reg = library_gemm("k", "k", 128, c_from_registers=True).arg_roles(va, vb, c, epilogue=False)
    assert [r[0] for r in reg] == ["map", "map", "ptr", "value"] + ["value"] * 5 + ["partials", "counters"]
    dims = {r[1]: r[2]["globalDim"] for r in roles if r[0] == "map"}
    assert list(dims["A"]) == [512, 256] and list(dims["B"]) == [512, 384]


def test_import_gemm_ladder_registers_the_ops_and_design_stays_torch_free():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(p) for p in sys.path if p]), GEMM_LADDER_HOST="0")
    run = lambda code: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                      timeout=300)
    r = run("import torch, gemm_ladder; print(torch.ops.gemm_ladder.linear.default.name())")
    assert r.returncode == 0 and "gemm_ladder::linear" in r.stdout, r.stderr
    r = run("import gemm_ladder.host as h; h.load(); print(h.load_seconds())")
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stderr  # the host path off: nothing loaded
    r = run("import sys, gemm_ladder.design; print('torch' in sys.modules)")
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


@pytest.mark.parametrize("value, want", [("0", "off"), ("off", "off"), ("1", "on"), ("", "on"), (" Require ", "require")])
def test_host_mode_reads_the_values_it_documents(value, want, monkeypatch):
    from gemm_ladder import host as host_module

    monkeypatch.setenv("GEMM_LADDER_HOST", value)
    assert host_module.mode() == want
    monkeypatch.delenv("GEMM_LADDER_HOST")
    assert host_module.mode() == "on"


@pytest.mark.parametrize("value", ["requre", "2", "maybe"])
def test_host_mode_refuses_an_unknown_value(value, monkeypatch):
    """GEMM_LADDER_HOST=requre (a typo) is refused, naming the variable and the values it takes, as a bad
    GEMM_LADDER_COMPILER is: it was read as on (a failed build then warned instead of raising)."""
    from gemm_ladder import host as host_module

    monkeypatch.setenv("GEMM_LADDER_HOST", value)
    with pytest.raises(ValueError, match=rf"^GEMM_LADDER_HOST='{value}': use 0 .*, 1 .* or require"):
        host_module.mode()


# --- the C++ autograd functions, on CPU: the ops' kernels replaced by float64 stand-ins ------------


def _stand_in_linear(x, w, bias=None, residual=None, *, activation=None, alpha=1.0, beta=1.0, out_dtype=None):
    F = torch.nn.functional
    z = alpha * (x.double() @ w.double().T) + (0 if bias is None else bias.double())
    act = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
           "silu": F.silu}[activation]
    y = act(z) + (0 if residual is None else beta * residual.double())
    return y.to(out_dtype or x.dtype)


@pytest.fixture
def cpu_kernels(host):
    lib = torch.library.Library("gemm_ladder", "IMPL")
    lib.impl("mm", lambda a, b, *, out_dtype=None: (a.double() @ b.double()).to(out_dtype or a.dtype), "CPU")
    lib.impl("linear", _stand_in_linear, "CPU")
    yield
    lib._destroy()


def _grads(fn, *tensors):
    leaves = [None if t is None else t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]
    y = fn(*leaves)
    g = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape).to(y.dtype)
    y.backward(g)
    return [None if t is None else t.grad for t in leaves]


def test_cpp_autograd_mm_matches_torch(cpu_kernels):
    a = torch.randn(7, 5, dtype=torch.float64).to(BF16).requires_grad_()
    b = torch.randn(5, 3, dtype=torch.float64).to(BF16).requires_grad_()
    ours = _grads(lambda a, b: OPS.mm(a, b), a, b)
    ref = _grads(lambda a, b: (a @ b).to(BF16), a.double(), b.double())
    for o, r in zip(ours, ref):
        assert o.dtype == BF16 and torch.allclose(o.double(), r, rtol=2**-7, atol=1e-2)
    # Only the gradient asked for is computed: b alone (a kept for it), then none recorded at all.
    only_b = _grads(lambda a, b: OPS.mm(a, b), a.detach(), b)
    assert only_b[0] is None and torch.allclose(only_b[1].double(), ref[1], rtol=2**-7, atol=1e-2)
    with torch.no_grad():
        assert OPS.mm(a, b).grad_fn is None


@pytest.mark.parametrize("inputs", ["bias+residual", "residual", "bias", "none"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_cpp_autograd_linear_matches_torch(cpu_kernels, activation, inputs):
    x = torch.randn(2, 3, 8, dtype=torch.float64).to(BF16).requires_grad_()
    w = torch.randn(6, 8, dtype=torch.float64).to(BF16).requires_grad_()
    bias = torch.randn(6, dtype=torch.float64).to(FP32).requires_grad_() if "bias" in inputs else None
    res = torch.randn(2, 3, 6, dtype=torch.float64).to(BF16).requires_grad_() if "residual" in inputs else None
    kw = dict(activation=activation, alpha=0.75, beta=-1.5)
    ours = _grads(lambda x, w, b, r: OPS.linear(x, w, b, r, **kw), x, w, bias, res)
    ref = _grads(lambda x, w, b, r: _stand_in_linear(x, w, b, r, out_dtype=torch.float64, **kw).to(BF16),
                 x.double(), w.double(), None if bias is None else bias.double(), None if res is None else res.double())
    for name, o, r in zip(("x", "w", "bias", "residual"), ours, ref):
        if r is None:
            assert o is None
            continue
        assert o is not None and o.dtype == {"bias": FP32}.get(name, BF16), name
        err = (o.double() - r).abs().max().item()
        assert err <= 0.05 * r.abs().max().item() + 1e-2, (name, err)


def test_cpp_autograd_on_meta_tensors(host):
    x = torch.empty(4, 8, dtype=BF16, device="meta", requires_grad=True)
    w = torch.empty(6, 8, dtype=BF16, device="meta", requires_grad=True)
    y = OPS.linear(x, w, None, None, activation="silu")
    assert y.grad_fn is not None and "LinearFunction" in type(y.grad_fn).__name__ + y.grad_fn.name()
    gx, gw = torch.autograd.grad(y.sum(), (x, w))
    assert gx.shape == x.shape and gw.shape == w.shape and gx.device.type == "meta"


@pytest.mark.parametrize("x_shape, w_shape", [((4, 8), (0, 8)), ((4, 0), (5, 0)), ((2, 3, 0), (5, 0))],
                         ids=["N=0", "K=0", "3-D K=0"])
def test_cpp_autograd_linear_with_an_empty_extent(host, x_shape, w_shape):
    """N or K = 0: the forward is accepted, so the backward must be too (a reshape to (-1, 0) was not)."""
    x = torch.empty(x_shape, dtype=BF16, device="meta", requires_grad=True)
    w = torch.empty(w_shape, dtype=BF16, device="meta", requires_grad=True)
    y = OPS.linear(x, w, None, None)
    assert "LinearFunction" in type(y.grad_fn).__name__ + y.grad_fn.name()
    gx, gw = torch.autograd.grad(y, (x, w), torch.empty_like(y))
    assert gx.shape == x.shape and gw.shape == w.shape


def test_api_takes_the_entries_for_plain_tensors_and_the_op_for_subclasses(monkeypatch):
    """gemm_ladder.mm/linear with the host in use: plain tensors and Parameters go to the module's
    typed entries, a subclass (here a FakeTensor on CUDA) to the OpOverload, so that a
    __torch_function__ override still sees it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gemm_ladder import api

    seen = []
    ops4 = (lambda *a: seen.append(("mm entry", a)), lambda *a: seen.append(("linear entry", a)),
            lambda *a, **k: seen.append(("mm op", k)), lambda *a, **k: seen.append(("linear op", k)))
    monkeypatch.setattr(api, "_HOST_OPS", ops4)
    with FakeTensorMode():
        x = torch.empty(4, 8, dtype=BF16, device="cuda")
        w = torch.empty(6, 8, dtype=BF16, device="cuda")
        api.mm(x, w.T)
        api.linear(x, w, activation="gelu", alpha=2)
    assert [s[0] for s in seen] == ["mm op", "linear op"]
    assert seen[1][1] == {"activation": "gelu", "alpha": 2.0, "beta": 1.0, "out_dtype": None}
    assert api._PLAIN == (torch.Tensor, torch.nn.Parameter)
