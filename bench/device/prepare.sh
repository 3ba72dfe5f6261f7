#!/usr/bin/env bash
# Here, before a device session (no GPU needed): everything the device would otherwise compile, packed
# for `run`'s carry. From the repository root with the package installed (the README's install):
#   bash bench/device/prepare.sh
# Builds, with NVRTC (what the device scripts force too, so the keys match): the AOT kernels
# (tools/build_aot.py: every build the dispatcher can pick), and into .kcache the builds the experiments
# launch (bench/experiments/gemm_timeline.py --prebuild, bench/grouped.py --prebuild,
# bench/quantized_linear.py --prebuild, bench/experiments/quantized_pingpong.py --prebuild,
# bench/experiments/profile_mid.py --prebuild for smoke_mid_profile.sh's shapes, bench/experiments/bias_cost.py
# --prebuild for smoke_bias_stalls.sh's, bench/experiments/bias_mma.py --prebuild for smoke_bias_mma.sh's,
# bench/shapes_real.py --prebuild for its full set, and the release-lag GPU
# test's builds). Then packs both
# into .gl/carry.tgz. On the device: carry [".gl"], and run
#   tar xzf .gl/carry.tgz && export GEMM_LADDER_COMPILER=nvrtc GEMM_LADDER_GIT_COMMIT=<sha> && OUT=$OUT bash bench/device/smoke_....sh
# Exit status: 0 when every build is ready; the first failing step's otherwise.
set -euo pipefail
export GEMM_LADDER_COMPILER=nvrtc GEMM_LADDER_CACHE="$PWD/.kcache" PYTHONUNBUFFERED=1
start=$(date +%s)
python3 tools/build_aot.py --workers "$(nproc)"
python3 bench/experiments/gemm_timeline.py --prebuild
python3 bench/grouped.py --prebuild
python3 bench/quantized_linear.py --prebuild
python3 bench/experiments/quantized_pingpong.py --prebuild
python3 bench/experiments/profile_mid.py --prebuild
python3 bench/experiments/bias_cost.py --prebuild  # smoke_bias_stalls.sh's builds (the default shapes)
python3 bench/experiments/bias_mma.py --prebuild  # smoke_bias_mma.sh's builds
python3 bench/shapes_real.py --prebuild  # the full set's fused rows (the plain rows' builds are the AOT kernels)
python3 bench/shapes_real.py --prebuild --dtype bf16 --autotune  # smoke_autotune.sh's: the candidates too
python3 bench/experiments/profile_mid.py --prebuild --shape 1023,768,3072 --builds "route;c1 bm64 bn128 none;c1 bm64 lag2 bn128 none;c1 bm64 bn64 none"
# tests/test_release_lag_gpu.py's builds, both lags
python3 - <<'PY'
import sys
sys.path.insert(0, "bench")
from suite import prebuild
from gemm_ladder.library.gemm import library_gemm
cfgs = [dict(bn=64, bm=64, cluster=1), dict(bn=128, bm=64, cluster=1), dict(bn=128), dict(bn=256),
        dict(bn=256, bm=64, pingpong=True, cluster=1)]
sys.exit(prebuild([library_gemm("k", "k", release_lag=lag, **c) for c in cfgs for lag in (1, 2)]))
PY
mkdir -p .gl
tar czf .gl/carry.tgz src/gemm_ladder/aot_kernels .kcache
echo "prepared in $(( $(date +%s) - start )) s: .gl/carry.tgz $(du -h .gl/carry.tgz | cut -f1) (carry limit 64 MiB)"
