#!/usr/bin/env bash
# The fp8 kernel's TMA-store build (Fp8Kernel store="tma", not the default) on the H200, from the
# repository root with the package installed (or PYTHONPATH=src):
#   OUT=/tmp/out bash bench/device/smoke_fp8store.sh
# Steps, each under its own time limit (a deadlock ends as rc=124, not a hung session), at most 225 s in
# all (racecheck has taken 23-119 s on other kernels), typically about 120: the TMA-store and register builds compiled in parallel; the TMA store's GPU
# tests (tests/test_fp8_store_gpu.py) and the register build's quantized-output and padded-pitch tests (the
# kernel's signature changed for every build); compute-sanitizer memcheck and racecheck on small forced
# TMA-store calls (BN 64 and 128, every scale mode, M and N tails, bias); then
# bench/experiments/fp8_epilogue_cost.py (stores / no_stores / tma_store, K swept) at 4096x24576 (K0 1536)
# and 4096x7168 (K0 16384), tensorwise. Writes $OUT/fp8store/smoke.log and the two result JSONs there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
export GEMM_LADDER_HOST=${GEMM_LADDER_HOST:-0}
smoke_begin smoke_fp8store fp8store
step prebuild 25 python3 - <<'PY'
import itertools, time
from concurrent.futures import ThreadPoolExecutor
from gemm_ladder.gates.resources import parse_ptxas_log
from gemm_ladder.library.fp8 import KERNEL_NAME, Fp8Kernel
ks = [Fp8Kernel(m, out_dtype=o, bias=b, bn=n, store=s) for m, o, b, n, s in itertools.product(
      ("tensorwise", "rowwise", "blockwise"), ("bf16", "fp16"), (False, True), (64, 128), ("tma", "registers"))]
ks += [Fp8Kernel(m, out_dtype="fp8", bias=b) for m in ("tensorwise", "rowwise", "blockwise") for b in (False, True)]
t = time.time()
with ThreadPoolExecutor(16) as ex:
    built = list(ex.map(lambda k: k.build(), ks))
print(f"{len(ks)} builds in {time.time() - t:.0f} s")
for k, b in zip(ks, built):
    if k.store == "tma":
        u = parse_ptxas_log(b.ptxas_log)[KERNEL_NAME]
        print(f"{k.scale_mode} {k.out_dtype} bias={k.bias} bn={k.bn}: {u.registers} registers, "
              f"{u.spill_stores + u.spill_loads} spill bytes, {k.ring_stages} stages, {k.dynamic_smem} B smem")
PY
step pytest 40 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_fp8_store_gpu.py tests/test_fp8_gpu.py \
  -k "test_fp8_store_gpu or quantized or out_with_row_pitch"
SAN='
import torch
from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel, quantize_fp8
B = {"tensorwise": ((-1, -1), (-1, -1)), "rowwise": ((1, -1), (1, -1)), "blockwise": ((1, 128), (128, 128))}
for mode, (ba, bw) in B.items():
    for (m, n, k), bn in (((130, 200, 272), 64), ((300, 328, 512), 128), ((1, 136, 16), 128)):
        qa, sa = quantize_fp8(torch.randn(m, k, device="cuda"), ba)
        qw, sw = quantize_fp8(torch.randn(n, k, device="cuda"), bw)
        sb = sw.T if sw.dim() == 2 else sw
        bias = torch.randn(n, device="cuda")
        call = fp8.check_scaled_mm(qa, qw.T, sa, sb, bias)
        fp8.scaled_mm_launch(qa, qw.T, sa, sb, bias, call, kernel=Fp8Kernel(mode, bias=True, bn=bn, store="tma"))
torch.cuda.synchronize(); print("sanitize cases done")
'
step memcheck 20 compute-sanitizer --report-api-errors no --tool memcheck --error-exitcode 1 python3 -c "$SAN"
step racecheck 60 compute-sanitizer --report-api-errors no --tool racecheck --error-exitcode 1 python3 -c "$SAN"
step cost_24576 40 python3 bench/experiments/fp8_epilogue_cost.py --shape 4096x24576 --k0 1536 --budget 0.03 \
  -o "$DEST/fp8_epilogue_cost_4096x24576.json"
step cost_7168 40 python3 bench/experiments/fp8_epilogue_cost.py --shape 4096x7168 --k0 16384 --budget 0.03 \
  -o "$DEST/fp8_epilogue_cost_4096x7168.json"
smoke_end smoke_fp8store 'passed|failed|error|ERROR|intercept|TMA store|builds in'  # exit status: 0 when every step passed
