"""How one GEMM operand sits in memory: the view shared by the library kernels and the dispatcher.

Every library kernel computes ``D (M, N) = A (M, K) @ B (N, K)^T`` (the ladder's contract), with
each of A and B either

* **K-major**: element (r, k) at ``r * ld + k`` (a row-major ``a``; for ``torch.mm(a, b)`` the
  operand ``b.T`` of a column-major ``b``, e.g. ``w.T`` of a row-major weight), or
* **MN-major**: element (r, k) at ``r + k * ld`` (a column-major ``a``; a row-major ``b``),

the two orders wgmma reads from shared memory (PTX ISA, "Asynchronous Warpgroup Level Matrix
Multiply-Accumulate": the imm-trans-a / imm-trans-b operands select an MN-major layout for 16-bit
types). ``ld`` is the leading dimension in elements: at least the contiguous extent, any pitch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Major = Literal["k", "mn"]

#: TMA needs 16-byte aligned global addresses and 16-byte multiple strides (CUDA Driver API,
#: cuTensorMapEncodeTiled: globalAddress and globalStrides).
TMA_ALIGN_BYTES = 16


@dataclass(frozen=True)
class OperandView:
    """A (rows, K) operand over ``tensor``'s storage, in one of the two majors.

    ``rows`` is M for A and N for B. ``tensor`` is the caller's tensor (its storage is what the
    kernel reads; the view is never copied).
    """

    tensor: torch.Tensor
    rows: int
    k: int
    ld: int
    major: Major

    @property
    def elem_bytes(self) -> int:
        return self.tensor.element_size()

    @property
    def data_ptr(self) -> int:
        return self.tensor.data_ptr()

    @property
    def tma_ok(self) -> bool:
        """Whether a TMA tensor map can describe it: 16-byte aligned base and pitch."""
        return self.data_ptr % TMA_ALIGN_BYTES == 0 and (self.ld * self.elem_bytes) % TMA_ALIGN_BYTES == 0


def operand_view(t: torch.Tensor, *, k_dim: int) -> OperandView | None:
    """The view of a 2-D tensor ``t`` as a (rows, K) operand, K being dimension ``k_dim`` of ``t``.

    For ``torch.mm(a, b)``: A = ``operand_view(a, k_dim=1)``, B = ``operand_view(b, k_dim=0)``.
    Returns None when ``t`` is neither K-major nor MN-major with a pitch at least its extent
    (e.g. a broadcast stride 0, or a view with both strides above 1): such an operand needs a copy.
    A dimension of extent 1 has no meaningful stride, so either major is taken when it fits.
    """
    if t.dim() != 2:
        raise ValueError(f"operand_view takes a 2-D tensor, got {t.dim()} dimensions")
    rows_dim = 1 - k_dim
    rows, k = t.shape[rows_dim], t.shape[k_dim]
    s_rows, s_k = t.stride(rows_dim), t.stride(k_dim)
    if (s_k == 1 or k == 1) and (s_rows >= max(k, 1) or rows == 1):
        return OperandView(t, rows, k, s_rows if s_rows >= max(k, 1) else max(k, 1), "k")
    if (s_rows == 1 or rows == 1) and (s_k >= max(rows, 1) or k == 1):
        return OperandView(t, rows, k, s_k if s_k >= max(rows, 1) else max(rows, 1), "mn")
    return None
