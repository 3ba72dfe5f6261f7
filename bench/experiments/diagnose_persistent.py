"""Why is a persistent level slow? Print its grid and occupancy, then time it at several grid sizes.

    python bench/experiments/diagnose_persistent.py --levels 6,8,9 --size 8192

One-off (bench/README.md): not maintained; it needs triton (the H200 has it), sets the loaded
kernel's private resident count, and prints its rows without writing a result file.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py
from suite import require_gpu  # noqa: E402

from gemm_ladder.contract import cublas
from gemm_ladder.levels import LEVELS


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--levels", default="6,7,8,9")
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    require_gpu(__file__)
    from triton.testing import do_bench  # the H200 has triton; a machine without a GPU need not
    s = args.size
    a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    flops = 2 * s**3
    rows = [{"name": "cuBLAS", "tflops": flops / do_bench(lambda: cublas(a, b), return_mode="median") / 1e9}]
    for n in (int(x) for x in args.levels.split(",")):
        level = LEVELS[n]
        k = level.loaded("bf16", a.device)
        natural = k.max_active_clusters(a.device)
        info = {"level": n, "ctas_per_sm": k.max_active_ctas_per_sm(), "resident_units": natural,
                "grid": level.grid(s, s, "bf16", a.device)}
        for resident in sorted({natural, 132 // level.cluster, 66 // level.cluster, 2 * 132 // level.cluster}):
            k._resident = resident
            try:
                t = do_bench(lambda: level(a, b), return_mode="median")
                info[f"tflops@{resident}"] = flops / t / 1e9
            except Exception as exc:  # noqa: BLE001 - a diagnostic: report and go on
                info[f"error@{resident}"] = repr(exc)[:200]
            torch.cuda.synchronize()
        k._resident = natural
        rows.append(info)
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
