"""What storing C from registers costs against the TMA store (one-off experiment).

    python bench/experiments/register_store_cost.py

The general kernel forced (split none) at 4096^3 and 2048x2048x4096, BN 256 and 128: its TMA-store
build, and its register-store build on the same aligned bf16 output, on an odd-pitch view and on a
float32 output, timed interleaved with cuBLAS (gates.performance.time_fns). Writes creg_probe.json
under $OUT without the suite's meta (bench/results/2026-12-01_register_store_probe_5e7c704.json adds it).
"""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from suite import require_gpu
require_gpu(__file__)
import torch
import library as L
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.library.operand import operand_view
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.contract import reference
out = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%FT%TZ", time.gmtime()),
       "commit": os.environ.get("GEMM_LADDER_GIT_COMMIT"), "rows": []}
for (m, n, k) in [(4096, 4096, 4096), (2048, 2048, 4096)]:
    x, y = L.operands("row,w.T", m, n, k, "bf16", 11)
    va, vb = operand_view(x, k_dim=1), operand_view(y.T, k_dim=1)
    ref = reference(x, y.T)
    fns = {"cuBLAS": lambda p, q: torch.mm(p, q)}
    for bn in (256, 128):
        for name, kern, dt in (("tma", K.general("k", "k", bn), torch.bfloat16),
                               ("creg", K.general_from_registers("k", "k", bn), torch.bfloat16),
                               ("creg_odd_pitch", K.general_from_registers("k", "k", bn), torch.bfloat16),
                               ("creg_fp32", K.general_from_registers("k", "k", bn, out_fp32=True), torch.float32)):
            if name == "creg_odd_pitch":
                c = torch.empty(m, n + 1, dtype=dt, device="cuda")[:, :n]
            else:
                c = torch.empty(m, n, dtype=dt, device="cuda")
            c.fill_(float("nan"))
            why = kern.supports(va, vb, c) if hasattr(kern, "supports") else None
            if why:
                print(name, bn, "unsupported:", why); continue
            kern.launch(va, vb, c, split="none")
            err = ((c.double() - ref).norm() / ref.norm()).item()
            print(f"{m}x{n}x{k} BN {bn} {name}: err {err:.2e}", flush=True)
            fns[f"BN{bn} {name}"] = lambda p, q, kern=kern, c=c: kern.launch(va, vb, c, split="none")
    t = time_fns(fns, x, y, budget_s=1.5, rounds=4, warmup=5)
    row = {"m": m, "n": n, "k": k, "us": {nm: tm.median_ms * 1e3 for nm, tm in t.items()}}
    out["rows"].append(row)
    print(row, flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "creg_probe.json"), "w"), indent=1)
