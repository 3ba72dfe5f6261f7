"""OperandView: which memory order the library kernels read an operand in (no GPU)."""

import pytest
import torch

from gemm_ladder.library.operand import operand_view


def test_torch_mm_operands_in_all_four_orders():
    a = torch.empty(48, 40, dtype=torch.bfloat16)      # (M, K) row-major: K-major
    w = torch.empty(24, 40, dtype=torch.bfloat16)      # (N, K) row-major weight
    va = operand_view(a, k_dim=1)
    assert (va.rows, va.k, va.ld, va.major) == (48, 40, 40, "k")
    vb = operand_view(w.T, k_dim=0)                     # b = w.T (K, N): F.linear's layout
    assert (vb.rows, vb.k, vb.ld, vb.major) == (24, 40, 40, "k")
    vat = operand_view(torch.empty(40, 48, dtype=torch.bfloat16).T, k_dim=1)  # column-major a
    assert (vat.rows, vat.k, vat.ld, vat.major) == (48, 40, 48, "mn")
    vbr = operand_view(torch.empty(40, 24, dtype=torch.bfloat16), k_dim=0)   # row-major b (K, N)
    assert (vbr.rows, vbr.k, vbr.ld, vbr.major) == (24, 40, 24, "mn")


def test_padded_pitch_and_offsets():
    big = torch.empty(64, 100, dtype=torch.float16)
    v = operand_view(big[3:50, 5:45], k_dim=1)
    assert (v.rows, v.k, v.ld, v.major) == (47, 40, 100, "k")
    assert not v.tma_ok  # 100 x 2 bytes is not a multiple of 16
    assert operand_view(torch.empty(64, 96, dtype=torch.float16)[:, :40], k_dim=1).tma_ok


def test_views_that_need_a_copy():
    t = torch.empty(10, 10, dtype=torch.bfloat16)
    assert operand_view(t[::2, ::2], k_dim=1) is None
    assert operand_view(torch.empty(1, 8, dtype=torch.bfloat16).expand(4, 8), k_dim=1) is None
    with pytest.raises(ValueError, match="2-D"):
        operand_view(torch.empty(2, 2, 2), k_dim=1)


def test_unit_extents_take_either_major():
    row = torch.empty(1, 40, dtype=torch.bfloat16)
    assert operand_view(row, k_dim=1).major == "k"
    col = torch.empty(40, 1, dtype=torch.bfloat16)  # (K, N=1) as b
    v = operand_view(col, k_dim=0)
    assert (v.rows, v.k, v.major) == (1, 40, "k")
