"""Is a fused epilogue free, and faster than what users write instead? (issue 13)

    python bench/epilogues.py [--quick] [--passes 3] [--budget 0.15] [--dtype bf16] [-o OUT.json]

Shapes (M x N x K): 4096x14336x4096, 4096³, 8192³ and the ``llm`` set (``--quick``: the first two, one
pass unless ``--passes`` is given). Epilogues: ``bias_gelu_tanh`` (linear(x, w, b, activation="gelu_tanh")), ``silu``, ``bias``, and
``residual`` (linear(x, w, residual=r, alpha=0.5, beta=1.0) against torch.addmm(r, x, w.T, alpha=0.5)).

Per shape and epilogue, six callables timed interleaved (gates.performance.time_fns: L2 flushed before
every call, the host's launch latency hidden, medians), ``--passes`` passes with the order rotated:
``fused`` (gemm_ladder.linear), ``plain`` (gemm_ladder.mm of the same product: the top level without
an epilogue), ``eager`` (the torch composition), ``compiled`` (torch.compile of it, dynamic shapes,
compiled once per epilogue), ``cublas`` (torch.mm, the plain product). Before timing, the fused output's
first 256 rows are checked against the float64 reference of the whole epilogue (2 x the eager
composition's relative error + u).

Targets (issue 13): fused within 3% of plain at every shape; bias_gelu_tanh and silu >= 1.08x eager and
>= 1.05x compiled at 4096x14336x4096 and 4096³ and >= 1.0x eager at every llm shape; residual >= 1.08x
torch.addmm at 4096³. A target whose epilogue's check failed is "not run" (``met`` None, ``not_run`` the
reason): a wrong kernel's speed meets nothing.

Exit status: 0 when every check passed and every target judged is met; 1 when a target is missed or a
result is wrong (the JSON says which); 2 for bad input (one line: ``--passes``, ``--budget``, an
unwritable ``-o``) or no CUDA GPU, before anything runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table
from outputs import check_output, judged, positive
from suite import add_output_argument, require_gpu, save

import gemm_ladder
from gemm_ladder.contract import DTYPES, reference
from gemm_ladder.dispatch.validate import linear_call
from gemm_ladder.gates.correctness import _rel_err, error_bound
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.shapes import SHAPE_SETS

HEADLINE = [(4096, 14336, 4096), (4096, 4096, 4096), (8192, 8192, 8192)]
EPILOGUES = ("bias_gelu_tanh", "silu", "bias", "residual")
TARGET_VS_PLAIN, TARGET_VS_EAGER, TARGET_VS_COMPILED, TARGET_RESIDUAL = 1 / 1.03, 1.08, 1.05, 1.08


def eager_fns():
    """The torch compositions a user writes, one per epilogue: f(x, w, b, r)."""
    return {
        "bias_gelu_tanh": lambda x, w, b, r: F.gelu(F.linear(x, w, b), approximate="tanh"),
        "silu": lambda x, w, b, r: F.silu(F.linear(x, w)),
        "bias": lambda x, w, b, r: F.linear(x, w, b),
        "residual": lambda x, w, b, r: torch.addmm(r, x, w.T, alpha=0.5),
    }


def fused_kwargs(name: str, b, r) -> dict:
    return {"bias_gelu_tanh": dict(bias=b, activation="gelu_tanh"), "silu": dict(activation="silu"),
            "bias": dict(bias=b), "residual": dict(residual=r, alpha=0.5, beta=1.0)}[name]


def check(name, x, w, b, r, dtype: str) -> dict:
    """The fused output's first 256 rows against the float64 reference of the whole epilogue."""
    kw = fused_kwargs(name, b, r)
    rows = slice(0, 256)
    xs = x[rows]
    kws = {k: (v[rows] if k == "residual" else v) for k, v in kw.items()}
    y = gemm_ladder.linear(x, w, **kw)[rows]
    call = linear_call(xs, w, **kws)
    ref = call.reference(reference(xs, w))
    eager = eager_fns()[name](xs, w, b, r[rows])
    rel, bound = _rel_err(y, ref), error_bound(_rel_err(eager, ref), dtype)
    return {"rel_err": rel, "bound": bound, "passed": bool(rel <= bound)}


def run_shape(shape, dtype: str, passes: int, budget: float, compiled: dict) -> dict:
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    dt = DTYPES[dtype]
    x = torch.randn((m, k), generator=gen, device="cuda").to(dt)
    w = torch.randn((n, k), generator=gen, device="cuda").to(dt)
    b = torch.randn((n,), generator=gen, device="cuda").to(dt)
    r = torch.randn((m, n), generator=gen, device="cuda").to(dt)
    out = {"shape": list(shape), "epilogues": {}}
    for name in EPILOGUES:
        kw = fused_kwargs(name, b, r)
        eager = eager_fns()[name]
        fns = {
            "fused": lambda a_, b_, kw=kw: gemm_ladder.linear(x, w, **kw),
            "plain": lambda a_, b_: gemm_ladder.mm(x, w.T),
            "eager": lambda a_, b_, f=eager: f(x, w, b, r),
            "compiled": lambda a_, b_, f=compiled[name]: f(x, w, b, r),
            "cublas": lambda a_, b_: torch.mm(x, w.T),
        }
        verdict = check(name, x, w, b, r, dtype)
        for f in fns.values():  # builds, compiles and autotuning outside the timing
            f(x, w)
        torch.cuda.synchronize()
        runs = []
        for p in range(passes):
            order = list(fns)[p % len(fns):] + list(fns)[:p % len(fns)]
            t = time_fns({o: fns[o] for o in order}, x, w, budget_s=budget, rounds=2)
            runs.append({o: t[o].median_ms for o in fns})
        med = {o: statistics.median(run[o] for run in runs) for o in fns}
        out["epilogues"][name] = {"check": verdict, "passes": runs, "median_ms": med,
                                  "fused_vs_plain": med["plain"] / med["fused"],
                                  "vs_eager": med["eager"] / med["fused"], "vs_compiled": med["compiled"] / med["fused"],
                                  "vs_cublas_plain": med["cublas"] / med["fused"],
                                  "tflops_fused": 2 * m * n * k / med["fused"] / 1e9}
    return out


def judge(results: list[dict]) -> list[dict]:
    """Each issue-13 target with its measured ratio and whether it is met."""
    llm = {tuple(s) for s in SHAPE_SETS["llm"]}
    targets = []
    for res in results:
        shape = tuple(res["shape"])
        for name, e in res["epilogues"].items():
            targets.append({"shape": list(shape), "epilogue": name, "what": "fused within 3% of plain",
                            "ratio": e["fused_vs_plain"], "target": TARGET_VS_PLAIN})
            if name in ("bias_gelu_tanh", "silu") and shape in ((4096, 14336, 4096), (4096, 4096, 4096)):
                targets.append({"shape": list(shape), "epilogue": name, "what": "vs eager", "ratio": e["vs_eager"],
                                "target": TARGET_VS_EAGER})
                targets.append({"shape": list(shape), "epilogue": name, "what": "vs torch.compile",
                                "ratio": e["vs_compiled"], "target": TARGET_VS_COMPILED})
            elif name in ("bias_gelu_tanh", "silu") and shape in llm:
                targets.append({"shape": list(shape), "epilogue": name, "what": "vs eager (llm)",
                                "ratio": e["vs_eager"], "target": 1.0})
            if name == "residual" and shape == (4096, 4096, 4096):
                targets.append({"shape": list(shape), "epilogue": name, "what": "vs torch.addmm",
                                "ratio": e["vs_eager"], "target": TARGET_RESIDUAL})
    passed = {(tuple(res["shape"]), name): e["check"]["passed"] for res in results for name, e in res["epilogues"].items()}
    for t in targets:
        t.update(judged(t["ratio"], t["target"], passed[(tuple(t["shape"]), t["epilogue"])]))
    return targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="4096x14336x4096 and 4096³ only, one pass unless --passes is given")
    parser.add_argument("--passes", type=int, default=None, help="passes, the order rotated (default 3; --quick: 1)")
    parser.add_argument("--budget", type=float, default=0.15, help="seconds of timed calls per callable per pass")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    add_output_argument(parser)
    args = parser.parse_args(argv)
    passes = args.passes if args.passes is not None else 1 if args.quick else 3
    if passes < 1:
        print(f"bench/epilogues.py: --passes {passes}: at least 1", file=sys.stderr)
        return 2
    positive(__file__, "--budget", args.budget)
    check_output(__file__, args.output)
    require_gpu(__file__)
    shapes = HEADLINE[:2] if args.quick else list(dict.fromkeys(HEADLINE + [tuple(s) for s in SHAPE_SETS["llm"]]))
    torch.set_grad_enabled(False)
    compiled = {name: torch.compile(f, dynamic=True) for name, f in eager_fns().items()}
    results = [run_shape(s, args.dtype, passes, args.budget, compiled) for s in shapes]
    targets = judge(results)
    table = Table(title=f"fused epilogues, {args.dtype}, {torch.cuda.get_device_name()}")
    for col in ("shape", "epilogue", "fused TFLOP/s", "vs plain", "vs eager", "vs compile", "vs cuBLAS mm", "check"):
        table.add_column(col)
    for res in results:
        for name, e in res["epilogues"].items():
            table.add_row("x".join(map(str, res["shape"])), name, f"{e['tflops_fused']:.0f}",
                          f"{e['fused_vs_plain']:.3f}", f"{e['vs_eager']:.3f}", f"{e['vs_compiled']:.3f}",
                          f"{e['vs_cublas_plain']:.3f}", "ok" if e["check"]["passed"] else "WRONG")
    Console().print(table)
    missed = [t for t in targets if t["met"] is False]
    for t in missed:
        print(f"missed: {t['epilogue']} at {'x'.join(map(str, t['shape']))}: {t['what']} {t['ratio']:.3f} < {t['target']:.3f}")
    wrong = [f"{'x'.join(map(str, r['shape']))} {n}" for r in results for n, e in r["epilogues"].items()
             if not e["check"]["passed"]]
    save({"dtype": args.dtype, "passes": passes, "budget_s": args.budget, "results": results, "targets": targets,
          "wrong": wrong}, "epilogues" + ("_quick" if args.quick else ""), args.output)
    return 1 if missed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
