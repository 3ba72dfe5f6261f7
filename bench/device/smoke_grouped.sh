#!/usr/bin/env bash
# The grouped GEMM's GPU smoke run (issue 24), from the repo root on the H200 with GEMM_LADDER_CACHE set:
# the GPU tests (builds happen at first use), then a short bench. Everything goes to ONE log,
# $OUT/smoke.log, plus the bench's JSON in $OUT; about 150 s. Exit status: the tests'.
set -u
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src"  # absolute: the bench step runs from bench/
LOG="$OUT/smoke.log"
{
  echo "== smoke_grouped $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
  echo "== pytest"
  timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=line \
    tests/test_grouped_gpu.py 2>&1 | tail -n 80
  echo "== pytest rc=${PIPESTATUS[0]}"
  echo "== bench"
  (cd bench && timeout 50 python3 grouped.py --quick --cases qwen3_gate_up,decode_128 --directions fwd,grad_w) 2>&1 | tail -n 30
  echo "== bench rc=${PIPESTATUS[0]}"
} >"$LOG" 2>&1
grep -E "^== |passed|failed|error" "$LOG"
grep -q "== pytest rc=0" "$LOG"
