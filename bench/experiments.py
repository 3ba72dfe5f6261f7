"""One-off variants of levels 6-9 to find where time goes (development tool; results go in notes).

    python bench/experiments.py [--size 8192]

Each variant is a level's source with one change, compiled into a temporary file and timed beside
its unchanged level and cuBLAS in the same run (triton do_bench, L2 flushed, median).
"""

import argparse
import dataclasses
import json
import os
import tempfile
from pathlib import Path

import torch
from triton.testing import do_bench

from gemm_ladder.contract import cublas
from gemm_ladder.levels import LEVELS
from gemm_ladder.runtime.compiler import KERNEL_ROOT

# The remote arrive without .release.cluster; since 2026-11-30 ptx/mbarrier.cuh uses this form itself,
# so the L8/L9 "plain" variants now match the levels (kept to reproduce that measurement).
PLAIN_ARRIVE = '''
__device__ __forceinline__ void arrive_remote_plain(uint64_t* bar, uint32_t cta_rank) {
  asm volatile("{\\n.reg .b32 remote;\\nmapa.shared::cluster.u32 remote, %0, %1;\\n"
               "mbarrier.arrive.shared::cluster.b64 _, [remote];\\n}\\n" ::"r"(gl::smem_u32(bar)), "r"(cta_rank) : "memory");
}
'''


def variant(level_no, name, edit, **config):
    src = (KERNEL_ROOT / LEVELS[level_no].source).read_text()
    new = edit(src)
    assert new != src or not edit.__name__.startswith("e_"), name
    path = Path(tempfile.gettempdir()) / f"gl_exp_{name}.cu"
    path.write_text(new)
    base = LEVELS[level_no].variant(**config)

    class Variant(type(base)):
        def translation_unit(self, dtype):
            return f'#include "{path}"\n'

    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    return name, Variant(**fields)


def e_plain_arrive(src):
    src = src.replace("using namespace gl;", "using namespace gl;\n" + PLAIN_ARRIVE, 1)
    return src.replace("mbarrier_arrive_cluster(", "arrive_remote_plain(")


def e_no_multicast(src):
    return src.replace(
        "tma_load_2d_multicast(smem.b(s) + rank * GL_B_BOX_ROWS * BK, &map_b, smem.full(s), kt * BK,\n"
        "                                tn * BN + rank * GL_B_BOX_ROWS, (1 << GL_CLUSTER) - 1);",
        "for (int r = 0; r < GL_CLUSTER; ++r) tma_load_2d(smem.b(s) + r * GL_B_BOX_ROWS * BK, &map_b, smem.full(s), kt * BK, tn * BN + r * GL_B_BOX_ROWS);")


def same(src):
    return src


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=8192)
    args = p.parse_args()
    s = args.size
    a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    ref = (a[:256].double() @ b.double().T)
    flops = 2 * s**3
    runs = [("cuBLAS", cublas)]
    runs += [(f"L{n}", LEVELS[n]) for n in (4, 5, 6, 7, 8, 9)]
    runs += [variant(8, "L8_plain_arrive", e_plain_arrive), variant(8, "L8_no_multicast", e_no_multicast),
             variant(8, "L8_no_multicast_plain", lambda x: e_no_multicast(e_plain_arrive(x))),
             variant(9, "L9_plain_arrive", e_plain_arrive), variant(9, "L9_no_multicast", e_no_multicast),
             variant(9, "L9_no_cluster", same, cluster=1)]
    runs += [variant(6, f"L6_s{st}", same, stages=st) for st in (3, 4)]
    runs += [variant(7, f"L7_s{st}", same, stages=st) for st in (5, 6)]
    runs += [variant(5, f"L5_s{st}", same, stages=st) for st in (3, 4, 6)]
    rows = []
    for name, fn in runs:
        try:
            c = fn(a, b)
            err = ((c[:256].double() - ref).norm() / ref.norm()).item()
            t = do_bench(lambda: fn(a, b), warmup=50, rep=300, return_mode="median")
            rows.append({"name": name, "tflops": round(flops / t / 1e9, 1), "ms": t, "rel_err_first_rows": err})
        except Exception as exc:  # noqa: BLE001 - report every variant
            rows.append({"name": name, "error": repr(exc)[:300]})
        torch.cuda.synchronize()
        print(json.dumps(rows[-1]), flush=True)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, f"experiments_{s}.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "size": s, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
