"""Does the correctness gate catch a broken stream-K fixup? Level 9 splitting every tail, as shipped
and with its reduction dropping the last partial, on two shapes with split tails (H200: 66 clusters).

    python bench/experiments/broken_fixup_check.py OUT.json

One-off (bench/README.md): the record of bench/results/2026-11-30_broken_fixup_check_{5ddbf40,fac6faa}.json.
Its question belongs in a GPU test beside the stream-K tests; until then it is kept here, not maintained.
"""
import sys, json
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py, variants.py
from suite import require_gpu
require_gpu(__file__)
from variants import with_edit
from gemm_ladder.levels import LEVELS
from gemm_ladder.gates.correctness import check_correctness
good = LEVELS[9].variant(stream_k_min_idle=0.0)
bad = with_edit(LEVELS[9], "l9_drop_last_partial",
                lambda s: s.replace("slots.reduce(seg.contributors, d);", "slots.reduce(seg.contributors - 1, d);"),
                stream_k_min_idle=0.0)
out = []
for name, lv in (("L9 split", good), ("L9 split, reduce drops the last partial", bad)):
    for shape in ((2304, 2048, 1000), (4096, 4096, 4096)):
        r = check_correctness(lv, *shape, "bf16", device="cuda", domain=lv.domain)
        out.append({"level": name, "shape": shape, "status": r.status, "messages": [str(m)[:200] for m in getattr(r, "messages", [])][:2]})
        print(name, shape, r.status, out[-1]["messages"][:1])
json.dump(out, open(sys.argv[1], "w"), indent=1)
