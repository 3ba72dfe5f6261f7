#!/usr/bin/env bash
# The hostdev branch's GPU checkpoint on the H200 (one GPU): run from the repository root with
# PYTHONPATH=src and GEMM_LADDER_CACHE set; everything is logged to $OUT/smoke_hostdev.log, result
# JSONs land in $OUT. About 200 s at most (each step has its own limit; the host module's build,
# ~30 s, happens in the first step).
#
#   OUT=/tmp/out PYTHONPATH=src GEMM_LADDER_CACHE=... bash bench/device/smoke_hostdev.sh
#
# Steps: the new GPU tests (device guard, tensor parallelism at NCCL world size 1, the example) with
# the CPU tests of the same code; the host module's GPU tests; host time per call (--model: Parameter
# weight and a new activation, grad off/on; --extra: out= and swiglu); bench/multi_gpu.py on one GPU
# (its code paths at world size 1) and its refusal of 2 GPUs; the example at world size 1.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/smoke_hostdev.log"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
echo "== smoke_hostdev $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT cache ${GEMM_LADDER_CACHE:-unset}" >"$LOG"
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader >>"$LOG" 2>&1
step() {
  local name=$1 secs=$2; shift 2
  echo "== $name ($secs s): $*" >>"$LOG"
  local start=$(date +%s)
  timeout "$secs" "$@" >>"$LOG" 2>&1
  echo "== $name rc=$? in $(( $(date +%s) - start )) s" >>"$LOG"
}
step new_tests 70 python3 -m pytest -q -p no:cacheprovider -rs tests/test_devices_gpu.py tests/test_parallel_gpu.py \
  tests/test_devices.py tests/test_parallel.py -k "not gloo"
step host_tests 45 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/test_host_gpu.py
step host_overhead 25 python3 bench/host_overhead.py --model --extra --calls 1000 --repeats 3
step example_world1 15 python3 examples/tp_llama_mlp.py --world 1
step multi_gpu_one 35 python3 bench/multi_gpu.py --spread 1 --tp 1 --quick --blocks 4
step multi_gpu_refuses 8 python3 bench/multi_gpu.py --tp 2
grep '^== ' "$LOG"
