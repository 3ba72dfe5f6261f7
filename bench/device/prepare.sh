#!/usr/bin/env bash
# Here, before a device session (no GPU needed): everything the device would otherwise compile, packed
# for `run`'s carry. From the repository root with the package installed (the README's install):
#   bash bench/device/prepare.sh
# Builds, with NVRTC (what the device scripts force too, so the keys match): the AOT kernels
# (tools/build_aot.py: every build the dispatcher can pick), and into .kcache the builds the experiments
# launch (bench/experiments/gemm_timeline.py --prebuild, bench/grouped.py --prebuild,
# bench/quantized_linear.py --prebuild, bench/experiments/quantized_pingpong.py --prebuild,
# bench/experiments/profile_mid.py --prebuild for smoke_mid_profile.sh's shapes). Then packs both
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
python3 bench/experiments/profile_mid.py --prebuild --shape 1023,768,3072 --builds "route;c1 bm64 bn128 none;c1 bm64 lag2 bn128 none;c1 bm64 bn64 none"
mkdir -p .gl
tar czf .gl/carry.tgz src/gemm_ladder/aot_kernels .kcache
echo "prepared in $(( $(date +%s) - start )) s: .gl/carry.tgz $(du -h .gl/carry.tgz | cut -f1) (carry limit 64 MiB)"
