"""Does fusing grouped_linear's activation into the grouped kernel's epilogue pay? (issue 24)

Times, interleaved in one process under ``torch.no_grad()`` (the calls that fuse), with ``ops_grouped.ACTIVATION_FUSED``
on (its default), on the same operands:

* ``fused``: ``gemm_ladder.grouped_linear(x, w, offs, bias, activation=name)`` as routed: one launch, the
  activation applied to the fp32 accumulators after the bias, rounded once (``ops_grouped.why_unfused`` None);
* ``fused_build``: the activation's build called directly (``grouped_mm_direct(..., activation=name)``; on one CTA
  where the unfused op takes a pair): the public call's launch, without its checks;
* ``unfused``: the same op without the activation, then the activation's PyTorch reference on its output (what a
  call with a backward runs);
* ``torch``: ``torch._grouped_mm`` plus the bias gathered by each row's group (the group index made once, outside
  the timing, as a router hands it over), then the activation: what a user writes without this library.

Cases: bench/grouped.py's prefill and decode cases (their E, rows, N, K and group sizes), the weight in nn.Linear's
layout, a bias per expert. Every output is NaN-poisoned first and checked against float32 act(x @ w[e].T + b[e])
per group (relative Frobenius error below 1e-2, the grouped bench's bound); a wrong one is reported and not timed.

    python bench/experiments/grouped_activation.py [--cases NAME,...] [--activations gelu,relu,...] [--budget 0.05]
                                                   [--prebuild] [-o FILE]

``--prebuild`` compiles the run's builds into the kernel cache and exits (no GPU).

Writes ``DATE_grouped_activation_COMMIT.json`` (``$OUT`` or bench/results/): ``rows: [{case, activation, E, rows,
N, K, kernel, why_unfused, us: {label: us}, speed_vs_unfused, speed_vs_torch, build_vs_unfused, errors}]``. Exits 1 when an output is wrong, 2 for an
unknown case or activation or no CUDA GPU, before anything runs.
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

DEFAULT_CASES = ("mixtral_gate_up", "qwen3_gate_up", "deepseek_v3_32", "decode_128")
#: Relative Frobenius error against the float32 reference that counts as right (bench/grouped.py's F64_TOL).
TOL = 1e-2


def run_case(name: str, activation: str, budget: float) -> dict:
    import gemm_ladder
    from gemm_ladder.api_grouped import explain_grouped_mm, group_of_rows, grouped_mm_direct
    from gemm_ladder.ops_grouped import why_unfused
    from gemm_ladder.library.activations import ACTIVATIONS
    from gemm_ladder.timing import time_fns

    act = ACTIVATIONS[activation].reference
    e, rows, n, k, lo, hi = GROUPED_CASES[name]
    sizes = group_sizes(e, rows, lo, hi)
    torch.manual_seed(0)
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    bias = torch.randn(e, n, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    group = group_of_rows(offs, rows).clamp_max(e - 1)
    ref = torch.empty(rows, n, device="cuda", dtype=torch.float32)
    start = 0
    for i, s in enumerate(sizes):
        ref[start:start + s] = act(x[start:start + s].float() @ w[i].float().T + bias[i].float())
        start += s
    fns = {
        "fused": lambda *_: gemm_ladder.grouped_linear(x, w, offs, bias, activation=activation),
        "fused_build": lambda *_: grouped_mm_direct(x, w.transpose(-2, -1), offs, bias=bias, activation=activation),
        "unfused": lambda *_: act(gemm_ladder.grouped_linear(x, w, offs, bias)),
        "torch": lambda *_: act(torch._grouped_mm(x, w.transpose(-2, -1), offs) + bias[group]),
    }
    errors, good = {}, {}
    with torch.no_grad():
        for label, fn in fns.items():
            torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)  # freed: the output reuses it
            got = fn().float()
            err = float((got - ref).norm() / ref.norm())
            errors[label] = err
            if err == err and err < TOL:
                good[label] = fn
        t = time_fns(good, x, x, budget_s=budget, rounds=4)
    row = {"case": name, "activation": activation, "E": e, "rows": rows, "N": n, "K": k,
           "kernel": explain_grouped_mm(x, w.transpose(-2, -1), offs, bias=bias, activation=activation)["kernel"],
           "why_unfused": why_unfused(x, w, bias),
           "errors": errors, "us": {lbl: t[lbl].median_ms * 1e3 for lbl in t},
           "spread": {lbl: t[lbl].spread for lbl in t}}
    for base in ("unfused", "torch"):
        if base in t and "fused" in t:
            row[f"speed_vs_{base}"] = t[base].median_ms / t["fused"].median_ms
    if "unfused" in t and "fused_build" in t:
        row["build_vs_unfused"] = t["unfused"].median_ms / t["fused_build"].median_ms
    print(f"{name} {activation}: " + ", ".join(f"{lbl} {row['us'][lbl]:.1f} us" for lbl in t)
          + "".join(f", fused {row[f'speed_vs_{b}']:.3f}x {b}" for b in ("unfused", "torch") if f"speed_vs_{b}" in row)
          + (f", the build {row['build_vs_unfused']:.3f}x unfused" if "build_vs_unfused" in row else ""))
    bad = [lbl for lbl in fns if lbl not in good]
    if bad:
        print(f"{name} {activation}: WRONG, not timed: {bad} ({errors})")
    return row


def prebuild(names, acts) -> int:
    """Compile each case's builds, with and without the activation (the bias on), into the kernel cache."""
    from gemm_ladder.api_grouped import choose_bn, grouped_build
    from gemm_ladder.library.kernel import GROUP_M
    from suite import prebuild as build_all

    kernels = []
    for name in names:
        e, rows, n, k, _, _ = GROUPED_CASES[name]
        for act in (None, *acts):
            kernels.append(grouped_build(choose_bn(n, rows, e), "k", k, GROUP_M, False, True, None, activation=act)[0])
    return build_all(list(dict.fromkeys(kernels)))


def main(argv: list[str] | None = None) -> int:
    from gemm_ladder.library.activations import ACTIVATIONS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated names of {', '.join(GROUPED_CASES)}")
    parser.add_argument("--activations", default="gelu", help=f"comma-separated names of {', '.join(ACTIVATIONS)}")
    parser.add_argument("--budget", type=float, default=0.05, help="seconds of timed calls per callable")
    parser.add_argument("--prebuild", action="store_true", help="compile the run's builds (no GPU) and exit")
    add_output_argument(parser)
    args = parser.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    acts = [a for a in args.activations.split(",") if a]
    unknown = [c for c in names if c not in GROUPED_CASES] + [a for a in acts if a not in ACTIVATIONS]
    if unknown or not names or not acts:
        print(f"grouped_activation: unknown or no case or activation {unknown}; cases: {', '.join(GROUPED_CASES)}; "
              f"activations: {', '.join(ACTIVATIONS)}", file=sys.stderr)
        return 2
    if args.prebuild:
        return prebuild(names, acts)
    require_gpu(__file__)
    import gemm_ladder.ops_grouped as ops_grouped

    ops_grouped.ACTIVATION_FUSED = True  # the switch this measures (its default; the environment may turn it off)
    rows = [run_case(c, a, args.budget) for c in names for a in acts]
    save({"rows": rows, "tolerance": TOL}, "grouped_activation", args.output)
    return 1 if any(len(r["us"]) < len(r["errors"]) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
