"""The persistent kernels' tile order: its group height is the plan's -D constant (GL_GROUP_M), and
the designer's unit_coords walks the same order as tile_scheduler.cuh, compiled here for the host.
nvcc only, no GPU."""

from __future__ import annotations

import subprocess

import pytest
from conftest import needs_nvcc

from gemm_ladder.design import kernel_defines_for
from gemm_ladder.design.plan import GROUP_M, unit_coords, units_span
from gemm_ladder.levels import LEVELS
from gemm_ladder.runtime.compiler import KERNEL_ROOT, nvcc_path

HOST_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "gemm_ladder/tile_scheduler.cuh"
int main(int argc, char** argv) {
  for (int a = 1; a + 2 < argc; a += 3) {
    const int tiles_m = atoi(argv[a]), tiles_n = atoi(argv[a + 1]), cluster = atoi(argv[a + 2]);
    const gl::TileScheduler s(tiles_m * 128, tiles_n * 256, 128, 256, cluster);
    for (int u = 0; u < s.total; ++u) {
      int um, tn;
      s.coords(u, um, tn);
      printf("%d %d %d %d\n", a, u, um, tn);
    }
  }
  return 0;
}
"""

#: (M tiles, N tiles, cluster): partial last groups, a single row, clusters stacking M tiles.
CASES = [(10, 3, 1), (17, 5, 2), (1, 7, 1), (32, 16, 2), (9, 1, 1), (64, 64, 2)]


@pytest.mark.parametrize("number", [n for n, lv in LEVELS.items() if n >= 4])
def test_tma_levels_compile_in_the_plans_group_height(number):
    assert LEVELS[number].defines("bf16")["GL_GROUP_M"] == GROUP_M


def test_kernel_defines_carry_the_group_height():
    assert kernel_defines_for("fp16", (128, 256, 64), stages=4, cluster=2, consumers=2, c_ring=2)["GL_GROUP_M"] == GROUP_M


@needs_nvcc
@pytest.mark.parametrize("group_m", [None, 3], ids=["plan", "3"])
def test_header_walks_the_order_of_unit_coords(tmp_path, group_m):
    group_m = group_m or kernel_defines_for()["GL_GROUP_M"]
    src = tmp_path / "order.cu"
    src.write_text(HOST_PROGRAM)
    exe = tmp_path / "order"
    subprocess.run([nvcc_path(), "-std=c++17", f"-DGL_GROUP_M={group_m}", f"-I{KERNEL_ROOT / 'include'}", str(src),
                    "-o", str(exe)], check=True, capture_output=True, timeout=300)
    args, expected = [], []
    for i, (tiles_m, tiles_n, cluster) in enumerate(CASES):
        args += [str(tiles_m), str(tiles_n), str(cluster)]
        units_m = -(-tiles_m // cluster)
        expected += [(1 + 3 * i, u, *unit_coords(u, units_m, tiles_n, group_m)) for u in range(units_m * tiles_n)]
    out = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True, timeout=60).stdout
    assert [tuple(int(x) for x in line.split()) for line in out.splitlines()] == expected


@needs_nvcc
def test_header_refuses_to_compile_without_the_group_height(tmp_path):
    src = tmp_path / "order.cu"
    src.write_text(HOST_PROGRAM)
    proc = subprocess.run([nvcc_path(), "-std=c++17", "-E", f"-I{KERNEL_ROOT / 'include'}", str(src), "-o", "/dev/null"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "GL_GROUP_M" in proc.stderr


@pytest.mark.parametrize("group_m", [GROUP_M, 3, 1])
def test_units_span_counts_what_unit_coords_walks(group_m):
    """units_span (the cost model's count of the A rows and B columns a split reads) gives the distinct unit
    rows and N tiles of unit_coords over every range of small grids, partial last groups included."""
    for units_m, tiles_n in ((1, 1), (5, 3), (9, 4), (17, 7), (3, 11)):
        total = units_m * tiles_n
        for begin in range(total + 1):
            for end in range(begin, total + 1):
                pts = [unit_coords(u, units_m, tiles_n, group_m) for u in range(begin, end)]
                assert units_span(begin, end, units_m, tiles_n, group_m) == (len({p[0] for p in pts}),
                                                                              len({p[1] for p in pts}))
    with pytest.raises(ValueError, match="outside"):
        units_span(0, 13, 3, 4)
