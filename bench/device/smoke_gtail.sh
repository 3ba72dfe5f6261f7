#!/usr/bin/env bash
# The grouped GEMM's stream-K tail build (grouped_gemm(..., tail=True): the last partial wave of units split
# by K over every cluster, decided on the device; not the default) on the H200, from the repository root with
# the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_gtail.sh
# Steps in order of what matters most (a call cut short keeps the first), each under its own time limit (a
# deadlock ends as rc=124, not a hung session; the pair's tail hung once,
# bench/results/logs/2026-12-06_device_grouped_tail_h100_b94d59f.log), at most 560 s in all: the tail builds
# compiled in parallel (the kernel's code changed for every build), each checked for spills;
# bench/sanitize_grouped.py --tail plain, then under compute-sanitizer racecheck (BN 128 on one CTA, BN 256 on a
# pair, on groups that make a wave and a third); bench/experiments/grouped_vs_dense.py on the E = 8 and 32
# forwards, the tail build (grouped_tail, grouped_tail_c1) interleaved with the route, the loops of our mm and
# cuBLAS mm and torch._grouped_mm; the tail's GPU tests and the grouped ones (tests/test_grouped_tail_gpu.py,
# tests/test_grouped_gpu.py); memcheck and synccheck of the sanitizer case; and PAIR_RING_HANG's probe with
# the one-buffer pair cut to 3 stages (grouped_pair_ring_hang.py c2s3).
# Writes $OUT/gtail/smoke.log and the bench's JSON there. Exit status: 0 when every step passed; the failed
# steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
export GEMM_LADDER_HOST=${GEMM_LADDER_HOST:-0}
smoke_begin smoke_gtail gtail
step prebuild 60 python3 - <<'PY'
import time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.gates.resources import parse_ptxas_log
from gemm_ladder.library.grouped import KERNEL_NAME, grouped_gemm
cfgs = [dict(bn=bn, b_major=m, cluster=cl) for bn in (128, 256) for m in ("k", "mn") for cl in (1, 2)]
cfgs += [dict(bn=128, bias=True), dict(bn=128, bias=True, cluster=2), dict(bn=256, bias=True, cluster=2),
         dict(bn=128, out_fp32=True), dict(bn=128, out_fp32=True, cluster=2)]
jobs = [(dict(c, tail=t), d) for c in cfgs for t in (True, False) for d in ("bf16", "fp16")]
t = time.time()
with ThreadPoolExecutor(16) as ex:
    built = list(ex.map(lambda j: grouped_gemm(**j[0]).build(j[1]), jobs))
print(f"{len(jobs)} builds in {time.time() - t:.0f} s")
bad = 0
for (kw, d), b in zip(jobs, built):
    u = parse_ptxas_log(b.ptxas_log)[KERNEL_NAME]
    bad += u.spill_stores + u.spill_loads > 0
    if kw["tail"] and d == "bf16":
        print(f"{grouped_gemm(**kw).name} {d}: {u.registers} registers, {u.spill_stores + u.spill_loads} spill bytes")
print(f"builds with spills: {bad}")
raise SystemExit(1 if bad else 0)
PY
step tail_plain 45 bash -c "cd bench && python3 sanitize_grouped.py --tail"
step racecheck 80 bash -c "cd bench && compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 sanitize_grouped.py --tail"
step bench 110 python3 bench/experiments/grouped_vs_dense.py \
  --cases mixtral_down_uniform,mixtral_down_skewed,deepseek_v3_32,mixtral_gate_up -o "$DEST/grouped_vs_dense_tail.json"
step pytest 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_grouped_tail_gpu.py \
  tests/test_grouped_gpu.py
step memcheck 60 bash -c "cd bench && compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 sanitize_grouped.py --tail"
step synccheck 50 bash -c "cd bench && compute-sanitizer --report-api-errors no --tool synccheck --error-exitcode 1 python3 sanitize_grouped.py --tail"
# PAIR_RING_HANG's lead: the one-buffer pair cut to the four-buffer build's 3 stages, on the case that hung
step pair_s3 35 python3 bench/experiments/grouped_pair_ring_hang.py qwen3_down c2s3 --reps 20
smoke_end smoke_gtail 'passed|failed|error|ERROR|WRONG|rel err|builds in|registers|grouped_tail'  # 0 when every step passed
