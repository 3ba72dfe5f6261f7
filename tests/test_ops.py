"""The registered ops (gemm_ladder.ops) without a GPU: registration and schemas, the fake
implementations on FakeTensor (CUDA) and meta tensors (shapes, dtypes, strides, out_dtype, batch
dimensions, errors), opcheck's checks that need no real kernel, a fullgraph + dynamic compile that a
graph break would fail, the backward formulas against torch's autograd (the kernels replaced by a
float64 stand-in), and the ctypes launch configuration against cuda.bindings' own struct.
"""

from __future__ import annotations

import ctypes
import math

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemm_ladder
import gemm_ladder.ops as ops
from gemm_ladder import api
from gemm_ladder.contract import GemmInputError
from gemm_ladder.dispatch.validate import GemmTypeError, NotSupportedError

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
OPS = torch.ops.gemm_ladder


def meta(*shape, dtype=BF16, **kw):
    return torch.empty(shape, dtype=dtype, device="meta", **kw)


# --- registration ---------------------------------------------------------------------------------------


def test_ops_are_registered_with_their_schemas():
    expected = {
        "mm": "gemm_ladder::mm(Tensor a, Tensor b, *, ScalarType? out_dtype=None) -> Tensor",
        "mm_out": "gemm_ladder::mm_out(Tensor a, Tensor b, *, Tensor(a!) out, ScalarType? out_dtype=None) -> ()",
        "linear": "gemm_ladder::linear(Tensor x, Tensor w, Tensor? bias=None, Tensor? residual=None, *, "
                  "str? activation=None, float alpha=1., float beta=1., ScalarType? out_dtype=None) -> Tensor",
        "linear_out": "gemm_ladder::linear_out(Tensor x, Tensor w, Tensor? bias=None, Tensor? residual=None, *, "
                      "Tensor(a!) out, str? activation=None, float alpha=1., float beta=1., "
                      "ScalarType? out_dtype=None) -> ()",
    }
    for name, schema in expected.items():
        op = getattr(OPS, name).default
        assert str(op._schema) == schema
        # A CUDA kernel, a fake (Meta) kernel; autograd for the functional ops only.
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CUDA")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta")
    for name in ("mm", "linear"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(getattr(OPS, name).default.name(), "Autograd")
    assert {"nn", "ops", "precompile"} <= set(gemm_ladder.__all__)


# --- fake implementations ---------------------------------------------------------------------------------


@pytest.fixture
def fake():
    with FakeTensorMode() as mode:
        yield mode


def cuda(*shape, dtype=BF16):
    return torch.empty(shape, dtype=dtype, device="cuda")


def test_fake_mm_shapes_dtypes_strides(fake):
    for a, b in ((cuda(5, 8), cuda(8, 3)), (cuda(8, 5).T, cuda(3, 8).T)):  # row- and column-major operands
        c = OPS.mm(a, b)
        assert (tuple(c.shape), c.dtype, c.stride(), c.device.type) == ((5, 3), BF16, (3, 1), "cuda")
    c = OPS.mm(cuda(5, 8, dtype=FP16), cuda(8, 3, dtype=FP16), out_dtype=FP32)
    assert (c.dtype, c.stride()) == (FP32, (3, 1))
    assert OPS.mm(cuda(0, 8), cuda(8, 3)).shape == (0, 3)
    out = cuda(3, 5).T
    assert OPS.mm_out(cuda(5, 8), cuda(8, 3), out=out) is None


def test_fake_linear_batch_dims_and_out_dtype(fake):
    w = cuda(6, 8)
    for x_shape in ((8,), (4, 8), (2, 3, 8), (2, 1, 3, 8)):
        y = OPS.linear(cuda(*x_shape), w)
        assert tuple(y.shape) == (*x_shape[:-1], 6) and y.is_contiguous() and y.dtype == BF16
    assert OPS.linear(cuda(4, 8), w, out_dtype=FP32).dtype == FP32
    OPS.linear_out(cuda(2, 3, 8), w, out=cuda(2, 3, 6))


@pytest.mark.parametrize("call, error, rule", [
    (lambda: OPS.mm(cuda(5, 8), cuda(7, 3)), GemmInputError, r"a.shape\[1\] = 8 must equal b.shape\[0\] = 7"),
    (lambda: OPS.mm(cuda(5, 8, dtype=FP32), cuda(8, 3, dtype=FP32)), GemmInputError, "bfloat16 or torch.float16"),
    (lambda: OPS.mm(cuda(5, 8), cuda(8, 3, dtype=FP16)), GemmInputError, "must share a dtype"),
    (lambda: OPS.mm(cuda(5, 8), cuda(8, 3), out_dtype=FP16), GemmInputError, "out_dtype=torch.float16"),
    (lambda: OPS.mm(cuda(2, 5, 8), cuda(8, 3)), GemmInputError, "a must be 2-D"),
    (lambda: OPS.mm_out(cuda(5, 8), cuda(8, 3), out=cuda(5, 4)), GemmInputError, r"out must have shape \(M, N\)"),
    (lambda: OPS.linear(cuda(4, 8), cuda(6, 7)), GemmInputError, r"x.shape\[-1\] = 8 must equal w.shape\[1\] = 7"),
    (lambda: OPS.linear(cuda(4, 8), cuda(6, 8), cuda(5)), GemmInputError, r"bias has shape \(5,\); it must be \(N,\)"),
    (lambda: OPS.linear(cuda(4, 8), cuda(6, 8), cuda(6, dtype=FP16)), GemmInputError, "bias has dtype torch.float16"),
    (lambda: OPS.linear(cuda(4, 8), cuda(6, 8), None, cuda(4, 5)), GemmInputError, r"residual has shape \(4, 5\)"),
    (lambda: OPS.linear(cuda(2, 4, 8), cuda(6, 8), None, cuda(8, 6)), GemmInputError, r"output's shape \(\*, N\)"),
    (lambda: OPS.linear(cuda(4, 8), cuda(6, 8), activation="tanh"), GemmInputError, "activation='tanh'"),
    (lambda: OPS.linear_out(cuda(4, 8), cuda(6, 8), cuda(7), out=cuda(4, 6)), GemmInputError, "bias has shape"),
    (lambda: OPS.linear_out(cuda(4, 8), cuda(6, 8), out=cuda(4, 5)), GemmInputError, "out must have shape"),
])
def test_fake_refuses_what_the_kernel_refuses(fake, call, error, rule):
    with pytest.raises(error, match=rule):
        call()


def test_fake_linear_with_the_fused_epilogue(fake):
    w = cuda(6, 8)
    for x_shape in ((8,), (4, 8), (2, 3, 8)):
        lead = x_shape[:-1]
        for bias_dtype, res_dtype in ((BF16, BF16), (FP32, FP32), (BF16, FP32)):
            y = OPS.linear(cuda(*x_shape), w, cuda(6, dtype=bias_dtype), cuda(*lead, 6, dtype=res_dtype),
                           activation="gelu_tanh", alpha=0.5, beta=-2.0)
            assert (tuple(y.shape), y.dtype, y.is_contiguous()) == ((*lead, 6), BF16, True)
    y = OPS.linear(cuda(4, 8), w, cuda(6), activation="silu", out_dtype=FP32)
    assert (tuple(y.shape), y.dtype) == ((4, 6), FP32)
    res = cuda(6, 4).T  # a column-major residual is read in place
    assert OPS.linear(cuda(4, 8), w, None, res, beta=0.0).shape == (4, 6)
    assert OPS.linear_out(cuda(2, 3, 8), w, cuda(6), cuda(2, 3, 6), out=cuda(2, 3, 6), activation="relu") is None


def test_fake_linear_out_takes_k_zero_and_refuses_out_over_an_epilogue_input(fake):
    # K = 0 (the real op writes epilogue(0)); a reshape to (-1, 0) used to fail in the fake only.
    assert OPS.linear_out(cuda(2, 0), cuda(5, 0), out=cuda(2, 5)) is None
    assert OPS.linear_out(cuda(2, 3, 0), cuda(5, 0), cuda(5), out=cuda(2, 3, 5)) is None
    res = cuda(3, 5)
    with pytest.raises(NotSupportedError, match="out shares memory with residual"):
        OPS.linear_out(cuda(3, 8), cuda(5, 8), None, res, out=res)
    bias = cuda(10)
    with pytest.raises(NotSupportedError, match="out shares memory with bias"):
        OPS.linear_out(cuda(2, 8), cuda(5, 8), bias.narrow(0, 0, 5), out=bias.view(2, 5))
    assert OPS.linear_out(cuda(3, 8), cuda(5, 8), cuda(5), cuda(3, 5), out=cuda(3, 5)) is None  # separate: fine


@pytest.mark.parametrize("x_shape, w_shape", [((4, 8), (0, 8)), ((4, 0), (5, 0)), ((2, 3, 0), (5, 0))],
                         ids=["N=0", "K=0", "3-D K=0"])
def test_linear_backward_with_an_empty_extent(x_shape, w_shape):
    """N or K = 0: the forward is accepted, so is the backward (Python's path; test_host.py the C++ one)."""
    x = torch.empty(x_shape, dtype=BF16, device="meta", requires_grad=True)
    w = torch.empty(w_shape, dtype=BF16, device="meta", requires_grad=True)
    y = gemm_ladder.linear(x, w)
    gx, gw = torch.autograd.grad(y, (x, w), torch.empty_like(y))
    assert gx.shape == x.shape and gw.shape == w.shape


def test_fake_refuses_cpu_tensors_as_the_real_kernel_does():
    with FakeTensorMode():
        a, b = torch.empty(5, 8, dtype=BF16), torch.empty(8, 3, dtype=BF16)
        with pytest.raises(GemmInputError, match="a must be on a cuda or meta device"):
            OPS.mm(a, b)


def test_meta_tensors_go_through_the_op_and_its_fake():
    assert gemm_ladder.mm(meta(5, 8), meta(8, 3)).device.type == "meta"
    y = gemm_ladder.linear(meta(2, 3, 8), meta(4, 8))
    assert tuple(y.shape) == (2, 3, 4) and y.is_contiguous()
    y = gemm_ladder.linear(meta(2, 3, 8), meta(4, 8), meta(4), activation="relu", residual=meta(2, 3, 4), alpha=2)
    assert (tuple(y.shape), y.device.type) == ((2, 3, 4), "meta")  # the fused epilogue's fake
    x, w, b = meta(2, 8, requires_grad=True), meta(4, 8, requires_grad=True), meta(4, requires_grad=True)
    gemm_ladder.linear(x, w, b, activation="gelu").sum().backward()  # the backward's calls, through the fakes
    assert (tuple(x.grad.shape), tuple(w.grad.shape), tuple(b.grad.shape)) == ((2, 8), (4, 8), (4,))
    ep = gemm_ladder.Epilogue(cuda="acc * s", inputs={"s": "scalar"}, reference=lambda acc, s: acc * s)
    with pytest.raises(NotSupportedError, match="a user Epilogue runs eagerly only"):
        gemm_ladder.linear(meta(2, 8), meta(4, 8), epilogue=ep, s=2.0)
    with pytest.raises(GemmInputError, match="x must be on a cuda device"):  # CPU: refused, no op involved
        gemm_ladder.linear(torch.empty(2, 8, dtype=BF16), torch.empty(4, 8, dtype=BF16))


# --- opcheck (its checks that need no real kernel, run on meta tensors through the fake) ---------------------


@pytest.mark.parametrize("op, args, kwargs", [
    (OPS.mm.default, lambda: (meta(5, 8), meta(8, 3)), {}),
    (OPS.mm.default, lambda: (meta(8, 5).T, meta(3, 8).T), {"out_dtype": FP32}),
    (OPS.mm.default, lambda: (meta(5, 8, requires_grad=True), meta(8, 3, requires_grad=True)), {}),
    (OPS.mm_out.default, lambda: (meta(5, 8), meta(8, 3)), {"out": meta(5, 3)}),
    (OPS.linear.default, lambda: (meta(2, 3, 8, requires_grad=True), meta(4, 8, requires_grad=True)), {}),
    (OPS.linear_out.default, lambda: (meta(2, 3, 8), meta(4, 8)), {"out": meta(2, 3, 4)}),
])
def test_opcheck_on_meta(op, args, kwargs):
    result = torch.library.opcheck(op, args(), kwargs)
    assert set(result.values()) == {"SUCCESS"}, result


# --- torch.compile: fullgraph, dynamic shapes, forward and backward ------------------------------------------


class Mlp(torch.nn.Module):
    """Two gemm_ladder layers around a GELU, residual added by torch (as a transformer MLP block)."""

    def __init__(self, direct: bool = False):
        super().__init__()
        self.w1 = torch.nn.Parameter(meta(32, 16))
        self.w2 = torch.nn.Parameter(meta(16, 32))
        self.direct = direct

    def forward(self, x):
        h = F.gelu(gemm_ladder.linear(x, self.w1))
        if self.direct:  # the op boundary skipped: a data_ptr read that Dynamo cannot trace
            return api.mm_direct(h.reshape(-1, 32), self.w2.T).view(*x.shape[:-1], 16) + x
        return gemm_ladder.mm(h.reshape(-1, 32), self.w2.T).view(*x.shape[:-1], 16) + x


def test_fullgraph_dynamic_compile_traces_forward_and_backward_once():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    model = Mlp()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=counter)
    frames = []
    for batch in (3, 5, 9):
        x = meta(batch, 4, 16, requires_grad=True)
        y = compiled(x)
        y.float().sum().backward()
        assert tuple(y.shape) == (batch, 4, 16) and tuple(x.grad.shape) == (batch, 4, 16)
        assert tuple(model.w1.grad.shape) == (32, 16) and tuple(model.w2.grad.shape) == (16, 32)
        frames.append(counter.frame_count)
    assert frames[0] == frames[-1]  # no recompilation for new batch sizes: the shapes are dynamic
    with_ops = [g for g in counter.graphs if any("gemm_ladder" in str(n.target) for n in g.graph.nodes)]
    assert len(with_ops) == 1  # one graph holds both layers
    names = {str(n.target) for n in with_ops[0].graph.nodes if n.op == "call_function"}
    assert {"gemm_ladder.linear.default", "gemm_ladder.mm.default"} <= names, names


class FusedBlock(torch.nn.Module):
    """One gemm_ladder layer with the whole built-in epilogue: bias, GELU, a residual scaled by beta."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(meta(16, 16))
        self.b = torch.nn.Parameter(meta(16))

    def forward(self, x):
        return gemm_ladder.linear(x, self.w, self.b, activation="gelu", residual=x, alpha=0.5, beta=2.0)


def test_fullgraph_dynamic_compile_of_the_fused_epilogue():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    model = FusedBlock()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=counter)
    for batch in (3, 5):
        x = meta(batch, 4, 16, requires_grad=True)
        compiled(x).float().sum().backward()
        assert tuple(x.grad.shape) == (batch, 4, 16) and tuple(model.b.grad.shape) == (16,)
    names = {str(n.target) for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"}
    assert "gemm_ladder.linear.default" in names, names
    linear_nodes = [n for g in counter.graphs for n in g.graph.nodes if str(n.target) == "gemm_ladder.linear.default"]
    assert any(n.kwargs.get("activation") == "gelu" and n.kwargs.get("beta") == 2.0 for n in linear_nodes)


def test_a_user_epilogue_under_compile_is_refused_not_broken_into():
    ep = gemm_ladder.Epilogue(cuda="acc * s", inputs={"s": "scalar"}, reference=lambda acc, s: acc * s)
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w: gemm_ladder.linear(x, w, epilogue=ep, s=2.0), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="a user Epilogue runs eagerly only"):
        fn(meta(4, 8), meta(6, 8))


def test_a_graph_break_fails_the_fullgraph_compile():
    # The control for the test above: the same model with the op boundary skipped must not compile.
    torch._dynamo.reset()
    compiled = torch.compile(Mlp(direct=True), fullgraph=True, dynamic=True, backend="aot_eager")
    with pytest.raises(Exception) as info:
        compiled(meta(3, 4, 16))
    assert type(info.value).__module__.startswith("torch._dynamo")


# --- backward formulas, with the kernels replaced by a float64 stand-in -----------------------------------


def _stand_in_linear(x, w, bias=None, *, activation=None, residual=None, alpha=1.0, beta=1.0, out_dtype=None, **_):
    z = alpha * (x.double() @ w.double().T) + (0 if bias is None else bias.double())
    act = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
           "silu": F.silu}[activation]
    y = act(z) + (0 if residual is None else beta * residual.double())
    return y.to(out_dtype or x.dtype)


def _stand_in_mm(a, b, out=None, out_dtype=None, **_):
    c = (a.double() @ b.double()).to(out_dtype or a.dtype)
    return c if out is None else out.copy_(c)


@pytest.fixture
def cpu_stand_in(monkeypatch):
    """CPU kernels for the ops (float64 math) and the API's direct paths replaced by the same math, so
    the registered autograd formulas run on CPU tensors."""
    monkeypatch.setattr(api, "mm_direct", _stand_in_mm)
    monkeypatch.setattr(api, "linear_direct", _stand_in_linear)
    lib = torch.library.Library("gemm_ladder", "IMPL")
    lib.impl("mm", lambda a, b, *, out_dtype=None: _stand_in_mm(a, b, out_dtype=out_dtype), "CPU")
    lib.impl("linear", lambda x, w, bias=None, residual=None, **kw: _stand_in_linear(x, w, bias, residual=residual, **kw),
             "CPU")
    yield
    lib._destroy()


def _grads(fn, *tensors):
    leaves = [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]
    y = fn(*leaves)
    g = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape).to(y.dtype)
    y.backward(g)
    return [t.grad for t in leaves]


def test_mm_backward_formulas(cpu_stand_in):
    a = torch.randn(7, 5, dtype=torch.float64).to(BF16).requires_grad_()
    b = torch.randn(5, 3, dtype=torch.float64).to(BF16).requires_grad_()
    ours = _grads(lambda a, b: gemm_ladder.mm(a, b), a, b)
    ref = _grads(lambda a, b: (a.double() @ b.double()).to(BF16), a.double(), b.double())
    for o, r in zip(ours, ref):
        assert o.dtype == BF16 and torch.allclose(o.double(), r, rtol=2**-7, atol=1e-2)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_linear_backward_formulas_full_epilogue(cpu_stand_in, activation):
    x = torch.randn(2, 3, 8, dtype=torch.float64).to(BF16).requires_grad_()
    w = torch.randn(6, 8, dtype=torch.float64).to(BF16).requires_grad_()
    bias = torch.randn(6, dtype=torch.float64).to(BF16).requires_grad_()
    res = torch.randn(2, 3, 6, dtype=torch.float64).to(BF16).requires_grad_()
    kw = dict(activation=activation, alpha=0.5, beta=2.0)
    ours = _grads(lambda x, w, b, r: gemm_ladder.linear(x, w, b, residual=r, **kw), x, w, bias, res)
    ref = _grads(lambda x, w, b, r: _stand_in_linear(x, w, b, residual=r, **kw).double(),
                 x.double(), w.double(), bias.double(), res.double())
    for name, o, r in zip(("x", "w", "bias", "residual"), ours, ref):
        assert o.shape == r.shape and o.dtype == BF16, name
        assert torch.allclose(o.double(), r, rtol=2**-6, atol=2e-2), (name, (o.double() - r).abs().max())


def test_out_variants_have_no_backward():
    a, b = meta(5, 8, requires_grad=True), meta(8, 3)
    with pytest.raises(NotSupportedError, match="out= with a first operand that requires grad"):
        gemm_ladder.mm(a, b, out=meta(5, 3))
    with torch.no_grad():
        gemm_ladder.mm(a, b, out=meta(5, 3))


# --- the ctypes launch configuration -------------------------------------------------------------------------


def test_launch_config_struct_matches_cuda_bindings():
    drv = pytest.importorskip("cuda.bindings.driver")
    from gemm_ladder.runtime.module import launch_config_struct

    cluster_id = int(drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    ours, _ = launch_config_struct((66, 1, 1), 384, 200000, 0xABCDEF0, 2, cluster_id)
    ref = drv.CUlaunchConfig()
    ref.gridDimX, ref.gridDimY, ref.gridDimZ = 66, 1, 1
    ref.blockDimX, ref.blockDimY, ref.blockDimZ = 384, 1, 1
    ref.sharedMemBytes = 200000
    ref.hStream = drv.CUstream(0xABCDEF0)
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = 2, 1, 1
    ref.attrs, ref.numAttrs = [attr], 1
    size = ctypes.sizeof(ours)
    theirs = ctypes.string_at(ref.getPtr(), size)
    mine = ctypes.string_at(ctypes.addressof(ours), size)
    attrs_at = type(ours).attrs.offset
    assert size == 56 and attrs_at == 40
    assert mine[:attrs_at] == theirs[:attrs_at] and mine[attrs_at + 8:] == theirs[attrs_at + 8:]
    their_attr = ctypes.string_at(int.from_bytes(theirs[attrs_at:attrs_at + 8], "little"), 72)
    my_attr = ctypes.string_at(ctypes.addressof(ours.attrs.contents), 72)
    assert my_attr[:20] == their_attr[:20] and math.prod(ours.attrs.contents.x for _ in (0,)) == 2
