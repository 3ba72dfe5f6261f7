"""Which columns past N a TMA store of the layouts kernel writes into a padded c (N = 300 wrote 300-303:
the row's last 16-byte chunk goes out whole). One-off; its output: bench/results/logs/2026-12-01_tma_store_edge_3419336.log."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py
from suite import require_gpu
require_gpu(__file__)
import torch
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view
torch.manual_seed(0)
for (m, n, k) in [(512, 300, 128), (1000, 520, 200), (512, 300, 200), (512, 520, 128), (1000, 300, 128), (256, 300, 128)]:
    for split in ["tail", "none"]:
        a = torch.randn(m, k, device="cuda").bfloat16(); b = torch.randn(n, k, device="cuda").bfloat16()
        store = torch.full((m, ((n + 7) // 8) * 8 + 16), float("nan"), dtype=torch.bfloat16, device="cuda")
        c = store[:, :n]
        library_gemm("k", "k", 256).launch(operand_view(a, k_dim=1), operand_view(b, k_dim=1), c, split=split)
        torch.cuda.synchronize()
        bad = ~torch.isnan(store[:, n:])
        ref = a.double() @ b.double().T
        rows = bad.any(1).nonzero().flatten().tolist()
        print(m, n, k, split, "pad written:", int(bad.sum()), "rows", rows[:4], rows[-2:], "cols",
              (bad.any(0).nonzero().flatten() + n).tolist()[:24], "maxerr", (c.double() - ref).abs().max().item(),
              "unwritten", int(torch.isnan(c).sum()))
