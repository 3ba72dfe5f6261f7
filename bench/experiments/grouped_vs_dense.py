"""Is the grouped kernel slower than our own dense kernel on the same per-expert work? (issue 24, one-off)

The E = 8 and E = 32 forwards run 0.87-0.98x the per-expert loop of cuBLAS ``mm`` (docs/grouped.md). This
times, interleaved in one process on the same operands, what separates the two:

* ``grouped``: ``gemm_ladder.grouped_mm`` as routed (one launch, no host-side sizes);
* ``grouped_c1`` / ``grouped_c2``: the same kernel forced to one CTA per cluster or a pair;
* ``grouped_rall``: the routed build's width with one CTA per cluster and a panel buffer for each of its tile's
  output panels (``ring`` 4 at BN 256, 2 at BN 128: every panel staged at the tile's end with no wait, one
  stage fewer; library/grouped.py refuses it with a pair of CTAs along M, PAIR_RING_HANG). The runs at
  d89e962 and 293011f took it with the routed cluster (2 for the forwards at K >= 2048);
* ``grouped_tail`` / ``grouped_tail_c1``: the stream-K tail build (library/grouped.py ``tail``: the last partial
  wave of units split by K over every cluster, decided on the device) with the routed cluster, and with one CTA
  per cluster;
* ``loop_ours``: a loop of ``gemm_ladder.mm`` over the experts (host-side sizes; each expert on the dense
  route, as a user who knows the sizes could call it);
* ``loop_cublas``: the same loop of ``torch.mm`` (the issue's "loop of mm per expert");
* ``torch_grouped``: ``torch._grouped_mm``.

If ``loop_ours`` runs at ``loop_cublas``'s speed and ``grouped`` below it, the grouped kernel loses time
that the dense kernel does not (its tile walk, its stores, its K loop); if ``loop_ours`` is as slow, the
gap is the dense kernel's too.

    python bench/experiments/grouped_vs_dense.py [--cases NAME,...] [--direction fwd|grad_x] [--no-loops]
                                                 [--budget 0.05] [-o FILE]

``--direction grad_x`` times the input gradient instead: dy (R, N) times each group's w (N, K), the weight
read N-major (``b = w``, no transpose), as autograd's backward of the forward calls it. ``--no-loops``
leaves the two per-expert loops out (128 launches a call at E = 128).

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
from grouped import CASES as GROUPED_CASES  # noqa: E402
from grouped import group_sizes  # noqa: E402
from suite import add_output_argument, require_gpu, save  # noqa: E402

#: name -> (E, rows, N, K, smallest, largest group): Mixtral's down projection with equal groups (the skew's
#: share of the gap), then bench/grouped.py's prefill cases.
CASES = {"mixtral_down_uniform": (8, 16384, 4096, 14336, 2048, 2048),
         **{k: v for k, v in GROUPED_CASES.items() if "decode" not in k}}
#: The cases run without --cases: the E = 8 and E = 32 forwards.
DEFAULT_CASES = ("mixtral_down_uniform", "mixtral_down_skewed", "deepseek_v3_32", "mixtral_gate_up")
#: Relative Frobenius error against the float32 reference that counts as right (bench/grouped.py's F64_TOL).
TOL = 1e-2


def fns_for(a, b, offs, sizes, out, full_ring: int, loops: bool = True):
    """The callables of the module docstring on ``a`` (R, K') and ``b`` (E, K', N'), each writing into ``out``
    (R, N') or returning a new tensor; ``full_ring`` the routed build's panels per tile; the two loops only
    with ``loops``."""
    import gemm_ladder
    from gemm_ladder.api_grouped import grouped_mm_direct

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

    fns = {
        "grouped": lambda *_: gemm_ladder.grouped_mm(a, b, offs),
        "grouped_c1": lambda *_: grouped_mm_direct(a, b, offs, cluster=1),
        "grouped_c2": lambda *_: grouped_mm_direct(a, b, offs, cluster=2),
        "grouped_rall": lambda *_: grouped_mm_direct(a, b, offs, cluster=1, ring=full_ring),
        "grouped_tail": lambda *_: grouped_mm_direct(a, b, offs, tail=True),
        "grouped_tail_c1": lambda *_: grouped_mm_direct(a, b, offs, cluster=1, tail=True),
        "torch_grouped": lambda *_: torch._grouped_mm(a, b, offs),
    }
    if loops:
        fns.update(loop_ours=loop(gemm_ladder.mm), loop_cublas=loop(torch.mm))
    return fns


def run_case(name: str, budget: float, direction: str = "fwd", loops: bool = True) -> dict:
    from gemm_ladder.api_grouped import explain_grouped_mm
    from gemm_ladder.timing import time_fns

    e, rows, n, k, lo, hi = CASES[name]
    sizes = group_sizes(e, rows, lo, hi)
    torch.manual_seed(0)
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    if direction == "fwd":  # x (R, K) @ w[e]^T
        a, b = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16), w.transpose(1, 2)
    else:  # grad_x: dy (R, N) @ w[e]
        a, b = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16), w
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    ref = torch.empty(rows, b.shape[2], device="cuda", dtype=torch.float32)
    start = 0
    for i, s in enumerate(sizes):
        ref[start:start + s] = a[start:start + s].float() @ b[i].float()
        start += s
    out = torch.empty(rows, b.shape[2], device="cuda", dtype=torch.bfloat16)
    route = explain_grouped_mm(a, b, offs)
    fns = fns_for(a, b, offs, sizes, out, route["tile"][1] // 64, loops)
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
    row = {"case": name, "direction": direction, "E": e, "rows": rows, "N": n, "K": k, "group_sizes": sizes,
           "route": route,
           "errors": errors,
           "us": {lbl: t[lbl].median_ms * 1e3 for lbl in t},
           "spread": {lbl: t[lbl].spread for lbl in t},
           "tflops": {lbl: flop / (t[lbl].median_ms * 1e-3) / 1e12 for lbl in t}}
    for base_name in ("loop_cublas", "torch_grouped"):
        base = t.get(base_name)
        if base:
            row[f"speed_vs_{base_name}"] = {lbl: base.median_ms / t[lbl].median_ms for lbl in t}
    print(f"{name} {direction}: " + ", ".join(f"{lbl} {row['us'][lbl]:.0f} us ({row['tflops'][lbl]:.0f} TF/s)" for lbl in t))
    bad = [lbl for lbl in fns if lbl not in good]
    if bad:
        print(f"{name} {direction}: not timed (wrong or refused): {bad}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated names of {', '.join(CASES)}")
    parser.add_argument("--direction", default="fwd", choices=("fwd", "grad_x"))
    parser.add_argument("--no-loops", action="store_true", help="leave out the per-expert loops of mm")
    parser.add_argument("--budget", type=float, default=0.05, help="seconds of timed calls per callable")
    add_output_argument(parser)
    args = parser.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        print(f"grouped_vs_dense: unknown case(s) {unknown}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    require_gpu(__file__)
    rows = [run_case(c, args.budget, args.direction, not args.no_loops) for c in names]
    save({"rows": rows, "tolerance": TOL}, "grouped_vs_dense", args.output)
    wrong = [r["case"] for r in rows if len(r["us"]) < len(r["errors"])]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
