#!/usr/bin/env bash
# Run a command as a machine without a CUDA toolkit sees it (issue 28's target: the GPU suite through
# NVRTC from the pip wheels): in a private mount namespace, the directory behind /usr/local/cuda and
# every nvcc on PATH hidden under empty ones, the toolkit's variables unset and its folders off PATH.
# Refuses (exit 2) where nvcc still answers after hiding. Needs root (unshare -m), as on the H200.
#
#   bash bench/device/no_toolkit.sh python3 -m pytest -m gpu tests/test_fp8_gpu.py
set -u
if [ "${GL_TOOLKIT_HIDDEN:-}" != 1 ]; then
  toolkit=$(readlink -f /usr/local/cuda 2>/dev/null || true)
  hide="true"
  [ -n "$toolkit" ] && [ -d "$toolkit" ] && hide="mount --bind \$(mktemp -d) $toolkit"
  for n in $(which -a nvcc 2>/dev/null | sort -u); do
    real=$(readlink -f "$n")
    case "$real" in "$toolkit"/*) ;; *) hide="$hide && mount --bind /dev/null $real" ;; esac  # outside the toolkit
  done
  exec unshare -m sh -c "$hide && GL_TOOLKIT_HIDDEN=1 exec bash \"\$0\" \"\$@\"" "$0" "$@"
fi
unset CUDA_HOME CUDA_PATH GEMM_LADDER_NVCC GEMM_LADDER_COMPILER
PATH=$(echo "$PATH" | tr ':' '\n' | grep -vi cuda | paste -sd: -)
export PATH
if nvcc --version >/dev/null 2>&1; then
  echo "no_toolkit.sh: nvcc still answers after hiding the toolkit; refusing" >&2
  exit 2
fi
python3 -c 'from gemm_ladder.runtime import compiler as c; k = c.compiler_choice(); print("compiler:", k, c.compiler_identity(k))'
exec "$@"
