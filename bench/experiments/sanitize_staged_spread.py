"""bench/library.py --sanitize with the staged store routed, then the spread splits forced (one-off).

    compute-sanitizer --report-api-errors no --tool memcheck python3 bench/experiments/sanitize_staged_spread.py

Run at 0bb96dc under memcheck, racecheck and synccheck
(bench/results/logs/2026-12-01_session_0bb96dc_sanitizers_tune.log): bench/library.py's sanitize() with
dispatch/kernels.py's STAGED_STORE switched on (every mm route through the staged copy where the output
needs it), then "tail_spread" and "all_spread" forced on the TMA-store and staged builds of every BN at
two tail shapes, each checked against float64. Prints one line per spread launch; nothing is timed.
"""
import sys, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from suite import require_gpu
require_gpu(__file__)
import torch
import library as L
from gemm_ladder.dispatch import kernels as K
K.STAGED_STORE = True
rc = L.sanitize()
print("sanitize with the staged store: rc", rc, flush=True)
from gemm_ladder.library.operand import operand_view
from gemm_ladder.contract import reference
g = torch.Generator(device="cuda").manual_seed(3)
for (m, n, k) in ((3 * 128 + 8, 3 * 256 + 8, 200), (1000, 900, 1000)):
    x = torch.randn(m, k, generator=g, device="cuda").bfloat16(); w = torch.randn(n, k, generator=g, device="cuda").bfloat16()
    for bn in K.general_bns():
        for kern in (K.general("k", "k", bn), K.general_staged("k", "k", bn)):
            for split in ("tail_spread", "all_spread"):
                c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                if kern.supports(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c):
                    continue
                kern.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, split=split)
                torch.cuda.synchronize()
                err = ((c.double() - reference(x, w)).norm() / reference(x, w).norm()).item()
                print(f"{kern.name} {split} {m}x{n}x{k}: {err:.2e}", flush=True)
                assert err < 1e-2
