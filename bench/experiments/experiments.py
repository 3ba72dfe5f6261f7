"""One-off variants of levels 5-9 to find where time goes (one-off experiment).

    python bench/experiments/experiments.py [--size 8192]

Each variant is a level with one change (bench/variants.py), timed beside the unchanged levels and
cuBLAS in the same run with triton's do_bench (L2 flushed, median). This is the older timing: the
host's launch latency counts when the GPU waits for it; gates.performance.time_fns (used by
bench/ladder_variants.py) hides it. bench/results/2026-11-30_experiments_8192.json came from this
script; its "plain arrive" rows compared the remote arrive without .release.cluster, which has since
become the levels' own form (ptx/mbarrier.cuh), so those variants are gone from here.

One-off (bench/README.md): not maintained; it needs triton (the H200 has it) and writes
experiments_SIZE.json under $OUT without the suite's meta. Its questions are now asked by
bench/ladder_variants.py with the gates' timing.
"""

import argparse
import json
import os

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py, variants.py
from suite import require_gpu  # noqa: E402
from variants import check_targets, no_multicast_edit, with_edit  # noqa: E402

from gemm_ladder.contract import cublas
from gemm_ladder.levels import LEVELS


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=8192)
    args = p.parse_args()
    require_gpu(__file__)
    from triton.testing import do_bench  # the H200 has triton; a machine without a GPU need not
    s = args.size
    a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    flops = 2 * s**3
    runs = {"cuBLAS": cublas, **{f"L{n}": LEVELS[n] for n in (4, 5, 6, 7, 8, 9)}}
    runs.update({f"L{n}_no_multicast": with_edit(LEVELS[n], f"L{n}_no_multicast", no_multicast_edit) for n in (8, 9)})
    runs["L9_no_cluster"] = LEVELS[9].variant(cluster=1)
    runs.update({f"L6_s{st}": LEVELS[6].variant(stages=st) for st in (3, 4)})
    runs.update({f"L7_s{st}": LEVELS[7].variant(stages=st) for st in (5, 6)})
    runs.update({f"L5_s{st}": LEVELS[5].variant(stages=st) for st in (3, 4, 6)})
    live, errors, failures = check_targets(runs, a, b)
    rows = [{"name": name, "error": error} for name, error in failures.items()]
    for name, fn in live.items():
        t = do_bench(lambda: fn(a, b), warmup=50, rep=300, return_mode="median")
        rows.append({"name": name, "tflops": round(flops / t / 1e9, 1), "ms": t, "rel_err_first_rows": errors[name]})
        print(json.dumps(rows[-1]), flush=True)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, f"experiments_{s}.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "size": s, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
