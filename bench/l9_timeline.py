"""Where level 9's time goes inside one launch: per-CTA timestamps around its main loop and epilogue.

    python bench/l9_timeline.py [--shapes "4096,4096,4096;4096,1024,4096;8192,8192,8192"]
                                [--flush write,read,none] [-o OUT.json]

A copy of level 9 (bench/variants.with_edit) in which consumer 0's elected thread of every CTA writes
%globaltimer (ns) and clock64 (SM cycles) into a __device__ array at these points:

* ``entry``: the kernel's first instruction (before the barrier setup and the cluster barrier);
  ``ready``: registers raised (consumer 0); ``first_load``: the producer about to issue its first load;
* per whole tile i (up to MAX_TILES): ``issue[i]``, the tile's first wgmma issued (its first stage
  arrived), ``math_end[i]``, every wgmma of the tile complete (wait_group 0), and ``boundary_end[i]``,
  the end of what the consumer does before the next tile (packing, the first panels staged and stored);
  for tile 0 also when its K iterations 0-3 were issued;
* ``drain``: the last tile's remaining panels issued; ``stored``: its stores read out of shared
  memory (wait_group.read 0); ``exit``: after the final cluster barrier.

Cycles per K tile come from two windows per tile after the first: from ``issue`` (opens after the
tile's first wgmma is issued, and consumer 1's may already run: a lower bound) and from the previous
``boundary_end`` (includes the wait for the tile's first stage: an upper bound).

The traced copy never splits its tail (stream_k_min_idle = 2), so the last partial wave shows as
CTAs that exit early; the split tail's steps are not stamped. The stamps add a few global stores per
tile. One traced launch per shape and flush mode, after warm-up (see trace() for the modes; ``write``
is the timed benchmarks' L2 flush). The output gives, over the CTAs (median, min, max): the setup,
the first load's latency, each tile's math and boundary, the drain, and how far each CTA's exit is
from the last one's (the partial last wave shows there).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys

import torch
from rich.console import Console
from rich.table import Table
from suite import add_output_argument, require_gpu, save
from variants import with_edit

from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.gpu import l2_bytes
from gemm_ladder.levels import LEVELS
from gemm_ladder.runtime.module import _driver, check

MAX_TILES = 24
SLOTS = 3 + 3 * MAX_TILES + 3 + 4  # entry, consumer ready, producer's first load; 3 per tile; drain, stored, exit;
#                                   tile 0's K iterations 0-3 issued
ENTRY, READY, FIRST_LOAD = 0, 1, 2
DRAIN, STORED, EXIT = 3 + 3 * MAX_TILES, 4 + 3 * MAX_TILES, 5 + 3 * MAX_TILES
FIRST_ITERS = 6 + 3 * MAX_TILES  # 4 slots: when tile 0's K iterations 0..3 were issued (their stages arrived)


def _tile_slot(i: int, what: int) -> int:
    return 3 + 3 * i + what  # what: 0 issue, 1 math_end, 2 boundary_end


_HELPERS = f"""
#define GL_TRACE_SLOTS {SLOTS}
__device__ unsigned long long gl_trace_ns[1024][GL_TRACE_SLOTS];
__device__ long long gl_trace_clk[1024][GL_TRACE_SLOTS];
__device__ __forceinline__ void gl_stamp(int slot) {{
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  gl_trace_ns[blockIdx.x][slot] = ns;
  gl_trace_clk[blockIdx.x][slot] = clock64();
}}
"""


def _edits() -> list[tuple[str, str]]:
    """(anchor, replacement) pairs applied in order to level 9's source; each anchor must be unique."""
    def t(what: int) -> str:  # the slot of this CTA's current tile (the last slot's for tiles past MAX_TILES)
        i = "(unit - first_unit) / unit_stride"
        return f"3 + 3 * ({i} < {MAX_TILES} ? {i} : {MAX_TILES - 1}) + {what}"

    tracer = "consumer == 0 && elected"
    return [
        ("using namespace gl;\n", "using namespace gl;\n" + _HELPERS),
        ("    setmaxnreg_dec<40>();\n    if (threadIdx.x == 0) {\n",
         f"    setmaxnreg_dec<40>();\n    if (threadIdx.x == 0) {{\n      gl_stamp({FIRST_LOAD});\n"),
        ("    setmaxnreg_inc<232>();\n",
         "    setmaxnreg_inc<232>();\n    if (warpgroup_index() == 1 && thread_in_warpgroup() == 0) "
         f"gl_stamp({READY});\n"),
        ("  extern __shared__ uint8_t smem_raw[];\n",
         "  extern __shared__ uint8_t smem_raw[];\n  unsigned long long gl_entry_ns; long long gl_entry_clk = clock64();\n"
         "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(gl_entry_ns));\n"),
        ("    RingPosition pos{0};\n",
         "    RingPosition pos{0};\n    if (" + tracer + f") {{ gl_trace_ns[blockIdx.x][{ENTRY}] = gl_entry_ns; "
         f"gl_trace_clk[blockIdx.x][{ENTRY}] = gl_entry_clk; }}\n"),
        ("      consume_k_range(smem, d, consumer, 0, k_tiles, pos, elected, [&](int kt) {\n",
         "      consume_k_range(smem, d, consumer, 0, k_tiles, pos, elected, [&](int kt) {\n"
         f"        if (kt == 0 && {tracer}) gl_stamp({t(0)});\n"
         f"        if (kt < 4 && unit == first_unit && {tracer}) gl_stamp({FIRST_ITERS} + kt);\n"),
        ("      if (unit != first_unit)  // fewer K iterations than deferred panels",
         f"      if ({tracer}) gl_stamp({t(1)});\n"
         "      if (unit != first_unit)  // fewer K iterations than deferred panels"),
        ("        store_panel(p, packed, ring, &map_c, tn * BN, tm * BM + 64 * consumer, bar, elected);\n    }\n",
         "        store_panel(p, packed, ring, &map_c, tn * BN, tm * BM + 64 * consumer, bar, elected);\n"
         f"      if ({tracer}) gl_stamp({t(2)});\n    }}\n"),
        ("    if (elected) tma_store_wait_read<0>();\n",
         f"    if ({tracer}) gl_stamp({DRAIN});\n    if (elected) tma_store_wait_read<0>();\n"
         f"    if ({tracer}) gl_stamp({STORED});\n"),
        ("  cluster_sync();\n}\n",
         "  cluster_sync();\n"
         f"  if (warpgroup_index() == 1 && thread_in_warpgroup() == 0) gl_stamp({EXIT});\n}}\n"),
    ]


def traced_edit(src: str) -> str:
    for anchor, new in _edits():
        assert src.count(anchor) == 1, f"level 9 changed: anchor {anchor.strip()[:60]!r} is not unique or gone"
        src = src.replace(anchor, new, 1)
    return src


def timeline_enum(source: str) -> dict[str, int]:
    """A library kernel's TimelineSlot enum (name without its k -> value), read from its source under
    kernels/ (``source``, e.g. "library/sm90_gemm.cu"): the stamps' one truth. Also used by
    bench/small_m_timeline.py and bench/experiments/gemm_timeline.py."""
    from gemm_ladder.runtime.compiler import KERNEL_ROOT

    body = re.search(r"enum TimelineSlot \{(.*?)\};", (KERNEL_ROOT / source).read_text(), re.S)
    assert body, f"{source} has no TimelineSlot enum"
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"\bk(\w+) = (\d+),", body.group(1))}


def read_global(kernel, name: str, shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """A copy on the host of ``kernel``'s (a LoadedKernel) __device__ array ``name`` of ``shape`` and ``dtype``
    (cuModuleGetGlobal + cuMemcpyDtoH, synchronous). Also used by bench/small_m_timeline.py."""
    drv = _driver()
    ptr, size = check(drv.cuModuleGetGlobal(kernel.module, name.encode()), f"cuModuleGetGlobal({name})")
    out = torch.empty(shape, dtype=dtype)
    assert size == out.numel() * out.element_size()
    check(drv.cuMemcpyDtoH(out.data_ptr(), ptr, size), "cuMemcpyDtoH")
    return out


def zero_global(kernel, name: str) -> None:
    """Zero ``kernel``'s __device__ array ``name`` (cuMemsetD8), before a traced launch."""
    drv = _driver()
    ptr, size = check(drv.cuModuleGetGlobal(kernel.module, name.encode()), f"cuModuleGetGlobal({name})")
    check(drv.cuMemsetD8(ptr, 0, size), "cuMemsetD8")


def spread(xs: list[float]) -> dict:
    """median, min, max and count of ``xs`` (empty dict for none)."""
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)} if xs else {}


def trace(level, m: int, n: int, k: int, flush: str = "write") -> dict:
    """One traced launch of ``level`` on (m, n, k), bf16. ``flush``: what runs just before it: ``write``
    (the timed benchmarks' L2 flush: 2 x L2 of writes, which leaves L2 full of dirty lines), ``read``
    (2 x L2 of reads: L2 cold but clean) or ``none`` (L2 as the warm-up launches left it)."""
    a, b = random_operands(m, n, k, "bf16", "cuda", seed=m + n + k)
    tail = level.stream_k_tail(m, n, k, "bf16", a.device)
    assert tail.tail_units == 0, "the traced copy runs every unit whole"
    assert -(-tail.units // tail.clusters) <= MAX_TILES, f"more than {MAX_TILES} tiles per CTA: raise MAX_TILES"
    kernel = level.loaded("bf16", a.device)
    grid = list(level.grid(m, n, "bf16", a.device))
    buf = torch.empty(2 * l2_bytes(a.device), dtype=torch.uint8, device="cuda")  # empty: allocating writes nothing
    for _ in range(3):
        level(a, b)
    torch.cuda.synchronize()
    for name in ("gl_trace_ns", "gl_trace_clk"):  # stale stamps of another shape would read as this one's
        zero_global(kernel, name)
    if flush == "write":
        buf.fill_(1)
    elif flush == "read":
        buf.sum(dtype=torch.int64)
    c = level(a, b)
    torch.cuda.synchronize()
    ns = read_global(kernel, "gl_trace_ns", (1024, SLOTS), torch.int64)
    clk = read_global(kernel, "gl_trace_clk", (1024, SLOTS), torch.int64)
    ctas = int((ns[:, ENTRY] > 0).sum().item())
    ns, clk = ns[:ctas].tolist(), clk[:ctas].tolist()
    t0 = min(r[ENTRY] for r in ns)
    last_exit = max(r[EXIT] for r in ns)
    rows = {"entry_skew_us": [], "to_first_issue_us": [], "drain_us": [], "store_wait_us": [], "exit_gap_us": [],
            "tiles": [], "math_us": {}, "boundary_us": {}, "clock_ghz": []}
    for r, cr in zip(ns, clk):
        rows["entry_skew_us"].append((r[ENTRY] - t0) / 1e3)
        rows["to_first_issue_us"].append((r[_tile_slot(0, 0)] - r[ENTRY]) / 1e3)
        tiles = sum(1 for i in range(MAX_TILES) if r[_tile_slot(i, 0)] >= r[ENTRY] > 0 and r[_tile_slot(i, 0)] > 0)
        rows["tiles"].append(tiles)
        for i in range(tiles):
            rows["math_us"].setdefault(i, []).append((r[_tile_slot(i, 1)] - r[_tile_slot(i, 0)]) / 1e3)
            end = r[_tile_slot(i + 1, 0)] if i + 1 < tiles else r[_tile_slot(i, 2)]
            rows["boundary_us"].setdefault(i, []).append((end - r[_tile_slot(i, 1)]) / 1e3)
        rows["drain_us"].append((r[DRAIN] - r[_tile_slot(tiles - 1, 2)]) / 1e3)
        rows["store_wait_us"].append((r[STORED] - r[DRAIN]) / 1e3)
        rows["exit_gap_us"].append((last_exit - r[EXIT]) / 1e3)
        if r[EXIT] > r[ENTRY]:
            rows["clock_ghz"].append((cr[EXIT] - cr[ENTRY]) / (r[EXIT] - r[ENTRY]))
    k_tiles = tail.k_tiles
    rows["cycles_per_k_tile_low"] = [(c[_tile_slot(i, 1)] - c[_tile_slot(i, 0)]) / k_tiles
                                     for r, c, t in zip(ns, clk, rows["tiles"]) for i in range(1, t)]
    rows["cycles_per_k_tile_high"] = [(c[_tile_slot(i, 1)] - c[_tile_slot(i - 1, 2)]) / k_tiles
                                      for r, c, t in zip(ns, clk, rows["tiles"]) for i in range(1, t)]
    rows["first_load_latency_us"] = [(r[_tile_slot(0, 0)] - r[FIRST_LOAD]) / 1e3 for r in ns]
    rows["ready_us"] = [(r[READY] - r[ENTRY]) / 1e3 for r in ns]
    rows["first_load_us"] = [(r[FIRST_LOAD] - r[ENTRY]) / 1e3 for r in ns]
    for j in range(4):
        rows[f"iter{j}_issue_us"] = [(r[FIRST_ITERS + j] - r[ENTRY]) / 1e3 for r in ns if r[FIRST_ITERS + j] > 0]
    out = {"m": m, "n": n, "k": k, "flush": flush, "ctas": ctas, "grid": grid, "span_us": (last_exit - t0) / 1e3,
           "c_checksum_finite": bool(torch.isfinite(c.float()).all().item())}
    for key in ("ready_us", "first_load_us", "first_load_latency_us", *(f"iter{j}_issue_us" for j in range(4)),
                "entry_skew_us", "to_first_issue_us", "drain_us", "store_wait_us", "exit_gap_us", "clock_ghz", "tiles",
                "cycles_per_k_tile_low", "cycles_per_k_tile_high"):
        out[key] = spread(rows[key])
    out["math_us"] = {i: spread(v) for i, v in rows["math_us"].items()}
    out["boundary_us"] = {i: spread(v) for i, v in rows["boundary_us"].items()}
    out["per_cta"] = {"entry_ns": [r[ENTRY] - t0 for r in ns], "exit_ns": [r[EXIT] - t0 for r in ns],
                      "tiles": rows["tiles"]}
    if flush == "write":  # the benchmarks' condition: every stamp kept, for other readings
        out["raw"] = {"slots": {"entry": ENTRY, "ready": READY, "first_load": FIRST_LOAD, "tile0": 3, "per_tile": 3,
                                "drain": DRAIN, "stored": STORED, "exit": EXIT, "first_iters": FIRST_ITERS},
                      "ns": ns, "clk": clk}
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="4096,4096,4096;4096,1024,4096;8192,8192,8192")
    p.add_argument("--flush", default="write,read,none", help="comma list of: write, read, none (see trace())")
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    level = with_edit(LEVELS[9], "l9_traced", traced_edit, stream_k_min_idle=2.0)
    results = [trace(level, *(int(x) for x in s.split(",")), flush=f)
               for s in args.shapes.split(";") for f in args.flush.split(",")]
    table = Table(title="level 9 inside one launch (us, or cycles per K tile; median [min, max] over CTAs)")
    for col in ("shape", "flush", "span", "setup to 1st load", "1st load latency", "tile 0 math", "boundary 0",
                "drain", "exit before last", "cycles/K tile (low)", "cycles/K tile (high)", "GHz"):
        table.add_column(col, justify="right")
    fmt = lambda s, d=2: f"{s['median']:.{d}f} [{s['min']:.{d}f}, {s['max']:.{d}f}]" if s else "-"  # noqa: E731
    for r in results:
        table.add_row(f"{r['m']}x{r['n']}x{r['k']}", r["flush"], f"{r['span_us']:.1f}", fmt(r["first_load_us"]),
                      fmt(r["first_load_latency_us"]), fmt(r["math_us"].get(0, {})), fmt(r["boundary_us"].get(0, {})),
                      fmt(r["drain_us"]), fmt(r["exit_gap_us"]), fmt(r["cycles_per_k_tile_low"], 0),
                      fmt(r["cycles_per_k_tile_high"], 0), fmt(r["clock_ghz"]))
    Console(width=280).print(table)
    save({"shapes": results}, "l9_timeline", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
