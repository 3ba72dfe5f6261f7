#!/usr/bin/env bash
# The grouped GEMM's GPU smoke run (issue 24), from the repo root on the H200 with GEMM_LADDER_CACHE set:
# every build the tests use (16 in parallel), the GPU tests, then a short bench. Everything goes to ONE
# log, $OUT/smoke.log, plus the bench's JSON in $OUT; about 150 s. Exit status: the tests'.
set -u
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src"  # absolute: the bench step runs from bench/
LOG="$OUT/smoke.log"
{
  echo "== smoke_grouped $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
  echo "== build"
  timeout 45 python3 - <<'PY' 2>&1 | tail -n 5
import time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.library.grouped import grouped_gemm
cfgs = [dict(bn=bn, b_major=m) for bn in (128, 256) for m in ("k", "mn")]
cfgs += [dict(bn=bn, b_major="mn", k_grouped=True) for bn in (128, 256)]
cfgs += [dict(bn=128, bias=True), dict(bn=128, b_major="mn", out_fp32=True), dict(bn=128, masked=True)]
t = time.time()
with ThreadPoolExecutor(16) as pool:
    built = list(pool.map(lambda j: grouped_gemm(**j[0]).build(j[1]), [(c, d) for c in cfgs for d in ("bf16", "fp16")]))
spills = [k.kernel_name for k in built if "0 bytes spill stores, 0 bytes spill loads" not in k.ptxas_log]
print(f"{len(built)} builds in {time.time() - t:.0f} s; with spills: {spills or 'none'}")
PY
  echo "== pytest"
  timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=line tests/test_grouped_gpu.py 2>&1 | tail -n 60
  echo "== pytest rc=${PIPESTATUS[0]}"
  echo "== bench"
  (cd bench && timeout 35 python3 grouped.py --quick --cases qwen3_gate_up,mixtral_down_skewed,decode_128 \
     --directions fwd,grad_w) 2>&1 | grep -v "^wrote" | tail -n 12
  echo "== bench rc=${PIPESTATUS[0]}"
  (cd bench && timeout 12 python3 grouped.py --quick --cases qwen3_gate_up --directions fwd --bn 256 -o /tmp/bn256.json) \
     2>&1 | grep -v "^wrote" | sed 's/^/bn256: /' | tail -n 3
} >"$LOG" 2>&1
grep -E "^== |passed|failed|error|builds" "$LOG"
grep -q "== pytest rc=0" "$LOG"
