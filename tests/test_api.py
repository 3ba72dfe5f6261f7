"""gemm_ladder.mm / linear / explain: every input rule, on CPU and meta tensors (no GPU).

The rules run before anything is built or launched, so a CPU tensor reaches them with the device
rule relaxed (``device_types=("cpu",)``), and the public functions refuse CPU tensors by that rule.
"""

from __future__ import annotations

import json

import pytest
import torch

import gemm_ladder
from gemm_ladder.contract import GemmInputError, OutsideDomainError
from gemm_ladder.dispatch.validate import (
    MAX_DIM,
    GemmTypeError,
    MmShape,
    NotSupportedError,
    check_domain,
    check_linear,
    check_mm,
    internal_overlap,
    may_overlap,
    trivial,
)

BF16, FP16 = torch.bfloat16, torch.float16
CPU = ("cpu",)


def t(*shape, dtype=BF16, device="cpu"):
    return torch.empty(shape, dtype=dtype, device=device)


def test_public_names():
    assert {"mm", "linear", "explain", "Explanation"} <= set(gemm_ladder.__all__)


def test_valid_call_returns_the_shape():
    assert check_mm(t(5, 7), t(7, 3), device_types=CPU) == MmShape(5, 3, 7, BF16)
    assert check_mm(t(5, 7), t(3, 7).T, out_dtype=torch.float32, device_types=CPU).out_dtype == torch.float32
    assert check_mm(t(5, 7, dtype=FP16), t(7, 3, dtype=FP16), out=t(5, 3, dtype=FP16), device_types=CPU).m == 5


@pytest.mark.parametrize("a", [None, "a string", 3.0, [[1.0]]])
def test_non_tensors(a):
    with pytest.raises(GemmTypeError, match=f"a must be a torch.Tensor, got {type(a).__name__}"):
        check_mm(a, t(2, 2), device_types=CPU)
    with pytest.raises(TypeError):  # also a TypeError, as torch.mm raises
        check_mm(a, t(2, 2), device_types=CPU)


def test_b_not_a_tensor():
    with pytest.raises(GemmTypeError, match="b must be a torch.Tensor, got list"):
        check_mm(t(2, 2), [[1.0]], device_types=CPU)


def test_cpu_tensors_are_refused_by_the_public_functions():
    for fn in (gemm_ladder.mm, gemm_ladder.explain):
        with pytest.raises(GemmInputError, match="a must be on a cuda"):
            fn(t(4, 8), t(8, 4))
    with pytest.raises(GemmInputError, match="x must be on a cuda device"):
        gemm_ladder.linear(t(4, 8), t(4, 8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8])
def test_other_dtypes_name_the_supported_ones(dtype):
    with pytest.raises(GemmInputError, match=r"a has dtype .*bfloat16 or torch.float16.*never falls back to cuBLAS"):
        check_mm(t(4, 8, dtype=dtype), t(8, 4, dtype=dtype), device_types=CPU)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_inputs_are_sent_to_scaled_mm(dtype):
    with pytest.raises(GemmInputError, match=r"a has dtype .*bfloat16 or torch.float16; fp8 inputs .*gemm_ladder.scaled_mm"):
        check_mm(t(4, 8, dtype=dtype), t(8, 4, dtype=dtype), device_types=CPU)


def test_mixed_dtypes():
    with pytest.raises(GemmInputError, match="a and b must share a dtype"):
        check_mm(t(4, 8), t(8, 4, dtype=FP16), device_types=CPU)


def test_devices_that_differ():
    with pytest.raises(GemmInputError, match="a and b must be on one device"):
        check_mm(t(4, 8), t(8, 4, device="meta"), device_types=("cpu", "meta"))


@pytest.mark.parametrize("a,b,rule", [
    ((2, 4, 8), (8, 4), "a must be 2-D"),
    ((4, 8), (8,), "b must be 2-D"),
    ((4, 8), (7, 4), r"a.shape\[1\] = 8 must equal b.shape\[0\] = 7"),
])
def test_ranks_and_k(a, b, rule):
    with pytest.raises(GemmInputError, match=rule):
        check_mm(t(*a), t(*b), device_types=CPU)


def test_out_dtype_rules():
    with pytest.raises(GemmInputError, match="out_dtype=torch.float16: the output is the input dtype"):
        check_mm(t(4, 8), t(8, 4), out_dtype=FP16, device_types=CPU)
    with pytest.raises(GemmTypeError, match="out_dtype must be a torch.dtype"):
        check_mm(t(4, 8), t(8, 4), out_dtype="float32", device_types=CPU)


def test_out_rules():
    a, b = t(4, 8), t(8, 4)
    with pytest.raises(GemmTypeError, match="out must be a torch.Tensor"):
        check_mm(a, b, out=3, device_types=CPU)
    with pytest.raises(GemmInputError, match=r"out must have shape \(M, N\) = \(4, 4\), got \(4, 5\)"):
        check_mm(a, b, out=t(4, 5), device_types=CPU)
    with pytest.raises(GemmInputError, match=r"out must have shape .* got \(16,\)"):
        check_mm(a, b, out=t(16), device_types=CPU)
    with pytest.raises(GemmInputError, match="out has dtype torch.float16; it must be torch.bfloat16"):
        check_mm(a, b, out=t(4, 4, dtype=FP16), device_types=CPU)
    with pytest.raises(GemmInputError, match="it must be torch.float32, from out_dtype=torch.float32"):
        check_mm(a, b, out=t(4, 4), out_dtype=torch.float32, device_types=CPU)
    with pytest.raises(GemmInputError, match="out must be on the operands' device"):
        check_mm(a, b, out=t(4, 4, device="meta"), device_types=("cpu", "meta"))
    with pytest.raises(GemmInputError, match="out has internal overlap"):
        check_mm(a, b, out=t(1, 4).expand(4, 4), device_types=CPU)
    assert check_mm(a, b, out=t(4, 4, dtype=torch.float32), out_dtype=torch.float32,
                    device_types=CPU).out_dtype == torch.float32


def test_out_overlapping_an_input():
    buf = t(16, 16)
    a, b = buf[:4, :8], buf[4:12, :4]
    with pytest.raises(GemmInputError, match="out overlaps a"):
        check_mm(a, b, out=buf[2:6, 4:8], device_types=CPU)
    with pytest.raises(GemmInputError, match="out overlaps b"):
        check_mm(a, b, out=buf[8:12, 2:6], device_types=CPU)
    # Disjoint blocks of one buffer (a fused output, say) are fine, in either orientation.
    check_mm(a, b, out=buf[12:16, :4], device_types=CPU)
    check_mm(a, b, out=buf[:4, 8:12], device_types=CPU)
    check_mm(a, b, out=buf[:4, 12:16].T, device_types=CPU)
    with pytest.raises(GemmInputError, match="out overlaps a"):
        check_mm(a, b, out=buf[:4, 4:8].T, device_types=CPU)  # a column-major view of a block of a


def test_overlap_helpers():
    x = torch.empty(100)
    assert not may_overlap(x[:50], x[50:])
    assert may_overlap(x[:50], x[49:])
    assert not may_overlap(x, torch.empty(100))
    assert may_overlap(x[::2], x[1::2])  # interleaved and not a pitched grid: refused, not guessed
    m = torch.empty(8, 10)
    assert not may_overlap(m[:, :5], m[:, 5:])
    assert may_overlap(m[:, :5], m[:, 4:])
    assert internal_overlap(torch.empty(1, 4).expand(3, 4))
    assert not internal_overlap(torch.empty(10, 10)[::2, ::3])
    assert internal_overlap(torch.as_strided(torch.empty(20), (3, 3), (2, 3)))  # interleaved rows: refused
    assert not internal_overlap(torch.empty(10, 10).T)


def test_autograd_is_refused_while_grad_is_on_where_there_is_no_backward():
    # check_grad is the rule of out= calls (they have no backward); the ops' kernels pass check_grad=False.
    a = t(4, 8).requires_grad_()
    with pytest.raises(NotSupportedError, match="a requires grad: this call has no backward"):
        check_mm(a, t(8, 4), device_types=CPU)
    with torch.no_grad():
        assert check_mm(a, t(8, 4), device_types=CPU).m == 4
    assert check_mm(a, t(8, 4), device_types=CPU, check_grad=False).m == 4


def test_empty_dimensions_are_decided_before_the_domain():
    assert trivial(MmShape(0, 5, 7, BF16)) == "empty"
    assert trivial(MmShape(5, 0, 7, BF16)) == "empty"
    assert trivial(MmShape(5, 3, 0, BF16)) == "zeros"
    assert trivial(MmShape(5, 3, 7, BF16)) is None
    assert trivial(MmShape(0, 5, MAX_DIM + 1, BF16)) == "empty"  # valid whatever its other extents


def test_extent_limit_and_large_operands():
    with pytest.raises(OutsideDomainError, match="K = 2147483648 > 2\\^31 - 1"):
        check_domain(MmShape(4, 4, 2**31, BF16))
    # An operand of more than 2^31 elements is accepted: only one extent is bounded.
    check_domain(MmShape(2**20, 16, 2**12, BF16))
    a, b = t(2**20, 2**12, device="meta"), t(2**12, 16, device="meta")
    assert a.numel() > 2**31
    assert gemm_ladder.explain(a, b).kind in ("general", "small_m")


def test_explain_on_meta_empty_and_zeros():
    e = gemm_ladder.explain(t(0, 8, device="meta"), t(8, 5, device="meta"))
    assert e.kind == "empty" and "nothing to launch" in str(e)
    e = gemm_ladder.explain(t(3, 0, device="meta"), t(0, 5, device="meta"))
    assert e.kind == "zeros" and "zeros" in str(e)
    json.dumps(e.to_dict())


def test_linear_rules():
    x, w = t(2, 3, 8), t(4, 8)
    assert check_linear(x, w, device_types=CPU) == (8, 4)
    assert check_linear(x, w, t(4), device_types=CPU) == (8, 4)  # a fused bias (issue 13)
    with pytest.raises(GemmInputError, match="w must be 2-D"):
        check_linear(x, t(1, 4, 8), device_types=CPU)
    with pytest.raises(GemmInputError, match="x must have at least 1 dimension"):
        check_linear(t(), w, device_types=CPU)
    with pytest.raises(GemmInputError, match=r"x.shape\[-1\] = 8 must equal w.shape\[1\] = 7"):
        check_linear(x, t(4, 7), device_types=CPU)
    with pytest.raises(GemmInputError, match="x and w must share a dtype"):
        check_linear(x, t(4, 8, dtype=FP16), device_types=CPU)
    with pytest.raises(GemmInputError, match="x has dtype torch.float32"):
        check_linear(t(2, 8, dtype=torch.float32), t(4, 8, dtype=torch.float32), device_types=CPU)
    with pytest.raises(GemmTypeError, match="w must be a torch.Tensor"):
        check_linear(x, None, device_types=CPU)
    with pytest.raises(NotSupportedError, match="w requires grad"):
        check_linear(x, t(4, 8).requires_grad_(), device_types=CPU)
