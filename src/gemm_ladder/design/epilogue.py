"""The plan of a fused epilogue's extra loads: which inputs, how many bytes per output tile, how they
are loaded, where they are staged, and what orders them before the stores.

The library kernels (kernels/include/gemm_ladder/fused_epilogue.cuh) load every epilogue input
directly from global memory in the consumer threads that hold the accumulators, element pairs at a
time (one 4- or 8-byte load when the pair is adjacent and aligned), after the tile's last K
iteration and before the fragment is packed. So there is no tensor map, no shared-memory staging and
no barrier: the thread that loads an input element is the thread that uses it, and program order
orders the load before the math, the packing, the staging of the panel and its TMA store (whose
own ordering, fence.proxy.async and the named barrier, is level 9's and unchanged). The plan says so
rather than inventing a barrier; the auditor (audit/epilogue.py) checks these facts.

One more access, a hint: a tile input contiguous along the output's rows or columns is also prefetched
into L2 by the general kernel 8 K iterations before each tile's epilogue reads it (fused_epilogue.cuh's
epi_prefetch_runs: one prefetch.global.L2 per 128-byte line of each contiguous run of a consumer's 64 x BN
slice). A prefetch writes nothing the kernel reads and is only a hint (PTX ISA,
"prefetch"), so it orders nothing and needs no barrier; the plan records it per input (``prefetch``:
"L2 along cols", "L2 along rows" or "none"), its bytes the input's loads' bytes.
Vectors and scalars are not prefetched.

Bytes per tile (BM x BN outputs): a row vector BM elements, a column vector BN, a tile BM x BN, a
scalar none (kernel parameter space); each input's own element size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

KINDS_EXTENT = {"row": lambda bm, bn: bm, "col": lambda bm, bn: bn, "tile": lambda bm, bn: bm * bn, "scalar": lambda bm, bn: 0}


@dataclass(frozen=True)
class EpilogueLoad:
    name: str
    kind: str  # row, col, tile, scalar
    element_bytes: int
    bytes_per_tile: int
    method: str  # "direct" (ld.global.nc by the consumer threads) or "parameter" (scalars)
    staged_in: str  # "registers" or "constant bank"
    prefetch: str = "none"  # "L2 along cols" / "L2 along rows" (tile inputs, 8 K iterations before the epilogue) or "none"


@dataclass(frozen=True)
class EpilogueLoadPlan:
    tile: tuple[int, int]
    loads: tuple[EpilogueLoad, ...]
    barriers: tuple[str, ...] = ()
    ordering: str = ""
    output_bytes_per_tile: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def bytes_per_tile(self) -> int:
        return sum(ld.bytes_per_tile for ld in self.loads)

    def to_json(self) -> dict:
        return {**asdict(self), "bytes_per_tile": self.bytes_per_tile}

    def text(self) -> str:
        bm, bn = self.tile
        lines = [f"epilogue loads per {bm} x {bn} tile: {self.bytes_per_tile} bytes "
                 f"({self.bytes_per_tile / max(self.output_bytes_per_tile, 1):.2f}x the tile's output bytes)"]
        for ld in self.loads:
            pre = "" if ld.prefetch == "none" else f", prefetched to {ld.prefetch} 8 K iterations before the epilogue"
            lines.append(f"  {ld.name}: {ld.kind}, {ld.bytes_per_tile} bytes, {ld.method} loads into {ld.staged_in}{pre}")
        lines.append("  barriers: " + (", ".join(self.barriers) if self.barriers else "none added"))
        lines.append(f"  ordering: {self.ordering}")
        return "\n".join(lines)


ORDERING = ("program order: each consumer thread loads the input elements of its own accumulators after the "
            "tile's last wgmma completes (wait_group 0), applies the epilogue, then packs, stages and stores "
            "the panel through level 9's fence.proxy.async + named barrier + TMA store; no other thread reads "
            "what it loaded, so no barrier is added; a tile input's L2 prefetch 8 K iterations before the tile's "
            "end is a hint (a weak memory operation writing nothing the kernel reads) and orders nothing")

#: What EpilogueLoad.prefetch may say: the run direction of EpilogueCall.prefetch_runs.
PREFETCH = {"cols": "L2 along cols", "rows": "L2 along rows"}


def plan_epilogue_loads(inputs: list[tuple[str, str, int]], tile: tuple[int, int], out_bytes: int,
                        prefetch: dict[str, str] | None = None) -> EpilogueLoadPlan:
    """The plan for inputs ``[(name, kind, element_bytes)]`` on a (BM, BN) output tile of ``out_bytes``
    elements; ``prefetch``: the tile inputs prefetched into L2 and their run direction, "cols" or "rows"
    (EpilogueCall.prefetch_runs). Raises ValueError for an unknown kind, a non-positive element size,
    or a prefetch of an input that is not a declared tile or along another direction."""
    bm, bn = tile
    prefetch = dict(prefetch or {})
    kinds = {name: kind for name, kind, _ in inputs}
    for name, how in prefetch.items():
        if kinds.get(name) != "tile" or how not in PREFETCH:
            raise ValueError(f"prefetch of {name!r} along {how!r}: only tile inputs are prefetched, along 'cols' or 'rows'")
    loads = []
    for name, kind, size in inputs:
        if kind not in KINDS_EXTENT:
            raise ValueError(f"input {name!r}: unknown kind {kind!r}")
        if kind == "scalar":
            loads.append(EpilogueLoad(name, kind, 4, 0, "parameter", "constant bank"))
            continue
        if size <= 0:
            raise ValueError(f"input {name!r}: element size {size} must be positive")
        loads.append(EpilogueLoad(name, kind, size, KINDS_EXTENT[kind](bm, bn) * size, "direct", "registers",
                                  PREFETCH[prefetch[name]] if name in prefetch else "none"))
    return EpilogueLoadPlan((bm, bn), tuple(loads), (), ORDERING, bm * bn * out_bytes)


__all__ = ["PREFETCH", "EpilogueLoad", "EpilogueLoadPlan", "plan_epilogue_loads"]
