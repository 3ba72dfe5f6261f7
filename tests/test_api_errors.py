"""The library's own exceptions on every path a newcomer's call can take (issue 26), without a GPU:
the op path (Parameters requiring grad, meta tensors, torch.compile) raises them before torch's
dispatcher does; they are importable from the package; mm's and swiglu's meta paths agree with the
kernels' domain and with ``explain``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import gemm_ladder
from gemm_ladder import ops
from gemm_ladder.errors import GemmInputError, GemmTypeError, NotSupportedError, OutsideDomainError

BF16 = torch.bfloat16


def meta(*shape, dtype=BF16):
    return torch.empty(*shape, device="meta", dtype=dtype)


def test_nn_linear_on_cpu_raises_the_library_error_not_the_dispatchers():
    layer = gemm_ladder.nn.Linear(8, 8, dtype=BF16)  # CPU Parameters requiring grad: the op path
    with pytest.raises(gemm_ladder.GemmInputError, match="x must be on a cuda"):
        layer(torch.randn(2, 8, dtype=BF16))
    with pytest.raises(gemm_ladder.GemmInputError, match="a must be on a cuda"):
        gemm_ladder.mm(torch.randn(2, 8, dtype=BF16, requires_grad=True), torch.randn(8, 3, dtype=BF16))


BAD_TYPES = {
    "mm b a list": (lambda: gemm_ladder.mm(meta(4, 8), [1, 2]), "b must be a torch.Tensor"),
    "mm out_dtype a str": (lambda: gemm_ladder.mm(meta(4, 8), meta(8, 3), out_dtype="float32"), "out_dtype must be"),
    "linear w a list": (lambda: gemm_ladder.linear(meta(4, 8), [1]), "w must be a torch.Tensor"),
    "linear alpha a str": (lambda: gemm_ladder.linear(meta(4, 8), meta(3, 8), alpha="abc"), "alpha must be"),
    "linear beta a bool": (lambda: gemm_ladder.linear(meta(4, 8), meta(3, 8), beta=True), "beta must be"),
    "linear out_dtype a str": (lambda: gemm_ladder.linear(meta(4, 8), meta(3, 8), out_dtype="float32"), "out_dtype"),
    "linear bias a list": (lambda: gemm_ladder.linear(meta(4, 8), meta(3, 8), [1.0] * 3), "bias must be"),
    "linear activation an int": (lambda: gemm_ladder.linear(meta(4, 8), meta(3, 8), activation=3), "activation must"),
    "ops.mm a list": (lambda: ops.mm([1], meta(8, 3)), "a must be a torch.Tensor"),
    "ops.linear alpha a str": (lambda: ops.linear(meta(4, 8), meta(3, 8), alpha="abc"), "alpha must be"),
    "swiglu w_up a list": (lambda: gemm_ladder.swiglu(meta(4, 8), meta(3, 8), [1]), "w_up must be a torch.Tensor"),
    "mm out an int": (lambda: gemm_ladder.mm(meta(4, 8), meta(8, 3), out=5), "out must be a torch.Tensor"),
    "mm out a list": (lambda: gemm_ladder.mm(meta(4, 8), meta(8, 3), out=[1]), "out must be a torch.Tensor"),
    "grouped_linear activation an int": (lambda: gemm_ladder.grouped_linear(
        meta(96, 64), meta(4, 48, 64), meta(4, dtype=torch.int32), activation=1), "activation must"),
    "explain_grouped_mm bias a str": (lambda: gemm_ladder.explain_grouped_mm(
        meta(96, 64), meta(4, 48, 64).transpose(-2, -1), meta(4, dtype=torch.int32), bias="b"), "bias must be"),
    "explain_grouped_mm masked a str": (lambda: gemm_ladder.explain_grouped_mm(
        meta(4, 24, 64), meta(4, 48, 64).transpose(-2, -1), meta(4, dtype=torch.int32), masked="yes"), "masked must"),
}


BAD_VALUES = {
    "grouped_linear an unknown activation": (lambda: gemm_ladder.grouped_linear(
        meta(96, 64), meta(4, 48, 64), meta(4, dtype=torch.int32), activation="tanh"), "activation='tanh'"),
    "explain_grouped_mm a bias of the wrong shape": (lambda: gemm_ladder.explain_grouped_mm(
        meta(96, 64), meta(4, 48, 64).transpose(-2, -1), meta(4, dtype=torch.int32), bias=meta(48)), "bias: "),
    "explain_grouped_mm a bias of another dtype": (lambda: gemm_ladder.explain_grouped_mm(
        meta(96, 64), meta(4, 48, 64).transpose(-2, -1), meta(4, dtype=torch.int32), bias=meta(4, 48, dtype=torch.int32)),
        "bias: "),
    "explain_grouped_mm a bias along K": (lambda: gemm_ladder.explain_grouped_mm(
        meta(256, 32).T, meta(256, 48), meta(4, dtype=torch.int32), bias=meta(4, 48)), "not taken"),
}


@pytest.mark.parametrize("case", BAD_VALUES)
def test_bad_values_beside_a_meta_tensor_raise_the_documented_input_error(case):
    """grouped_linear's and explain_grouped_mm's rules are linear's and grouped_linear's (what the call
    refuses, explain refuses: it never describes a call that would not run)."""
    call, says = BAD_VALUES[case]
    with pytest.raises(gemm_ladder.GemmInputError, match=says):
        call()


@pytest.mark.parametrize("case", BAD_TYPES)
def test_wrong_types_beside_a_meta_tensor_raise_the_documented_type_error(case):
    call, says = BAD_TYPES[case]
    with pytest.raises(TypeError, match=says) as info:  # never torch's schema RuntimeError
        call()
    assert isinstance(info.value, gemm_ladder.GemmTypeError)


def test_a_misspelled_keyword_is_named_as_python_names_it():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'activaton' \(did you mean 'activation'\?\)"):
        gemm_ladder.linear(meta(4, 8), meta(3, 8), activaton="gelu")
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        gemm_ladder.linear(torch.randn(4, 8, dtype=BF16), torch.randn(3, 8, dtype=BF16), colour=1)


def test_valid_meta_calls_still_give_their_results():
    assert gemm_ladder.mm(meta(4, 8), meta(8, 3), out_dtype=torch.float32).dtype == torch.float32
    y = gemm_ladder.linear(meta(2, 4, 8), meta(3, 8), meta(3), activation="gelu", alpha=2, beta=0)
    assert y.shape == (2, 4, 3) and y.is_meta
    fp8 = torch.float8_e4m3fn
    a, b = meta(64, 256, dtype=fp8), meta(128, 256, dtype=fp8).T
    rowwise = (meta(64, 1, dtype=torch.float32), meta(1, 128, dtype=torch.float32))
    y = gemm_ladder.scaled_mm(a, b, *rowwise)  # as mm's meta path: the op's fake answers
    assert y.shape == (64, 128) and y.dtype == BF16 and y.is_meta
    out = meta(64, 128, dtype=torch.float16)
    assert gemm_ladder.scaled_mm(a, b, *rowwise, out_dtype=torch.float16, out=out) is out
    blockwise = (meta(64, 2, dtype=torch.float32), meta(2, 1, dtype=torch.float32))
    values, scales = gemm_ladder.scaled_mm(a, b, *blockwise, out_dtype=fp8)
    assert values.shape == (64, 128) and values.dtype == fp8 and scales.shape == (64, 1) and scales.is_meta
    with pytest.raises(gemm_ladder.GemmInputError, match="match no scaling"):  # the rules still hold there
        gemm_ladder.scaled_mm(a, b, rowwise[0], meta(1, 127, dtype=torch.float32))
    with pytest.raises(gemm_ladder.GemmTypeError, match="a must be a torch.Tensor"):
        gemm_ladder.scaled_mm(5, b, *rowwise)


def test_error_classes_are_exported_at_the_top_level():
    from gemm_ladder.dispatch.validate import GemmTypeError, NotSupportedError
    from gemm_ladder.library.epilogue import EpilogueCompileError, EpilogueError
    from gemm_ladder.runtime.capture import CaptureBuildError

    assert gemm_ladder.GemmTypeError is GemmTypeError and gemm_ladder.NotSupportedError is NotSupportedError
    assert gemm_ladder.CaptureBuildError is CaptureBuildError and gemm_ladder.EpilogueError is EpilogueError
    assert gemm_ladder.EpilogueCompileError is EpilogueCompileError
    assert issubclass(gemm_ladder.OutsideDomainError, gemm_ladder.GemmInputError)
    assert issubclass(gemm_ladder.GemmInputError, ValueError) and issubclass(gemm_ladder.GemmTypeError, TypeError)
    for name in gemm_ladder.__all__:
        assert getattr(gemm_ladder, name) is not None, name


def test_importing_the_errors_and_the_designer_imports_no_torch():
    code = ("import sys, gemm_ladder, gemm_ladder.design; from gemm_ladder import GemmInputError, CaptureBuildError; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_every_error_class_is_importable_from_the_package():
    """README: every error class is importable from the package, HostBuildError (GEMM_LADDER_HOST=require's, raised
    by gemm_ladder.host) included; it lives in gemm_ladder.errors, so the import pulls in no torch."""
    from gemm_ladder import errors, host

    for name in errors.__all__:
        assert getattr(gemm_ladder, name) is getattr(errors, name) and name in gemm_ladder.__all__, name
    assert gemm_ladder.HostBuildError is host.HostBuildError and issubclass(gemm_ladder.HostBuildError, RuntimeError)
    code = "import sys; from gemm_ladder import HostBuildError; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_mm_on_meta_refuses_what_explain_refuses():
    a, b = meta(2**31, 8), meta(8, 16)
    with pytest.raises(gemm_ladder.OutsideDomainError):
        gemm_ladder.explain(a, b)
    with pytest.raises(gemm_ladder.OutsideDomainError, match="M = 2147483648"):
        gemm_ladder.mm(a, b)
    with pytest.raises(gemm_ladder.OutsideDomainError):
        gemm_ladder.mm(a, b, out=meta(2**31, 16))
    with pytest.raises(gemm_ladder.OutsideDomainError):
        gemm_ladder.linear(meta(2**16, 2**15, 8), meta(16, 8))  # M = 2^31 once batch dimensions merge
    assert gemm_ladder.mm(meta(2**31 - 1, 8), b).shape == (2**31 - 1, 16)
    assert gemm_ladder.mm(meta(2**31, 0), meta(0, 16)).shape == (2**31, 16)  # K = 0: zeros, no kernel


def test_swiglu_has_a_meta_path_with_the_same_rules():
    x, w = meta(2, 5, 64), meta(96, 64)
    y = gemm_ladder.swiglu(x, w, w)
    assert y.is_meta and y.shape == (2, 5, 96) and y.dtype == BF16
    assert gemm_ladder.swiglu(meta(3, 64, dtype=torch.float16), *(meta(8, 64, dtype=torch.float16),) * 2).dtype == torch.float16
    with pytest.raises(gemm_ladder.GemmInputError, match="one shape"):
        gemm_ladder.swiglu(x, w, meta(96, 32))
    with pytest.raises(gemm_ladder.GemmInputError, match="dtype"):
        gemm_ladder.swiglu(meta(2, 64, dtype=torch.float32), w, w)
    with pytest.raises(gemm_ladder.NotSupportedError, match="TMA"):
        gemm_ladder.swiglu(meta(2, 60), meta(8, 60), meta(8, 60))  # rows of 120 bytes
    with pytest.raises(gemm_ladder.OutsideDomainError):
        gemm_ladder.swiglu(meta(2**31, 64), w, w)
    with pytest.raises(gemm_ladder.NotSupportedError, match="requires grad"):
        gemm_ladder.swiglu(meta(2, 64).requires_grad_(), w, w)
    assert gemm_ladder.swiglu(meta(0, 64), w, w).shape == (0, 96)


def test_swiglu_is_a_registered_op_that_torch_compile_traces():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("gemm_ladder::swiglu", "CUDA")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("gemm_ladder::swiglu", "Meta")

    def mlp(x, w_gate, w_up, w_down):
        return gemm_ladder.linear(gemm_ladder.swiglu(x, w_gate, w_up), w_down)

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    compiled = torch.compile(mlp, backend=backend, fullgraph=True, dynamic=True)
    out = compiled(meta(7, 64), meta(96, 64), meta(96, 64), meta(64, 96))
    assert out.shape == (7, 64) and out.is_meta and len(graphs) == 1
    assert "gemm_ladder.swiglu" in str(graphs[0].graph)


@pytest.mark.gpu
def test_swiglu_compiled_runs_the_same_kernel_as_eager():
    """On the GPU: torch.compile(fullgraph=True) of swiglu goes through the registered op's CUDA kernel
    (the same launch as the eager call), so the two results are bitwise equal; the op path refuses
    a CPU operand with the library's error."""
    torch.manual_seed(0)
    x = torch.randn(3, 70, 512, device="cuda", dtype=BF16)
    w_gate, w_up = (torch.randn(1000, 512, device="cuda", dtype=BF16) / 16 for _ in range(2))
    eager = gemm_ladder.swiglu(x, w_gate, w_up)
    torch._dynamo.reset()
    compiled = torch.compile(gemm_ladder.swiglu, fullgraph=True, dynamic=True)(x, w_gate, w_up)
    assert compiled.shape == (3, 70, 1000) and torch.equal(compiled, eager)
    ref = torch.nn.functional.silu(x.double() @ w_gate.double().T) * (x.double() @ w_up.double().T)
    assert (eager.double() - ref).abs().max().item() < 0.05 * ref.abs().max().item()
    with pytest.raises(gemm_ladder.GemmInputError, match="must be on a cuda device"):
        ops.swiglu(x, w_gate.cpu(), w_up)


def test_fake_cuda_tensors_take_the_op_path_without_a_cuda_runtime():
    """FakeTensors on a CUDA device (torch.compile's and torch.export's tracing) reach the ops' fakes from the
    public functions as from the ops, with no CUDA runtime asked which device is current (a CPU build of
    torch has none)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(64, 128, dtype=BF16, device="cuda")
        w = torch.empty(96, 128, dtype=BF16, device="cuda")
        b = torch.empty(96, dtype=BF16, device="cuda")
        assert gemm_ladder.mm(a, w.T).shape == torch.ops.gemm_ladder.mm(a, w.T).shape == (64, 96)
        y = gemm_ladder.linear(a, w, b, activation="gelu")
        assert y.shape == (64, 96) and y.device.type == "cuda"


def test_torch_export_takes_an_unbounded_dynamic_dimension():
    """A dynamic batch dimension with no bounds exports through nn.Linear and linear: the fakes add no
    guard on the extent's 2^31 - 1 limit (the call checks the concrete value)."""
    model = torch.nn.Sequential(torch.nn.Linear(128, 96, device="meta", dtype=BF16))
    gemm_ladder.nn.replace_linear(model)
    x = meta(8, 128)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("b")},))
    assert "torch.ops.gemm_ladder.linear" in program.graph_module.code


@pytest.mark.parametrize("op", ["grouped_mm", "grouped_linear", "grouped_swiglu"])
def test_torch_export_takes_an_unbounded_dynamic_row_count_for_the_grouped_ops(op):
    """The token count of a MoE layer is dynamic: the grouped ops export with an unbounded Dim on x's rows.
    Their checks add no guard on it (Python's max() over (rows, N, K) had bounded rows by N and K)."""
    i32 = torch.int32
    x, offs = meta(64, 128), meta(4, dtype=i32)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(meta(4, 256, 128))  # (E, N, K), N > K > 64 rows

        def forward(self, x, offs):
            if op == "grouped_mm":
                return gemm_ladder.grouped_mm(x, self.w.transpose(-2, -1), offs)
            if op == "grouped_linear":
                return gemm_ladder.grouped_linear(x, self.w, offs)
            return gemm_ladder.grouped_swiglu(x, self.w, self.w, offs)

    program = torch.export.export(Layer(), (x, offs), dynamic_shapes=({0: torch.export.Dim("rows")}, None))
    (rows_range,) = program.range_constraints.values()
    assert rows_range.upper > 2**40, rows_range
    assert f"torch.ops.gemm_ladder.{op}" in program.graph_module.code


def test_torch_export_takes_an_unbounded_dynamic_row_count_for_scaled_mm():
    """scaled_mm's checks add no guard on a dynamic M either (its extent check used Python's max())."""

    class Fp8Layer(torch.nn.Module):
        def forward(self, a, b, scale_a, scale_b):
            return gemm_ladder.scaled_mm(a, b, scale_a, scale_b)

    e4m3 = torch.float8_e4m3fn
    a, b = meta(64, 256, dtype=e4m3), meta(512, 256, dtype=e4m3).T
    one = torch.empty((), device="meta", dtype=torch.float32)
    program = torch.export.export(Fp8Layer(), (a, b, one, one), dynamic_shapes=({0: torch.export.Dim("m")}, None, None, None))
    (m_range,) = program.range_constraints.values()
    assert m_range.upper > 2**40, m_range


def test_extents_refusal_names_the_rule_and_leaves_symbolic_extents_alone():
    from gemm_ladder.library.kernel import MAX_EXTENT, extents_refusal

    assert extents_refusal({"M": 1, "N": MAX_EXTENT, "K": 8}) is None
    assert "empty problem" in extents_refusal({"M": 0, "N": 8, "K": 8})
    assert extents_refusal({"M": 0, "N": 8, "K": 8}, empty_ok=True) is None
    import numpy as np

    assert extents_refusal({"M": np.int64(MAX_EXTENT + 1), "N": 8}) is not None  # compared, not skipped
    assert extents_refusal({"M": 8, "total K": MAX_EXTENT + 1}) == (
        f"M, total K = 8, {MAX_EXTENT + 1}: each must be at most {MAX_EXTENT} (the kernels' 32-bit coordinates)")
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    rows = ShapeEnv().create_unbacked_symint()  # no value to compare: a guard on it would raise
    assert extents_refusal({"rows": rows, "N": 2**40}) is not None
    assert extents_refusal({"rows": rows, "N": 8}) is None


def test_calls_with_no_backward_refuse_grad_before_the_forward():
    """grouped_mm_masked has no backward: an input requiring grad under grad mode is refused by the call
    (NotSupportedError), not by the backward after the forward ran; under no_grad it runs. grouped_mm along K has one
    (since 2026-12-07): the call runs and its result requires grad."""
    i32 = torch.int32
    a, b, counts = meta(4, 24, 64).requires_grad_(), meta(4, 64, 48), meta(4, dtype=i32)
    with pytest.raises(gemm_ladder.NotSupportedError, match="grouped_mm_masked .* has no backward"):
        gemm_ladder.grouped_mm_masked(a, b, counts)
    with torch.no_grad():
        assert gemm_ladder.grouped_mm_masked(a, b, counts).shape == (4, 24, 48)
    a2, b2 = meta(256, 32).T.requires_grad_(), meta(256, 48)
    y = gemm_ladder.grouped_mm(a2, b2, meta(4, dtype=i32))
    assert y.shape == (4, 32, 48) and y.requires_grad


# --- what a review found getting through as torch's errors (2026-12-05) -----------------------------------


@pytest.mark.parametrize("make", [
    lambda t: t.to_sparse(), lambda t: t.to_sparse_csr(), lambda t: t.float().to_mkldnn(),
    lambda t: torch.nested.nested_tensor([t]),
], ids=["coo", "csr", "mkldnn", "nested"])
def test_sparse_mkldnn_and_nested_operands_are_refused_by_name(make):
    import warnings

    dense = torch.randn(8, 8).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's beta/prototype notes on CSR and nested tensors
        odd = make(dense)
    for call, name in ((lambda: gemm_ladder.mm(odd, dense), "a"), (lambda: gemm_ladder.linear(odd, dense), "x"),
                       (lambda: gemm_ladder.explain(odd, dense), "a")):
        with pytest.raises(GemmInputError, match=rf"^{name} is .*(layout|nested)"):
            call()
    # Through the registered op (meta operands): refused before the dispatcher answers in torch's words.
    with pytest.raises(GemmInputError, match="bias is layout"):
        gemm_ladder.linear(meta(8, 8), meta(8, 8), torch.randn(8).to(torch.bfloat16).to_sparse())
    with pytest.raises(GemmInputError, match="out is layout"):
        gemm_ladder.mm(meta(8, 8), meta(8, 8), out=dense.to_sparse())


def test_quantize_fp8_refuses_a_sparse_tensor_by_name():
    with pytest.raises(GemmInputError, match="x is layout torch.sparse_coo"):
        gemm_ladder.quantize_fp8(torch.randn(4, 128).to_sparse())


@pytest.mark.parametrize("kw", [{"alpha": 10**400}, {"beta": -10**400}], ids=["alpha", "beta"])
def test_an_int_scalar_past_the_largest_float_is_refused(kw):
    with pytest.raises(GemmInputError, match="past the largest float"):
        gemm_ladder.linear(meta(4, 64), meta(32, 64), residual=meta(4, 32), **kw)
    assert gemm_ladder.linear(meta(4, 64), meta(32, 64), alpha=2**60).shape == (4, 32)  # large, but a float


def test_scaled_mm_refuses_inputs_requiring_grad_before_the_forward():
    e4, f32 = torch.float8_e4m3fn, torch.float32
    a, b = torch.empty(64, 128, dtype=e4, device="meta"), torch.empty(64, 128, dtype=e4, device="meta").T
    sa, sb = torch.empty((), dtype=f32, device="meta").requires_grad_(), torch.empty((), dtype=f32, device="meta")
    with pytest.raises(NotSupportedError, match="scale_a requires grad: scaled_mm has no backward"):
        gemm_ladder.scaled_mm(a, b, sa, sb)
    with torch.no_grad():
        assert gemm_ladder.scaled_mm(a, b, sa, sb).shape == (64, 64)


@pytest.mark.parametrize("epilogue", ["relu", 5])
def test_a_non_epilogue_is_a_type_error_not_a_device_error(epilogue):
    with pytest.raises(GemmTypeError, match="epilogue must be a gemm_ladder.Epilogue"):
        gemm_ladder.linear(meta(4, 64), meta(32, 64), epilogue=epilogue)


def test_fp8_and_grouped_extents_past_the_limit_are_outside_the_domain():
    e4 = torch.float8_e4m3fn
    s = torch.empty((), dtype=torch.float32, device="meta")
    with pytest.raises(OutsideDomainError):
        gemm_ladder.scaled_mm(torch.empty(2**31, 16, dtype=e4, device="meta"),
                              torch.empty(64, 16, dtype=e4, device="meta").T, s, s)
    with pytest.raises(OutsideDomainError):
        gemm_ladder.grouped_mm(meta(2**31, 64), meta(4, 64, 32), torch.empty(4, dtype=torch.int32, device="meta"))


@pytest.mark.parametrize("bias, says", [
    (lambda: meta(4095), r"^bias has shape \(4095,\); it must be \(N,\)"),
    (lambda: meta(4096, 1), r"^bias has shape \(4096, 1\)"),
    (lambda: meta(4096, dtype=torch.float64), r"^bias has dtype torch.float64"),
])
def test_explain_checks_the_bias_as_linear_does_and_names_it(bias, says):
    """explain(a, b, bias=...) describes linear(a, b.T, bias): a bad bias is refused by linear's own check, naming
    ``bias`` (never the fused epilogue's internal slot name), on the trivial path too."""
    a, b = meta(512, 1024), meta(1024, 4096)
    with pytest.raises(GemmInputError, match=says) as info:
        gemm_ladder.explain(a, b, bias=bias())
    assert "gl_" not in str(info.value)
    with pytest.raises(GemmInputError, match=says):
        gemm_ladder.linear(a, b.T, bias())
    with pytest.raises(GemmInputError, match=says):
        gemm_ladder.explain(meta(0, 1024), b, bias=bias())  # nothing to launch: still linear's rules
    with pytest.raises(GemmTypeError, match="bias must be a torch.Tensor"):
        gemm_ladder.explain(a, b, bias=[1.0])
