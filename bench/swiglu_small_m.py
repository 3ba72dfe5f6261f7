"""Where does swiglu's small-M path (two small-M GEMMs, gate and up meeting in the second's epilogue)
beat the fused swiglu kernel, and by how much does it beat what users write? Its threshold.

    python bench/swiglu_small_m.py [--quick] [--dtype bf16] [--ms 1,7,16,...] [--no-compile] [-o OUT.json]

Per MLP shape (N x K: w_gate and w_up (N, K)) and M, timed interleaved on the same tensors
(gates.performance.time_fns: L2 flushed before every call, launch latency hidden, medians):

* ``pair``     dispatch/swiglu_small_m.run with ONE_LAUNCH off: x @ w_up^T into float32, then x @ w_gate^T with
               silu(gate) * up in its epilogue (the small-M route, two launches);
* ``one_launch`` dispatch/swiglu_small_m.run with ONE_LAUNCH on at every M (ONE_LAUNCH_MAX_M lifted to 256: past
               128 rows, BN 128 in two tiles): both products in one launch of the small-M kernel's gated build
               (library/swiglu_small_m.py), silu(gate) * up in registers;
* ``pair_route`` the same two launches on the dispatcher's own route for each GEMM
               (swiglu_small_m.PAIR_ROUTE = "route": the general kernel's 64- and 128-row builds among the
               candidates, as ``linear`` would take them);
* ``fused``    the one-kernel swiglu (library/swiglu.py's SwigluKernel.launch);
* ``fused_{none,all,wave}`` (``--fused-splits``) the fused kernel with each other stream-K policy (its launch
               takes "tail");
* ``eager``    F.silu(F.linear(x, wg)) * F.linear(x, wu);
* ``compiled`` torch.compile of that composition (static shapes; not with --no-compile).

Both library paths are checked against float64 first (gates' bound on the eager composition's error).
Shapes: Llama-3-8B / Mixtral-8x7B expert (14336 x 4096), Qwen2.5-7B (18944 x 3584), Phi-3-mini (8192 x
3072); M = 1-256 (``--quick``: Llama-3-8B only). ``threshold``: the largest M of the run at and below
which ``pair`` is faster than ``fused`` on every shape (what dispatch/swiglu_small_m.SMALL_M_MAX should
be; ``threshold_one_launch`` the same for ``one_launch``); the JSON (``swiglu_small_m_DTYPE[_quick]``) keeps every time. Exit status 1 on a wrong result.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F

SHAPES = {"llama3_8b": (14336, 4096), "qwen2.5_7b": (18944, 3584), "phi3_mini": (8192, 3072)}
MS = (1, 7, 16, 32, 64, 96, 128, 160, 192, 256)


def eager(x, wg, wu):
    return F.silu(F.linear(x, wg)) * F.linear(x, wu)


def threshold(rows: list[dict], path: str = "pair") -> int | None:
    """The largest M such that at every M' <= M of the run ``path`` ("pair" or "one_launch") beat ``fused`` on
    every shape (None: not even at the smallest M)."""
    best = None
    for m in sorted({r["m"] for r in rows}):
        at = [r for r in rows if r["m"] == m]
        if not at or any(not r["ok"] or r[f"{path}_us"] >= r["fused_us"] for r in at):
            break
        best = m
    return best


def main(argv: list[str] | None = None) -> int:
    from suite import add_output_argument, require_gpu, save, with_setting

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="Llama-3-8B's MLP only")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--ms", default=None, help="comma list of M (default 1-256)")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--fused-splits", action="store_true",
                   help="also the fused kernel under the stream-K policies none, all and wave (its launch's is tail)")
    p.add_argument("--budget", type=float, default=0.1, help="seconds of timed calls per callable")
    add_output_argument(p)
    args = p.parse_args(argv)
    try:
        ms = MS if args.ms is None else tuple(int(v) for v in args.ms.split(","))
        if any(not 1 <= m <= 256 for m in ms):
            raise ValueError
    except ValueError:
        print(f"bench/swiglu_small_m.py: --ms {args.ms!r}: a comma list of M in 1..256", file=sys.stderr)
        return 2
    require_gpu(__file__)

    from gemm_ladder.contract import DTYPES
    from gemm_ladder.dispatch import swiglu_small_m
    from gemm_ladder.gates.correctness import _rel_err, error_bound
    from gemm_ladder.gates.performance import time_fns
    from gemm_ladder.library.operand import operand_view
    from gemm_ladder.library.swiglu import swiglu_kernel

    torch.set_grad_enabled(False)
    compiled = None
    if not args.no_compile:
        for limit in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, 256)
        compiled = torch.compile(eager, dynamic=False)
    shapes = {"llama3_8b": SHAPES["llama3_8b"]} if args.quick else SHAPES
    dt = DTYPES[args.dtype]
    rows = []
    for name, (n, k) in shapes.items():
        for m in ms:
            gen = torch.Generator(device="cuda").manual_seed(m * 31 + n)
            x = torch.randn((m, k), generator=gen, device="cuda").to(dt)
            wg = (torch.randn((n, k), generator=gen, device="cuda") / math.sqrt(k)).to(dt)
            wu = (torch.randn((n, k), generator=gen, device="cuda") / math.sqrt(k)).to(dt)
            views = [operand_view(t, k_dim=1) for t in (x, wg, wu)]

            def run_small_m(a_, b_):
                out = torch.empty((m, n), dtype=dt, device="cuda")
                swiglu_small_m.run(x, wg, wu, out)
                return out

            pair = with_setting(swiglu_small_m, "ONE_LAUNCH", False, run_small_m)
            # the gated build at every M of the run, past ONE_LAUNCH_MAX_M too (BN 128 in two tiles there)
            one_launch = with_setting(swiglu_small_m, "ONE_LAUNCH_MAX_M", 256,
                                      with_setting(swiglu_small_m, "ONE_LAUNCH", True, run_small_m))
            pair_route = with_setting(swiglu_small_m, "PAIR_ROUTE", "route", pair)

            def fused(a_, b_, split="tail"):
                out = torch.empty((m, n), dtype=dt, device="cuda")
                swiglu_kernel().launch(*views, out, split=split)
                return out

            splits = ("none", "all", "wave") if args.fused_splits else ()

            x64 = x.double()
            ref = F.silu(x64 @ wg.double().T) * (x64 @ wu.double().T)
            bound = error_bound(_rel_err(eager(x, wg, wu), ref), args.dtype)
            errs = {"pair": _rel_err(pair(0, 0), ref), "one_launch": _rel_err(one_launch(0, 0), ref),
                    "pair_route": _rel_err(pair_route(0, 0), ref),
                    "fused": _rel_err(fused(0, 0), ref),
                    **{f"fused_{sp}": _rel_err(fused(0, 0, sp), ref) for sp in splits}}
            row = {"shape": name, "m": m, "n": n, "k": k, "dtype": args.dtype, "bound": bound,
                   **{f"{p}_rel_err": e for p, e in errs.items()}, "ok": all(e <= bound for e in errs.values())}
            if row["ok"]:
                fns = {"pair": pair, "one_launch": one_launch, "pair_route": pair_route, "fused": fused, "eager": lambda a_, b_: eager(x, wg, wu),
                       **{f"fused_{sp}": (lambda a_, b_, sp=sp: fused(a_, b_, sp)) for sp in splits}}
                if compiled is not None:
                    compiled(x, wg, wu)
                    fns["compiled"] = lambda a_, b_: compiled(x, wg, wu)
                t = time_fns(fns, x, wg, budget_s=args.budget, rounds=2)
                for f, tm in t.items():
                    row[f"{f}_us"] = tm.median_ms * 1e3
                for f in ("fused", "eager", "compiled"):
                    if f"{f}_us" in row:
                        row[f"pair_vs_{f}"] = row[f"{f}_us"] / row["pair_us"]
                        row[f"pair_route_vs_{f}"] = row[f"{f}_us"] / row["pair_route_us"]
                        row[f"one_launch_vs_{f}"] = row[f"{f}_us"] / row["one_launch_us"]
                row["one_launch_vs_pair"] = row["pair_us"] / row["one_launch_us"]
                row["fused_vs_eager"] = row["eager_us"] / row["fused_us"]
            rows.append(row)
            if row["ok"]:
                extra = f", compiled {row['compiled_us']:.1f}" if "compiled_us" in row else ""
                print(f"{name} M={m:>3}: pair {row['pair_us']:.1f} us, one_launch {row['one_launch_us']:.1f} "
                      f"({row['one_launch_vs_pair']:.3f}x the pair, {row['one_launch_vs_eager']:.3f}x eager), pair_route {row['pair_route_us']:.1f}, fused "
                      f"{row['fused_us']:.1f}, eager {row['eager_us']:.1f}{extra}; pair vs fused "
                      f"{row['pair_vs_fused']:.3f}x, vs eager {row['pair_vs_eager']:.3f}x; pair_route vs eager "
                      f"{row['pair_route_vs_eager']:.3f}x"
                      + "".join(f"; fused_{sp} {row[f'fused_{sp}_us']:.1f}" for sp in splits), flush=True)
            else:
                print(f"{name} M={m:>3}: WRONG (pair {errs['pair']:.2e}, one_launch {errs['one_launch']:.2e}, pair_route {errs['pair_route']:.2e}, fused "
                      f"{errs['fused']:.2e}, bound {bound:.2e})", flush=True)
    th, th_one = threshold(rows), threshold(rows, "one_launch")
    shipped = swiglu_small_m.small_m_max(torch.cuda.get_device_name())
    print(f"threshold (pair faster than fused at every M <= it, every shape): {th}; one_launch's: {th_one}; "
          f"shipped for this device: {shipped} (SMALL_M_MAX = {swiglu_small_m.SMALL_M_MAX}; "
          f"ONE_LAUNCH = {swiglu_small_m.ONE_LAUNCH})")
    save({"dtype": args.dtype, "threshold": th, "threshold_one_launch": th_one, "shipped_small_m_max": shipped,
          "one_launch_default": swiglu_small_m.ONE_LAUNCH, "rows": rows},
         f"swiglu_small_m_{args.dtype}" + ("_quick" if args.quick else ""), args.output)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
