"""Levels 4+: kernels fed by the TMA, built and launched from the designer's plan.

The plan (:func:`gemm_ladder.design.plan.plan_gemm`) is the one source of truth: its
``kernel_defines()`` become the kernel's compile-time constants and its tensor-map specs become the
``CUtensorMap`` arguments. Nothing about the pipeline is restated here.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from gemm_ladder.contract import dtype_name
from gemm_ladder.design.plan import kernel_defines_for, plan_gemm
from gemm_ladder.design.problem import ceil_div
from gemm_ladder.design.stream_k import DEFAULT_MIN_IDLE, StreamKTail, plan_tail
from gemm_ladder.levels.base import LaunchGeometry, Level
from gemm_ladder.runtime.tensor_map import encode_tiled
from gemm_ladder.runtime.workspace import WORKSPACES

#: Tensor maps are cached per (operand pointers, shape, dtype): encoding one in Python costs a
#: noticeable part of a sub-millisecond kernel's launch (docs/measured-choices.md), paid on every launch otherwise.
_MAP_CACHE_SIZE = 64


@dataclass(frozen=True, eq=False)
class TmaLevel(Level):
    """A level whose kernel takes (map_a, map_b, map_c, M, N, K) and the designer's smem layout."""

    tile: tuple[int, int, int] = (128, 128, 64)
    stages: int = 1
    consumers: int = 1
    cluster: int = 1
    persistent: bool = False
    producer_warpgroup: bool = False
    c_aliases_stages: bool = False
    c_ring: int = 0
    #: The kernel's signature, not a switch: it takes the stream-K tail's arguments (level 9):
    #: (tail_first_unit, max_contributors, partials, counters) after (M, N, K). The tail is split when
    #: the last wave would leave more than stream_k_min_idle of the clusters idle
    #: (design.stream_k.plan_tail); stream_k_min_idle >= 1 turns the split off.
    stream_k_args: bool = False
    stream_k_min_idle: float = DEFAULT_MIN_IDLE
    _maps: OrderedDict = field(default_factory=OrderedDict, repr=False, compare=False)
    _launches: OrderedDict = field(default_factory=OrderedDict, repr=False, compare=False)
    _defines: dict = field(default_factory=dict, repr=False, compare=False)

    def layout(self) -> dict[str, str]:
        """The operand majors this kernel is planned for, as designer keywords (``a_major``, ``b_major``);
        none for the ladder's levels, whose contract is K-major (a library kernel overrides it)."""
        return {}

    def defines(self, dtype: str) -> dict[str, int | str]:
        # Cached: planning in Python would otherwise be paid on every launch (docs/measured-choices.md).
        if dtype not in self._defines:
            self._defines[dtype] = kernel_defines_for(
                dtype, self.tile, self.stages, self.cluster, self.consumers, "sm_90a",
                producer_warpgroup=self.producer_warpgroup, c_aliases_stages=self.c_aliases_stages,
                c_ring=self.c_ring, **self.layout())
        return self._defines[dtype]

    def geometry(self, dtype: str) -> LaunchGeometry:
        d = self.defines(dtype)
        return LaunchGeometry(threads=int(d["GL_THREADS"]), dynamic_smem=int(d["GL_SMEM_BYTES"]), cluster=self.cluster)

    def plan(self, m: int, n: int, k: int, dtype: str, **leading_dims):
        """The designer's plan for this level on one problem; ``leading_dims``: ``lda``, ``ldb``, ``ldc``
        in elements (default dense), for a kernel that takes padded operands."""
        return plan_gemm(m, n, k, dtype, tile=self.tile, stages=self.stages, cluster=self.cluster,
                         consumers=self.consumers, persistent=self.persistent,
                         producer_warpgroup=self.producer_warpgroup, c_aliases_stages=self.c_aliases_stages,
                         c_ring=self.c_ring, stream_k=self.stream_k_args, stream_k_min_idle=self.stream_k_min_idle,
                         **self.layout(), **leading_dims)

    def _units(self, m: int, n: int) -> int:
        """Work units of a persistent launch: cluster-sized stacks of M tiles x N tiles."""
        return ceil_div(ceil_div(m, self.tile[0]), self.cluster) * ceil_div(n, self.tile[1])

    def grid(self, m: int, n: int, dtype: str, device: torch.device) -> tuple[int, int, int]:
        """One CTA per tile, or (persistent) as many CTAs as are resident at once, whole clusters."""
        bm, bn, _ = self.tile
        if not self.persistent:
            return (ceil_div(n, bn), ceil_div(m, bm), 1)
        resident = self.loaded(dtype, device).max_active_clusters(device)
        return (min(self._units(m, n), resident) * self.cluster, 1, 1)

    def tensor_maps(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> list:
        m, k = a.shape
        n = b.shape[0]
        key = (a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, a.dtype)
        maps = self._maps.get(key)
        if maps is None:
            plan = self.plan(m, n, k, dtype_name(a.dtype))
            maps = [encode_tiled(plan.tensor_maps[name].encode_kwargs(t.data_ptr()))
                    for name, t in (("a", a), ("b", b), ("c", c))]
            self._maps[key] = maps
            while len(self._maps) > _MAP_CACHE_SIZE:
                self._maps.popitem(last=False)
        else:
            self._maps.move_to_end(key)
        return maps

    def stream_k_tail(self, m: int, n: int, k: int, dtype: str, device: torch.device) -> StreamKTail:
        """How the launch on (M, N, K) splits its work units into whole ones and a stream-K tail."""
        return self._tail(m, n, k, self.grid(m, n, dtype, device))

    def _tail(self, m: int, n: int, k: int, grid: tuple[int, int, int]) -> StreamKTail:
        return plan_tail(self._units(m, n), grid[0] // self.cluster, ceil_div(k, self.tile[2]), self.stream_k_min_idle)

    def launch(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        m, k = a.shape
        n = b.shape[0]
        dtype = dtype_name(a.dtype)
        kernel = self.loaded(dtype, a.device)
        # The grid and the tail split per problem, cached: both are Python work on every launch otherwise.
        key = (m, n, k, dtype, a.device.index)
        plan = self._launches.get(key)
        if plan is None:
            grid = self.grid(m, n, dtype, a.device)
            plan = self._launches[key] = (grid, self._tail(m, n, k, grid) if self.stream_k_args else None)
            while len(self._launches) > _MAP_CACHE_SIZE:
                self._launches.popitem(last=False)
        grid, tail = plan
        stream = torch.cuda.current_stream(a.device)  # the workspace's stream and the launch's must be one
        args = [*self.tensor_maps(a, b, c), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k)]
        if tail is not None:
            first, partials, counters = tail.units, 0, 0  # whole units only: the workspace is never touched
            # A graph capture would keep the workspace's addresses beyond its cache: capture runs unsplit.
            if tail.tail_units and not torch.cuda.is_current_stream_capturing():
                part, ctr = WORKSPACES.get(stream, tail.workspace_floats(self.cluster, self.consumers, self.tile[1]),
                                           tail.counters(self.cluster, self.consumers))
                first, partials, counters = tail.first_unit, part.data_ptr(), ctr.data_ptr()
            args += [ctypes.c_int(first), ctypes.c_int(tail.max_contributors),
                     ctypes.c_void_p(partials), ctypes.c_void_p(counters)]
        kernel.launch(grid, args, stream)
