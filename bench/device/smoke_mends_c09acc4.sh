#!/usr/bin/env bash
# The GPU tests of the mends made after the last GPU run of 2026-12-07 (swiglu's host path, nn.replace_gated_mlp, the
# shared GPU fixture, the planned-settings check), run on c09acc4's own tree, whose kernel headers the carry's
# .gl/slim.tgz cache was built for (later commits changed them). From the repository root, with .gl/pre.tgz
# (`git archive c09acc4 src tests bench/device bench/experiments bench/suite.py bench/outputs.py pyproject.toml |
# gzip > .gl/pre.tgz`) and .gl/slim.tgz carried:
#   OUT=/tmp/out bash bench/device/smoke_mends_c09acc4.sh
# Steps: the host module built; the swiglu, gated-MLP and host-path GPU tests; bench/experiments/gated_mlp.py
# (-> $OUT/s65/gated_mlp.json). Writes $OUT/s65/smoke.log. Exit status: 0 when every step passed.
set -u
export GEMM_LADDER_COMPILER=nvrtc PYTHONUNBUFFERED=1
mkdir -p /tmp/pre/.kcache && tar xzf .gl/pre.tgz -C /tmp/pre && tar xzf .gl/slim.tgz --strip-components=1 -C /tmp/pre/.kcache
cd /tmp/pre || exit 1
export GEMM_LADDER_CACHE=/tmp/pre/.kcache PYTHONPATH=/tmp/pre/src GEMM_LADDER_GIT_COMMIT=c09acc4
source bench/device/step.sh  # smoke_begin, step, smoke_end
smoke_begin smoke_mends_c09acc4 s65
step host 100 python3 -c 'import sys, gemm_ladder.ops as o; sys.exit(0 if o.host_module() is not None else "no host")'
step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_swiglu_host_gpu.py \
  tests/test_library_swiglu_gpu.py tests/test_swiglu_small_m_gated_gpu.py tests/test_gated_mlp_gpu.py \
  tests/test_host_gpu.py tests/test_grouped_host_gpu.py
step gated_rows 60 python3 bench/experiments/gated_mlp.py -o "$DEST/gated_mlp.json"
smoke_end smoke_mends_c09acc4 'passed|failed|error|ERROR|x '
