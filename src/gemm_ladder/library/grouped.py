"""The grouped GEMM library kernel family (mixture-of-experts): configs, plan, build, bind and launch.

The family ``sm90_grouped_gemm`` (:data:`GROUPED`, the :class:`~gemm_ladder.library.kernel.Kernel`
protocol) takes a :class:`~gemm_ladder.library.kernel.KernelConfig` whose schedule is ``grouped``
and whose ``grouping`` says how the problems split: along M by cumulative row ends (``"m"``), along M in
the masked layout (``"m_masked"``) or along K (``"k"``). :class:`GroupedGemm` is the per-configuration
object (:func:`grouped_gemm`) the public API (api_grouped.py), the tests and the benches hold; its
builds and loaded modules are the kernel module's, keyed by the config (library/kernel.py ``built``
and ``loaded``).

Kernel: ``kernels/library/sm90_grouped_gemm.cu`` (its header comment gives the design). The problem is
torch._grouped_mm's contiguous layout: x (R, K) row-major with its R rows split into E groups by
``offs`` (int32, on the device, cumulative row ends), w (E, N, K) (one ``nn.Linear`` weight per group),
``out[r] = x[r] @ w[e].T`` for each row r of group e. Group sizes stay on the device: the launch (grid,
arguments) depends on R, N, K, E and the pointers only.

**The plan.** The kernel's ring, shared memory, stage count, expect_tx bytes and roles are those of the
designer's plan (:func:`plan_gemm`) of one dense GEMM (R, N, K) on the configuration the kernel is built
with: tile 128 x BN x 64, one CTA per cluster (or two: below), two consumer warpgroups, a producer
warpgroup, persistent, and C through level 9's panel ring (a ring of :data:`C_RING` 64 x 64 panel buffer
per consumer, a tile's last panel stored during the next tile's first K iteration; an experiment's build
may have a deeper ring, :data:`RINGS`) for a bf16 or
fp16 output, from registers (no C staging) for a float32 one. Its stage count is the most that fit in
shared memory beside the kernel's group table (:data:`GROUP_TABLE_BYTES`, static shared memory). What
the grouped kernel changes is named in :class:`GroupedPlan`: the weight's tensor map is rank 3 over (E,
N, K) (the group is its outer coordinate), the schedule's tile count is known on the device only, and
rows are masked at each group's end: a consumer's 64 rows go through the panel ring when all are its
group's and the output is one TMA can write (:func:`out_map`: 16-byte base and pitches), from registers
with the rows masked otherwise (a group's last, partial slice; any pitch).

**Operands** (:meth:`GroupedGemm.supports`): x row-major (pitch a multiple of 16 bytes, base 16-byte
aligned); w K-major per group (``b_major="k"``: element (e, n, k) at e * s_e + n * s_n + k) or N-major
(``"mn"``: at e * s_e + k * s_k + n, the backward's grad_x = grad_out @ w[e]), strides multiples of 16
bytes; out (R, N) row-major with any pitch >= N (a pitch or base TMA cannot write is stored from registers
throughout); E <= :data:`MAX_GROUPS`.

**The cluster build** (``cluster=2``, :data:`CLUSTERS`): two CTAs per cluster take units of two
vertically adjacent M tiles (one N tile; along K, one group), and when both tiles read one weight each
CTA loads half of the B tile and multicasts it to both (the dense library kernel's level-8 sharing).
The public calls take it where it measured faster (:func:`choose_cluster`: grouped along M, a K-major
weight, K >= :data:`CLUSTER_MIN_K`), cluster 1 elsewhere. The plan is the designer's at cluster 2 (B boxes of
BN / 2 rows for a K-major weight, empty barriers counting both CTAs' consumers, expect_tx A + the whole
B); the launch is a grid of 2 x the resident clusters, at most 2 x the units.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from gemm_ladder.contract import DTYPES, GemmInputError, dtype_name
from gemm_ladder.design.plan import Plan, plan_gemm
from gemm_ladder.design.problem import PlanRefused, arch_info, ceil_div, dtype_info
from gemm_ladder.design.smem import max_stages
from gemm_ladder.design.stream_k import DEFAULT_MIN_IDLE, tail_idle_min
from gemm_ladder.design.tensor_maps import TensorMapSpec, operand_map
from gemm_ladder.runtime.module import LaunchGeometry
from gemm_ladder.library import kernel as K
from gemm_ladder.library.activations import ACTIVATIONS
from gemm_ladder.library.bound import BoundLaunch
from gemm_ladder.library.kernel import (
    GROUP_K, GROUP_M, GROUP_M_MASKED, GROUPED, GROUPINGS, HALF_DTYPES, STORE_REGISTERS, STORE_TMA, KernelConfig,
    Operands, extents_refusal,
)
from gemm_ladder.library.lru import cached
from gemm_ladder.library.operand import TMA_ALIGN_BYTES
from gemm_ladder.runtime.compiler import CompiledKernel, compile_kernel
from gemm_ladder.runtime.module import LoadedKernel, device_index, ensure_context, load
from gemm_ladder.runtime.tensor_map import encode_tiled
from gemm_ladder.runtime.workspace import WORKSPACES

SOURCE = "library/sm90_grouped_gemm.cu"
FAMILY = "sm90_grouped_gemm"
KERNEL_NAME = "grouped_gemm_kernel"
BM, BK = 128, 64
BNS = (128, 256)
#: CTAs per cluster a build may have: 1, or 2 sharing the weight tile by multicast.
CLUSTERS = (1, 2)
#: The route's cluster rule (:func:`choose_cluster`): the cluster build for a call grouped along M with a
#: K-major weight (the forward) and K >= CLUSTER_MIN_K, cluster 1 otherwise: where cluster 2 measured
#: faster and slower in one interleaved, float64-checked run (:data:`CLUSTER_EVIDENCE`,
#: :data:`CLUSTER_EVIDENCE_GRAD_W`; the figures in docs/grouped.md). The bound lies between the two K
#: measured each side of it; the masked layout and an N-major weight (grad_x) were not measured with
#: cluster 2, so they keep cluster 1.
CLUSTER_MIN_K = 2048
CLUSTER_EVIDENCE = "bench/results/2026-12-04_grouped_cluster_fwd_3935e4e.json"
CLUSTER_EVIDENCE_GRAD_W = "bench/results/2026-12-04_grouped_cluster_grad_w_3935e4e.json"
CONSUMERS = 2
#: The tile width of the grouped-along-K build (the weight gradient) where none is asked for: 256. With the
#: TMA store, two runs of bench/grouped.py --directions grad_w in one H200 session (ee503e2), each against
#: torch._grouped_mm in its own interleaved rounds: BN 256 took 0.547 / 2.843 / 2.798 ms where BN 128 took
#: 0.669 / 3.461 / 3.454 (Qwen3-30B-A3B gate+up, gpt-oss-120b gate+up, Mixtral down skewed; 0.81-0.90x ->
#: 0.99-1.05x torch): half the tiles, each a short reduction, so half the per-tile cost (GRAD_W_BN_EVIDENCE).
GRAD_W_BN = 256
GRAD_W_BN_EVIDENCE = ("bench/results/2026-12-04_grouped_grad_w_bn128_ee503e2.json",
                      "bench/results/2026-12-04_grouped_grad_w_bn256_ee503e2.json")
#: The most groups one launch takes: the group table in each CTA's shared memory has this many entries.
MAX_GROUPS = 1024
#: Bytes of the group table (grouped_scheduler.cuh: MAX_GROUPS + 1 tile starts, MAX_GROUPS row ends, the layout word).
GROUP_TABLE_BYTES = (2 * MAX_GROUPS + 2) * 4
B_MAJORS = ("k", "mn")
#: Panel buffers per consumer in the output's ring (bf16/fp16 outputs; the plan's c_ring): one 64 x 64
#: panel (8 KiB), so the stage count stays what the register store had beside the group table (6 at BN
#: 128, 4 at 256; two buffers would cost a stage). A tile's panels but the last go at its end, each after
#: the one before has left the buffer (wait_group.read 0); the last during the next tile's first K
#: iteration (holding more across the K loop spilled at BN 256).
C_RING = 1
#: Panel buffers per consumer a build may have (:attr:`GroupedGemm.ring`): :data:`C_RING`, or a buffer for
#: every panel of the tile (2 at BN 128, 4 at BN 256) for short reductions (the weight gradient of many
#: experts: a few K blocks per tile, so the tile's stores weigh more than its main loop), at the price of a
#: stage (3 at BN 256, 5 at BN 128): every panel stored at the tile's end, none held in registers across
#: the next tile's K loop. Two buffers at BN 256 cost the same stage, still hold a panel and spilled
#: (ptxas, along M), so they are not built; nor a deeper ring with a bias (it spilled at BN 256). The
#: public calls take :func:`choose_ring`'s (4 for the BN 256 weight gradient, BN / 64 for the input gradient, as
#: measured; else C_RING).
RINGS = (1, 2, 4)
#: The run behind choose_ring (H200, bench/grouped.py --directions grad_w --ring 1,4, interleaved).
RING_EVIDENCE = "bench/results/2026-12-05_grouped_ring_grad_w_52f0b90.json"
#: Why a deeper ring is refused with a pair of CTAs along M (grouped_gemm): the one launch that hung.
PAIR_RING_HANG = ("on an H100 at 293011f the build at BN 256, cluster 2, ring 4 did not finish one forward of "
                  "Qwen3-30B-A3B's down projection (E = 128, 32768 rows in groups of 21-515, N 2048, K 768) in 45 s, "
                  "where the route returned in 3.3 s, its first load included; on the gate+up (K 2048) a call of it "
                  "returned in 0.06 s as the other builds' did, but a timing loop of it stalled 150 s "
                  "(bench/results/logs/2026-12-06_device_grouped_pair_ring_hang_h100_293011f.log); "
                  "cause not found; the routes never take it; its GPU test on 48 small groups at K = 192 passed")
#: The runs behind choose_ring's input-gradient rule and its forward's one-buffer ring (H100,
#: bench/experiments/grouped_vs_dense.py: the routed build and the one with a buffer per panel interleaved).
GRAD_X_RING_EVIDENCE = ("bench/results/2026-12-06_grouped_vs_dense_gradx_e128_h100_293011f.json",
                        "bench/results/2026-12-06_grouped_vs_dense_gradx_e8_h100_293011f.json",
                        "bench/results/2026-12-06_grouped_vs_dense_fwd_h100_d89e962.json")
#: What a build with the panel ring does with an output TMA can write: "tma" (the ring; a group's partial
#: slices still from registers) or "registers" (every slice from registers, the build otherwise the
#: same: how the tests and bench/grouped.py --store both compare the two). The environment's
#: GL_GROUPED_STORE at import, else "tma".
STORES = (STORE_TMA, STORE_REGISTERS)
STORE_DEFAULT = os.environ.get("GL_GROUPED_STORE", STORE_TMA)


@dataclass(frozen=True)
class GroupedPlan:
    """The designer's plan of the grouped kernel on one problem (R rows, N, K, E groups).

    ``gemm``: the plan of the dense (R, N, K) GEMM on the kernel's configuration (ring, shared memory,
    stages, load protocol, roles). ``tensor_maps``: the kernel's own maps, ``x`` (rank 2 over all rows)
    and ``w`` (rank 3, the group outermost), validated against cuTensorMapEncodeTiled's rules.
    ``max_tiles``: an upper bound of the launch's tiles, sum over groups of ceil(rows / 128) <=
    ceil(R / 128) + E, times the N tiles (the exact count is computed on the device); ``max_units`` the
    same bound over the ``cluster``'s units (pairs of M tiles at cluster 2).
    """

    rows: int
    n: int
    k: int
    groups: int
    dtype: str
    bn: int
    b_major: str
    gemm: Plan
    tensor_maps: dict[str, TensorMapSpec]
    cluster: int = 1
    #: Output columns per tile where they differ from ``bn``: the fused gated MLP's 128 (its 256
    #: accumulator columns are 128 gate and 128 up columns); 0: ``bn``.
    out_bn: int = 0

    @property
    def n_tile(self) -> int:
        """Output columns per tile: the schedule's N tile."""
        return self.out_bn or self.bn

    @property
    def max_tiles(self) -> int:
        return (ceil_div(self.rows, BM) + self.groups) * ceil_div(self.n, self.n_tile)

    @property
    def store(self) -> str:
        """How this build's C can leave: "tma" (it has the panel ring; a group's partial slices, outputs TMA
        cannot write and STORE_DEFAULT "registers" still go from registers, decided at each launch) or
        "registers"."""
        return STORE_TMA if self.gemm.smem.c_ring else STORE_REGISTERS

    @property
    def max_units(self) -> int:
        return ceil_div(ceil_div(self.rows, BM) + self.groups, self.cluster) * ceil_div(self.n, self.n_tile)

    def to_json(self) -> dict:
        return {
            "schema": "gemm-ladder/grouped-plan/1",
            "problem": {"rows": self.rows, "n": self.n, "k": self.k, "groups": self.groups, "dtype": self.dtype,
                        "bn": self.bn, "b_major": self.b_major, "max_tiles": self.max_tiles,
                        "cluster": self.cluster, "max_units": self.max_units},
            "tensor_maps": {k: v.to_json() for k, v in self.tensor_maps.items()},
            "gemm": self.gemm.to_json(),
        }

    def describe(self) -> str:
        g = self.gemm
        lines = [
            f"grouped GEMM: x ({self.rows}, {self.k}) in {self.groups} groups by offs, w ({self.groups}, {self.n}, "
            f"{self.k}) {'K' if self.b_major == 'k' else 'N'}-major per group, {self.dtype}",
            f"tile {BM} x {self.bn} x {BK}, {g.stages} stages of {g.load_protocol.expect_tx_bytes} bytes, "
            f"{g.smem.total_bytes} bytes of dynamic shared memory + {GROUP_TABLE_BYTES} of group table",
            f"at most {self.max_tiles} tiles (exact count on the device), "
            + (f"C by TMA through a ring of {g.smem.c_ring} 64 x 64 panel buffer(s) per consumer where a consumer's "
               "64 rows are all its group's and the output takes a tensor map, else from registers with the rows "
               "masked per group" if self.store == STORE_TMA else "C stored from registers, rows masked per group"),
        ]
        if self.cluster > 1:
            lines.append(f"clusters of {self.cluster} CTAs on units of {self.cluster} M tiles; B multicast in "
                         "halves when both tiles are one group's, else loaded whole by each CTA")
        lines += [f"map {name}: {spec.description}; globalDim {spec.global_dim}, box {spec.box_dim}"
                  for name, spec in self.tensor_maps.items()]
        return "\n".join(lines)


def choose_cluster(k: int, b_major: str, grouping: str = GROUP_M) -> tuple[int, str]:
    """The cluster size (1 or 2) a public call takes, and why: 2 for a call grouped along M (contiguous
    rows, ``grouping`` "m") with a K-major weight (``b_major`` "k") and ``k`` >= :data:`CLUSTER_MIN_K`,
    else 1 (the rule and its measurements: :data:`CLUSTER_MIN_K`). ``k``: the contraction length (along
    K: the total K). Raises ValueError for a grouping or major this family does not know."""
    if grouping not in GROUPINGS or b_major not in B_MAJORS:
        raise ValueError(f"grouping = {grouping!r}, b_major = {b_major!r}: one of {GROUPINGS}, one of {B_MAJORS}")
    if grouping == GROUP_K:
        return 1, (f"grouped along K (the weight gradient): the cluster build measured 0.968x cluster 1's speed on "
                   f"Mixtral down's ({CLUSTER_EVIDENCE_GRAD_W})")
    if grouping == GROUP_M_MASKED:
        return 1, "the masked layout (decode): the cluster build is not measured there"
    if b_major != "k":
        return 1, "an N-major weight (grad_x): the cluster build is not measured there"
    if k < CLUSTER_MIN_K:
        return 1, (f"K = {k} < {CLUSTER_MIN_K}: the cluster build measured 0.903x cluster 1's speed at K = 768 "
                   f"(Qwen3-30B-A3B down, {CLUSTER_EVIDENCE})")
    return 2, (f"grouped along M, K-major weight, K = {k} >= {CLUSTER_MIN_K}: the cluster build measured 1.026-1.152x "
               f"cluster 1's speed at K = 2048-14336 (Mixtral-8x7B, Qwen3-30B-A3B gate+up, {CLUSTER_EVIDENCE})")


def choose_tail(grouping: str, activation: str | None = None) -> tuple[bool, str]:
    """Whether a public call takes the stream-K tail build (:attr:`GroupedGemm.tail`), and why; never with an
    ``activation`` (not built with one). Raises ValueError for a grouping this family does not know."""
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping = {grouping!r}: one of {GROUPINGS}")
    if activation is not None:
        return False, f"an activation ({activation}): the stream-K tail is not built with one"
    if grouping != GROUP_M:
        return False, "the stream-K tail is built grouped along M contiguously"
    return False, ("the stream-K tail build measured 1.014-1.032x the whole-unit route on the Mixtral forwards and "
                   "0.967x on DeepSeek-V3's 32 experts (one H100 run, within two or three times its spread: "
                   "docs/grouped.md): not taken by default")


def choose_ring(bn: int, grouping: str, out_fp32: bool, bias: bool, b_major: str = "k",
                cluster: int = 1, activation: str | None = None) -> tuple[int, str]:
    """The output's panel buffers per consumer (:data:`RINGS`) a public call takes, and why, in bf16/fp16
    without a bias (a deeper ring with a bias spilled): a buffer for each of the tile's panels (BN / 64) for
    the weight gradient (grouped along K) at BN 256, measured faster on every case (:data:`RING_EVIDENCE`), and
    for a call grouped along M on one CTA per cluster whose weight is read N-major (``b_major`` "mn": the input
    gradient's, autograd's backward of the forward), measured faster on 7 of 9 cases
    (:data:`GRAD_X_RING_EVIDENCE`); else :data:`C_RING` (along M with a pair of CTAs, ``cluster`` 2, always:
    :data:`PAIR_RING_HANG`; and with an ``activation``, whose build has the plain ring). Raises ValueError for a
    grouping this family does not know."""
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping = {grouping!r}: one of {GROUPINGS}")
    if activation is not None:
        return C_RING, f"an activation ({activation}): its build has the plain ring ({C_RING} panel buffer)"
    if grouping == GROUP_K and bn == 256 and not out_fp32 and not bias:
        return 4, ("grouped along K (the weight gradient), BN 256: a buffer for each of the tile's 4 panels measured "
                   "1.01-1.25x the one-buffer ring's speed on all nine prefill cases, most where a tile has few K "
                   f"blocks (E = 256: 1.22x, 1.25x; E = 128: 1.11-1.17x; E = 8: 1.01x, 1.03x) ({RING_EVIDENCE})")
    if grouping == GROUP_K:
        return C_RING, ("grouped along K " + ("with a float32 output (no panel ring)" if out_fp32 else
                                              "with a bias (a deeper ring with a bias spilled)" if bias else
                                              f"at BN {bn}: the deeper ring is measured at BN 256 only"))
    if grouping == GROUP_M and cluster != 1:
        return C_RING, f"grouped along M on a pair of CTAs: a deeper ring is refused there ({PAIR_RING_HANG})"
    if grouping == GROUP_M and b_major == "mn" and not out_fp32 and not bias:
        return bn // 64, (f"grouped along M with the weight read N-major (the input gradient), BN {bn}: a buffer for "
                          f"each of the tile's {bn // 64} panels measured 1.16-1.22x the one-buffer ring's speed on "
                          "three cases (gpt-oss gate+up, DeepSeek-V3 gate+up and down, E = 128 and 256), 1.00-1.05x on "
                          "four more, 0.95x and 0.99x on two (Qwen3-30B-A3B gate+up, Mixtral gate+up) "
                          f"({GRAD_X_RING_EVIDENCE[0]}, {GRAD_X_RING_EVIDENCE[1]})")
    return C_RING, ("grouped along M" + (" with a float32 output (no panel ring)" if out_fp32 else
                                         " with a bias (a deeper ring with a bias spilled)" if bias else
                                         ", the weight K-major (the forward): a buffer per panel ran 0.91-0.92x the "
                                         "one-buffer ring (it costs a stage) on the E = 8 and 32 forwards "
                                         f"({GRAD_X_RING_EVIDENCE[2]})" if grouping == GROUP_M else
                                         ": the masked layout has no panel ring"))


def weight_map(groups: int, n: int, k: int, *, b_major: str, stride_major: int, stride_group: int, bn: int,
               data_type: str, elem_bytes: int, cluster: int = 1) -> TensorMapSpec:
    """The rank-3 map of the weights (not validated). ``b_major="k"``: element (e, n, k) at
    e * stride_group + n * stride_major + k: globalDim (K, N, E), box (BK, BN / cluster, 1) (a cluster
    of 2 loads B as two halves: one per CTA when shared, both by one CTA when not). ``"mn"``: at
    e * stride_group + k * stride_major + n: globalDim (N, K, E), box (128 / e, BK, 1), BN / 64 boxes
    per stage (a half is BN / 128 of them). Strides in elements."""
    strides = (stride_major * elem_bytes, stride_group * elem_bytes)
    common = dict(name="w", data_type=data_type, elem_bytes=elem_bytes, rank=3, element_strides=(1, 1, 1),
                  global_strides=strides)
    if b_major == "k":
        rows = bn // cluster
        per_stage = f"one {bn} x BK box" if cluster == 1 else f"{cluster} boxes of {rows} x BK"
        return TensorMapSpec(description=f"w (E, N, K) K-major per group (ld {stride_major}, group stride "
                                         f"{stride_group}), {per_stage} of group e per stage",
                             global_dim=(k, n, groups), box_dim=(BK, rows, 1), **common)
    inner = 128 // elem_bytes
    return TensorMapSpec(description=f"w (E, K, N) N-major per group (ld {stride_major}, group stride {stride_group}), "
                                     f"{bn // inner} boxes of {inner} N x BK K of group e per stage",
                         global_dim=(n, k, groups), box_dim=(inner, BK, 1), **common)


def out_map(out: torch.Tensor, *, k_grouped: bool) -> TensorMapSpec | None:
    """The panel ring's map of a bf16/fp16 output, or None when TMA cannot write it: a base or pitch not a
    multiple of 16 bytes, a row of N elements not a multiple of 16 bytes (a TMA store writes a row's last
    16-byte chunk whole, past N: bench/results/logs/2026-12-01_tma_store_edge_3419336.log; library/gemm.py
    and library/fp8.py refuse it for the same reason), or another cuTensorMapEncodeTiled rule. The launch
    then stores every slice from registers. Grouped along M: out (R, N), globalDim (N, R); along K: out (E, M, N), globalDim (N, M,
    E), the group outermost, so the copy engine clips each group's rows at M. Box 64 x 64 (x 1), 128B
    swizzle: one panel of stage_packed_panel_sw128 (kernels epilogue.cuh)."""
    e = out.element_size()
    dt = dtype_info(dtype_name(out.dtype))
    if out.data_ptr() % TMA_ALIGN_BYTES or (out.shape[-1] * e) % TMA_ALIGN_BYTES:
        return None
    if k_grouped:
        groups, m, n = out.shape
        strides = (_ld(out, 1, n) * e, (out.stride(0) if groups > 1 else m * _ld(out, 1, n)) * e)
        dims, box, what = (n, m, groups), (128 // e, 64, 1), "out (E, M, N), the group outermost"
    else:
        rows, n = out.shape
        strides, dims, box, what = (_ld(out, 0, n) * e,), (n, rows), (128 // e, 64), "out (R, N) over every group's rows"
    spec = TensorMapSpec(name="c", description=f"{what}: 64 x 64 panels stored from each consumer's ring",
                         data_type=dt.tensor_map_type, elem_bytes=e, rank=len(dims), global_dim=dims,
                         global_strides=strides, box_dim=box, element_strides=(1,) * len(dims))
    try:
        spec.validate()
    except PlanRefused:
        return None
    return spec


def store_rule(kernel: "GroupedGemm", n: int, elem_bytes: int) -> tuple[str, str]:
    """The store (:data:`STORES`) a call of ``kernel`` into an output of ``n`` columns of ``elem_bytes``
    takes, and why: what explain_grouped_mm reports for the new output a call makes, and what the launch
    asks first (then :func:`out_map` checks the output's own base and pitch). Reads :data:`STORE_DEFAULT`;
    raises ValueError for a value not in :data:`STORES`."""
    if STORE_DEFAULT not in STORES:
        raise ValueError(f"grouped.STORE_DEFAULT = {STORE_DEFAULT!r} (GL_GROUPED_STORE): one of {', '.join(STORES)}")
    if not kernel.c_ring:
        return STORE_REGISTERS, ("a float32 output: from registers" if kernel.out_fp32
                                 else "the masked layout: from registers (no panel ring in its builds)")
    if STORE_DEFAULT == STORE_REGISTERS:
        return STORE_REGISTERS, "grouped.STORE_DEFAULT (GL_GROUPED_STORE) = 'registers': every slice from registers"
    if (n * elem_bytes) % TMA_ALIGN_BYTES:
        return STORE_REGISTERS, (f"N = {n}: a row of {n * elem_bytes} bytes is not a multiple of {TMA_ALIGN_BYTES} "
                                 "(a tensor map's pitch): from registers")
    if kernel.k_grouped:
        return STORE_TMA, "by TMA through each consumer's panel ring (the rank-3 output map clips M and N per group)"
    return STORE_TMA, ("by TMA through each consumer's panel ring where its 64 rows are all one group's; a group's "
                       "last, partial slice from registers")


#: The tail build's split threshold (design/stream_k.py plan_tail's min_idle): level 9's.
TAIL_MIN_IDLE = DEFAULT_MIN_IDLE


def tail_workspace(clusters: int, cluster: int, bn: int) -> tuple[int, int]:
    """(fp32 partials, int32 counters) a :attr:`GroupedGemm.tail` launch on ``clusters`` clusters of
    ``cluster`` CTAs needs, whatever its groups make of the units (the kernel's layout,
    kernels/library/sm90_grouped_gemm.cu): per CTA rank and consumer warpgroup, 2 x clusters slots of a 64 x
    ``bn`` fragment (a piece of tail unit u computed by cluster c lives in slot u + c: the tail has fewer
    units than clusters, and u + c names one piece, design/stream_k.py tail_piece_slots); a counter per tail
    unit, rank and consumer. Raises ValueError for non-positive sizes."""
    if clusters < 1 or cluster < 1 or bn < 1:
        raise ValueError(f"clusters, cluster and bn must be positive, got {clusters}, {cluster}, {bn}")
    return cluster * CONSUMERS * 2 * clusters * 64 * bn, clusters * cluster * CONSUMERS


def grad_w_bn(n: int) -> int:
    """The tile width of a grouped-along-K call with N output columns: :data:`GRAD_W_BN`, or 128 where
    N <= 128 (a 256-wide tile's right half would be past N)."""
    return 128 if n <= 128 else GRAD_W_BN


@dataclass(frozen=True, eq=False)
class GroupedGemm:
    """One build configuration of the grouped kernel: ``bn`` 128 or 256, the weight's ``b_major``,
    ``out_fp32`` (write float32), ``bias`` (add a bias row per group), ``cluster`` (1, or 2: pairs of M
    tiles sharing the weight tile by multicast; module docstring). Use :func:`grouped_gemm` for the
    shared instance, whose plans and maps are cached on it (its builds and loaded kernels in
    library/kernel.py, keyed by :meth:`config`)."""

    bn: int = 128
    b_major: str = "k"
    out_fp32: bool = False
    bias: bool = False
    #: The K-grouped build (GL_GROUPED_K, the weight gradient): a (M, total K) and b (total K, N), both
    #: MN-major, out (E, M, N); b_major is then "mn".
    k_grouped: bool = False
    #: The masked layout (GL_MASKED, decode): x (E x M_max, K), ``offs`` the valid rows per group.
    masked: bool = False
    #: CTAs per cluster (:data:`CLUSTERS`).
    cluster: int = 1
    #: Panel buffers per consumer of a build with the panel ring (:data:`RINGS`; :attr:`c_ring`).
    ring: int = C_RING
    #: The fused gated MLP (GL_SWIGLU): out = silu(x @ w_gate[e].T) * (x @ w_up[e].T), B's 256 rows a stage
    #: 128 of w_gate and 128 of w_up, 128 output columns a tile (:meth:`launch_swiglu`).
    swiglu: bool = False
    #: The stream-K tail (GL_GROUPED_TAIL; grouped along M contiguously): the device splits the last partial
    #: wave's units by K over every cluster when design/stream_k.py plan_tail's rule says so
    #: (:data:`TAIL_MIN_IDLE`), finishing a split slice through a workspace (:func:`tail_workspace`).
    tail: bool = False
    #: A measuring build's stage count, below what fits (0: the most that fit, :meth:`stages`): whether a
    #: behaviour follows the ring's depth (bench/experiments/grouped_pair_ring_hang.py). Never a route's.
    stage_cap: int = 0
    #: An activation applied in the epilogue after the bias (a name of library/activations.py ACTIVATIONS; None:
    #: none): out = act(x @ w[e].T + bias[e]) in fp32, rounded once. Grouped along M contiguously, one panel
    #: buffer, no tail (:func:`grouped_gemm`).
    activation: str | None = None
    _plans: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _maps: OrderedDict = field(default_factory=OrderedDict, repr=False)

    @property
    def tile(self) -> tuple[int, int, int]:
        return (BM, self.bn, BK)

    @property
    def name(self) -> str:
        return (f"sm90_grouped_gemm_{self.bn}_{'kgrouped' if self.k_grouped else self.b_major}"
                + ("_f32" if self.out_fp32 else "") + ("_bias" if self.bias else "")
                + ("_masked" if self.masked else "") + ("" if self.cluster == 1 else f"_c{self.cluster}")
                + ("" if self.ring == C_RING else f"_r{self.ring}") + ("_swiglu" if self.swiglu else "")
                + ("_sk" if self.tail else "") + (f"_s{self.stage_cap}" if self.stage_cap else "")
                + (f"_{self.activation}" if self.activation else ""))

    @property
    def c_ring(self) -> int:
        """Panel buffers per consumer for the output: :attr:`ring` (:data:`C_RING` unless built otherwise)
        for a bf16/fp16 output, 0 (stored from registers) for float32 and for the masked layout (decode's
        few rows per expert rarely fill a 64-row slice, and its cluster build at BN 256 spilled with the
        ring). A bias build adds the bias while packing (an in-place add to the accumulators made ptxas
        serialise every wgmma, C7515)."""
        return 0 if self.out_fp32 or self.masked or self.swiglu else self.ring

    @property
    def out_bn(self) -> int:
        """Output columns per tile: ``bn``, or half of it for the fused gated MLP (:attr:`swiglu`)."""
        return self.bn // 2 if self.swiglu else self.bn

    @property
    def deferred_panels(self) -> int:
        """Panels of a consumer's slice stored during the next tile's first K iterations (the kernel's
        kDeferredPanels): the last one, or none where the ring holds every panel of the tile (or there is
        no ring)."""
        return 0 if not self.c_ring or self.c_ring == self.bn // 64 else 1

    @staticmethod
    def stages(bn: int, dtype: str = "bf16", arch: str = "sm_90a", c_ring: int = 0) -> int:
        """The ring depth: the most stages that fit beside the group table and ``c_ring`` panel buffers per
        consumer (6 at BN 128, 4 at 256, with no ring or one buffer)."""
        ar = arch_info(arch)
        ar = replace(ar, max_smem_per_block=ar.max_smem_per_block - GROUP_TABLE_BYTES)
        return max_stages(bm=BM, bn=bn, bk=BK, elem_bytes=DTYPES[dtype].itemsize, arch=ar, consumers=CONSUMERS,
                          c_from_registers=not c_ring, c_ring=c_ring)

    def ring_stages(self, dtype: str = "bf16", arch: str = "sm_90a") -> int:
        """This build's stage count: :meth:`stages` for its tile and output ring, or :attr:`stage_cap` where set."""
        return self.stage_cap or self.stages(self.bn, dtype, arch, self.c_ring)

    @property
    def grouping(self) -> str:
        """How this build splits its problems (library/kernel.py GROUPINGS)."""
        return GROUP_K if self.k_grouped else GROUP_M_MASKED if self.masked else GROUP_M

    # --- building (no GPU needed) -----------------------------------------------------------------
    def config(self, dtype: str, arch: str = "sm_90a") -> KernelConfig:
        """The build of this configuration for ``dtype`` inputs ('bf16' or 'fp16'): its key and its
        ``-D`` constants (:meth:`KernelConfig.defines`). Raises PlanRefused, KeyError for a dtype."""
        return _config(self, dtype, arch)

    def defines(self, dtype: str, arch: str = "sm_90a") -> dict[str, int]:
        """The kernel's ``-D`` constants without the dtype switch: the designer's for the configuration,
        the float32 output switch (GL_OUT_FP32), GL_MAX_GROUPS, and the build's variants (GL_GROUPED_K,
        GL_MASKED, GL_BIAS). Raises PlanRefused, KeyError for a dtype."""
        return {k: v for k, v in self.config(dtype, arch).defines().items() if not k.startswith("GL_DTYPE_")}

    def geometry(self, dtype: str) -> LaunchGeometry:
        """384 threads (a producer and two consumer warpgroups), the planned dynamic shared memory, the
        build's cluster size."""
        d = self.defines(dtype)
        return LaunchGeometry(threads=int(d["GL_THREADS"]), dynamic_smem=int(d["GL_SMEM_BYTES"]), cluster=self.cluster)

    def translation_unit(self, dtype: str) -> str:
        """The source compiled: a comment naming the build, the activation's macro (:func:`activation_prelude`)
        where the build has one, then the kernel."""
        return f'// gemm-ladder library: {self.name}, {dtype}\n{activation_prelude(self.activation)}#include "{SOURCE}"\n'

    def build(self, dtype: str, arch: str = "sm_90a") -> CompiledKernel:
        """Compile (or fetch from the cache) the cubin for ``dtype``; needs nvcc, not a GPU.
        Raises CompilerNotFoundError without a compiler and CompileError with its message."""
        return GROUPED_GEMM.build(self.config(dtype, arch))

    def plan(self, rows: int, n: int, k: int, groups: int, dtype: str, *, ldx: int | None = None,
             w_strides: tuple[int, int] | None = None) -> GroupedPlan:
        """The plan on one problem (:class:`GroupedPlan`). ``ldx``: x's pitch (default K); ``w_strides``:
        (group stride, major stride) in elements (default dense). Raises PlanRefused naming the rule."""
        key = (rows, n, k, groups, dtype, ldx, w_strides)
        return cached(self._plans, key, lambda: self._plan(rows, n, k, groups, dtype, ldx, w_strides))

    def _plan(self, rows, n, k, groups, dtype, ldx, w_strides) -> GroupedPlan:
        # The fused gated MLP computes, before its epilogue, x times a weight of 2 x ceil(N / 128) x 128 rows
        # interleaving 128-row blocks of w_gate and w_up (its ring and shared memory are that GEMM's).
        n_gemm = 2 * ceil_div(n, self.out_bn) * self.out_bn if self.swiglu else n
        gemm = plan_gemm(rows, n_gemm, k, dtype, tile=self.tile, stages=self.ring_stages(dtype),
                         cluster=self.cluster, consumers=CONSUMERS, persistent=True, producer_warpgroup=True,
                         c_from_registers=not self.c_ring, c_ring=self.c_ring, b_major=self.b_major, lda=ldx,
                         ldb=None if w_strides is None else w_strides[1], ldc=self._ldc(n, dtype))
        dt = dtype_info(dtype)
        if w_strides is None:
            w_strides = (n * k, k if self.b_major == "k" else n)
        maps = {
            "x": operand_map("x", rows, k, major="k", ld=k if ldx is None else ldx, tile_rows=BM, bk=BK,
                             data_type=dt.tensor_map_type, elem_bytes=dt.elem_bytes, what="x (R, K) over every group's rows"),
            # The fused gated MLP's weights are each one box of BN / 2 rows a stage (w_gate's and w_up's halves).
            "w": weight_map(groups, n, k, b_major=self.b_major, stride_major=w_strides[1], stride_group=w_strides[0],
                            bn=self.bn, data_type=dt.tensor_map_type, elem_bytes=dt.elem_bytes,
                            cluster=2 if self.swiglu else self.cluster),
        }
        if self.swiglu:
            maps["w"] = replace(maps["w"], description="w_gate (E, N, K) K-major per group: the stage's first "
                                                       f"{self.out_bn} B rows, one box of group e")
            maps["w_up"] = replace(maps["w"], name="w_up", description="w_up (E, N, K) K-major per group (w_gate's "
                                                                       f"strides): the stage's last {self.out_bn} B rows")
        for spec in maps.values():
            spec.validate()
        w_boxes = self.bn // maps["w"].box_dim[1 if self.b_major == "k" else 0]  # every CTA receives the whole B
        box_bytes = maps["x"].box_bytes + maps["w"].box_bytes * w_boxes
        assert box_bytes == gemm.load_protocol.expect_tx_bytes, (box_bytes, gemm.load_protocol.expect_tx_bytes)
        return GroupedPlan(rows=rows, n=n, k=k, groups=groups, dtype=dtype, bn=self.bn, b_major=self.b_major,
                           gemm=gemm, tensor_maps=maps, cluster=self.cluster, out_bn=self.out_bn if self.swiglu else 0)

    def _ldc(self, n: int, dtype: str) -> int | None:
        """The output pitch the plan's C map is checked at: N rounded up to 16 bytes, the map a TMA-writable
        output takes (an output whose own pitch is not is stored from registers, :func:`out_map`)."""
        return _round16(n, DTYPES[dtype].itemsize) if self.c_ring else None

    def ring_protocol(self, k_iters: int | None = None, tiles: int = 2, dtype: str = "bf16",
                      shared: tuple[bool, ...] | None = None, **faults):
        """The kernel's stage ring as the auditor models it (gemm_ladder.audit), from its plan's facts: a
        producer thread, two consumer warpgroups reading every stage, each stage released once the wgmma
        of the next is issued (release_lag 1, wgmma.wait_group 1), the planned stage count, barrier
        counts and first parities; the counters carried across a CTA's tiles. A tile's K iterations
        differ between tiles in the kernel (the K-grouped build: each group's K range; an empty group's
        tiles take none and touch no stage), which audits at several (k_iters, tiles) bound. The output:
        a build with the panel ring (bf16/fp16) is modelled with it, every tile's panels through each
        consumer's ring of :attr:`c_ring` buffers, all but the last at the tile's end and the last
        deferred to the next tile's first K iteration (:attr:`deferred_panels`: none when the ring holds
        them all) (the kernel stores a group's partial slices from registers,
        which touch no shared memory: a subset of the modelled accesses); a float32 build's register
        store is modelled as a private staging buffer per consumer, which adds no hazard the kernel has
        and hides none. ``k_iters``
        defaults to stages + 1 (the ring wraps within a tile). ``faults`` go to
        :class:`gemm_ladder.audit.ring.RingConfig` (to show the audit can fail).

        The cluster build: two CTAs, each consumer releasing every stage to both, B in two halves.
        ``shared`` says per unit (tile of the model) whether the pair shares B (each CTA loads its half
        and multicasts it) or not (each loads both halves into its own stage): a tuple of ``tiles``
        bools, default every unit shared. The kernel decides per unit at run time; the audit covers the
        sequences it is given (the model's units all take ``k_iters`` K iterations; a rank without a
        tile walks its units' stages as a CTA that does not share)."""
        from gemm_ladder.audit.ring import RingConfig, build_ring_protocol

        plan = self.plan_k(256, 256, 4096, 2, dtype) if self.k_grouped else self.plan(256, 256, 4096, 2, dtype)
        g = plan if self.k_grouped else plan.gemm
        k_iters = g.stages + 1 if k_iters is None else k_iters
        ring = dict(full_count=g.ring.full_init_count, empty_count=g.ring.empty_init_count,
                    full_initial_phase=g.ring.first_full_wait_parity, empty_initial_phase=g.ring.first_empty_wait_parity,
                    expect_tx_bytes=g.load_protocol.expect_tx_bytes)
        bm, bn, bk = g.tile
        if self.c_ring:
            panels = bn * DTYPES[dtype].itemsize // 128
            faults = {"staging_buffers": self.c_ring, "panels_per_tile": panels,
                      "deferred_panels": self.deferred_panels, **faults}
        if self.cluster > 1:
            shared = (True,) * tiles if shared is None else tuple(shared)
            faults = {"shared_tiles": shared, **faults}
        elif shared is not None:
            raise ValueError("shared: only a cluster build shares B")
        label = "" if shared is None else "-" + "".join("S" if x else "O" for x in shared)
        return build_ring_protocol(RingConfig(
            stages=g.stages, k_iters=k_iters, tiles=tiles, consumers=g.consumers.warpgroups, cluster=self.cluster,
            warp_specialized=g.consumers.producer_warpgroup, release_lag=1, bm=bm, bn=bn, bk=bk, **{**ring, **faults}),
            name=f"{self.name}-S{g.stages}-K{k_iters}-T{tiles}{label}")

    # --- operands ---------------------------------------------------------------------------------
    def supports(self, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, out: torch.Tensor,
                 bias: torch.Tensor | None = None) -> str | None:
        """None when this build computes ``out[r] = x[r] @ W[e].T (+ bias[e])`` for these tensors, else the
        rule they break. ``w`` is the (E, N, K) weight as the build reads it: for ``b_major="k"`` its
        stride(2) is 1; for ``"mn"`` its stride(1) is 1 (an (E, K, N) row-major tensor transposed)."""
        dt = x.dtype
        if dt not in DTYPES.values():
            return f"x: dtype {dt} is not one of bf16, fp16"
        if w.dtype != dt:
            return f"x and w must share one dtype: got {dt}, {w.dtype}"
        want_out = torch.float32 if self.out_fp32 else dt
        if out.dtype != want_out:
            return f"out: dtype {out.dtype}, this build writes {want_out}"
        if x.dim() != 2 or w.dim() != 3 or out.dim() != 2:
            return f"x (R, K), w (E, N, K), out (R, N): got {x.dim()}-D, {w.dim()}-D, {out.dim()}-D"
        rows, k = x.shape
        groups, n, wk = w.shape
        if wk != k:
            return f"x has K = {k} but w has K = {wk}"
        if refusal := extents_refusal({"R": rows, "N": n, "K": k, "E": groups}):
            return refusal
        if groups > MAX_GROUPS:
            return f"E = {groups} groups: at most {MAX_GROUPS} (the group table in each CTA's shared memory)"
        if offs.dtype != torch.int32 or offs.dim() != 1 or offs.numel() != groups:
            return f"offs: int32 of shape ({groups},) expected, got {offs.dtype} of shape {tuple(offs.shape)}"
        if self.masked and rows % groups:
            return f"the masked layout: R = {rows} rows must be E x M_max (E = {groups})"
        if tuple(out.shape) != (rows, n) or (n > 1 and out.stride(1) != 1) or (rows > 1 and out.stride(0) < n):
            return f"out: shape {tuple(out.shape)}, strides {tuple(out.stride())}: (R, N) = ({rows}, {n}) row-major expected"
        e = x.element_size()
        if k > 1 and x.stride(1) != 1:
            return f"x has strides {tuple(x.stride())}: it must be row-major (stride (ldx, 1))"
        if self.b_major == "k" and k > 1 and w.stride(2) != 1:
            return f"w has strides {tuple(w.stride())}: this build reads w[e] K-major (stride(2) == 1)"
        if self.b_major == "mn" and n > 1 and w.stride(1) != 1:
            return f"w has strides {tuple(w.stride())}: this build reads w[e] N-major (stride(1) == 1)"
        for name, ptr, pitches in (("x", x.data_ptr(), (_ld(x, 0, k),)), ("w", w.data_ptr(), self.w_strides(w))):
            if ptr % TMA_ALIGN_BYTES or any((p * e) % TMA_ALIGN_BYTES for p in pitches):
                return (f"{name}: base {ptr:#x} and strides {tuple(p * e for p in pitches)} bytes must be multiples of "
                        f"{TMA_ALIGN_BYTES} (a TMA tensor map, cuTensorMapEncodeTiled globalAddress and globalStrides)")
        if bias is not None:
            if not self.bias:
                return "bias given to a build without GL_BIAS"
            if bias.dtype != dt or tuple(bias.shape) != (groups, n) or not bias.is_contiguous():
                return f"bias: a contiguous ({groups}, {n}) {dt} tensor expected, got {bias.dtype} {tuple(bias.shape)}"
        elif self.bias:
            return "this build adds a bias: pass one"
        dev = x.device
        tensors = (w, offs, out) + (() if bias is None else (bias,))
        if dev.type != "cuda" or any(t.device != dev for t in tensors):
            return "x, w, offs, out (and bias) must be on one CUDA device"
        return None

    def w_strides(self, w: torch.Tensor) -> tuple[int, int]:
        """(group stride, major stride) of w in elements, as its map takes them; a size-1 dimension's
        stride is replaced by the dense one (it is never stepped over)."""
        groups, n, k = w.shape
        major = _ld(w, 1, k) if self.b_major == "k" else _ld(w, 2, n)
        return (_ld(w, 0, n * k), major)

    # --- launching (GPU) --------------------------------------------------------------------------
    def loaded(self, dtype: str, device: torch.device) -> LoadedKernel:
        """The build for ``dtype`` loaded on ``device`` (compiled first if needed)."""
        config = self.config(dtype)

        def make():
            g = self.geometry(dtype)
            return load(GROUPED_GEMM.build(config), device, threads=g.threads, dynamic_smem=g.dynamic_smem,
                        cluster=g.cluster)

        return K.loaded(config, device_index(device), make)

    def launch(self, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, out: torch.Tensor,
               bias: torch.Tensor | None = None) -> None:
        """``out[r] = x[r] @ w[e].T (+ bias[e])`` on torch's current stream (see :meth:`supports`).
        Raises GemmInputError naming the rule, before any launch."""
        a = self.launch_args(x, w, offs, out, bias)
        a.kernel.launch(a.grid, a.args, a.stream)

    def bind(self, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, out: torch.Tensor,
             bias: torch.Tensor | None = None) -> BoundLaunch:
        """:meth:`launch`'s launch bound to these tensors (its ``roles`` name them x, w, out, bias, offs), for the
        compiled host path's template (gemm_ladder/host/templates.py). Raises as :meth:`launch`."""
        return self.launch_args(x, w, offs, out, bias).bound()

    def launch_args(self, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, out: torch.Tensor,
                    bias: torch.Tensor | None = None) -> "GroupedArgs":
        """What :meth:`launch` launches (:class:`GroupedArgs`): the checks, the plan, the grid, the encoded maps
        and the packed arguments with their roles. Raises GemmInputError naming the rule."""
        reason = ("the fused gated MLP build takes w_gate and w_up: launch_swiglu" if self.swiglu
                  else self.supports(x, w, offs, out, bias))
        if reason is not None:
            raise GemmInputError(reason)
        rows, k = x.shape
        groups, n, _ = w.shape
        dtype = dtype_name(x.dtype)
        ensure_context(out.device)  # autograd's backward thread has no current driver context
        kernel = self.loaded(dtype, out.device)
        try:
            plan = self.plan(rows, n, k, groups, dtype, ldx=_ld(x, 0, k), w_strides=self.w_strides(w))
        except PlanRefused as exc:
            raise GemmInputError(str(exc)) from None
        # Whole clusters, at most one per unit (a unit is `cluster` M tiles x one N tile).
        clusters = min(kernel.max_active_clusters(out.device), plan.max_units)
        map_x, map_w = self.maps(plan, x, w)
        map_c, tma_store = self.out_map(out, map_x)
        stream = torch.cuda.current_stream(out.device)
        partials, counters, idle_min = self._tail_workspace(plan, clusters, stream)
        args = [map_x, map_w, map_c, ctypes.c_void_p(out.data_ptr()), ctypes.c_longlong(_ld(out, 0, n)),
                ctypes.c_void_p(offs.data_ptr()), ctypes.c_int(groups), ctypes.c_int(rows), ctypes.c_int(n),
                ctypes.c_int(k), ctypes.c_void_p(0 if bias is None else bias.data_ptr()), ctypes.c_int(tma_store),
                ctypes.c_void_p(partials), ctypes.c_void_p(counters), ctypes.c_int(idle_min)]
        def roles():
            x_kw = ("map", "x", plan.tensor_maps["x"].encode_kwargs(x.data_ptr()))
            return [x_kw, ("map", "w", plan.tensor_maps["w"].encode_kwargs(w.data_ptr())),
                    ("map", "out", self._out_spec(out).encode_kwargs(out.data_ptr())) if tma_store else x_kw,
                    ("ptr", "out"), ("value",), ("ptr", "offs"), *[("value",)] * 4,
                    ("value",) if bias is None else ("ptr", "bias"), ("value",),
                    *([("partials",), ("counters",)] if partials else [("value",)] * 2), ("value",)]

        workspace = tail_workspace(clusters, self.cluster, self.bn) if partials else None
        return GroupedArgs(kernel, (self.cluster * clusters, 1, 1), args, roles, workspace, stream)

    def _tail_workspace(self, plan: "GroupedPlan", clusters: int, stream: torch.cuda.Stream) -> tuple[int, int, int]:
        """(partials, counters, idle_min) for a launch on ``clusters`` clusters: the stream's workspace
        (:func:`tail_workspace`'s sizes, the counters zeroed on ``stream`` first) and plan_tail's idle
        threshold in clusters, for a :attr:`tail` build that may split (more units than clusters at most);
        (0, 0, 0), no split, for the others and while a CUDA graph is captured on the current stream (the
        workspace would outlive its cache in the graph: level 9's rule, runtime/workspace.py)."""
        if not self.tail or plan.max_units <= clusters or torch.cuda.is_current_stream_capturing():
            return 0, 0, 0
        floats, count = tail_workspace(clusters, self.cluster, self.bn)
        part, ctr = WORKSPACES.get(stream, floats, count)
        return part.data_ptr(), ctr.data_ptr(), tail_idle_min(clusters, TAIL_MIN_IDLE)

    def supports_swiglu(self, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, offs: torch.Tensor,
                        out: torch.Tensor) -> str | None:
        """None when this (swiglu) build computes ``out[r] = silu(x[r] @ w_gate[e].T) * (x[r] @ w_up[e].T)``
        for these tensors, else the rule they break: :meth:`supports`' rules with w_gate as w, and w_up of
        w_gate's shape, strides, dtype and device (one map layout for both)."""
        if not self.swiglu:
            return "this build is not the fused gated MLP (swiglu=True)"
        reason = self.supports(x, w_gate, offs, out)
        if reason is not None:
            return reason
        if not isinstance(w_up, torch.Tensor):
            return f"w_up must be a torch.Tensor, got {type(w_up).__name__}"
        if (w_up.shape, w_up.stride(), w_up.dtype, w_up.device) != (w_gate.shape, w_gate.stride(), w_gate.dtype,
                                                                    w_gate.device):
            return (f"w_up: shape {tuple(w_up.shape)}, strides {tuple(w_up.stride())}, {w_up.dtype} on {w_up.device}; "
                    f"it must match w_gate's {tuple(w_gate.shape)}, {tuple(w_gate.stride())}, {w_gate.dtype} on "
                    f"{w_gate.device}")
        if w_up.data_ptr() % TMA_ALIGN_BYTES:
            return f"w_up: base {w_up.data_ptr():#x} must be a multiple of {TMA_ALIGN_BYTES} (a TMA tensor map)"
        return None

    def launch_swiglu(self, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, offs: torch.Tensor,
                      out: torch.Tensor) -> None:
        """``out[r] = silu(x[r] @ w_gate[e].T) * (x[r] @ w_up[e].T)`` for each row r of group e (fp32
        accumulation and product, one rounding to out's dtype) on torch's current stream; rows past
        offs[E - 1] are not written. Raises GemmInputError naming the rule (:meth:`supports_swiglu`) before
        any launch."""
        a = self.swiglu_args(x, w_gate, w_up, offs, out)
        a.kernel.launch(a.grid, a.args, a.stream)

    def swiglu_args(self, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, offs: torch.Tensor,
                    out: torch.Tensor) -> "GroupedArgs":
        """What :meth:`launch_swiglu` launches (:class:`GroupedArgs`; roles name x, w (w_gate), w_up, out, offs).
        Raises as it does."""
        reason = self.supports_swiglu(x, w_gate, w_up, offs, out)
        if reason is not None:
            raise GemmInputError(reason)
        rows, k = x.shape
        groups, n, _ = w_gate.shape
        dtype = dtype_name(x.dtype)
        ensure_context(out.device)
        kernel = self.loaded(dtype, out.device)
        try:
            plan = self.plan(rows, n, k, groups, dtype, ldx=_ld(x, 0, k), w_strides=self.w_strides(w_gate))
        except PlanRefused as exc:
            raise GemmInputError(str(exc)) from None
        grid = min(kernel.max_active_clusters(out.device), plan.max_units)
        specs = plan.tensor_maps
        maps = cached(self._maps, (x.data_ptr(), w_gate.data_ptr(), w_up.data_ptr(), specs["x"], specs["w"]),
                      lambda: _encode(x.device, (specs["x"], x), (specs["w"], w_gate), (specs["w_up"], w_up)))
        args = [*maps, maps[0], ctypes.c_void_p(out.data_ptr()), ctypes.c_longlong(_ld(out, 0, n)),
                ctypes.c_void_p(offs.data_ptr()), ctypes.c_int(groups), ctypes.c_int(rows), ctypes.c_int(n),
                ctypes.c_int(k), ctypes.c_void_p(0), ctypes.c_int(0)]  # map_c: x's, never read; no bias; no TMA store
        def roles():
            x_kw = ("map", "x", specs["x"].encode_kwargs(x.data_ptr()))
            return [x_kw, ("map", "w", specs["w"].encode_kwargs(w_gate.data_ptr())),
                    ("map", "w_up", specs["w_up"].encode_kwargs(w_up.data_ptr())), x_kw, ("ptr", "out"), ("value",),
                    ("ptr", "offs"), *[("value",)] * 6]

        return GroupedArgs(kernel, (grid, 1, 1), args, roles, None, torch.cuda.current_stream(out.device))

    def out_map(self, out: torch.Tensor, unused):
        """(map, tma_store) for the kernel's map_c and tma_store arguments: out's encoded map (cached per
        address and encoding) and 1 where :func:`store_rule` gives this build and out's N the TMA store and
        TMA can write out itself (:func:`out_map`); else ``unused`` (an encoded map the kernel never reads)
        and 0."""
        spec = self._out_spec(out)
        if spec is None:
            return unused, 0
        return cached(self._maps, (out.data_ptr(), spec), lambda: _encode(out.device, (spec, out))[0]), 1

    def _out_spec(self, out: torch.Tensor) -> TensorMapSpec | None:
        """out's panel-ring map where :func:`store_rule` gives this build and out's N the TMA store and TMA can
        write out itself (:func:`out_map`), else None (stored from registers)."""
        store, _ = store_rule(self, out.shape[-1], out.element_size())
        return out_map(out, k_grouped=self.k_grouped) if store == STORE_TMA else None

    def maps(self, plan: GroupedPlan, x: torch.Tensor, w: torch.Tensor) -> list:
        """The encoded maps (x, w), cached per pointers and plan (tensor maps per call: a new pointer
        encodes new maps; a cache hit reuses them)."""
        key = (x.data_ptr(), w.data_ptr(), plan.tensor_maps["x"], plan.tensor_maps["w"])
        return cached(self._maps, key, lambda: _encode(x.device, (plan.tensor_maps["x"], x), (plan.tensor_maps["w"], w)))


    # --- the K-grouped build (the weight gradient) -------------------------------------------------
    def plan_k(self, m: int, n: int, total_k: int, groups: int, dtype: str, *, lda: int | None = None,
               ldb: int | None = None) -> Plan:
        """The K-grouped build's plan: the designer's plan of the dense (M, N, total K) GEMM with a and b
        MN-major, whose tensor maps (a: globalDim (M, total K), b: (N, total K), boxes of 64 x BK) are the
        kernel's: a group's K tiles start at its first row (any K coordinate), its last one masked in
        shared memory. ``lda``/``ldb``: the pitch along K in elements (default M, N)."""
        key = ("k", m, n, total_k, groups, dtype, lda, ldb)
        return cached(self._plans, key, lambda: plan_gemm(
            m, n, total_k, dtype, tile=self.tile, stages=self.ring_stages(dtype),
            cluster=self.cluster, consumers=CONSUMERS, persistent=True, producer_warpgroup=True,
            c_from_registers=not self.c_ring, c_ring=self.c_ring, a_major="mn", b_major="mn", lda=lda, ldb=ldb,
            ldc=self._ldc(n, dtype)))

    def supports_k(self, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor) -> str | None:
        """None when the K-grouped build computes ``out[e] = a[:, K_e] @ b[K_e, :]``, else the rule broken.
        a (M, total K) with stride(0) == 1, b (total K, N) with stride(1) == 1, out (E, M, N) with rows
        of stride(2) == 1; pitches along K multiples of 16 bytes, bases 16-byte aligned; one CUDA device."""
        if not self.k_grouped:
            return "this build is grouped along M: use a k_grouped build"
        dt = a.dtype
        if dt not in DTYPES.values() or b.dtype != dt:
            return f"a and b: one dtype of bf16, fp16 expected, got {a.dtype}, {b.dtype}"
        if out.dtype != (torch.float32 if self.out_fp32 else dt):
            return f"out: dtype {out.dtype} is not what this build writes"
        if a.dim() != 2 or b.dim() != 2 or out.dim() != 3:
            return "a (M, total K), b (total K, N), out (E, M, N) expected"
        m, total_k = a.shape
        n = b.shape[1]
        groups = out.shape[0]
        if b.shape[0] != total_k or tuple(out.shape) != (groups, m, n):
            return f"a {tuple(a.shape)}, b {tuple(b.shape)}, out {tuple(out.shape)}: shapes do not match"
        if refusal := extents_refusal({"M": m, "N": n, "total K": total_k, "E": groups}):
            return refusal
        if groups > MAX_GROUPS:
            return f"E = {groups} groups: at most {MAX_GROUPS} (the group table in each CTA's shared memory)"
        if offs.dtype != torch.int32 or offs.dim() != 1 or offs.numel() != groups:
            return f"offs: int32 of shape ({groups},) expected"
        if (m > 1 and a.stride(0) != 1) or (n > 1 and b.stride(1) != 1):
            return (f"a strides {tuple(a.stride())}, b strides {tuple(b.stride())}: the K-grouped build reads both "
                    "MN-major (a.stride(0) == 1, b.stride(1) == 1)")
        if n > 1 and out.stride(2) != 1:
            return f"out strides {tuple(out.stride())}: rows must be contiguous"
        e = a.element_size()
        for name, t, pitch in (("a", a, _ld(a, 1, m)), ("b", b, _ld(b, 0, n))):
            if t.data_ptr() % TMA_ALIGN_BYTES or (pitch * e) % TMA_ALIGN_BYTES:
                return (f"{name}: base {t.data_ptr():#x} and pitch {pitch * e} bytes must be multiples of "
                        f"{TMA_ALIGN_BYTES} (a TMA tensor map)")
        dev = a.device
        if dev.type != "cuda" or any(t.device != dev for t in (b, offs, out)):
            return "a, b, offs and out must be on one CUDA device"
        return None

    def launch_k(self, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor) -> None:
        """``out[e] = a[:, offs[e-1]:offs[e]] @ b[offs[e-1]:offs[e], :]`` (zeros for an empty group) on
        torch's current stream. Raises GemmInputError naming the rule (:meth:`supports_k`) before any launch."""
        g = self.k_args(a, b, offs, out)
        g.kernel.launch(g.grid, g.args, g.stream)

    def bind_k(self, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor) -> BoundLaunch:
        """:meth:`launch_k`'s launch bound to these tensors (roles name a, b, out, offs). Raises as it does."""
        return self.k_args(a, b, offs, out).bound()

    def k_args(self, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor) -> "GroupedArgs":
        """What :meth:`launch_k` launches (:class:`GroupedArgs`). Raises as it does."""
        reason = self.supports_k(a, b, offs, out)
        if reason is not None:
            raise GemmInputError(reason)
        m, total_k = a.shape
        n, groups = b.shape[1], out.shape[0]
        dtype = dtype_name(a.dtype)
        ensure_context(out.device)  # autograd's backward thread has no current driver context
        kernel = self.loaded(dtype, out.device)
        lda, ldb = _ld(a, 1, m), _ld(b, 0, n)
        try:
            plan = self.plan_k(m, n, total_k, groups, dtype, lda=lda, ldb=ldb)
        except PlanRefused as exc:
            raise GemmInputError(str(exc)) from None
        units = groups * ceil_div(ceil_div(m, BM), self.cluster) * ceil_div(n, self.bn)
        grid = self.cluster * min(kernel.max_active_clusters(out.device), units)
        maps = cached(self._maps, (a.data_ptr(), b.data_ptr(), plan.tensor_maps["a"], plan.tensor_maps["b"]),
                      lambda: _encode(a.device, (plan.tensor_maps["a"], a), (plan.tensor_maps["b"], b)))
        map_c, tma_store = self.out_map(out, maps[0])
        args = [*maps, map_c, ctypes.c_void_p(out.data_ptr()), ctypes.c_longlong(_ld(out, 1, n)),
                ctypes.c_longlong(out.stride(0) if groups > 1 else m * n), ctypes.c_void_p(offs.data_ptr()),
                ctypes.c_int(groups), ctypes.c_int(total_k), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(tma_store)]
        def roles():
            a_kw = ("map", "a", plan.tensor_maps["a"].encode_kwargs(a.data_ptr()))
            return [a_kw, ("map", "b", plan.tensor_maps["b"].encode_kwargs(b.data_ptr())),
                    ("map", "out", self._out_spec(out).encode_kwargs(out.data_ptr())) if tma_store else a_kw,
                    ("ptr", "out"), ("value",), ("value",), ("ptr", "offs"), *[("value",)] * 5]

        return GroupedArgs(kernel, (grid, 1, 1), args, roles, None, torch.cuda.current_stream(out.device))


@dataclass
class GroupedArgs:
    """One grouped launch, packed: the loaded ``kernel``, its ``grid``, the ``args`` (ctypes values and encoded
    maps, the kernel's parameter order), ``roles()`` their roles (library/bound.py's BoundLaunch: ``("map", tensor,
    encode_kwargs)``, ``("ptr", tensor)``, ``("value",)``, ``("partials",)``, ``("counters",)``; tensors named x, w,
    w_up, out, bias, offs along M, a, b, out, offs along K; made only by :meth:`bound`, not per launch), the tail's
    ``workspace`` (fp32 partials, int32 counters) where it splits, else None, and the ``stream`` launched on."""

    kernel: LoadedKernel
    grid: tuple[int, int, int]
    args: list
    roles: Callable[[], list]
    workspace: tuple[int, int] | None
    stream: torch.cuda.Stream

    def bound(self) -> BoundLaunch:
        """These arguments as a BoundLaunch on :attr:`stream` (what a launch template is made from)."""
        return BoundLaunch(self.kernel.prepare(self.grid, self.args, self.stream.cuda_stream), roles=self.roles(),
                           workspace=self.workspace)


def _encode(device: torch.device, *specs) -> list:
    """Encode (spec, tensor) pairs into CUtensorMaps, the device's context made current first: autograd
    runs a backward on a thread of its own, which has no current driver context (cuTensorMapEncodeTiled
    then fails with CUDA_ERROR_INVALID_CONTEXT)."""
    ensure_context(device)
    return [encode_tiled(spec.encode_kwargs(t.data_ptr())) for spec, t in specs]


def _ld(t: torch.Tensor, dim: int, dense: int) -> int:
    """The pitch of dimension ``dim`` (elements); a size-1 dimension is never stepped over, so its pitch
    is the dense one rounded up to 16 bytes (a tensor map's stride rule)."""
    return t.stride(dim) if t.shape[dim] > 1 else _round16(dense, t.element_size())


def _round16(elems: int, elem_bytes: int) -> int:
    per = TMA_ALIGN_BYTES // elem_bytes
    return max(per, -(-elems // per) * per)


@functools.lru_cache(maxsize=1024)
def _config(kernel: GroupedGemm, dtype: str, arch: str) -> KernelConfig:
    # The -D constants beyond the plan's, in the order the build always passed them (GL_OUT_FP32 comes
    # with the config's output dtype).
    extra = [("GL_MAX_GROUPS", MAX_GROUPS)]
    extra += [("GL_GROUPED_K", 1)] if kernel.k_grouped else []
    extra += [("GL_MASKED", 1)] if kernel.masked else []
    extra += [("GL_BIAS", 1)] if kernel.bias else []
    extra += [("GL_SWIGLU", 1)] if kernel.swiglu else []
    extra += [("GL_GROUPED_TAIL", 1)] if kernel.tail else []
    return KernelConfig(
        FAMILY, dtype=dtype, out_dtype="fp32" if kernel.out_fp32 else dtype, arch=arch,
        a_major="mn" if kernel.k_grouped else "k", b_major=kernel.b_major, tile=kernel.tile,
        stages=kernel.ring_stages(dtype, arch), cluster=kernel.cluster, consumers=CONSUMERS,
        producer_warpgroup=True, c_ring=kernel.c_ring, store=STORE_TMA if kernel.c_ring else STORE_REGISTERS,
        schedule=GROUPED, grouping=kernel.grouping, extra=tuple(extra),
        epilogue=activation_prelude(kernel.activation) or None)


def activation_prelude(activation: str | None) -> str:
    """The lines an activation build's translation unit starts with: the header of the activations' device
    functions and ``GL_GROUPED_ACTIVATION(x)``, the activation's CUDA expression (library/activations.py); "" for
    none. The build's :class:`KernelConfig` carries it as its ``epilogue`` (part of its key)."""
    if activation is None:
        return ""
    expr = ACTIVATIONS[activation].cuda_of("x")
    return f'#include "gemm_ladder/fused_epilogue.cuh"\n#define GL_GROUPED_ACTIVATION(x) ({expr})\n'


def kernel_for(config: KernelConfig) -> GroupedGemm:
    """The :class:`GroupedGemm` whose builds ``config`` describes (its tile width, weight major, output
    dtype, bias, grouping and cluster); raises ValueError for a config of another family or one this
    family does not build."""
    if config.family != FAMILY:
        raise ValueError(f"config of family {config.family!r} given to {FAMILY}")
    try:
        kernel = grouped_gemm(config.tile[1], config.b_major, config.out_fp32, ("GL_BIAS", 1) in config.extra,
                              config.grouping == GROUP_K, config.grouping == GROUP_M_MASKED, config.cluster,
                              ring=config.c_ring or C_RING, swiglu=("GL_SWIGLU", 1) in config.extra,
                              tail=("GL_GROUPED_TAIL", 1) in config.extra, stages=config.stages,
                              activation=_activation_of(config.epilogue))
        same = kernel.config(config.dtype, config.arch) == config
    except (ValueError, KeyError):
        same = False
    if not same:
        raise ValueError(f"{FAMILY} builds no such configuration: {config}")
    return kernel


def _activation_of(epilogue: str | None) -> str | None:
    """The activation whose prelude a config's ``epilogue`` is (None for none); ValueError for another text."""
    if epilogue is None:
        return None
    for name in ACTIVATIONS:
        if activation_prelude(name) == epilogue:
            return name
    raise ValueError(f"{FAMILY}: an epilogue that is no activation's prelude")


class Sm90GroupedGemm:
    """The grouped GEMM family behind the :class:`~gemm_ladder.library.kernel.Kernel` protocol. A
    problem (:class:`~gemm_ladder.library.kernel.Operands`) grouped along M: ``a`` x (R, K), ``b`` w
    (E, N, K) as the build reads it, ``c`` out (R, N), ``more`` = (offs,) or (offs, bias) (the fused gated
    MLP: ``b`` w_gate, ``more`` = (offs, w_up)); grouped along K: ``a`` (M, total K), ``b`` (total K, N), ``c`` out (E, M, N), ``more`` = (offs,). Tensors, not
    operand views: the group's extents are on the device."""

    family = FAMILY
    splits: tuple[str, ...] = ()

    def config(self, bn: int, b_major: str, dtype: str, *, out_dtype: str | None = None, bias: bool = False,
               grouping: str = GROUP_M, cluster: int = 1, ring: int = C_RING, tail: bool = False,
               activation: str | None = None) -> KernelConfig:
        """The build with tile width ``bn``, the weight ``b_major``, ``dtype`` inputs, ``out_dtype``
        (default the inputs'; or "fp32"), a bias row per group, ``grouping``, ``cluster`` (1 or 2),
        ``ring`` (panel buffers per consumer, :data:`RINGS`), ``tail`` (the stream-K tail) and ``activation``
        (applied after the bias). Raises ValueError for a build this family does not make."""
        # Checked here: the flags below would turn an unknown grouping into "m" and an output dtype
        # other than the inputs' or fp32 into the inputs'.
        if dtype not in HALF_DTYPES:
            raise ValueError(f"dtype = {dtype!r}: {FAMILY} takes {', '.join(HALF_DTYPES)} inputs")
        if out_dtype not in (None, dtype, "fp32"):
            raise ValueError(f"out_dtype = {out_dtype!r}: {FAMILY} writes the inputs' dtype ({dtype}) or fp32")
        if grouping not in GROUPINGS:
            raise ValueError(f"grouping = {grouping!r}: one of {', '.join(GROUPINGS)}")
        return grouped_gemm(bn, b_major, out_dtype == "fp32", bias, grouping == GROUP_K,
                            grouping == GROUP_M_MASKED, cluster, ring=ring, tail=tail,
                            activation=activation).config(dtype)

    def supports(self, config: KernelConfig, problem: Operands, **rules) -> str | None:
        kernel = kernel_for(config)
        a = problem.a
        if a.dtype in DTYPES.values() and dtype_name(a.dtype) != config.dtype:
            return f"a has dtype {a.dtype}: this build ({config.dtype}) takes {config.dtype} inputs"
        if kernel.k_grouped:
            return kernel.supports_k(problem.a, problem.b, problem.more[0], problem.c)
        if kernel.swiglu:  # more = (offs, w_up)
            return kernel.supports_swiglu(problem.a, problem.b, problem.more[1], problem.more[0], problem.c)
        return kernel.supports(problem.a, problem.b, problem.more[0], problem.c, *problem.more[1:])

    def build(self, config: KernelConfig) -> CompiledKernel:
        kernel = kernel_for(config)
        return K.built(config, lambda: compile_kernel(kernel.translation_unit(config.dtype), KERNEL_NAME,
                                                      arch=config.arch, defines=config.defines()))

    def bind(self, config: KernelConfig, problem: Operands, **options):
        """Grouped launches are not bound ahead (their maps are cached per pointer): the result launches
        when called, checked then, on the stream current then."""
        if options:
            raise TypeError(f"{FAMILY} takes no launch options, got {sorted(options)}")
        kernel = kernel_for(config)
        if kernel.k_grouped:
            return lambda: kernel.launch_k(problem.a, problem.b, problem.more[0], problem.c)
        if kernel.swiglu:
            return lambda: kernel.launch_swiglu(problem.a, problem.b, problem.more[1], problem.more[0], problem.c)
        return lambda: kernel.launch(problem.a, problem.b, problem.more[0], problem.c, *problem.more[1:])

    def launch(self, bound, stream=None) -> None:
        bound()

    def loaded(self, config: KernelConfig, device: torch.device) -> LoadedKernel:
        return kernel_for(config).loaded(config.dtype, device)

    def describe(self, config: KernelConfig) -> dict:
        return {"name": kernel_for(config).name, "source": SOURCE, "tile": list(config.tile), "stages": config.stages,
                "cluster": config.cluster, "store": config.store, "c_ring": config.c_ring}


#: The grouped GEMM family (library/kernel.py's Kernel protocol).
GROUPED_GEMM = Sm90GroupedGemm()


def grouped_gemm(bn: int = 128, b_major: str = "k", out_fp32: bool = False, bias: bool = False,
                 k_grouped: bool = False, masked: bool = False, cluster: int = 1, *, ring: int = C_RING,
                 swiglu: bool = False, tail: bool = False, stages: int | None = None,
                 activation: str | None = None) -> GroupedGemm:
    """The shared :class:`GroupedGemm` of one build configuration. Raises ValueError for a BN not in
    :data:`BNS`, a major not in :data:`B_MAJORS`, a cluster not in :data:`CLUSTERS`, a K-grouped
    build with a K-major b or a bias, or a ``ring`` other than :data:`C_RING` and the tile's BN / 64
    panels (:data:`RINGS`), or deeper than :data:`C_RING` on a build without the panel ring (float32,
    masked) or with a bias, or with a pair of CTAs along M (:data:`PAIR_RING_HANG`), or a ``swiglu`` build (the fused gated MLP) other than BN 256, a K-major weight,
    grouped along M contiguously, one CTA, no bias, the inputs' dtype out, or a ``tail`` (the stream-K tail)
    on a build not grouped along M contiguously (along K, the masked layout, the fused gated MLP) or with a
    bias at BN 256 on one CTA (it spilled), or an ``activation`` not in library/activations.py ACTIVATIONS, or
    one on a build not grouped along M contiguously, with the gated MLP, the tail or a deeper ring, or with a bias
    at BN 256 on a pair of CTAs (it spilled). ``stages``: a
    measuring build's stage count (2 up to what fits; None: what fits), never a route's; ValueError outside that
    range."""
    if bn not in BNS:
        raise ValueError(f"bn = {bn}: the grouped kernel is built with BN in {BNS}")
    if b_major not in B_MAJORS:
        raise ValueError(f"b_major = {b_major!r}: 'k' or 'mn'")
    if k_grouped and (b_major != "mn" or bias):
        raise ValueError("the K-grouped build reads b MN-major (b_major='mn') and adds no bias")
    if k_grouped and masked:
        raise ValueError("the masked layout is grouped along M, not K")
    if cluster not in CLUSTERS or isinstance(cluster, bool):
        raise ValueError(f"cluster = {cluster!r}: the grouped kernel is built with clusters of {CLUSTERS} CTAs")
    if type(ring) is not int or ring not in (C_RING, bn // 64):
        raise ValueError(f"ring = {ring!r}: {C_RING} panel buffer per consumer, or one for each of the tile's "
                         f"{bn // 64} panels (RINGS)")
    if ring != C_RING and (out_fp32 or masked):
        raise ValueError(f"ring = {ring}: a float32 output and the masked layout store from registers (no panel ring)")
    if ring != C_RING and bias:
        raise ValueError(f"ring = {ring}: not built with a bias (it spilled at BN 256)")
    if ring != C_RING and cluster != 1 and not k_grouped:
        raise ValueError(f"ring = {ring} with cluster = {cluster} along M: refused, it hung ({PAIR_RING_HANG})")
    if swiglu and (bn != 256 or b_major != "k" or out_fp32 or bias or k_grouped or masked or cluster != 1 or ring != C_RING):
        raise ValueError("swiglu=True: the fused gated MLP is built at BN 256 (128 gate and 128 up rows a stage), a "
                         "K-major weight, grouped along M contiguously, one CTA, no bias, the inputs' dtype out")
    if not isinstance(tail, bool):
        raise ValueError(f"tail = {tail!r}: True or False")
    if tail and (k_grouped or masked or swiglu):
        raise ValueError("tail=True: the stream-K tail is built grouped along M contiguously (not along K, not the "
                         "masked layout, not the fused gated MLP)")
    if tail and bias and bn == 256 and cluster == 1:
        raise ValueError("tail=True with a bias at BN 256 on one CTA: not built (it spilled; the pair's build has none)")
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation = {activation!r}: one of {', '.join(ACTIVATIONS)} or None")
    if activation is not None and (k_grouped or masked or swiglu or tail or ring != C_RING):
        raise ValueError(f"activation = {activation!r}: built grouped along M contiguously, without the gated MLP, "
                         f"the tail or a deeper ring (ring = {C_RING})")
    if activation is not None and bias and bn == 256 and cluster == 2:
        raise ValueError(f"activation = {activation!r} with a bias at BN 256 on a pair of CTAs: not built (it spilled); "
                         "one CTA builds it")
    kernel = _grouped_gemm(bn, b_major, bool(out_fp32), bool(bias), bool(k_grouped), bool(masked), int(cluster),
                           int(ring), bool(swiglu), tail, activation)
    if stages is None:
        return kernel
    fit = kernel.ring_stages()
    if type(stages) is not int or not 2 <= stages <= fit:
        raise ValueError(f"stages = {stages!r}: 2 to {fit} (what fits beside this build's output ring)")
    return kernel if stages == fit else _capped(kernel, stages)


@functools.lru_cache(maxsize=None)
def _capped(kernel: GroupedGemm, stages: int) -> GroupedGemm:
    return replace(kernel, stage_cap=stages, _plans=OrderedDict(), _maps=OrderedDict())


@functools.lru_cache(maxsize=None)
def _grouped_gemm(bn: int, b_major: str, out_fp32: bool, bias: bool, k_grouped: bool, masked: bool,
                  cluster: int, ring: int, swiglu: bool = False, tail: bool = False,
                  activation: str | None = None) -> GroupedGemm:
    # One instance per configuration however the arguments were spelled (positional or by keyword).
    return GroupedGemm(bn=bn, b_major=b_major, out_fp32=out_fp32, bias=bias, k_grouped=k_grouped, masked=masked,
                       cluster=cluster, ring=ring, swiglu=swiglu, tail=tail, activation=activation)


__all__ = ["BM", "BK", "BNS", "B_MAJORS", "C_RING", "CLUSTERS", "PAIR_RING_HANG", "RINGS", "CLUSTER_EVIDENCE", "CLUSTER_EVIDENCE_GRAD_W", "CLUSTER_MIN_K",
           "FAMILY", "GRAD_W_BN", "GRAD_W_BN_EVIDENCE", "choose_cluster", "GROUPED_GEMM", "GROUP_TABLE_BYTES", "KERNEL_NAME", "MAX_GROUPS",
           "SOURCE", "STORES", "STORE_DEFAULT", "TAIL_MIN_IDLE", "activation_prelude", "choose_tail", "tail_workspace", "GroupedGemm", "GroupedPlan", "Sm90GroupedGemm", "grouped_gemm", "grad_w_bn", "kernel_for", "out_map", "store_rule", "weight_map"]
