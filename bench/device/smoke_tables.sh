#!/usr/bin/env bash
# This GPU's cost table against the H200's, and the fp8 shared-copy build's read order, on a GPU: one `run`
# call, about 480 s at most. From the repository root with the carry unpacked (bench/device/prepare.sh,
# then the fp8 builds prebuilt as smoke_fp8final.sh says, with this script's variants and shapes):
#   OUT=/tmp/out bash bench/device/smoke_tables.sh
# Steps, each under its own time limit: the whole GPU suite (its routes now from this GPU's table where the
# package has one: dispatch/table_<name>.json); bench/route_tables.py (every plain layer shape of
# bench/shapes_real.py in bf16: table.json's pick, this GPU's table's pick and cuBLAS, timed in the same
# rounds); bench/experiments/fp8_variants.py (scales_after: the shared copy's scales read after the wgmmas,
# as before; ahead: the load-ahead build); bench/fp8.py at decode (M = 64, the library's 64-row tiles) and
# 128 x 7168 x 2048.
# Writes $OUT/tables/smoke.log and the benches' JSONs there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_tables tables
step suite 170 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests
step route_tables 170 python3 bench/route_tables.py -o "$DEST/route_tables.json"
step fp8_order 70 python3 bench/experiments/fp8_variants.py --schemes blockwise --variants scales_after,ahead --shapes 4096x7168x16384,4096x4096x4096,8192x8192x8192,4096x24576x1536,128x7168x2048,4096x7168x14336,4096x4096x2048 -o "$DEST/fp8_variants.json"
step fp8_decode 60 python3 bench/fp8.py --shapes 64x1536x7168,64x24576x1536,64x576x7168,64x7168x16384,64x4096x7168,64x7168x2048,64x6144x4096,64x4096x4096,64x28672x4096,64x4096x14336,128x7168x2048 -o "$DEST/fp8_decode.json"
smoke_end smoke_tables 'passed|failed|error|WRONG|UNEQUAL|TFLOP|blockwise:|picks differ'
