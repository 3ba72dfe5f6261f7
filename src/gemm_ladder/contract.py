"""The baseline contract every level and every user kernel is held to.

``c = a @ b.T`` with ``a`` of shape (M, K) and ``b`` of shape (N, K), both row-major (K-major),
exactly what ``torch.nn.functional.linear(a, b)`` computes. Inputs are bf16 or fp16, accumulation is
fp32, the output has the input dtype. The reference is the same product in float64.

Input checks happen here, in Python, before anything is launched: a kernel never sees a tensor that
breaks its rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gemm_ladder.errors import GemmInputError, OutsideDomainError  # noqa: F401 - the public classes (re-exported here)

#: The dtypes of the contract, by their short names (used on the command line and in JSON).
DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: The fp8 dtypes scaled_mm takes (library/fp8.py), with their kinds' short names; mm, linear and swiglu
#: refuse them with a pointer to scaled_mm (dispatch/validate.py).
FP8_DTYPES: dict[torch.dtype, str] = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


def dtype_name(dtype: torch.dtype) -> str:
    """Short name ('bf16' or 'fp16') of a contract dtype; raises GemmInputError for any other."""
    for name, value in DTYPES.items():
        if value == dtype:
            return name
    raise GemmInputError(f"dtype {dtype} is not in the contract: use one of {sorted(DTYPES)}")


def parse_dtypes(spec: str) -> list[str]:
    """'bf16', 'fp16', 'all' or a comma list -> list of short names, each once, in the order first given (as
    ``--levels 1,1`` is one level); raises ValueError if unknown."""
    names = list(DTYPES) if spec == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in DTYPES]
    if unknown or not names:
        raise ValueError(f"unknown dtype {unknown or spec!r}: use bf16, fp16 or all")
    return list(dict.fromkeys(names))


def check_operands(a: torch.Tensor, b: torch.Tensor, *, device_type: str | None = "cuda") -> tuple[int, int, int]:
    """Check ``a`` (M, K) and ``b`` (N, K) against the contract and return (M, N, K).

    Args:
        a: (M, K), bf16 or fp16, row-major contiguous.
        b: (N, K), same dtype and device as ``a``, row-major contiguous.
        device_type: the device type both must live on ('cuda' for kernels); None skips the check
            (CPU callables under the gates).

    Raises:
        GemmInputError: naming the argument and the rule (not a tensor, device, dtype, rank,
            mismatched K, non-contiguous or internally overlapping storage).
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise GemmInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if device_type is not None and t.device.type != device_type:
            raise GemmInputError(f"{name} must be on a {device_type} device, got {t.device}")
        if t.dtype not in DTYPES.values():
            raise GemmInputError(f"{name} has dtype {t.dtype}; the contract takes bfloat16 or float16")
        if t.dim() != 2:
            raise GemmInputError(f"{name} must be 2-D (rows, K), got {t.dim()} dimensions")
        # Row-major contiguity also rules out internal overlap (stride 0 from expand, as_strided tricks).
        if not t.is_contiguous():
            raise GemmInputError(
                f"{name} must be row-major contiguous (stride (K, 1)), got strides {tuple(t.stride())}"
            )
    if a.dtype != b.dtype:
        raise GemmInputError(f"a and b must share a dtype, got a={a.dtype}, b={b.dtype}")
    if a.device != b.device:
        raise GemmInputError(f"a and b must be on one device, got a on {a.device}, b on {b.device}")
    if a.shape[1] != b.shape[1]:
        raise GemmInputError(f"a is (M, K) = {tuple(a.shape)} and b is (N, K) = {tuple(b.shape)}: K differs")
    return a.shape[0], b.shape[0], a.shape[1]


def trivial_result(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    """The result when there is nothing to launch, else None.

    M = 0 or N = 0 gives an empty (M, N) tensor; K = 0 gives zeros (the empty sum). Call after
    :func:`check_operands`.
    """
    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    if m == 0 or n == 0:
        return torch.empty((m, n), dtype=a.dtype, device=a.device)
    if k == 0:
        return torch.zeros((m, n), dtype=a.dtype, device=a.device)
    return None


@dataclass(frozen=True)
class Domain:
    """The shapes and dtypes a kernel declares it computes; anything else is refused, never computed.

    Bounds are inclusive; ``None`` means unbounded. ``*_multiple`` fields are divisibility rules
    (TMA needs 16-byte global strides: K and N multiples of 8 for 2-byte dtypes, CUDA Driver API
    ``cuTensorMapEncodeTiled``: globalStrides must be multiples of 16).
    """

    max_m: int | None = None
    max_n: int | None = None
    max_k: int | None = None
    k_multiple: int = 1
    n_multiple: int = 1
    dtypes: tuple[str, ...] = ("bf16", "fp16")
    base_alignment: int = 1  # bytes, for the data pointers of a, b and c

    def check(self, m: int, n: int, k: int, dtype: str) -> None:
        """Raise OutsideDomainError naming the first rule (m, n, k) or ``dtype`` breaks."""
        if dtype not in self.dtypes:
            raise OutsideDomainError(f"dtype {dtype} is outside this kernel's domain {self.dtypes}")
        for dim, value, bound in (("M", m, self.max_m), ("N", n, self.max_n), ("K", k, self.max_k)):
            if bound is not None and value > bound:
                raise OutsideDomainError(f"{dim} = {value} is outside this kernel's domain ({dim} <= {bound})")
        if k % self.k_multiple:
            raise OutsideDomainError(
                f"K = {k} is not a multiple of {self.k_multiple}: row stride of a and b must be a "
                f"multiple of 16 bytes for a TMA tensor map"
            )
        if n % self.n_multiple:
            raise OutsideDomainError(
                f"N = {n} is not a multiple of {self.n_multiple}: row stride of c must be a "
                f"multiple of 16 bytes for a TMA tensor map"
            )

    def check_pointers(self, **tensors: torch.Tensor) -> None:
        """Raise OutsideDomainError if any tensor's data pointer breaks ``base_alignment``."""
        for name, t in tensors.items():
            if t.data_ptr() % self.base_alignment:
                raise OutsideDomainError(
                    f"{name}.data_ptr() = {t.data_ptr():#x} is not {self.base_alignment}-byte aligned "
                    f"(TMA global address rule)"
                )

    def describe(self) -> str:
        """One line for tables: the bounds and divisibility rules."""
        parts = []
        for dim, bound in (("M", self.max_m), ("N", self.max_n), ("K", self.max_k)):
            parts.append(f"{dim}<={bound}" if bound is not None else f"any {dim}")
        if self.k_multiple > 1:
            parts.append(f"K%{self.k_multiple}==0")
        if self.n_multiple > 1:
            parts.append(f"N%{self.n_multiple}==0")
        return ", ".join(parts)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b.T`` in float64 on the operands' device: the ground truth of every correctness gate."""
    return a.double() @ b.double().T


def cublas(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The library baseline: ``torch.nn.functional.linear`` in the input dtype (cuBLAS on a GPU).

    On CPU (where the gates' own tests run) the stand-in computes in float32 and rounds once to
    the input dtype: torch 2.13's CPU bf16 matmul does not keep IEEE semantics for non-finite
    inputs (one NaN in ``a`` turned 519 finite outputs of a 513x520x520 product into NaN, seed
    1059302160 of the correctness gate), while float32 products with fp32 accumulation and one
    rounding are what cuBLAS computes on the GPU.
    """
    if a.device.type == "cpu":
        return torch.nn.functional.linear(a.float(), b.float()).to(a.dtype)
    return torch.nn.functional.linear(a, b)
