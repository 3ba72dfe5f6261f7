"""The staged store's copy (kernels/include/gemm_ladder/staged_store.cuh), checked byte for byte on the
CPU: tests/staged_store_host/model.cpp compiles the header itself for the host (a warp as 32 threads,
shared memory as an array) and runs 4320 cases (BN 64/128/256; bf16 and float32 outputs; the plain form
and the fused-epilogue builds' kTight form at BN 64/128; N edges 1, 7,
8, 9, 63, 65, BN - 1, BN, past BN; pitches N, N + 1, N + 5, N + 16 bytes; bases 0, 1, 3, 6 elements
past 16-byte alignment; M edges 1, 17, 64 rows into the tile). Each case checks every output element's
value, that no byte outside the output view changed (guard values before the base, in the pitch
padding, left of and above the tile), that the fused-epilogue hook ran once per pair, that every global
store is aligned to its size and that element stores happen only at rows' ends. The GPU tests
(tests/test_library_gemm_cstage_gpu.py) check the kernel around it on the device."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "tests" / "staged_store_host"
INCLUDE = ROOT / "src" / "gemm_ladder" / "kernels" / "include"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (a host C++17 compiler) to build the host model")
def test_staged_store_copies_every_case_exactly(tmp_path):
    exe = tmp_path / "model"
    subprocess.run(["g++", "-std=c++17", "-O1", "-pthread", "-Wno-unknown-pragmas", f"-I{HOST}", f"-I{INCLUDE}",
                    str(HOST / "model.cpp"), "-o", str(exe)], check=True, capture_output=True, text=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip() == "ok 4320", run.stdout + run.stderr
