"""Audit of a fused epilogue's load plan (design/epilogue.py): the facts the kernels rely on.

What applies to direct loads: every tensor input is loaded by the consumer threads into registers
(no shared memory, so no stage to reuse early and no phase to track), scalars come from parameter
space, the byte counts match the inputs' kinds on the tile, and the plan adds no barrier (so there is
no barrier to prove free of deadlock). A plan that stages an input in shared memory or adds a barrier
is refused here: the ring auditor would have to model it, and the kernels do not do it.

The L2 prefetch of a tile input before each tile's epilogue (design/epilogue.py) is a hint: it is allowed
on tile inputs only, names a run direction, and changes neither how the input is loaded (still direct,
into registers) nor the barriers (it orders nothing, so it adds none). The same holds of a vector's L1
prefetch (library/epilogue.py's VECTOR_PREFETCH_L1), allowed on vectors only, along the vector's own
direction (a "col" vector's along cols). Scalars are never prefetched.
"""

from __future__ import annotations

from gemm_ladder.design.epilogue import KINDS_EXTENT, PREFETCH, VECTOR_PREFETCH, EpilogueLoadPlan


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
        allowed = list(PREFETCH.values()) if ld.kind == "tile" else [VECTOR_PREFETCH.get(ld.kind)]
        if ld.prefetch != "none" and ld.prefetch not in allowed:
            problems.append(f"{ld.name}: prefetch {ld.prefetch!r} on a {ld.kind} input; the kernels prefetch tile inputs "
                            f"only into L2, {' or '.join(repr(v) for v in PREFETCH.values())}, and vectors only into "
                            f"L1 along their own direction, {' or '.join(repr(v) for v in VECTOR_PREFETCH.values())}")
    if plan.barriers:
        problems.append(f"barriers {list(plan.barriers)}: direct loads by the threads that use them need none")
    return problems


def audit_text(plan: EpilogueLoadPlan) -> str:
    problems = audit_epilogue_plan(plan)
    if problems:
        return "epilogue loads: REFUSED\n" + "\n".join(f"  {p}" for p in problems)
    l2 = [ld.name for ld in plan.loads if ld.prefetch.startswith("L2")]
    l1 = [ld.name for ld in plan.loads if ld.prefetch.startswith("L1")]
    pre = [f"{', '.join(names)} prefetched into {level}" for level, names in (("L2", l2), ("L1", l1)) if names]
    return ("epilogue loads: ok (direct loads into registers by the consumer threads that use them; "
            "no shared memory staged, no barrier added, nothing for the ring audit to prove"
            + (f"; {' and '.join(pre)} before each tile's epilogue, hints that order nothing)" if pre else ")"))


__all__ = ["audit_epilogue_plan", "audit_text"]
