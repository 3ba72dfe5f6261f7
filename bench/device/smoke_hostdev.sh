#!/usr/bin/env bash
# The hostdev branch's GPU checkpoint on the H200 (one GPU), at most ~150 s in all (the host
# module's build, ~30 s, happens in the first step). Run from the repository root with
# PYTHONPATH=src and GEMM_LADDER_CACHE set:
#
#   OUT=/tmp/out PYTHONPATH=src GEMM_LADDER_CACHE=... bash bench/device/smoke_hostdev.sh
#
# Writes ONE log, $OUT/smoke_hostdev.log, and bench/host_overhead.py's JSON in $OUT; nothing else
# (bench/multi_gpu.py's JSON goes to /tmp). Steps, each under its own limit, skipped once the
# budget is spent: the new GPU tests (device guard, tensor parallelism under NCCL at world size 1,
# the example); a subset of the host module's GPU tests (Parameters and fresh activations, one
# planner call per signature, autograd, a captured CUDA graph; torch.compile's cases left out for
# time); host time per call (--model, --extra); the example at world size 1; multi_gpu's refusal
# of 2 GPUs and its code paths at world size 1.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/smoke_hostdev.log"
BUDGET=${BUDGET:-145}
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD/src}
export GEMM_LADDER_GIT_COMMIT=${GEMM_LADDER_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
echo "== smoke_hostdev $(date -u +%FT%TZ) commit $GEMM_LADDER_GIT_COMMIT cache ${GEMM_LADDER_CACHE:-unset}" >"$LOG"
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader >>"$LOG" 2>&1
step() {
  local name=$1 secs=$2; shift 2
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  if (( left < 5 )); then echo "== $name skipped: budget spent" >>"$LOG"; return; fi
  (( secs > left )) && secs=$left
  echo "== $name ($secs s): $*" >>"$LOG"
  local start=$(date +%s)
  timeout -k 3 "$secs" "$@" >>"$LOG" 2>&1
  echo "== $name rc=$? in $(( $(date +%s) - start )) s" >>"$LOG"
}
step new_tests 60 python3 -m pytest -q -p no:cacheprovider -rs tests/test_devices_gpu.py tests/test_parallel_gpu.py
step host_tests 25 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/test_host_gpu.py \
  -k "fresh_activations or one_planner or autograd_against or cuda_graph_capture"
step host_overhead 15 python3 bench/host_overhead.py --model --extra --calls 300 --repeats 3
step example_world1 12 python3 examples/tp_llama_mlp.py --world 1 --tokens 256
step multi_gpu_refuses 6 python3 bench/multi_gpu.py --tp 2
step multi_gpu_one 25 python3 bench/multi_gpu.py --spread 1 --tp 1 --quick --blocks 2 -o /tmp/multi_gpu_smoke.json
echo "== done in $(( $(date +%s) - T0 )) s" >>"$LOG"
grep '^== ' "$LOG"
