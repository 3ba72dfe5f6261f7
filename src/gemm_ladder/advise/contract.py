"""The auditable artefact of a recommended step: the designer's plan (levels 4-9) or the thread-copy levels'
contract table (levels 1-3), for one problem shape clipped to the level's domain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Contract:
    """The auditable artefact for the recommended step: a designer plan, a thread-copy contract table, or
    (for a climb) the stopping table."""

    kind: str  # "tma_plan", "thread_copy", "stopping", "refused"
    title: str
    data: dict[str, Any] = field(default_factory=dict)
    plan: Any = None  # the design Plan, when kind == "tma_plan"

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "title": self.title, **self.data}
        if self.plan is not None:
            from gemm_ladder.design.describer import plan_document  # the plan with its prose, as `design` prints it

            out["plan"] = plan_document(self.plan)
        return out



def _clip_to_domain(level: Any, shape: tuple[int, int, int]) -> tuple[tuple[int, int, int], str]:
    d = level.domain
    clipped = tuple(min(v, b) if b is not None else v for v, b in zip(shape, (d.max_m, d.max_n, d.max_k)))
    if clipped == tuple(shape):
        return tuple(shape), ""
    return clipped, (f" ({'x'.join(map(str, shape))} clipped to level {level.number}'s domain, "
                     f"{d.describe()})")


def step_contract(number: int, shape: tuple[int, int, int], dtype: str, arch: str) -> Contract:
    """The designer's plan for level ``number`` (levels 4-9, :func:`gemm_ladder.design.plan.plan_gemm` with the
    level's configuration), or the thread-copy levels' contract table (levels 1-3: tile, grid, K tiles and the
    wgmma shared-memory descriptors, from the designer's :func:`~gemm_ladder.design.smem.mma_descriptor`)."""
    from gemm_ladder.design.plan import SWIZZLE_BYTES
    from gemm_ladder.design.problem import PlanRefused, arch_info, ceil_div, dtype_info
    from gemm_ladder.design.smem import mma_descriptor
    from gemm_ladder.levels import LEVELS
    from gemm_ladder.levels.thread_copy import TILE_M, TILE_N
    from gemm_ladder.levels.tma import TmaLevel

    level = LEVELS[number]
    (m, n, k), clipped = _clip_to_domain(level, shape)
    if isinstance(level, TmaLevel):
        try:
            plan = level.plan(m, n, k, dtype)
        except PlanRefused as exc:
            return Contract("refused", f"level {number}'s plan at {m}x{n}x{k}: refused", {"refused": str(exc)})
        return Contract("tma_plan", f"The designer's plan for level {number} ({level.name}) at {m}x{n}x{k} {dtype}"
                        f"{clipped}", {"shape": [m, n, k]}, plan)
    bk = LEVELS[1].domain.max_k  # level 1 is one K tile: its domain's K bound is BK
    e = dtype_info(dtype).elem_bytes
    desc = {op: mma_descriptor(op, rows=rows, bk=bk, elem_bytes=e, swizzle_bytes=SWIZZLE_BYTES, arch=arch_info(arch))
            for op, rows in (("A", TILE_M), ("B", TILE_N))}
    geo = level.geometry(dtype)
    tiles = ceil_div(m, TILE_M) * ceil_div(n, TILE_N)
    tiled = bool(getattr(level, "tiled", False))
    k_tiles = ceil_div(k, bk)
    rows = [
        ("tile BM x BN x BK", f"{TILE_M} x {TILE_N} x {bk}", "levels/thread_copy.py TILE_M, TILE_N; level 1's domain K <= BK"),
        ("threads per CTA", geo.threads, "Level.geometry"),
        ("grid", f"{ceil_div(n, TILE_N)} x {ceil_div(m, TILE_M)} CTAs, one per output tile ({tiles} tiles)" if tiled
         else "one CTA (the whole output is one tile)", "ThreadCopyLevel.tiled"),
        ("K tiles", f"{k_tiles} of {bk}" + (f", the last {k % bk} wide, zero-filled to {bk}" if k % bk else "")
         if number > 1 else f"one (K <= {bk})", "the level's domain"),
        ("shared memory", f"A {TILE_M} x {bk} and B {TILE_N} x {bk}, K-major, {SWIZZLE_BYTES}B swizzle, 1024-byte aligned",
         "design.smem"),
        ("domain", level.domain.describe(), "the level registry"),
    ]
    for op, d in desc.items():
        rows.append((f"wgmma descriptor {op}", f"layout type {d.layout_type} (bits {d.layout_type_bits}), LBO {d.leading_byte_offset} "
                     f"(encoded {d.leading_byte_offset_encoded}), SBO {d.stride_byte_offset} (encoded "
                     f"{d.stride_byte_offset_encoded}), +{d.k_step_bytes} bytes (encoded {d.k_step_encoded}) per "
                     f"k16 step, {d.k_steps_per_tile} steps per K tile, template {d.template:#018x}",
                     "design.smem.mma_descriptor"))
    return Contract("thread_copy", f"The contract of level {number} ({level.name}) at {m}x{n}x{k} {dtype}{clipped}",
                    {"shape": [m, n, k], "rows": [{"item": a, "value": b, "source": c} for a, b, c in rows],
                     "descriptors": {op: d.to_json() for op, d in desc.items()}})
