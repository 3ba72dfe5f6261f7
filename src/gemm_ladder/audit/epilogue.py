"""Audit of a fused epilogue's load plan (design/epilogue.py): the facts the kernels rely on.

What applies to direct loads: every tensor input is loaded by the consumer threads into registers
(no shared memory, so no stage to reuse early and no phase to track), scalars come from parameter
space, the byte counts match the inputs' kinds on the tile, and the plan adds no barrier (so there is
no barrier to prove free of deadlock). A plan that stages an input in shared memory or adds a barrier
is refused here: the ring auditor would have to model it, and the kernels do not do it.

The L2 prefetch of a tile input 8 K iterations before each tile's end (design/epilogue.py) is a hint: it
is allowed on tile inputs only (the kernels prefetch nothing else), names a run direction, and changes
neither how the input is loaded (still direct, into registers) nor the barriers (it orders nothing, so it
adds none).
"""

from __future__ import annotations

from gemm_ladder.design.epilogue import KINDS_EXTENT, PREFETCH, EpilogueLoadPlan


def audit_epilogue_plan(plan: EpilogueLoadPlan) -> list[str]:
    """Problems found (empty: the plan is what the kernels do). Each names the input and the rule."""
    bm, bn = plan.tile
    problems = []
    for ld in plan.loads:
        want = 0 if ld.kind == "scalar" else KINDS_EXTENT[ld.kind](bm, bn) * ld.element_bytes
        if ld.bytes_per_tile != want:
            problems.append(f"{ld.name}: {ld.bytes_per_tile} bytes per tile, the {ld.kind} input on {bm} x {bn} is {want}")
        if ld.kind == "scalar" and (ld.method, ld.staged_in) != ("parameter", "constant bank"):
            problems.append(f"{ld.name}: a scalar travels in the kernel's parameter space")
        if ld.kind != "scalar" and (ld.method, ld.staged_in) != ("direct", "registers"):
            problems.append(f"{ld.name}: {ld.method} into {ld.staged_in}; the kernels load inputs directly into "
                            "registers (staging in shared memory would need a barrier the ring audit does not model)")
        if ld.prefetch != "none" and (ld.kind != "tile" or ld.prefetch not in PREFETCH.values()):
            problems.append(f"{ld.name}: prefetch {ld.prefetch!r} on a {ld.kind} input; the kernels prefetch tile inputs "
                            f"only, {' or '.join(repr(v) for v in PREFETCH.values())}")
    if plan.barriers:
        problems.append(f"barriers {list(plan.barriers)}: direct loads by the threads that use them need none")
    return problems


def audit_text(plan: EpilogueLoadPlan) -> str:
    problems = audit_epilogue_plan(plan)
    if problems:
        return "epilogue loads: REFUSED\n" + "\n".join(f"  {p}" for p in problems)
    pre = [ld.name for ld in plan.loads if ld.prefetch != "none"]
    return ("epilogue loads: ok (direct loads into registers by the consumer threads that use them; "
            "no shared memory staged, no barrier added, nothing for the ring audit to prove"
            + (f"; {', '.join(pre)} prefetched into L2 8 K iterations before each tile's end, a hint that orders "
               "nothing)" if pre else ")"))


__all__ = ["audit_epilogue_plan", "audit_text"]
