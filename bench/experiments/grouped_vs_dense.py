"""Is the grouped kernel slower than our own dense kernel on the same per-expert work? (issue 24, one-off)

The E = 8 and E = 32 forwards run 0.87-0.98x the per-expert loop of cuBLAS ``mm`` (docs/grouped.md). This
times, interleaved in one process on the same operands, what separates the two:

* ``grouped``: ``gemm_ladder.grouped_mm`` as routed (one launch, no host-side sizes);
* ``grouped_c1`` / ``grouped_c2``: the same kernel forced to one CTA per cluster or a pair;
* ``grouped_r4``: the routed cluster with a panel buffer per output panel (``ring=4``: every panel staged
  at the tile's end with no wait, one stage fewer; the forward's ring is 1, unmeasured against 4);
* ``loop_ours``: a loop of ``gemm_ladder.mm`` over the experts (host-side sizes; each expert on the dense
  route, as a user who knows the sizes could call it);
* ``loop_cublas``: the same loop of ``torch.mm`` (the issue's "loop of mm per expert");
* ``torch_grouped``: ``torch._grouped_mm``.

If ``loop_ours`` runs at ``loop_cublas``'s speed and ``grouped`` below it, the grouped kernel loses time
that the dense kernel does not (its tile walk, its stores, its K loop); if ``loop_ours`` is as slow, the
gap is the dense kernel's too.

    python bench/experiments/grouped_vs_dense.py [--cases NAME,...] [--budget 0.05] [-o FILE]

Every output is NaN-poisoned first and checked against a float32 reference (relative Frobenius error
below 1e-2, the grouped bench's bound); a wrong configuration is reported and not timed. Writes
``DATE_grouped_vs_dense_COMMIT.json`` (``$OUT`` or bench/results/); exits 1 when any is wrong.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from grouped import group_sizes  # noqa: E402
from suite import add_output_argument, require_gpu, save  # noqa: E402

#: name -> (E, rows, N, K, smallest, largest group): bench/grouped.py's E = 8 and E = 32 cases, and
#: Mixtral's down projection with equal groups (the skew's share of the gap).
CASES = {
    "mixtral_down_uniform": (8, 16384, 4096, 14336, 2048, 2048),
    "mixtral_down_skewed": (8, 16384, 4096, 14336, 412, 4390),
    "deepseek_v3_32": (32, 32768, 4096, 7168, 21, 2423),
    "mixtral_gate_up": (8, 16384, 28672, 4096, 2048, 2048),
}
#: Relative Frobenius error against the float32 reference that counts as right (bench/grouped.py's F64_TOL).
TOL = 1e-2


def fns_for(a, w, offs, sizes, out):
    """The callables of the module docstring, each writing into ``out`` (R, N) or returning a new tensor."""
    import gemm_ladder
    from gemm_ladder.api_grouped import grouped_mm_direct

    b = w.transpose(1, 2)
    bounds, start = [], 0
    for s in sizes:
        bounds.append((start, start + s))
        start += s

    def loop(mm):
        def run(*_):
            for e, (lo, hi) in enumerate(bounds):
                if hi > lo:
                    mm(a[lo:hi], b[e], out=out[lo:hi])
            return out
        return run

    return {
        "grouped": lambda *_: gemm_ladder.grouped_mm(a, b, offs),
        "grouped_c1": lambda *_: grouped_mm_direct(a, b, offs, cluster=1),
        "grouped_c2": lambda *_: grouped_mm_direct(a, b, offs, cluster=2),
        "grouped_r4": lambda *_: grouped_mm_direct(a, b, offs, ring=4),
        "loop_ours": loop(gemm_ladder.mm),
        "loop_cublas": loop(torch.mm),
        "torch_grouped": lambda *_: torch._grouped_mm(a, b, offs),
    }


def run_case(name: str, budget: float) -> dict:
    from gemm_ladder.api_grouped import explain_grouped_mm
    from gemm_ladder.timing import time_fns

    e, rows, n, k, lo, hi = CASES[name]
    sizes = group_sizes(e, rows, lo, hi)
    torch.manual_seed(0)
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    ref = torch.empty(rows, n, device="cuda", dtype=torch.float32)
    start = 0
    for i, s in enumerate(sizes):
        ref[start:start + s] = a[start:start + s].float() @ w[i].float().T
        start += s
    out = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
    fns = fns_for(a, w, offs, sizes, out)
    errors, good = {}, {}
    for label, fn in fns.items():
        out.fill_(float("nan"))
        try:
            got = fn().float()
        except Exception as exc:  # noqa: BLE001 - a refused configuration is part of the record
            errors[label] = f"{type(exc).__name__}: {exc}"
            continue
        err = float((got - ref).norm() / ref.norm())
        errors[label] = err
        if err == err and err < TOL:
            good[label] = fn
    t = time_fns(good, a, a, budget_s=budget, rounds=4)
    flop = 2.0 * rows * n * k
    row = {"case": name, "E": e, "rows": rows, "N": n, "K": k, "group_sizes": sizes,
           "route": explain_grouped_mm(a, w.transpose(1, 2), offs),
           "errors": errors,
           "us": {lbl: t[lbl].median_ms * 1e3 for lbl in t},
           "spread": {lbl: t[lbl].spread for lbl in t},
           "tflops": {lbl: flop / (t[lbl].median_ms * 1e-3) / 1e12 for lbl in t}}
    base = t.get("loop_cublas")
    if base:
        row["speed_vs_loop_cublas"] = {lbl: base.median_ms / t[lbl].median_ms for lbl in t}
    print(f"{name}: " + ", ".join(f"{lbl} {row['us'][lbl]:.0f} us ({row['tflops'][lbl]:.0f} TF/s)" for lbl in t))
    bad = [lbl for lbl in fns if lbl not in good]
    if bad:
        print(f"{name}: not timed (wrong or refused): {bad}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated names of CASES")
    parser.add_argument("--budget", type=float, default=0.05, help="seconds of timed calls per callable")
    add_output_argument(parser)
    args = parser.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        print(f"grouped_vs_dense: unknown case(s) {unknown}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    require_gpu(__file__)
    rows = [run_case(c, args.budget) for c in names]
    save({"rows": rows, "tolerance": TOL}, "grouped_vs_dense", args.output)
    wrong = [r["case"] for r in rows if len(r["us"]) < len(r["errors"])]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
