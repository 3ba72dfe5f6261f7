#!/usr/bin/env bash
# This GPU's cost table against table.json (the H200's), on a GPU that has a table of its own (the H100: ask
# for kind nvidia-h100-x1; on an H200 both are table.json and the comparison measures nothing): one `run` call,
# about 420 s at most. From the repository root with the carry unpacked (bench/device/prepare.sh):
#   OUT=/tmp/out bash bench/device/smoke_tables.sh
# Steps, each under its own time limit: bench/route_tables.py (every plain layer shape of bench/shapes_real.py
# in bf16: table.json's pick, this GPU's table's pick and cuBLAS, timed in the same rounds); the whole GPU
# suite (its routes from this GPU's table; 170 s was too short on an H200 whose cache lacked the fp8 builds).
# Writes $OUT/tables/smoke.log and route_tables.json there.
# Exit status: 0 when every step passed; the failed steps are named on the log's last line.
set -u
source "$(dirname "$0")/step.sh"  # smoke_begin, step, smoke_end
smoke_begin smoke_tables tables
step route_tables 170 python3 bench/route_tables.py -o "$DEST/route_tables.json"
step suite 240 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE --tb=short tests
smoke_end smoke_tables 'passed|failed|error|WRONG|picks differ'
