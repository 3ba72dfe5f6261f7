"""grouped_mm's own refusals and layout rules (api_grouped.check_grouped_mm, weight_fits, group_of_rows, the direct
call grouped along N), each on its own, without a GPU: meta tensors unless an address is what is checked.

The backward tests run every call through the CPU stand-in (test_grouped_swiglu.py's cpu_kernel), which applies
check_grouped_mm itself: a rule dropped there is dropped from the stand-in too, so those tests cannot see it. These
tests hold each rule directly (found by mutating each and seeing nothing fail)."""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder import api_grouped
from gemm_ladder.api_grouped import check_grouped_mm, group_of_rows, weight_fits
from gemm_ladder.errors import GemmInputError, NotSupportedError
from gemm_ladder.library.grouped import MAX_GROUPS

from test_grouped_swiglu import cpu_kernel  # noqa: F401 (the fixture)

BF = torch.bfloat16
META = ("meta",)


def strided(shape, stride):
    return torch.empty_strided(shape, stride, dtype=BF, device="meta")


def offs_of(groups: int) -> torch.Tensor:
    return torch.empty(groups, dtype=torch.int32, device="meta")


def test_rows_of_a_whose_pitch_breaks_the_16_byte_rule_are_refused():
    with pytest.raises(GemmInputError, match="row pitch 20"):
        check_grouped_mm(strided((10, 16), (20, 1)), strided((3, 16, 8), (128, 8, 1)), offs_of(3), device_types=META)


def test_batched_k_must_be_a_multiple_of_8():
    with pytest.raises(GemmInputError, match="K = 12"):
        check_grouped_mm(strided((3, 5, 12), (60, 12, 1)), strided((3, 12, 8), (96, 8, 1)), None, device_types=META)


def test_a_weight_whose_pitch_breaks_the_16_byte_rule_is_refused():
    with pytest.raises(GemmInputError, match="multiples of 16 bytes"):  # N-major (3, 16, 12): a 24-byte pitch
        check_grouped_mm(strided((10, 16), (16, 1)), strided((3, 16, 12), (192, 12, 1)), offs_of(3), device_types=META)


def test_a_weight_whose_columns_overlap_is_refused():
    with pytest.raises(GemmInputError, match="overlap"):  # K-major, its columns 8 elements apart over 16 rows
        check_grouped_mm(strided((10, 16), (16, 1)), strided((3, 16, 8), (128, 1, 8)), offs_of(3), device_types=META)


def test_the_most_groups_the_kernel_takes_are_taken():
    case = check_grouped_mm(strided((10, 16), (16, 1)), strided((MAX_GROUPS, 16, 8), (128, 8, 1)), offs_of(MAX_GROUPS),
                            device_types=META)
    assert case[0] == "2d3d"
    with pytest.raises(NotSupportedError, match=str(MAX_GROUPS)):
        check_grouped_mm(strided((10, 16), (16, 1)), strided((MAX_GROUPS + 1, 16, 8), (128, 8, 1)),
                         offs_of(MAX_GROUPS + 1), device_types=META)


def test_offs_must_be_contiguous():
    with pytest.raises(GemmInputError, match="contiguous"):
        check_grouped_mm(strided((10, 16), (16, 1)), strided((3, 16, 8), (128, 8, 1)), offs_of(6)[::2], device_types=META)


def test_an_operand_whose_base_breaks_the_16_byte_rule_is_refused():
    a = torch.zeros(161, dtype=BF)[1:].view(10, 16)  # 2 bytes past the allocation's start
    with pytest.raises(GemmInputError, match="base address"):
        check_grouped_mm(a, torch.zeros(3, 16, 8, dtype=BF), torch.tensor([3, 5, 10], dtype=torch.int32),
                         device_types=("cpu",))


def test_grouped_along_k_wants_a_read_along_k():
    with pytest.raises(NotSupportedError, match=r"stride\(0\) == 1"):  # a row-major (M, K): its K not contiguous
        check_grouped_mm(strided((16, 40), (40, 1)), strided((40, 8), (8, 1)), offs_of(4), device_types=META)
    with pytest.raises(GemmInputError, match="pitch 40 bytes along K"):  # a read along K, its pitch 20 elements
        check_grouped_mm(strided((16, 40), (1, 20)), strided((40, 8), (8, 1)), offs_of(4), device_types=META)


def test_weight_fits_reads_the_batch_stride_and_the_base():
    assert weight_fits(torch.empty(3, 16, 8, dtype=BF))
    assert not weight_fits(torch.empty_strided((3, 16, 8), (132, 8, 1), dtype=BF))  # 264-byte batch stride
    assert not weight_fits(torch.zeros(385, dtype=BF)[1:].view(3, 16, 8))  # base 2 bytes past


def test_group_of_rows_gives_each_row_its_group_and_past_the_last_group_e():
    # groups of 2, 0 and 3 rows; row 5 lies past offs[-1] = 5
    assert group_of_rows(torch.tensor([2, 2, 5], dtype=torch.int32), 6).tolist() == [0, 0, 2, 2, 2, 3]


def test_the_direct_call_grouped_along_n_refuses_a_bias_and_returns_the_kernels_transpose(monkeypatch):
    """Under fake tensors (a CUDA device, no GPU): a bias per group grouped along N is refused, not dropped; the
    result is the kernel's (N, M) output transposed, shape (M, N), strides (1, M)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    direct = api_grouped.grouped_mm_direct
    with FakeTensorMode():
        a = torch.empty(3, 8, 16, dtype=BF, device="cuda")
        b = torch.empty(40, 16, dtype=BF, device="cuda").t()
        offs = torch.empty(3, dtype=torch.int32, device="cuda")
        with pytest.raises(GemmInputError, match="grouped along N"):
            direct(a, b, offs, bias=torch.empty(3, 40, dtype=BF, device="cuda"))
        # the recursive 2-D x 3-D call stood in for by an (N, M) result
        monkeypatch.setattr(api_grouped, "grouped_mm_direct", lambda r, w, o, **kw: r.new_empty((r.shape[0], w.shape[2])))
        y = direct(a, b, offs)
        assert y.shape == (8, 40) and y.stride() == (1, 8)


def test_no_groups_give_an_empty_result_and_zero_gradients(cpu_kernel):
    x = torch.randn(16, 8).to(BF).requires_grad_()
    b = torch.randn(16, 16).to(BF).requires_grad_()
    y = gemm_ladder.grouped_mm(x.t(), b, torch.empty(0, dtype=torch.int32))
    assert y.shape == (0, 8, 16)
    y.float().sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x)) and torch.equal(b.grad, torch.zeros_like(b))
