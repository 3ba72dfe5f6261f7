"""Count the SASS instructions of fused-epilogue builds: which opcodes an activation costs in the kernels.

    PYTHONPATH=src python tools/epilogue_sass_census.py [--activation gelu] [--json]

Builds (bf16) the general kernel (BN 256, TMA store; direct and swapped orientation) and the small-M
kernel (BN 64) with ``linear``'s built-in bias + activation epilogue and, for reference, with bias
alone, and prints each build's opcode census (gates.resources.sass_census: base opcodes, padding NOPs
not counted) and spills from ptxas. The difference between the two is what the activation costs.
Compare two versions of an activation by running it on each tree with its own empty
GEMM_LADDER_CACHE. Needs nvcc and cuobjdump, no GPU; docs/epilogues.md quotes its figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

OPCODES = ("MUFU", "FFMA", "FMUL", "FADD", "FSEL", "FSETP", "HFMA2", "MOV", "BRA", "CALL")


def builds(activation: str):
    import torch

    from gemm_ladder.library.epilogue import linear_epilogue
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.library.small_m import small_m_kernel

    out = []
    for act in (activation, None):
        ep = linear_epilogue(bias=True, activation=act, residual=False, alpha=False)
        dts = {n: torch.bfloat16 for n in ep.tensor_inputs}
        pairs = {n: (True, False) for n in dts}
        what = f"bias + {act}" if act else "bias"
        for swap in (False, True):
            src = ep.source(dts, swap, wide=False, pairs=pairs)
            out.append((f"general BN 256 {what} swap={swap}", lambda s=src: library_gemm("k", "k", 256).build("bf16", epilogue_source=s)))
        src = ep.source(dts, True, wide=False, pairs=pairs)
        out.append((f"small-M BN 64 {what}", lambda s=src: small_m_kernel(64).build("bf16", epilogue_source=s)))
    return out


def census(kernel) -> dict:
    from gemm_ladder.gates.resources import parse_ptxas_log, sass_census
    from gemm_ladder.runtime.compiler import cuobjdump_path

    sass = subprocess.run([cuobjdump_path(), "--dump-sass", str(kernel.cubin)], capture_output=True, text=True,
                          check=True).stdout
    c = next(iter(sass_census(sass).values()))
    usage = next(iter(parse_ptxas_log(kernel.ptxas_log).values()))
    return {"total": c.total, **{op: c.count(op) for op in OPCODES}, "spill_stores": usage.spill_stores,
            "spill_loads": usage.spill_loads}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--activation", default="gelu")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = {label: census(build()) for label, build in builds(args.activation)}
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for label, r in rows.items():
            print(f"{label:<42} " + " ".join(f"{k} {v}" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
