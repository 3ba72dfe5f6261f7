#!/usr/bin/env bash
# The grouped GEMM's GPU smoke run (issue 24), from the repo root on the H200 with PYTHONPATH=src and
# GEMM_LADDER_CACHE set: build the four bf16/fp16 x K/N-major kernels, the GPU tests, a quick bench.
# Logs under $OUT (build.log, pytest.log, bench.log; the bench's JSON too). Exit status: the tests'.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >"$OUT/build.log" 2>&1
timeout 300 python3 - >>"$OUT/build.log" 2>&1 <<'PY'
import time
from gemm_ladder.library.grouped import grouped_gemm
for bn in (128, 256):
    for major in ("k", "mn"):
        for dt in ("bf16", "fp16"):
            t = time.time(); k = grouped_gemm(bn, major).build(dt)
            print(bn, major, dt, f"{time.time() - t:.1f} s", [l for l in k.ptxas_log.splitlines() if "spill" in l or "registers" in l])
PY
echo "build rc=$?" >>"$OUT/build.log"
timeout 420 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_grouped*.py >"$OUT/pytest.log" 2>&1
rc=$?
echo "pytest rc=$rc" >>"$OUT/pytest.log"
(cd bench && timeout 240 python3 grouped.py --quick) >"$OUT/bench.log" 2>&1
echo "bench rc=$?" >>"$OUT/bench.log"
tail -n 40 "$OUT/build.log" "$OUT/pytest.log" "$OUT/bench.log"
exit $rc
