"""The gated MLP's benchmark: ``gemm_ladder.swiglu`` against what users write instead, in one run.

    python bench/swiglu.py [--dtype bf16] [--quick] [--no-compile] [--shapes 4096x14336x4096,...] [-o OUT.json]
    compute-sanitizer --tool memcheck python bench/swiglu.py --sanitize

Per shape (M x N x K: x (M, K), w_gate and w_up (N, K)), timed interleaved on the same tensors:

* ``swiglu``        gemm_ladder.swiglu(x, wg, wu): one kernel (kernels/library/sm90_swiglu.cu);
* ``eager``         F.silu(F.linear(x, wg)) * F.linear(x, wu): torch's eager composition (cuBLAS + two
                    elementwise kernels);
* ``compiled``      torch.compile of that composition (default mode, static shapes; compiled before timing);
* ``two_mm``        gemm_ladder.mm(x, wg.T) and gemm_ladder.mm(x, wu.T): the library's two plain GEMMs
                    (no SiLU, no product): what the fusion's GEMM part would cost unfused;
* ``cublas_two_mm`` torch.mm(x, wg.T) and torch.mm(x, wu.T): cuBLAS's two GEMMs, same run.

Shapes: 4096x14336x4096 (Llama-3-8B's MLP), 4096³, 8192³ and the ``llm`` set (gemm_ladder.shapes; each
(N, K) taken as the gate/up weights' shape); ``--quick``: the first two, shorter. TFLOP/s count both
products (4 M N K). Target (issue 13): swiglu >= 1.1x the eager composition at 4096x14336x4096; it is
"not run" (``met`` None, ``not_run`` the reason) where that shape was not timed (``--shapes`` leaving it
out) or its result was wrong, never met.

Exit status: 0 when every result is correct and the target is met or not run; 1 when a result is wrong
or the target is missed; 2 for bad input (one line: an unwritable ``-o``, a bad ``--shapes`` or
``--rounds``) or no CUDA GPU, before anything runs.

Method: fresh random operands per shape (x standard normal, weights normal / sqrt(K)); swiglu's first
256 rows checked against float64 (its relative error must be within the gates' bound built on the
eager composition's: gates.correctness.error_bound); then gates.performance.time_fns (L2 flushed by
writes before each call, the host's launch latency hidden behind a spin, median of the calls, rounds
rotating the first callable). One JSON (bench/suite.py: DATE_swiglu_DTYPE[_quick]_COMMIT.json) with the
GPU, clocks, date and commit in ``meta``. About 2 minutes on the H200 (``--quick``: under one).

``--sanitize``: every path of the kernel once on small shapes (M, N and K tails, M = 1, an odd N through
the padded output, the stream-K policies "all" and "tail", both dtypes), each checked against float64;
nothing timed, nothing written; exit 1 on a wrong result. For compute-sanitizer (memcheck, racecheck,
synccheck).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F

import gemm_ladder
from gemm_ladder.contract import DTYPES
from gemm_ladder.gates.correctness import error_bound
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.shapes import SHAPE_SETS
from outputs import check_output, judged, parse_shapes, positive
from suite import add_output_argument, require_gpu, save

MLP = (4096, 14336, 4096)
TARGET_VS_EAGER = 1.1


def shapes(quick: bool, spec: str | None) -> list[tuple[int, int, int]]:
    """``--shapes`` (validated: one line and exit 2 for a bad entry) or the default set."""
    if spec is not None:
        return parse_shapes(__file__, "--shapes", spec)
    if quick:
        return [MLP, (4096, 4096, 4096)]
    out = [MLP, (4096, 4096, 4096), (8192, 8192, 8192)]
    return out + [s for s in SHAPE_SETS["llm"] if s not in out]


def eager(x, wg, wu):
    return F.silu(F.linear(x, wg)) * F.linear(x, wu)


def operands(m, n, k, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dt = DTYPES[dtype]
    x = torch.randn((m, k), generator=gen, device="cuda").to(dt)
    wg = (torch.randn((n, k), generator=gen, device="cuda") / math.sqrt(k)).to(dt)
    wu = (torch.randn((n, k), generator=gen, device="cuda") / math.sqrt(k)).to(dt)
    return x, wg, wu


def check(x, wg, wu, dtype, rows=256) -> dict:
    """swiglu's and the eager composition's relative errors on the first ``rows`` rows against float64."""
    xs = x[:rows]
    x64 = xs.double()
    ref = F.silu(x64 @ wg.double().T) * (x64 @ wu.double().T)

    def err(c):
        return ((c.double() - ref).norm() / ref.norm()).item()

    ours, theirs = err(gemm_ladder.swiglu(x, wg, wu)[:rows]), err(eager(xs, wg, wu))
    bound = error_bound(theirs, dtype)
    return {"rel_err": ours, "eager_rel_err": theirs, "bound": bound, "ok": math.isfinite(ours) and ours <= bound}


def bench_shape(shape, dtype, budget, rounds, compiled, seed) -> dict:
    m, n, k = shape
    x, wg, wu = operands(m, n, k, dtype, seed)
    row = {"m": m, "n": n, "k": k, "dtype": dtype, **check(x, wg, wu, dtype)}
    fns = {
        "swiglu": lambda a, b: gemm_ladder.swiglu(x, wg, wu),
        "eager": lambda a, b: eager(x, wg, wu),
        "two_mm": lambda a, b: (gemm_ladder.mm(x, wg.T), gemm_ladder.mm(x, wu.T)),
        "cublas_two_mm": lambda a, b: (torch.mm(x, wg.T), torch.mm(x, wu.T)),
    }
    if compiled is not None:
        t0 = time.perf_counter()
        compiled(x, wg, wu)  # compile (or recompile for this shape) outside the timing
        torch.cuda.synchronize()
        row["compile_s"] = time.perf_counter() - t0
        fns["compiled"] = lambda a, b: compiled(x, wg, wu)
    t = time_fns(fns, x, wg, budget_s=budget, rounds=rounds, warmup=3)
    ours = t["swiglu"].median_ms
    for name, tm in t.items():
        row[f"{name}_ms"] = tm.median_ms
        row[f"{name}_tflops"] = 4 * m * n * k / (tm.median_ms * 1e-3) / 1e12
        row[f"{name}_spread"] = tm.spread
        if name != "swiglu":
            row[f"vs_{name}"] = tm.median_ms / ours  # > 1: swiglu is faster
    return row


def summary(rows: list[dict]) -> dict:
    """The run's verdict: ``correct`` (every row's check passed) and the target's ``met`` / ``not_run``
    (bench/outputs.py judged: None with the reason where the MLP shape was not timed or was wrong)."""
    mlp = next((r for r in rows if (r["m"], r["n"], r["k"]) == MLP), None)
    if mlp is None:
        verdict = {"met": None, "not_run": f"not run: {'x'.join(map(str, MLP))} is not among the shapes"}
    else:
        verdict = judged(mlp.get("vs_eager"), TARGET_VS_EAGER, mlp["ok"])
        mlp.update(target_vs_eager=TARGET_VS_EAGER, **verdict)
    return {"target_vs_eager_at_mlp": TARGET_VS_EAGER, **verdict, "correct": all(r["ok"] for r in rows)}


def sanitize() -> int:
    """Every path once, checked against float64 (see the module docstring); returns the exit status."""
    from gemm_ladder.library.operand import operand_view
    from gemm_ladder.library.swiglu import swiglu_kernel

    wrong = 0
    cases = [((300, 200, 136), "tail"), ((1, 36, 72), "tail"), ((129, 100, 8), "none"), ((2304, 2048, 1000), "tail"),
             ((256, 384, 1000), "all")]
    for dtype in ("bf16", "fp16"):
        for (m, n, k), split in cases:
            x, wg, wu = operands(m, n, k, dtype, seed=m + n + k)
            if n % 8:
                out = gemm_ladder.swiglu(x, wg, wu)
            else:
                out = torch.empty(m, n, dtype=x.dtype, device="cuda")
                swiglu_kernel().launch(*(operand_view(t, k_dim=1) for t in (x, wg, wu)), out, split=split)
            x64 = x.double()
            ref = F.silu(x64 @ wg.double().T) * (x64 @ wu.double().T)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            ok = math.isfinite(err) and err <= 2 * error_bound(0.0, dtype)
            wrong += not ok
            print(f"{dtype} {m}x{n}x{k} split={split}: relative error {err:.2e}{'' if ok else ' WRONG'}", flush=True)
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--quick", action="store_true", help="two shapes, shorter timing (under a minute)")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--shapes", default=None, help="comma list of MxNxK instead of the default set")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 4, --quick 2)")
    p.add_argument("--sanitize", action="store_true", help="every path once, checked, nothing timed (for compute-sanitizer)")
    add_output_argument(p)
    args = p.parse_args(argv)
    positive(__file__, "--rounds", args.rounds)
    shape_list = shapes(args.quick, args.shapes)
    check_output(__file__, args.output)
    require_gpu(__file__)
    if args.sanitize:
        return sanitize()
    rounds = args.rounds or (2 if args.quick else 4)
    budget = 0.15 if args.quick else 0.3
    gemm_ladder.swiglu(*operands(256, 256, 64, args.dtype, 0))  # build and load the kernel before any timing
    compiled = None
    if not args.no_compile:
        for limit in ("recompile_limit", "cache_size_limit"):  # one static compile per shape, past the default 8
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, 64)
        compiled = torch.compile(eager, dynamic=False)
    rows = []
    for i, shape in enumerate(shape_list):
        row = bench_shape(shape, args.dtype, budget, rounds, compiled, seed=1000 + i)
        rows.append(row)
        others = " ".join(f"{name} {row[f'vs_{name}']:.3f}x" for name in ("eager", "compiled", "two_mm", "cublas_two_mm")
                          if f"vs_{name}" in row)
        print(f"{shape[0]}x{shape[1]}x{shape[2]}: swiglu {row['swiglu_tflops']:6.1f} TFLOP/s; vs {others}; "
              f"error {row['rel_err']:.2e} (eager {row['eager_rel_err']:.2e}){'' if row['ok'] else ' WRONG'}", flush=True)
    verdict = summary(rows)
    name = f"swiglu_{args.dtype}" + ("_quick" if args.quick else "")
    save({**verdict, "rounds": rounds, "budget_s": budget, "rows": rows}, name, args.output)
    met, ok = verdict["met"], verdict["correct"]
    state = "met" if met else "MISSED" if met is False else verdict["not_run"]
    print(f"target (>= {TARGET_VS_EAGER}x eager at {'x'.join(map(str, MLP))}): {state}; "
          f"results {'correct' if ok else 'WRONG'}")
    return 0 if ok and met is not False else 1


if __name__ == "__main__":
    sys.exit(main())
