"""Two cost tables' picks timed against each other and against cuBLAS on this GPU (issue 23): which table
should route this device's calls.

    python bench/route_tables.py [--table-a TABLE.json] [--table-b TABLE.json] [--dtypes bf16] [--budget S]
                                 [--plan [--timings GLOB]] [-o OUT.json]

For every plain linear layer of bench/shapes_real.py's models at each of their M (each (M, N, K) once:
``x (M, K) @ w (N, K)^T``, w an ``nn.Parameter`` as a model holds it), the route each table chooses
(``dispatch.decide`` with that cost model, autotune off: the table's own pick) and, on the GPU, each pick's
launch and ``F.linear`` (cuBLAS) timed in the same rounds (gemm_ladder.timing.time_fns: L2 flushed before
each call, interleaved, the median); where both tables pick the same build it is timed once. Each pick's
output is checked against float64 first (relative Frobenius error <= 2e-2).

``--table-a`` defaults to dispatch/table.json (fitted on the H200), ``--table-b`` to the table the package
takes for this GPU (dispatch.cost_model: dispatch/table_<name>.json where one names it). ``--plan``: no GPU,
meta tensors (132 SMs, the H200's and the H100's): the rows whose picks differ, nothing timed; with ``--timings
GLOB`` (bench/shapes_real.py --autotune results), each such row whose two picks that run's autotune timed
gets their ratio (a's time over b's: warm L2, the model's leading candidates only), and a last line their
geometric mean.

Rows: ``{model, layer, M, N, K, dtype, pick_a, pick_b, us_a, us_b, us_cublas, ratio_b_over_a (us_a / us_b:
> 1, table b's pick faster), ratio_cublas_a, ratio_cublas_b (cuBLAS's time over the pick's)}``; the summary
has the geometric means over every row and over the rows whose picks differ. One JSON (bench/suite.py:
DATE_route_tables_COMMIT.json). Exit status: 0 done, 1 a wrong result, 2 no GPU (without --plan) or bad
arguments.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

from shapes_real import full_cases, geomean
from outputs import check_output, not_positive
from suite import add_output_argument, rel_frobenius_err, require_gpu, save

ERR_BOUND = 2e-2


def shapes(dtypes: list[str]) -> list[dict]:
    """bench/shapes_real.py's plain rows (every model, layer and M; ``dtypes``), each (M, N, K, dtype) once."""
    out, seen = [], set()
    for c in full_cases(dtypes=tuple(dtypes)):
        key = (c.m, c.n, c.k, c.dtype)
        if c.epilogue is None and key not in seen:
            seen.add(key)
            out.append({"model": c.model, "layer": c.layer, "M": c.m, "N": c.n, "K": c.k, "dtype": c.dtype})
    return out


def picks(row: dict, models, device: str):
    """The route each model picks for the row's product (operands on ``device``), and the operands."""
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch.validate import check_mm

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[row["dtype"]]
    x = torch.randn(row["M"], row["K"], dtype=dtype, device=device)
    w = torch.nn.Parameter(torch.randn(row["N"], row["K"], dtype=dtype, device=device) / math.sqrt(row["K"]))
    a, b = x, w.detach().T
    check_mm(a, b, None, None, device_types=("cuda", "meta"), check_grad=False)
    c = torch.empty((row["M"], row["N"]), dtype=dtype, device=device)
    return [dispatch.decide(a, b, c, given=False, model=m, tune=False) for m in models], (x, w, a, b)


def describe(route) -> str:
    from gemm_ladder.dispatch import autotune

    return autotune.label(route) if route.kind == "general" else f"{route.kind} {route.bn}"


def autotune_timings(pattern: str) -> dict:
    """(M, N, K, dtype) -> {candidate label: median us} from bench/shapes_real.py --autotune results: each plain
    row's timed candidates (dispatch/autotune.py's labels, the ones describe() gives; a candidate that raised
    left out)."""
    import glob
    import json

    out = {}
    for f in sorted(glob.glob(pattern)):
        for r in json.loads(Path(f).read_text()).get("rows", []):
            t = r.get("tuning") or {}
            if (r.get("epilogue") is None and t.get("state") == "tuned" and "same_as" not in r and r.get("ok")
                    and r.get("tuned_ok") is not False):
                out[(r["M"], r["N"], r["K"], r["dtype"])] = {
                    label: us for label, us in zip(t["candidates"], t["times_us"]) if us is not None}
    return out


def measure(row: dict, models, budget: float) -> tuple[dict, bool]:
    import torch.nn.functional as F

    from gemm_ladder.dispatch import execute
    from gemm_ladder.timing import time_fns

    routes, (x, w, a, b) = picks(row, models, "cuda")
    labels = [describe(r) for r in routes]
    ref = a.double() @ b.double()
    ok = True
    fns = {}
    for name, route in zip(("a", "b"), routes):
        if name == "b" and labels[1] == labels[0]:
            continue
        c = torch.full((row["M"], row["N"]), float("nan"), dtype=a.dtype, device="cuda")
        execute.run(route, a, b, c)
        err = rel_frobenius_err(c, ref)
        ok &= math.isfinite(err) and err <= ERR_BOUND
        row[f"err_{name}"] = err
        out = torch.empty_like(c)
        fns[name] = lambda x_, w_, r=route, o=out: execute.run(r, x_, w_.detach().T, o)
    fns["cublas"] = lambda x_, w_: F.linear(x_, w_)
    with torch.no_grad():
        t = time_fns(fns, x, w, budget_s=budget, rounds=3)
    us = {k: v.median_ms * 1e3 for k, v in t.items()}
    us.setdefault("b", us["a"])
    row.update(pick_a=labels[0], pick_b=labels[1], us_a=us["a"], us_b=us["b"], us_cublas=us["cublas"],
               ratio_b_over_a=us["a"] / us["b"], ratio_cublas_a=us["cublas"] / us["a"],
               ratio_cublas_b=us["cublas"] / us["b"])
    return row, ok


def summarize(rows: list[dict]) -> dict:
    differ = [r for r in rows if r["pick_a"] != r["pick_b"]]
    return {"rows": len(rows), "rows_differing": len(differ),
            "ratio_b_over_a_all": geomean([r["ratio_b_over_a"] for r in rows]),
            "ratio_b_over_a_differing": geomean([r["ratio_b_over_a"] for r in differ]),
            "ratio_cublas_a": geomean([r["ratio_cublas_a"] for r in rows]),
            "ratio_cublas_b": geomean([r["ratio_cublas_b"] for r in rows]),
            "min_ratio_b_over_a": min((r["ratio_b_over_a"] for r in rows), default=None),
            "max_ratio_b_over_a": max((r["ratio_b_over_a"] for r in rows), default=None)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table-a", type=Path, default=None, help="default: dispatch/table.json")
    p.add_argument("--table-b", type=Path, default=None, help="default: the package's table for this GPU")
    p.add_argument("--dtypes", default="bf16", help="comma list of bf16, fp16")
    p.add_argument("--budget", type=float, default=0.05, help="timing budget per callable and row, seconds")
    p.add_argument("--plan", action="store_true", help="no GPU: the rows whose picks differ, on meta tensors")
    p.add_argument("--timings", default=None,
                   help="with --plan: bench/shapes_real.py --autotune results (a glob) whose timed candidates price "
                        "both picks where both were timed")
    add_output_argument(p)
    args = p.parse_args(argv)
    dtypes = [d for d in args.dtypes.split(",") if d]
    if not dtypes or any(d not in ("bf16", "fp16") for d in dtypes):
        print(f"bench/route_tables.py: --dtypes {args.dtypes!r}: use bf16 and/or fp16", file=sys.stderr)
        return 2
    if problem := not_positive("--budget", args.budget):
        print(f"bench/route_tables.py: {problem}", file=sys.stderr)
        return 2
    if args.plan and args.output:
        print("bench/route_tables.py: --plan times nothing and writes no result; drop -o", file=sys.stderr)
        return 2
    if args.timings is not None and not args.plan:
        print("bench/route_tables.py: --timings goes with --plan", file=sys.stderr)
        return 2
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch.heuristic import TABLE_PATH, load_table

    if not args.plan:
        check_output(__file__, args.output)
        require_gpu(__file__)
    try:
        table_a = load_table(args.table_a or TABLE_PATH)
        if args.table_b:
            table_b = load_table(args.table_b)
        elif args.plan:
            print("bench/route_tables.py: --plan needs --table-b (no GPU to pick the package's table by)",
                  file=sys.stderr)
            return 2
        else:
            table_b = dispatch.cost_model(dispatch.device_facts(torch.device("cuda")))
    except (OSError, ValueError) as e:
        print(f"bench/route_tables.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    timed = {}
    if args.timings is not None:
        try:
            timed = autotune_timings(args.timings)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print(f"bench/route_tables.py: --timings {args.timings!r}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        if not timed:
            print(f"bench/route_tables.py: --timings {args.timings!r}: no autotune timings there", file=sys.stderr)
            return 2
    rows, ok, priced = [], True, []
    for row in shapes(dtypes):
        if args.plan:
            routes, _ = picks(row, (table_a, table_b), "meta")
            la, lb = describe(routes[0]), describe(routes[1])
            if la != lb:
                times = timed.get((row["M"], row["N"], row["K"], row["dtype"]), {})
                price = f"  timed: x{times[la] / times[lb]:.3f}" if la in times and lb in times else ""
                if price:
                    priced.append(times[la] / times[lb])
                print(f"{row['model']} {row['layer']} {row['M']}x{row['N']}x{row['K']} {row['dtype']}: {la} -> {lb}{price}")
            continue
        row, good = measure(row, (table_a, table_b), args.budget)
        ok &= good
        rows.append(row)
        flag = "" if row["pick_a"] == row["pick_b"] else f"  {row['pick_b']}: x{row['ratio_b_over_a']:.3f}"
        print(f"{row['model']} {row['layer']} {row['M']}x{row['N']}x{row['K']} {row['dtype']}: {row['pick_a']} "
              f"{row['ratio_cublas_a']:.3f}x cuBLAS{flag}{'' if good else '  WRONG'}", flush=True)
    if args.plan:
        if args.timings:
            print(f"{len(priced)} changed picks timed by the autotune: table b's pick "
                  f"{geomean(priced) or float('nan'):.3f}x faster than a's (geometric mean of a's time over b's)"
                  + (f", {min(priced):.3f}x to {max(priced):.3f}x" if priced else ""))
        return 0
    summary = summarize(rows)
    print(f"{summary['rows_differing']} of {summary['rows']} picks differ; table b over a: "
          f"{summary['ratio_b_over_a_all']:.3f} over all, {summary['ratio_b_over_a_differing'] or float('nan'):.3f} "
          f"where they differ; vs cuBLAS {summary['ratio_cublas_a']:.3f} (a) and {summary['ratio_cublas_b']:.3f} (b)")
    save({"table_a": table_a.provenance, "table_b": table_b.provenance, "summary": summary, "rows": rows},
         "route_tables", args.output)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
