"""How much of level 9's time at 4096^3 and 8192^3 is the last, partial wave, and at what clock.

    python bench/wave_quantization.py [--passes 3] [-o OUT.json]

Level 9 runs one 2-CTA cluster per pair of SMs (66 on the H200) over work units of 256 x 256
outputs. 4096^3 has 256 units (3.88 waves), 8192^3 has 1024 (15.5 waves): the last wave leaves
part of the GPU idle. Each is paired with a shape of (nearly) the same work whose unit count is a
whole number of waves (M = 8448 gives 33 unit rows: 33 x 8 = 264 = 4 x 66, 33 x 32 = 1056 =
16 x 66); the 8192 group adds N = 8448 (also 16 waves), M = 7936 (15.03 waves) and K = 8448 (the
cube's waves, more work). If the partial wave costs what the wave count predicts, level 9's
TFLOP/s on a whole-wave shape exceeds that on the cube by ~ceil(w)/w, and that is what stream-K or
a split tail could win back. cuBLAS is timed on the same shapes, interleaved
(gates.performance.time_fns); each shape group runs in order, so later rows run on a warmer GPU.

While it runs, nvidia-smi samples the SM clock and board power every 100 ms; each row gets the
median of the samples taken while its shape was being timed, so a ratio can be read against the
clock it ran at.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from rich.console import Console
from rich.table import Table
from suite import add_output_argument, require_gpu, save
from variants import check_targets

from gemm_ladder.contract import cublas
from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.levels import LEVELS

#: Each cube first, then shapes of about its work whose wave count differs: whole (M or N = 8448),
#: barely more than whole (7936: 15.03 waves), or the cube with a longer K (same waves).
GROUPS = [[(4096, 4096, 4096), (8448, 2048, 4096), (4096, 8448, 2048)],
          [(8192, 8192, 8192), (8448, 8192, 8192), (8192, 8448, 8192), (7936, 8192, 8192), (8192, 8192, 8448)]]
CLUSTERS = 66  # 2-CTA clusters resident on 132 SMs, one CTA per SM


def waves(m: int, n: int) -> float:
    return math.ceil(m / 256) * math.ceil(n / 256) / CLUSTERS


class Sampler:
    """nvidia-smi in the background: (unix time, SM MHz, watts) every 100 ms."""

    def __init__(self):
        self.path = tempfile.mktemp(suffix=".csv")
        smi = shutil.which("nvidia-smi")
        self.proc = None if smi is None else subprocess.Popen(
            [smi, "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "100",
             "-i", "0", "-f", self.path])
        self.marks = []

    def window(self, t0: float, t1: float) -> dict:
        if self.proc is None or not os.path.exists(self.path):
            return {"sm_mhz": None, "watts": None, "samples": 0}
        sm, w = [], []
        for line in open(self.path):
            parts = [p.strip() for p in line.split(",")]
            try:
                whole, _, frac = parts[0].partition(".")  # nvidia-smi: 2026/11/30 02:46:23.123, local time
                ts = time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + float("0." + (frac or "0"))
                if t0 <= ts <= t1:
                    sm.append(float(parts[1]))
                    w.append(float(parts[2]))
            except (ValueError, IndexError):
                continue
        return {"sm_mhz": statistics.median(sm) if sm else None, "watts": statistics.median(w) if w else None,
                "samples": len(sm)}

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--passes", type=int, default=3)
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    l9 = LEVELS[9]
    sampler = Sampler()
    rows = []
    try:
        for group in GROUPS:
            for m, n, k in group:
                a, b = random_operands(m, n, k, "bf16", "cuda", seed=m + 3 * n + 7 * k)
                _, errors, failures = check_targets({"L9": l9}, a, b)
                if failures:
                    raise RuntimeError(f"level 9 failed on {m}x{n}x{k}: {failures['L9']}")
                t0 = time.time()
                l9_tf, cu_tf = [], []
                for i in range(args.passes):
                    order = {"L9": l9, "cuBLAS": cublas} if i % 2 else {"cuBLAS": cublas, "L9": l9}
                    t = time_fns(order, a, b, budget_s=0.4, rounds=4, warmup=5)
                    l9_tf.append(2 * m * n * k / (t["L9"].median_ms * 1e-3) / 1e12)
                    cu_tf.append(2 * m * n * k / (t["cuBLAS"].median_ms * 1e-3) / 1e12)
                rows.append({"m": m, "n": n, "k": k, "waves": waves(m, n), "rel_err_256_rows": errors["L9"],
                             "window": (t0, time.time()),
                             "l9_tflops_per_pass": l9_tf, "cublas_tflops_per_pass": cu_tf,
                             "l9_tflops": statistics.median(l9_tf), "cublas_tflops": statistics.median(cu_tf),
                             "vs_cublas": statistics.median(l9_tf) / statistics.median(cu_tf)})
    finally:
        sampler.stop()  # nvidia-smi flushes its file when it ends, so the windows are read after
    for r in rows:
        r.update(sampler.window(*r.pop("window")))
    table = Table(title="level 9: partial last wave vs whole waves (bf16)")
    for col in ("M x N x K", "waves", "L9 TFLOP/s", "cuBLAS TFLOP/s", "L9/cuBLAS", "SM MHz", "W"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['m']}x{r['n']}x{r['k']}", f"{r['waves']:.2f}", f"{r['l9_tflops']:.0f}",
                      f"{r['cublas_tflops']:.0f}", f"{r['vs_cublas']:.3f}", str(r["sm_mhz"]), str(r["watts"]))
    Console(width=140).print(table)
    save({"rows": rows}, "wave_quantization", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
