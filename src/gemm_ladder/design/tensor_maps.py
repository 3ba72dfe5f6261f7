"""Tensor maps: the exact arguments of ``cuTensorMapEncodeTiled`` for a, b and c, and their rules.

Source: CUDA Driver API, "Tensor Map Object Management", ``cuTensorMapEncodeTiled``. The rules
checked by :meth:`TensorMapSpec.validate` (each refusal names the rule):

* ``globalAddress`` 16-byte aligned (32-byte with ``CU_TENSOR_MAP_INTERLEAVE_32B``);
* ``tensorRank`` 1..5 (>= 3 with interleave);
* ``globalDim[i]`` non-zero and <= 2^32;
* ``globalStrides[i]`` (bytes, dimensions 1..rank-1) a multiple of 16 (32 with interleave 32B) and < 2^40;
* ``boxDim[i]`` non-zero and <= 256;
* interleave NONE: ``boxDim[0] * elementSize`` a multiple of 16 bytes;
* interleave NONE with a swizzle: ``boxDim[0] * elementSize`` <= the swizzle span (32, 64, 128 bytes);
* ``elementStrides[i]`` non-zero and <= 8.

Dimensions are innermost first: a row-major (R, C) matrix has ``globalDim = (C, R)`` and one stride,
the row pitch in bytes. Out-of-bounds elements of a load are filled with zero
(``CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE``), which makes the M, N and K tails correct without masks, and
still count toward the mbarrier transaction bytes (the whole box is always delivered); a TMA store
clips the out-of-bounds part of the box (PTX ISA, "Tensor Memory Accelerator", bounding box and
out-of-bound access; ``cp.async.bulk.tensor``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gemm_ladder.design.problem import PlanRefused

SWIZZLE_SPAN: dict[str, int] = {
    "CU_TENSOR_MAP_SWIZZLE_NONE": 0,
    "CU_TENSOR_MAP_SWIZZLE_32B": 32,
    "CU_TENSOR_MAP_SWIZZLE_64B": 64,
    "CU_TENSOR_MAP_SWIZZLE_128B": 128,
}
SWIZZLE_FOR_SPAN: dict[int, str] = {v: k for k, v in SWIZZLE_SPAN.items()}

#: The order of cuTensorMapEncodeTiled's parameters after the output ``tensorMap``.
ENCODE_ORDER = (
    "tensorDataType", "tensorRank", "globalAddress", "globalDim", "globalStrides", "boxDim",
    "elementStrides", "interleave", "swizzle", "l2Promotion", "oobFill",
)

MAX_GLOBAL_DIM = 2**32
MAX_GLOBAL_STRIDE = 2**40  # exclusive
MAX_BOX_DIM = 256
MAX_ELEMENT_STRIDE = 8


@dataclass(frozen=True)
class TensorMapSpec:
    """One tensor map, argument for argument (all dimension tuples innermost first).

    ``global_strides`` are in bytes and cover dimensions 1..rank-1 (the innermost stride is the
    element size, implied). ``box_dim`` is the box one TMA instruction moves.
    """

    name: str
    description: str
    data_type: str
    elem_bytes: int
    rank: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: str = "CU_TENSOR_MAP_INTERLEAVE_NONE"
    swizzle: str = "CU_TENSOR_MAP_SWIZZLE_128B"
    l2_promotion: str = "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"
    oob_fill: str = "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"

    @property
    def inner_box_bytes(self) -> int:
        return self.box_dim[0] * self.elem_bytes

    @property
    def box_bytes(self) -> int:
        """Bytes one TMA instruction on this map moves (the whole box, out-of-bounds part included)."""
        total = self.elem_bytes
        for d in self.box_dim:
            total *= d
        return total

    @property
    def swizzle_span(self) -> int:
        return SWIZZLE_SPAN[self.swizzle]

    def validate(self) -> None:
        """Raise :class:`PlanRefused` naming the first cuTensorMapEncodeTiled rule this map breaks."""
        n = self.name
        if not 1 <= self.rank <= 5:
            raise PlanRefused("cuTensorMapEncodeTiled tensorRank", f"{n}: rank {self.rank} is not in 1..5")
        for field, values, want in (("globalDim", self.global_dim, self.rank),
                                    ("globalStrides", self.global_strides, self.rank - 1),
                                    ("boxDim", self.box_dim, self.rank),
                                    ("elementStrides", self.element_strides, self.rank)):
            if len(values) != want:
                raise PlanRefused(f"cuTensorMapEncodeTiled {field}", f"{n}: {len(values)} entries, rank {self.rank} needs {want}")
        interleaved = self.interleave != "CU_TENSOR_MAP_INTERLEAVE_NONE"
        for i, d in enumerate(self.global_dim):
            if not 1 <= d <= MAX_GLOBAL_DIM:
                raise PlanRefused(
                    "cuTensorMapEncodeTiled globalDim",
                    f"{n}: globalDim[{i}] = {d} must be non-zero and <= 2^32 (an empty dimension has no "
                    f"tensor map; the caller returns the empty or zero result without a launch)",
                )
        stride_multiple = 32 if self.interleave == "CU_TENSOR_MAP_INTERLEAVE_32B" else 16
        for i, s in enumerate(self.global_strides):
            if s % stride_multiple:
                raise PlanRefused(
                    "cuTensorMapEncodeTiled globalStrides",
                    f"{n}: globalStrides[{i}] = {s} bytes (row of {s // self.elem_bytes if s % self.elem_bytes == 0 else s / self.elem_bytes} "
                    f"elements x {self.elem_bytes} bytes) is not a multiple of {stride_multiple}",
                )
            if not 0 < s < MAX_GLOBAL_STRIDE:
                raise PlanRefused("cuTensorMapEncodeTiled globalStrides", f"{n}: globalStrides[{i}] = {s} bytes is not below 2^40")
        check_box(n, self.box_dim, self.elem_bytes, self.swizzle, interleaved=interleaved)
        for i, e in enumerate(self.element_strides):
            if not 1 <= e <= MAX_ELEMENT_STRIDE:
                raise PlanRefused("cuTensorMapEncodeTiled elementStrides", f"{n}: elementStrides[{i}] = {e} must be in 1..8")

    def check_address(self, base_ptr: int) -> None:
        """Raise :class:`PlanRefused` if ``base_ptr`` breaks the globalAddress alignment rule."""
        align = 32 if self.interleave == "CU_TENSOR_MAP_INTERLEAVE_32B" else 16
        if base_ptr % align:
            raise PlanRefused(
                "cuTensorMapEncodeTiled globalAddress",
                f"{self.name}: base address {base_ptr:#x} is not {align}-byte aligned",
            )

    def encode_kwargs(self, base_ptr: int) -> dict:
        """The arguments of cuTensorMapEncodeTiled in its parameter order, as plain Python values.

        Enum arguments are their enum names (e.g. ``"CU_TENSOR_MAP_SWIZZLE_128B"``); arrays are lists
        of ints; ``globalAddress`` is ``base_ptr``. The output ``tensorMap`` is not included. Validates
        the map and the address first.
        """
        self.validate()
        self.check_address(int(base_ptr))
        return {
            "tensorDataType": self.data_type,
            "tensorRank": self.rank,
            "globalAddress": int(base_ptr),
            "globalDim": list(self.global_dim),
            "globalStrides": list(self.global_strides),
            "boxDim": list(self.box_dim),
            "elementStrides": list(self.element_strides),
            "interleave": self.interleave,
            "swizzle": self.swizzle,
            "l2Promotion": self.l2_promotion,
            "oobFill": self.oob_fill,
        }

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "data_type": self.data_type,
            "rank": self.rank,
            "global_dim": list(self.global_dim),
            "global_strides": list(self.global_strides),
            "box_dim": list(self.box_dim),
            "element_strides": list(self.element_strides),
            "interleave": self.interleave,
            "swizzle": self.swizzle,
            "l2_promotion": self.l2_promotion,
            "oob_fill": self.oob_fill,
            "box_bytes": self.box_bytes,
        }


def check_box(name: str, box_dim: tuple[int, ...], elem_bytes: int, swizzle: str, *, interleaved: bool = False) -> None:
    """The boxDim rules of cuTensorMapEncodeTiled (shape-independent); raises :class:`PlanRefused`."""
    for i, b in enumerate(box_dim):
        if not 1 <= b <= MAX_BOX_DIM:
            raise PlanRefused(
                "cuTensorMapEncodeTiled boxDim",
                f"{name}: boxDim[{i}] = {b} must be in 1..256 (box {tuple(box_dim)}, innermost first)",
            )
    inner = box_dim[0] * elem_bytes
    if not interleaved and inner % 16:
        raise PlanRefused(
            "cuTensorMapEncodeTiled boxDim[0] bytes",
            f"{name}: boxDim[0] * {elem_bytes} = {inner} bytes is not a multiple of 16 (the smallest TMA row is 16 bytes)",
        )
    span = SWIZZLE_SPAN[swizzle]
    if not interleaved and span and inner > span:
        raise PlanRefused(
            "cuTensorMapEncodeTiled swizzle span",
            f"{name}: inner box {inner} bytes exceeds the {span}-byte span of {swizzle}",
        )


def b_mn_box_lines(bn: int, bk: int, cluster: int, elem_bytes: int) -> int:
    """K lines of one MN-major B box: BK, or BK / cluster when the cluster's slices of the shared B tile
    are narrower than one box (BN = 128 / e, the library GEMM at BN = 64: a slice of 32 N rows is not a
    whole 128-byte box, so each CTA rank loads BK / cluster lines of the one box instead, 1024-byte
    aligned when that is a multiple of 8: kernels/include/gemm_ladder/stage_ring.cuh produce_stage)."""
    inner = 128 // elem_bytes
    return bk // cluster if cluster > 1 and bn // cluster < inner else bk


def operand_map(name: str, rows: int, k: int, *, major: str, ld: int, tile_rows: int, bk: int, data_type: str,
                 elem_bytes: int, swizzle: str = "CU_TENSOR_MAP_SWIZZLE_128B", what: str = "",
                 box_lines: int | None = None) -> TensorMapSpec:
    """The map of one (rows, K) operand with leading dimension ``ld`` (elements), loaded ``tile_rows`` rows
    x BK per stage. Not validated.

    * K-major (element (r, k) at r * ld + k): globalDim (K, rows), stride (ld * e,), box (BK, tile_rows).
    * MN-major (element (r, k) at r + k * ld): globalDim (rows, K), stride (ld * e,), box (128 / e, BK):
      the rows are the inner dimension, and a box spans one swizzle span (128 bytes, 64 elements) of
      them, so a tile of ``tile_rows`` rows takes tile_rows * e / 128 boxes, each BK lines of 128 bytes
      (the MN-major descriptor's LBO apart, kernels/include/gemm_ladder/ptx/wgmma.cuh); ``box_lines``
      (default BK) K lines per box when a cluster splits one box by K (:func:`b_mn_box_lines`).
    """
    if major not in ("k", "mn"):
        raise PlanRefused("operand major", f"{name}: major {major!r} is 'k' or 'mn'")
    common = dict(name=name, data_type=data_type, elem_bytes=elem_bytes, rank=2, element_strides=(1, 1),
                  swizzle=swizzle, global_strides=(ld * elem_bytes,))
    if major == "k":
        return TensorMapSpec(description=f"{what} K-major (ld {ld}), loads of one {tile_rows} x BK tile per stage",
                             global_dim=(k, rows), box_dim=(bk, tile_rows), **common)
    inner = 128 // elem_bytes
    lines = bk if box_lines is None else box_lines
    if lines != bk:
        return TensorMapSpec(description=f"{what} MN-major (ld {ld}), loads of one box of {inner} x {lines} K lines "
                                         f"(lines [r*{lines}, (r+1)*{lines}) of the {inner} x BK tile) per stage",
                             global_dim=(rows, k), box_dim=(inner, lines), **common)
    return TensorMapSpec(description=f"{what} MN-major (ld {ld}), loads of {max(tile_rows // inner, 1)} box(es) of "
                                     f"{inner} x BK per {tile_rows} x BK tile per stage",
                         global_dim=(rows, k), box_dim=(inner, bk), **common)


def gemm_tensor_maps(m: int, n: int, k: int, *, data_type: str, elem_bytes: int, bm: int, bn: int, bk: int,
                     cluster: int = 1, swizzle: str = "CU_TENSOR_MAP_SWIZZLE_128B",
                     c_box_rows: int | None = None, a_major: str = "k", b_major: str = "k",
                     lda: int | None = None, ldb: int | None = None, ldc: int | None = None) -> dict[str, TensorMapSpec]:
    """The three maps of ``c = a @ b.T`` (a: (M, K), b: (N, K), c: (M, N)). Not validated.

    * a: the ladder's row-major (K-major) A: globalDim (K, M), stride (lda*e,), box (BK, BM); with
      ``a_major="mn"`` (a column-major A) see :func:`operand_map`.
    * b: likewise with (N, K), box (BK, BN / cluster): with a cluster along M, each CTA loads its slice
      of the shared B tile and multicasts it to every CTA of the cluster.
    * c: globalDim (N, M), stride (ldc*e,), box (128 / e, BM): the output is staged in shared memory as
      BN*e/128 column panels of BM rows x 128 bytes, 128B-swizzled, one TMA store per panel;
      ``c_box_rows`` (default BM) is smaller when each consumer warpgroup stores its own rows.

    ``lda``, ``ldb``, ``ldc``: leading dimensions in elements (default: dense, K for a K-major operand,
    M or N for an MN-major one, N for c).
    """
    c_rows = bm if c_box_rows is None else c_box_rows
    c_cols = 128 // elem_bytes
    ldc = n if ldc is None else ldc
    common = dict(data_type=data_type, elem_bytes=elem_bytes, bk=bk, swizzle=swizzle)
    b_rows = bn // cluster if cluster else bn
    b_lines = b_mn_box_lines(bn, bk, cluster or 1, elem_bytes)
    return {
        "a": operand_map("a", m, k, major=a_major, ld=(k if a_major == "k" else m) if lda is None else lda, tile_rows=bm,
                         what="A (M, K)", **common),
        "b": operand_map("b", n, k, major=b_major, ld=(k if b_major == "k" else n) if ldb is None else ldb, tile_rows=b_rows,
                         box_lines=b_lines,
                         what=("B (N, K)" if not cluster or cluster == 1 else
                               "B (N, K), each CTA loads K lines [r*BK/C, (r+1)*BK/C) of the one-box BN x BK tile and "
                               "multicasts them to the cluster;" if b_major == "mn" and b_lines != bk else
                               "B (N, K), each CTA loads rows [r*BN/C, (r+1)*BN/C) of the BN x BK tile and multicasts "
                               "them to the cluster;"), **common),
        "c": TensorMapSpec(
            name="c", description=f"C (M, N) row-major (ld {ldc}), stores of one {c_rows} x {c_cols} panel (128 bytes wide) each",
            global_dim=(n, m), global_strides=(ldc * elem_bytes,), box_dim=(c_cols, c_rows),
            l2_promotion="CU_TENSOR_MAP_L2_PROMOTION_NONE",  # promotion widens L2 fills of loads; c is only stored
            data_type=data_type, elem_bytes=elem_bytes, rank=2, element_strides=(1, 1),
            swizzle="CU_TENSOR_MAP_SWIZZLE_128B",
        ),
    }
