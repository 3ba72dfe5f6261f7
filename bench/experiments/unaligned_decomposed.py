"""Where 4097x4095x4093 loses against its aligned neighbour (one-off experiment).

    python bench/experiments/unaligned_decomposed.py

gemm_ladder.mm and cuBLAS timed interleaved (gates.performance.time_fns) at 4096^3 and at each
unaligned extent alone and combined (K = 4093: both operands repacked; N = 4095: C from registers;
M = 4097: a tile row more), with the route each took; then bench/library.py's forced() at 4097x4096x4096
and 4096^3 (each (BN, split) of the general kernel). Writes unaligned_probe.json under $OUT without
the suite's meta (bench/results/2026-12-01_unaligned_probe_5e7c704.json adds it by hand).
"""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from suite import require_gpu
require_gpu(__file__)
import torch
import library as L, gemm_ladder
from gemm_ladder.gates.performance import time_fns
out = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%FT%TZ", time.gmtime()),
       "commit": os.environ.get("GEMM_LADDER_GIT_COMMIT"), "rows": [], "forced": []}
shapes = [(4096, 4096, 4096), (4096, 4096, 4093), (4097, 4096, 4096), (4096, 4095, 4096),
          (4097, 4095, 4096), (4097, 4096, 4093), (4097, 4095, 4093)]
for i, (m, n, k) in enumerate(shapes):
    x, y = L.operands("row,w.T", m, n, k, "bf16", 9000 + i)
    err = L.check(x, y)
    t = time_fns({"ours": lambda p, q: gemm_ladder.mm(p, q), "cuBLAS": lambda p, q: torch.mm(p, q)},
                 x, y, budget_s=2.0, rounds=4, warmup=5)
    d = L.decision(x, y)
    row = {"m": m, "n": n, "k": k, "err": err, "ours_us": t["ours"].median_ms * 1e3,
           "cublas_us": t["cuBLAS"].median_ms * 1e3, "kernel": (d.get("kernel") or {}).get("name"),
           "split": d.get("split"), "grid": d.get("grid"), "tile": d.get("tile"),
           "operands": [(o["argument"], o["path"]) for o in d.get("operands", [])],
           "store": (d.get("output") or {}).get("output_path"),
           "candidates": (d.get("heuristic") or {}).get("candidates")}
    out["rows"].append(row)
    print(f"{m}x{n}x{k}: ours {row['ours_us']:.1f} us cuBLAS {row['cublas_us']:.1f} us "
          f"{row['kernel']} split={row['split']} grid={row['grid']} {row['operands']} {row['store']}", flush=True)
out["forced"] = L.forced("bf16", [(4097, 4096, 4096), (4096, 4096, 4096)], 2.0)
print(L.forced_markdown(out["forced"]))
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "unaligned_probe.json"), "w"), indent=1, default=str)
