"""From operand metadata to one route: the kernel, the orientation, which operands are read in place
and which are repacked first (and why), the output path, and the tile and split.

Works on CUDA and meta tensors alike (shapes, strides, dtypes and base-address residues are all it
reads; on meta the kernels' device rule is set aside: :func:`supports`), so every decision can be
checked without a GPU. On a CUDA device ``c`` must be a real tensor (the kernels' ``supports`` read
its device); operand workspaces are described by a small probe tensor, never allocated here (an
output workspace is, once, when a kernel must be asked about it).

The search, for each orientation (``D = A B^T`` into c; or ``D^T = B A^T`` into c.T, which makes a
column-major output row-major and puts a small N on the kernel's M) and each kernel (the small-M
kernel when the kernel's M <= 256; the general kernel for each tile width):

1. each operand is read in place when it has a K- or MN-major view (library.operand.operand_view),
   else or when the kernel refuses that view, repacked into a zero-padded workspace (same major, or
   the other one when the kernel reads only that); the output is written in place (by the general
   kernel's TMA store; where that cannot write it, e.g. N not a multiple of 16 bytes, a pitch or base
   not 16-byte aligned, a float32 output, by its build that stores C from registers; the small-M
   kernel always stores from registers) or, when no kernel can write it, into a workspace copied back;
2. the combinations are tried cheapest first (bytes the repack kernel moves; a copy that changes
   the major reads element by element and counts four times); the first one ``supports`` accepts is
   that kernel's route.

Choice: the small-M kernel when it fits and copies no more than the general kernel would (copies of
its small operand A aside), in the bucket and number of M tiles the table's measured rule picks
(dispatch.small_m_tiles; one tile of the smallest bucket >= M when more tiles would copy more), unless
that rule measured a general configuration faster at the nearest timed shape and the general kernel
has a route of it that copies no more than the small-M one (``Route.small_m_table`` then says why):
the general kernel's route below (the rule's GENERAL), or its 64-row build with one CTA per cluster at
the table's BN, split as the cost model ranks (GENERAL_BM64: :func:`choose_general_build`); otherwise
the route that moves the fewest repack bytes, then the (BN, split) the cost model (dispatch.heuristic)
ranks fastest, among the tile widths its table has times for (a width the tune has not timed is
named in ``untimed_bns`` and not chosen).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, replace

import torch

from gemm_ladder.contract import dtype_name
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.dispatch.heuristic import CLUSTER, CLUSTER1_SPLITS, Candidate, CostModel, rank
from gemm_ladder.dispatch.pingpong import wide_config
from gemm_ladder.dispatch.small_m_tiles import (BM64_CLUSTER, BM64_TILE_M, ONE_TILE, WORDS, TilesChoice, TilesRule,
                                                one_tile_bn)
from gemm_ladder.library.kernel import KernelConfig, Operands
from gemm_ladder.library.operand import TMA_ALIGN_BYTES, OperandView, operand_view
from gemm_ladder.library.quantized import QUANT_OUT
from gemm_ladder.library.repack import aligned_pitch

#: The quantized output's widest tile when its fused epilogue reads a residual or a float32 bias: at BN 256
#: the block-by-block quantization beside those loads spilled (a residual with any activation, 220 bytes;
#: a float32 bias with SiLU, 64), at BN 128 none did (every activation, bias and residual dtype; the
#: resource gate, docs/fp8.md).
QUANTIZED_NARROW_MAX_BN = 128
#: A copy that changes an operand's major reads with a stride: its bytes count this many times when
#: routes are compared (a cost rank, not a measured ratio).
TRANSPOSING_WEIGHT = 4


@dataclass(frozen=True)
class DeviceFacts:
    """The GPU a route is for: its name and SM count; ``assumed`` when there was none to ask."""

    name: str
    sms: int
    assumed: bool = False

    @property
    def clusters(self) -> int:
        """Resident 2-CTA clusters of the general kernel: one CTA per SM (66 on the H200's 132 SMs, as
        level 9 measured: design/stream_k.py)."""
        return max(1, self.sms // CLUSTER)

    def describe(self) -> str:
        return f"{self.name}, {self.sms} SMs" + (" (assumed: no GPU to ask)" if self.assumed else "")


#: What a route on meta tensors assumes: the H200 the project measures on (132 SMs: design/problem.py's ArchInfo for sm_90a).
ASSUMED_DEVICE = DeviceFacts("NVIDIA H200", 132, assumed=True)


def device_facts(device: torch.device) -> DeviceFacts:
    """The facts of a CUDA ``device`` (torch's device properties), or ASSUMED_DEVICE for meta."""
    if device.type != "cuda":
        return ASSUMED_DEVICE
    return _cuda_facts(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_facts(index: int) -> DeviceFacts:
    props = torch.cuda.get_device_properties(index)
    return DeviceFacts(props.name, props.multi_processor_count)


@dataclass(frozen=True)
class OperandPath:
    """How one kernel operand (rows, K) is read: in place, or from a zero-padded workspace.

    ``name``: the caller's argument ('a' or 'b'); ``role``: the kernel's operand ('A' or 'B');
    ``major``/``ld``/``k``: what the kernel reads; ``workspace``: the storage shape (outer, inner) of
    the copy, K padded to a multiple of 8 with zeros; ``repack``: why it is copied (None: in place).
    """

    name: str
    role: str
    rows: int
    k: int
    major: str
    ld: int
    repack: str | None = None
    workspace: tuple[int, int] | None = None
    transposing: bool = False
    elem_bytes: int = 2

    @property
    def repack_bytes(self) -> int:
        if self.workspace is None:
            return 0
        return (self.rows * self.k + self.workspace[0] * self.workspace[1]) * self.elem_bytes

    def to_json(self) -> dict:
        return {"argument": self.name, "operand": self.role, "rows": self.rows, "k": self.k, "major": self.major,
                "ld": self.ld, "path": "repacked" if self.repack else "in place", "why": self.repack,
                "workspace": list(self.workspace) if self.workspace else None, "transposing_copy": self.transposing}


@dataclass(frozen=True)
class OutputPath:
    """Where the kernel writes: ``c`` ((M, N), or c.T when ``transposed``) in place, or a workspace
    ``(rows, pitch)`` copied back into it (``copy_back`` says why). ``store``: how the kernel writes
    (``STORE_TMA`` through shared memory and TMA stores, or ``STORE_REGISTERS`` by the consumers
    themselves, from their registers)."""

    transposed: bool
    given: bool
    rows: int
    cols: int
    dtype: torch.dtype
    copy_back: str | None = None
    workspace: tuple[int, int] | None = None
    transposing: bool = False  # the copy back writes along a strided dimension (element by element)
    store: str = "TMA store"

    @property
    def label(self) -> str:
        """The output path in a few words: 'TMA store', 'C from registers' or 'workspace + copy back'."""
        return "workspace + copy back" if self.workspace is not None else self.store

    @property
    def copy_bytes(self) -> int:
        """Bytes the copy back moves (weighted TRANSPOSING_WEIGHT times when it writes with a stride)."""
        if self.workspace is None:
            return 0
        size = torch.empty((), dtype=self.dtype, device="meta").element_size()
        return 2 * self.rows * self.cols * size * (TRANSPOSING_WEIGHT if self.transposing else 1)

    def to_json(self) -> dict:
        return {"orientation": "D^T = B A^T written into c.T" if self.transposed else "D = A B^T written into c",
                "out": "given" if self.given else "allocated", "dtype": str(self.dtype).replace("torch.", ""),
                "path": "workspace, copied back" if self.copy_back else "in place", "why": self.copy_back,
                "store": self.store, "output_path": self.label,
                "workspace": list(self.workspace) if self.workspace else None, "transposing_copy": self.transposing}


@dataclass(frozen=True, eq=False)
class Route:
    """One decision: run the build ``config`` on operands ``a_path``/``b_path`` into ``c_path`` with
    ``options`` (the launch options its family's ``bind`` takes).

    ``m``, ``n``: the kernel's problem (swapped from the caller's when ``c_path.transposed``);
    ``bn``: the general kernel's tile width (None for the small-M kernel, whose bucket and M tiles
    are ``tiles``);
    ``refusals``: what the kernel's ``supports`` said of the cheaper paths it did not take.
    """

    kind: str  # 'small_m' or 'general'
    config: KernelConfig
    m: int
    n: int
    k: int
    dtype: torch.dtype
    a_path: OperandPath
    b_path: OperandPath
    c_path: OutputPath
    device: DeviceFacts
    bn: int | None = None
    options: tuple[tuple[str, object], ...] = ()
    candidates: tuple[Candidate, ...] = ()
    refusals: tuple[str, ...] = ()
    unfit: tuple[str, ...] = ()  # the kernel families that found no route, with their first refusal
    tiles: TilesChoice | None = None  # the small-M kernel's bucket and M tiles, and why (dispatch/small_m_tiles.py)
    untimed_bns: tuple[int, ...] = ()  # tile widths built with a route here but not in the cost table
    small_m_table: TilesChoice | None = None  # a general route where the small-M kernel fits: the table's
    # choice for it, whose ``general_why`` says why the general kernel runs instead
    consumer_schedule: str | None = None  # why the ping-pong build runs (dispatch/pingpong.py); None: cooperative
    tuning: object = None  # the autotune's timings where it chose this route (dispatch/autotune.py's Tuning)

    @property
    def family(self):
        """The config's kernel family (library/kernel.py's Kernel protocol: supports, build, bind, launch)."""
        return K.family(self.config)

    @property
    def kernel(self):
        """The per-configuration kernel object of the config (LibraryGemm or SmallMGemm: its plan, tile,
        stages and name, for explain and the benches)."""
        return K.kernel_object(self.config)

    @property
    def repack_cost(self) -> int:
        """Bytes the repack kernel moves (a copy changing the major weighted TRANSPOSING_WEIGHT times)."""
        return _cost(self.a_path) + _cost(self.b_path) + self.c_path.copy_bytes


def _cost(p: OperandPath) -> int:
    return p.repack_bytes * (TRANSPOSING_WEIGHT if p.transposing else 1)


# --- operands ------------------------------------------------------------------------------------


def tma_reason(v: OperandView | None, x: torch.Tensor) -> str | None:
    """Why a TMA tensor map cannot describe operand ``x`` (rows, K), or None when it can."""
    if v is None:
        return (f"neither K- nor MN-major: strides {tuple(x.stride())} for shape {tuple(x.shape)} "
                "(a tensor map needs one unit stride)")
    if v.data_ptr % TMA_ALIGN_BYTES:
        return (f"base address is {v.data_ptr % TMA_ALIGN_BYTES} bytes past a 16-byte boundary "
                "(TMA needs a 16-byte aligned base)")
    if (v.ld * v.elem_bytes) % TMA_ALIGN_BYTES:
        return (f"leading dimension {v.ld} elements = {v.ld * v.elem_bytes} bytes is not a multiple of 16 "
                "(TMA row strides)")
    return None


def in_place_view(x: torch.Tensor) -> OperandView | None:
    """``operand_view(x, k_dim=1)``, with any aligned pitch for a single line (one row of a K-major
    operand, one K of an MN-major one: its pitch is never used, so the kernel may take any)."""
    v = operand_view(x, k_dim=1)
    if v is not None:
        single = v.rows == 1 if v.major == "k" else v.k == 1
        if single and (v.ld * v.elem_bytes) % TMA_ALIGN_BYTES:
            v = replace(v, ld=aligned_pitch(v.k if v.major == "k" else v.rows, v.elem_bytes))
    return v


def natural_major(x: torch.Tensor, v: OperandView | None) -> str:
    """The major a copy of ``x`` keeps (its own, or the one along its smaller stride): the copy then
    reads and writes along rows."""
    if v is not None:
        return v.major
    return "k" if abs(x.stride(1)) <= abs(x.stride(0)) else "mn"


def workspace_shape(rows: int, k: int, major: str, elem_bytes: int) -> tuple[int, int]:
    """Storage (outer, inner) of a repacked operand: K padded to a multiple of 8 (zeros), the inner
    extent to a 16-byte pitch."""
    k8 = -(-k // 8) * 8
    return (rows, aligned_pitch(k8, elem_bytes)) if major == "k" else (k8, aligned_pitch(rows, elem_bytes))


def workspace_view(probe: torch.Tensor, rows: int, k: int, major: str, shape: tuple[int, int]) -> OperandView:
    """The view the kernel gets of a workspace of storage ``shape``; ``probe`` stands for its storage
    (dtype, device, a 16-byte aligned base), so no workspace is allocated to ask ``supports``."""
    return OperandView(probe, rows, k, shape[1], major)


@dataclass(frozen=True)
class _Option:
    path: OperandPath
    view: OperandView


def operand_options(name: str, role: str, x: torch.Tensor, probe: torch.Tensor, k_read: int) -> list[_Option]:
    """Ways to read operand ``x`` (rows, K) with the kernel reading K = ``k_read``, cheapest first:
    in place (when a view exists and ``k_read`` is the true K), a copy keeping its major, a copy
    changing it."""
    rows, k = x.shape
    e = x.element_size()
    v = in_place_view(x)
    reason = tma_reason(v, x)
    out = []
    if v is not None and k_read == k:
        out.append(_Option(OperandPath(name, role, rows, k, v.major, v.ld, elem_bytes=e), v))
    keep = natural_major(x, v)
    for major in (keep, "mn" if keep == "k" else "k"):
        shape = workspace_shape(rows, k, major, e)
        why = reason or "the kernel does not read it in place"
        if k_read != k:
            why += f"; K padded to {k_read} with zeros for the kernel"
        path = OperandPath(name, role, rows, k_read, major, shape[1], why, shape, major != keep, e)
        out.append(_Option(path, workspace_view(probe, rows, k_read, major, shape)))
    return out


# --- output --------------------------------------------------------------------------------------


def c_target(c: torch.Tensor, transposed: bool) -> torch.Tensor:
    """The tensor the kernel writes: ``c`` or ``c.T``, a single row given an aligned row stride (its
    pitch is never used)."""
    t = c.T if transposed else c
    if t.shape[0] == 1 and t.stride(1) == 1 and (t.stride(0) * t.element_size()) % TMA_ALIGN_BYTES:
        t = torch.as_strided(t, tuple(t.shape), (aligned_pitch(t.shape[1], t.element_size()), 1), t.storage_offset())
    return t


def c_reason(t: torch.Tensor) -> str:
    """Why a tensor-map store cannot write ``t`` directly (stated for the explanation)."""
    e = t.element_size()
    if t.stride(1) != 1 and t.shape[1] > 1:
        return f"not row-major: strides {tuple(t.stride())}"
    if t.data_ptr() % TMA_ALIGN_BYTES:
        return f"base address is {t.data_ptr() % TMA_ALIGN_BYTES} bytes past a 16-byte boundary"
    if (t.stride(0) * e) % TMA_ALIGN_BYTES:
        return f"row pitch {t.stride(0)} elements = {t.stride(0) * e} bytes is not a multiple of 16"
    return "the kernel does not write it in place"


#: OutputPath.store values.
STORE_TMA = "TMA store"
STORE_REGISTERS = "C from registers"


def output_options(c: torch.Tensor, transposed: bool, given: bool) -> list[tuple[OutputPath, object]]:
    """In place by a TMA store, in place from registers, then a workspace copied back; each with the
    tensor ``supports`` is asked about (the workspace's as a function: on the GPU it is allocated, once,
    only if the in-place paths are refused). The two in-place paths cost nothing and keep this order
    when routes are sorted by cost: the TMA store where it can write c."""
    t = c_target(c, transposed)
    rows, cols = t.shape
    direct = OutputPath(transposed, given, rows, cols, c.dtype)
    shape = (rows, aligned_pitch(cols, c.element_size()))
    made: list[torch.Tensor] = []

    def workspace() -> torch.Tensor:
        if not made:
            made.append(torch.empty(shape, dtype=c.dtype, device=c.device)[:, :cols])
        return made[0]

    strided = t.stride(1) != 1 and cols > 1
    return [(direct, t), (replace(direct, store=STORE_REGISTERS), t),
            (replace(direct, copy_back=c_reason(t), workspace=shape, transposing=strided), workspace)]


# --- search --------------------------------------------------------------------------------------


def supports(config: KernelConfig, a: OperandView, b: OperandView, c: torch.Tensor, **rules) -> str | None:
    """Whether the build ``config`` computes ``c = A @ B^T`` (its family's ``supports``), with its
    device rule set aside for meta tensors.

    The library kernels check the device last (library/gemm.py and library/small_m.py: "one CUDA
    device" ends their rules), so on meta tensors, which describe a call without running it, a refusal
    naming the meta device means every other rule held: it is taken as acceptance. On CUDA tensors
    every rule counts.
    """
    reason = K.family(config).supports(config, Operands(a, b, c), **rules)
    if reason is not None and c.device.type == "meta" and "meta" in reason:
        return None
    return reason


def _operands(a: torch.Tensor, b: torch.Tensor, transposed: bool):
    """The kernel's (A, B) as (rows, K) tensors with their caller names."""
    if transposed:
        return ("b", b.T), ("a", a)
    return ("a", a), ("b", b.T)


def _k_reads(k: int) -> tuple[int, ...]:
    """The K the kernel may read: the true K, then (K not a multiple of 8) K padded with zeros, which
    only workspaces provide."""
    return (k,) if k % 8 == 0 else (k, -(-k // 8) * 8)


def _combos(xa, xb, names, c_opts, probe, k_read) -> list:
    """Every (A option, B option, output option) of one orientation at one K read, cheapest first (what the
    repack and copy-back move): the same for every kernel family, so :func:`find_routes` makes them once."""
    a_opts = operand_options(names[0], "A", xa, probe, k_read)
    b_opts = operand_options(names[1], "B", xb, probe, k_read)
    return sorted(itertools.product(a_opts, b_opts, c_opts),
                  key=lambda abc: _cost(abc[0].path) + _cost(abc[1].path) + abc[2][0].copy_bytes)


def _route_for(kind, kernel_at, xa, xb, combos_by_k, dtype, device, bn) -> tuple[Route | None, list[str]]:
    """The cheapest route of one kernel family: the small-M kernel, or the general kernel of one tile
    width (a config per operand order and output store: ``kernel_at(a_major, b_major, c_path)``, None
    where none is built), over ``combos_by_k`` (K read -> :func:`_combos`, the true K first). Combinations are
    tried cheapest first; the refusals kept are those of cheaper paths. The small-M kernel stores only from
    registers: its in-place path is the registers one."""
    refusals: list[str] = []
    for k_read, combos in combos_by_k.items():
        for a_o, b_o, (cp, ct) in combos:
            if kind == "small_m" and cp.workspace is None and cp.store != STORE_REGISTERS:
                continue
            if cp.dtype in (torch.float32, QUANT_OUT) and cp.store != STORE_REGISTERS:
                continue  # only the register store writes float32 and e4m3 (the TMA-store builds write the inputs' dtype)
            config = kernel_at(a_o.path.major, b_o.path.major, cp)
            if config is None:
                if kind == "general" and cp.store == STORE_REGISTERS and cp.workspace is None and \
                        kernel_at(a_o.path.major, b_o.path.major, replace(cp, store=STORE_TMA)) is not None:
                    refusals.append("this build stores C only by TMA; this output needs the register store")
                else:
                    refusals.append(f"no {kind} kernel reads A {a_o.path.major}-major and B {b_o.path.major}-major")
                continue
            # A workspace is ours: the general kernel's TMA store may write its row padding.
            rules = {"c_padding_writable": True} if kind == "general" and callable(ct) else {}
            reason = supports(config, a_o.view, b_o.view, ct() if callable(ct) else ct, **rules)
            if reason is None:
                return Route(kind, config, xa.shape[0], xb.shape[0], k_read, dtype, a_o.path, b_o.path, cp, device,
                             bn, options=tuple(rules.items()), refusals=tuple(dict.fromkeys(refusals))), refusals
            refusals.append(reason)
    return None, refusals


def _general_at(a_major: str, b_major: str, bn: int, c_path: OutputPath, dtype: str,
                cluster: int = CLUSTER, tile_m: int = 128) -> KernelConfig | None:
    """The general kernel's build for an output path: the TMA-store build, or (STORE_REGISTERS, in
    place) the build that stores C from registers for outputs a TMA store cannot write, in the output's
    dtype; None where the width is not built for B's major (BN 192 and an MN-major B), for a
    cluster-1 or 64-row build anywhere but the TMA store (the one their GPU tests and measurements
    cover), for a 64-row build of majors the route does not offer it for (K.general_tile_m_routed), and
    for the quantized (e4m3) output at a width that is not whole 128-column scale blocks."""
    if not K.general_built(b_major, bn) or not K.general_tile_m_routed(tile_m, a_major, b_major):
        return None
    if c_path.store == STORE_REGISTERS and c_path.workspace is None:
        quantized = c_path.dtype == QUANT_OUT
        if cluster != CLUSTER or tile_m != 128 or (quantized and bn % 128):
            return None
        return K.general_from_registers(a_major, b_major, bn, dtype, out_fp32=c_path.dtype == torch.float32,
                                        out_e4m3=quantized)
    return K.general(a_major, b_major, bn, dtype, cluster, tile_m)


def _small_m_at(m: int, bn: int, a_major: str, b_major: str, c_path: OutputPath, dtype: str) -> KernelConfig:
    """The small-M kernel's build of bucket ``bn`` for these majors, in the output's dtype."""
    return K.small_m(m, bn, dtype, a_major=a_major, b_major=b_major,
                     out_dtype="fp32" if c_path.dtype == torch.float32 else None)


def _small_m_families(m: int, n: int, k: int, tiles_rule: TilesRule) -> list[tuple[int, TilesChoice]]:
    """The small-M kernel's buckets for the kernel's (M, N, K), with the tile choice of each: the
    bucket ``tiles_rule`` picks, and when that is more than one tile, one tile after it (a fallback
    :func:`choose` takes only when it copies less: a bucket below 64 reads an MN-major A only from a
    copy)."""
    if K.small_m(m) is None:
        return []
    one = one_tile_bn(m)
    choice = tiles_rule.choose(m, n, k)
    out = [(choice.bn, choice)]
    if choice.tiles > 1:
        why = (f"one tile: {WORDS.get(choice.tiles, choice.tiles)} tiles of BN {choice.bn} would copy more here "
               f"(the table's choice: {choice.why})")
        out.append((one, TilesChoice(one_tile_bn(m), 1, why, choice.provenance, choice.general_why,
                                     choice.general_bm64_bn)))
    return out


#: The shape classes :func:`class_configs` lists builds for (dispatch/precompile.py's CLASSES describe them).
SHAPE_CLASSES = ("large", "small_m", "fp32_out", "unaligned", "quantized_out")
_MAJORS = ("k", "mn")


def class_configs(shape_class: str, dtype: str, bns: tuple[int, ...], a_major: str | None = None,
                  b_major: str | None = None) -> list[KernelConfig]:
    """Every build the search above reaches for calls of ``shape_class`` on ``dtype`` inputs, made by the
    same constructors it uses (:func:`_general_at`, :func:`_small_m_at`): per operand order (each of
    A's and B's majors, or the one given), the general kernel's TMA-store build ("large"; with A and B K-major,
    its 128-row ping-pong build too, which dispatch/pingpong.py's 128-row rule hands a call) or its
    register-store build ("unaligned": outputs a TMA store cannot write; "fp32_out": its float32
    output) in each tile width of ``bns``, its quantized (e4m3) build in each of them that is whole scale
    blocks ("quantized_out"), and the small-M kernel in every bucket ("small_m"; its float32 output for
    "fp32_out"). What ``precompile`` builds; raises ValueError for another class."""
    if shape_class not in SHAPE_CLASSES:
        raise ValueError(f"shape class {shape_class!r}: one of {', '.join(SHAPE_CLASSES)}")
    bf16 = torch.bfloat16
    tma = OutputPath(False, False, 1, 1, bf16)
    registers = replace(tma, store=STORE_REGISTERS)
    fp32 = replace(registers, dtype=torch.float32)
    out: list[KernelConfig] = []
    for am in (a_major,) if a_major else _MAJORS:
        for bm in (b_major,) if b_major else _MAJORS:
            if shape_class == "large":
                out += [c for bn in bns for cl in K.general_clusters() for tm in K.general_tile_ms()
                        if (c := _general_at(am, bm, bn, tma, dtype, cl, tm)) is not None]
                if (am, bm) == ("k", "k"):  # the 128-row ping-pong build, any call (dispatch/pingpong.py's 128-row rule)
                    out.append(wide_config(dtype))
            if shape_class in ("unaligned", "fp32_out"):
                path = fp32 if shape_class == "fp32_out" else registers
                out += [c for bn in bns if (c := _general_at(am, bm, bn, path, dtype)) is not None]
            if shape_class == "quantized_out":
                out += [c for bn in bns if (c := _general_at(am, bm, bn, replace(registers, dtype=QUANT_OUT), dtype))
                        is not None]
            if shape_class in ("small_m", "fp32_out"):
                path = fp32 if shape_class == "fp32_out" else registers
                out += [_small_m_at(bn, bn, am, bm, path, dtype) for bn in K.small_m_buckets()]
    return out


def find_routes(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, given: bool, device: DeviceFacts,
                orientations: tuple[bool, ...] = (False, True),
                tiles_rule: TilesRule = ONE_TILE, narrow: bool = False) -> tuple[list[Route], list[str]]:
    """Every kernel family's cheapest route for ``c = a @ b`` (a (M, K), b (K, N), c (M, N), checked),
    and for each family and orientation without one, its first refusal.

    Small-M routes first (the bucket ``tiles_rule`` picks, then one tile when it picked more), then
    the general kernel's by tile width. A quantized output (``c`` e4m3: values whose 1 x 128 scales run
    along c's rows) has the general kernel's register-store build only, in c's own orientation, and
    with ``narrow`` (its epilogue reads a residual or a float32 bias) tiles at most :data:`QUANTIZED_NARROW_MAX_BN`
    wide.
    """
    routes: list[Route] = []
    unfit: list[str] = []
    probe = torch.empty(8, dtype=a.dtype, device=a.device)  # stands for a workspace (16-byte aligned)
    k = a.shape[1]
    dtype = dtype_name(a.dtype)
    quantized = c.dtype == QUANT_OUT
    for transposed in orientations:
        if quantized and transposed:
            continue
        (na, xa), (nb, xb) = _operands(a, b, transposed)
        c_opts = output_options(c, transposed, given)
        combos_by_k = {k_read: _combos(xa, xb, (na, nb), c_opts, probe, k_read) for k_read in _k_reads(k)}
        m = xa.shape[0]
        families = [("small_m", lambda am, bm, cp, sbn=sbn: _small_m_at(m, sbn, am, bm, cp, dtype), None, choice, CLUSTER,
                     None) for sbn, choice in ([] if quantized else _small_m_families(m, xb.shape[0], k, tiles_rule))]
        # Each width in level 9's 2-CTA clusters, then one CTA per cluster, each with 128-row tiles then
        # 64-row ones: a tie in predicted time keeps the earlier (the pair, the 128-row tile).
        families += [("general", lambda am, bm, cp, bn=bn, cl=cl, tm=tm: _general_at(am, bm, bn, cp, dtype, cl, tm), bn,
                      None, cl, tm)
                     for bn in K.general_bns() for cl in K.general_clusters() for tm in K.general_tile_ms()
                     if not (quantized and narrow and bn > QUANTIZED_NARROW_MAX_BN)]
        for kind, kernel_at, bn, choice, cl, tm in families:
            r, refusals = _route_for(kind, kernel_at, xa, xb, combos_by_k, a.dtype, device, bn)
            if r is not None:
                routes.append(replace(r, tiles=choice) if choice else r)
            elif refusals:
                label = (kind + (" BM 64" if tm == 64 else "") + (f" BN {bn}" if bn else "")
                         + (" (1 CTA per cluster)" if cl == 1 else "")
                         + (", D^T into c.T" if transposed else ""))
                unfit.append(f"{label}: {refusals[0]}")
    return routes, unfit


def choose(routes: list[Route], model: CostModel) -> Route | None:
    """The route to run (see the module docstring), its launch options and ranked candidates; None
    when ``routes`` is empty."""
    small = [r for r in routes if r.kind == "small_m"]
    general = [r for r in routes if r.kind == "general"]
    least_general = min((r.repack_cost for r in general), default=None)
    # The small-M kernel wins unless it would copy more than the general kernel does, its copies of
    # the small operand A (at most 256 x K) aside: a copy of the weight only it needs costs more
    # than its speed-up at small M gains.
    eligible = [r for r in small if least_general is None or r.repack_cost - _cost(r.a_path) <= least_general]
    if eligible:  # ties: the first listed (the table's bucket before its one-tile fallback)
        best = min(eligible, key=lambda r: (r.repack_cost, r.c_path.transposed))
        table = best.tiles
        cheap = [r for r in general if r.repack_cost <= best.repack_cost]
        # The table measured a general configuration faster here (in place, as the tune times it): taken
        # when the general kernel has a route of it (the 64-row one-CTA build at the table's BN, or any of
        # its timed widths for its route) that copies no more than the small-M route does.
        if table is not None and table.general_why:
            if table.general_bm64_bn is not None:
                forced = choose_general_build(cheap, model, bm=BM64_TILE_M, cluster=BM64_CLUSTER,
                                              bn=table.general_bm64_bn)
                if forced is not None:
                    return replace(forced, small_m_table=table)
            elif any(r.bn in model.k_iter_us for r in cheap):
                return replace(_choose_general(cheap, model), small_m_table=table)
        return replace(best, options=(*best.options, ("splits", None)))
    if not general:
        return None
    return _choose_general(general, model)


def _choose_general(general: list[Route], model: CostModel) -> Route:
    """The general route to run: the fewest repack bytes among the timed tile widths, then the
    (BN, split) the cost model ranks fastest (see :func:`choose`)."""
    # Only the tile widths the table has times for are ranked: a width built but never timed by the
    # tune (bench/library.py --tune) has no measured cost, and no hand-typed one stands in for it.
    timed = [r for r in general if r.bn in model.k_iter_us]
    if not timed:
        raise ValueError(f"dispatch table ({model.provenance}) times none of the tile widths the general kernel "
                         f"found a route for ({sorted({r.bn for r in general})}): re-tune with bench/library.py --tune")
    untimed = tuple(sorted({r.bn for r in general if r.bn not in model.k_iter_us}, reverse=True))
    ranked = _ranked_general(timed, model)
    cand, r = ranked[0]
    return replace(r, options=(*r.options, ("split", cand.work.split)), candidates=tuple(c for c, _ in ranked),
                   untimed_bns=untimed)


def _ranked_general(timed: list[Route], model: CostModel) -> list[tuple[Candidate, Route]]:
    """Every (BN, split) candidate of the routes in ``timed`` (general routes at widths the table times)
    that move the fewest repack bytes, with its route, fastest predicted first."""
    least = min(r.repack_cost for r in timed)
    ranked = []
    for r in timed:
        # A 64-row build is ranked at the widths whose K iteration the table has measured against the
        # 128-row build's (bm64_k_iter_scale); none other.
        if r.repack_cost == least and (r.config.tile[0] == 128 or r.bn in model.bm64_k_iter_scale):
            cluster = r.config.cluster
            configs = [(r.bn, s) for s in K.kernel_splits(r.config) if cluster != 1 or s in CLUSTER1_SPLITS]
            ranked += [(cand, r) for cand in rank(model, r.m, r.n, r.k, max(1, r.device.sms // cluster), configs,
                                                  cluster=cluster, bm=r.config.tile[0])]
    # A 64-row build past the table's bm64_max_waves is not ranked (CostModel.ranks), unless nothing else is
    # (choose_general_build's 64-row routes alone).
    kept = [cr for cr in ranked if model.ranks(cr[0].work, cr[1].m)]
    ranked = kept or ranked
    ranked.sort(key=lambda cr: round(cr[0].predicted_us, 6))  # stable: wider tiles, fewer splits first
    return ranked


def general_alternatives(routes: list[Route], model: CostModel, *, margin: float, limit: int) -> list[Route]:
    """The general routes the autotune times (dispatch/autotune.py): the model's choice among
    ``routes``' general ones (what :func:`choose` runs when no small-M route is eligible) first, then
    the next candidates it ranks, each as a route with its split set, while their predicted time is
    within ``margin`` (a fraction) of the choice's and there are at most ``limit`` in all; the ranking
    rules are the choice's (the fewest repack bytes, the timed widths). Empty where no general route
    has a timed width."""
    timed = [r for r in routes if r.kind == "general" and r.bn in model.k_iter_us]
    if not timed:
        return []
    chosen = _choose_general([r for r in routes if r.kind == "general"], model)  # its untimed_bns too
    ranked = _ranked_general(timed, model)
    best = ranked[0][0].predicted_us
    out = [chosen]
    # A split that leaves every tile whole ("tail" where the tiles fill whole waves) launches the same
    # work as no split: one of each is timed.
    seen = {_same_work(*ranked[0])}
    for cand, r in ranked[1:]:
        if len(out) >= limit or cand.predicted_us > best * (1 + margin):
            break
        if _same_work(cand, r) in seen:
            continue
        seen.add(_same_work(cand, r))
        # Its own candidate first (explain's grid reads it), then the rest in the model's order.
        others = tuple(c for c, _ in ranked if c is not cand)
        out.append(replace(r, options=(*r.options, ("split", cand.work.split)), candidates=(cand, *others),
                           untimed_bns=chosen.untimed_bns))
    return out


def _same_work(cand: Candidate, r: Route) -> tuple:
    """What a candidate launches, less its split's name: the build and the work's division."""
    w = cand.work
    return (r.config, w.units, w.grid_clusters, w.whole_iters, w.split_iters, w.contributors)


def choose_general_build(routes: list[Route], model: CostModel, *, bm: int, cluster: int,
                         bn: int | None = None) -> Route | None:
    """The general kernel's route of one build among ``routes``: ``bm``-row tiles, ``cluster`` CTAs per
    cluster, tile width ``bn`` (None: any), chosen as :func:`choose` chooses among general routes (the
    fewest repack bytes, then the (BN, split) the cost model ranks fastest); None where ``routes`` has
    no route of that build at a width the cost table times (``k_iter_us``, and ``bm64_k_iter_scale`` for
    64 rows). What the small-M table's GENERAL_BM64 answer runs, and what bench/library_small_m.py
    --tune times for it (dispatch/small_m_tiles.py)."""
    ok = [r for r in routes if r.kind == "general" and r.config.tile[0] == bm and r.config.cluster == cluster
          and (bn is None or r.bn == bn) and r.bn in model.k_iter_us
          and (bm == 128 or r.bn in model.bm64_k_iter_scale)]
    return _choose_general(ok, model) if ok else None
