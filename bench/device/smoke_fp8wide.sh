#!/usr/bin/env bash
# The fp8 kernel's experimental 192-wide tile (fp8.EXPERIMENTAL_TILE_N; docs/fp8.md) on the H200, from the
# repository root with the package installed (or PYTHONPATH=src), its builds prebuilt with NVRTC
# (`python3 bench/experiments/fp8_variants.py --prebuild` with this script's variants, schemes and shapes;
# the GPU tests' own builds compile there if not carried):
#   OUT=/tmp/out bash bench/device/smoke_fp8wide.sh [quick|sanitize]
# Default steps, in order of what matters most, each under its own time limit (about 490 s if each ran to its
# limit): the 192-wide GPU tests (tests/test_fp8_bn192_gpu.py: float64, bitwise equal to BN 128, repeatable);
# bench/experiments/fp8_variants.py, blockwise, the issue's shapes and four DeepSeek/Llama layers, the default
# build against `serial` (its promotion serial) and `bn192`, and torch._scaled_mm, interleaved
# -> $OUT/fp8wide/variants_blockwise.json; the same for tensorwise and rowwise -> variants_tw_rw.json.
# With `quick` (about 230 s at most): three blockwise shapes of the variants, five shapes of the 256-row experiment,
# then the two GPU test files, for a call with little device time left.
# With `sanitize`: compute-sanitizer racecheck, memcheck and synccheck on --check-only launches of the default
# and 192-wide builds (two small shapes with tails, 17 K blocks: the shared scale_b copy) instead.
# The default run then takes the 256-row bf16 tile's GPU tests and experiment (smoke_tall.sh's first two steps,
# fewer shapes): device time was short on 2026-12-06, and one call had to carry both.
# Writes $OUT/fp8wide/smoke.log (and pingpong.json, .md). Exit status: 0 when every step passed; the failed
# steps are named on the log's last line; 2 for an unknown mode, before anything runs.
set -u
case "${1:-}" in
  ""|quick|sanitize) ;;
  *) echo "smoke_fp8wide.sh: unknown mode '$1' (none, quick or sanitize)" >&2; exit 2 ;;
esac
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
# The AOT kernels (the route's builds, which the 256-row experiment's route column calls) where carried.
[ -f .gl/aot.tgz ] && [ ! -d src/gemm_ladder/aot_kernels ] && tar xzf .gl/aot.tgz
smoke_begin smoke_fp8wide fp8wide
V=bench/experiments/fp8_variants.py
WIDE_SHAPES=4096x7168x16384,4096x4096x4096,8192x8192x8192,4096x24576x1536,128x7168x2048,4096x576x7168,4096x6144x4096,4096x28672x4096,4096x1536x7168
SMALL=300x1000x2064,1540x776x2064
if [ "${1:-}" = quick ]; then  # the least device time that answers both questions: a few shapes, then the tests
  step variants_blockwise 45 python3 "$V" --schemes blockwise --variants serial,bn192 \
    --shapes 4096x7168x16384,8192x8192x8192,4096x6144x4096 --budget 0.05 -o "$DEST/variants_blockwise.json"
  step tall_bench 60 python3 bench/experiments/pingpong.py --budget 0.02 \
    --shapes "vit_l16 qkv 1576,qwen2.5_7b qkv 1000,vit_l16 fc2 1576,bert_large output 512,vit_l16 fc2" \
    --configs '^(tall|coop BM 128 BN (128|192|256)( c1)? (none|tail)|pp BN 256 c1)' -o "$DEST"
  step tests 60 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_fp8_bn192_gpu.py
  step tall_tests 60 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short -x tests/test_tall_tile_gpu.py
elif [ "${1:-}" = sanitize ]; then
  for tool in racecheck memcheck synccheck; do
    step "$tool" 90 compute-sanitizer --report-api-errors no --tool "$tool" --error-exitcode 1 \
      python3 "$V" --check-only --variants bn192 --schemes blockwise,tensorwise --shapes "$SMALL"
  done
else
  step tests 70 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_fp8_bn192_gpu.py
  step variants_blockwise 110 python3 "$V" --schemes blockwise --variants serial,bn192 --shapes "$WIDE_SHAPES" \
    --budget 0.06 -o "$DEST/variants_blockwise.json"
  step tall_tests 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests/test_tall_tile_gpu.py
  step tall_bench 130 python3 bench/experiments/pingpong.py --set mid --budget 0.02 \
    --configs '^(tall|coop BM 128 BN (128|192|256) (c1 )?(none|tail)|pp BN 256 c1)' -o "$DEST"
  step variants_tw_rw 80 python3 "$V" --schemes tensorwise,rowwise --variants serial,bn192 \
    --shapes 4096x7168x16384,8192x8192x8192,4096x576x7168,4096x6144x4096 --budget 0.05 -o "$DEST/variants_tw_rw.json"
fi
smoke_end smoke_fp8wide 'passed|failed|error|ERROR|WRONG|UNEQUAL|TFLOP|SUMMARY'  # 0 when every step passed
