"""Every built configuration forced on the real layer shapes the route loses most on (issue 23), against
cuBLAS and the route, interleaved in one process: does the route pick badly among what exists, or is
no existing configuration good enough?

    python bench/tiles_forced.py [--shapes NAME,...] [--check] [--full-run] [--decode] [--h100-lows] [--tall]
                                 [--clusters 2,1] [--tile-m 128,64] [--register-widths 96,144]
                                 [--splits none,tail] [--budget 0.03] [-o OUT_DIR]
    python bench/tiles_forced.py --prebuild [the same selection]   # compile the forced builds here, no GPU

``--check`` adds :data:`CHECK_SHAPES`, ``--full-run`` :data:`SHAPES_FULL_RUN`, ``--small-m``
:data:`SHAPES_SMALL_M`, ``--decode`` :data:`SHAPES_DECODE`, ``--h100-lows`` :data:`SHAPES_H100_LOWS`, ``--tall``
:data:`SHAPES_TALL`.
Shapes: :data:`SHAPES`, the plain (no epilogue) rows of bench/results/2026-12-03_shapes_real_quick_5c39c94.json
below 0.85x cuBLAS (M x N x K of ``F.linear(x, w)``, x (M, K), w (N, K), both row-major).

Configurations per shape:

* ``cuBLAS``: ``F.linear(x, w)``; ``route``: ``gemm_ladder.linear(x, w)`` (what the dispatcher runs;
  ``explain``'s choice and the cost model's candidates are recorded beside it);
* ``general BN {64,128,192,256} {none,tail,all,wave}``: the general kernel (library/gemm.py, 128 x BN
  tiles, 2-CTA cluster) bound in place with each split policy (library.gemm.SPLITS, the ones the route
  ranks and any it does not); ``general c1 BN ...`` the same with one CTA per cluster (``--clusters``), ``general BM 64 BN ...`` with
  64-row tiles (``--tile-m``), each split policy of ``--splits`` (default all);
* for M <= 256, ``small_m BN b splits s``: the small-M kernel in the bucket of one tile and the
  smaller buckets of up to 4 M tiles, its own split rule (s = None) and classic split-K (s = 1, 2, 4,
  8, 16, where the grid differs from the rule's).

Method: fresh random operands per shape (gates.correctness.random_operands); every configuration's
output NaN-poisoned, computed once and checked against the float64 reference (gates.correctness's
error_bound on the relative Frobenius error, absolute_cap on the largest element error); then all of
them timed interleaved in one gates.performance.time_fns call (L2 flushed by writes before every
call, launch latency hidden, median over 4 rounds). The builds are compiled first, in parallel
(dispatch.precompile.run_builds). Writes ``tiles_forced.json`` and ``tiles_forced.md`` into the
output folder (default ``$OUT/tiles``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from suite import cost_table_provenance, require_gpu

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.contract import DTYPES, reference
from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands

#: (name, M, N, K, dtype): the plain rows below 0.85x in the 2026-12-03 shapes_real quick run.
SHAPES = (
    ("vit_l16 attn.proj", 197, 1024, 1024, "fp16"),
    ("gpt2 mlp.c_proj", 1023, 768, 3072, "bf16"),
    ("gpt2 attn.c_attn", 1023, 2304, 768, "bf16"),
    ("phi3_mini mlp.down_proj", 333, 3072, 8192, "bf16"),
    ("qwen2.5_7b qkv_proj", 1000, 4608, 3584, "bf16"),
    ("t5_base wo", 2048, 768, 3072, "bf16"),
    ("t5_base q", 512, 768, 768, "bf16"),
    ("vit_l16 mlp.fc2", 12608, 1024, 4096, "bf16"),
    ("gpt2 mlp.c_proj 8k", 8192, 768, 3072, "bf16"),
    ("qwen2.5_7b o_proj", 64, 3584, 3584, "bf16"),
    ("vit_l16 attn.qkv", 12608, 3072, 1024, "bf16"),
)
#: The plain rows furthest below cuBLAS in the full run of 2026-12-04
#: (bench/results/2026-12-04_shapes_real_beaafa4.json, 0.53-0.80x; M = 333 three M tiles, an odd count).
SHAPES_FULL_RUN = (
    ("phi3_mini qkv_proj 333", 333, 9216, 3072, "bf16"),
    ("phi3_mini gate_up_proj 333", 333, 8192, 3072, "bf16"),
    ("phi3_mini o_proj 333", 333, 3072, 3072, "bf16"),
    ("phi3_mini lm_head 333", 333, 32064, 3072, "bf16"),
    ("bert_large output.dense 512", 512, 1024, 4096, "bf16"),
    ("t5_base wo 512", 512, 768, 3072, "bf16"),
    ("vit_l16 mlp.fc2 1576", 1576, 1024, 4096, "bf16"),
    ("gemma_7b down_proj 511", 511, 3072, 24576, "bf16"),
    ("mixtral_8x7b gate 37", 37, 8, 4096, "bf16"),
    ("mixtral_8x7b gate 1", 1, 8, 4096, "bf16"),
    ("gpt2 attn.c_proj 1", 1, 768, 768, "bf16"),
    ("gpt2 attn.c_proj 64", 64, 768, 768, "bf16"),
    ("t5_base wo 1", 1, 768, 3072, "bf16"),
    ("bert_large query 128", 128, 1024, 1024, "bf16"),
    ("qwen2.5_7b o_proj 64", 64, 3584, 3584, "bf16"),
)
#: Small-M rows (M <= 256, the small-M kernel's) at 0.64-0.86x cuBLAS in the partial full runs of 2026-12-04
#: (bench/results/2026-12-04_shapes_real_5models_f8feda9.json): the small-M kernel's buckets against the general
#: kernel's 64-row tiles, which the route does not weigh against it.
SHAPES_SMALL_M = (
    ("vit_l16 mlp.fc2 197", 197, 1024, 4096, "bf16"),
    ("vit_l16 attn.qkv 197", 197, 3072, 1024, "bf16"),
    ("vit_l16 mlp.fc1 197", 197, 4096, 1024, "bf16"),
    ("bert_large output.dense 128", 128, 1024, 4096, "bf16"),
    ("bert_large intermediate 128", 128, 4096, 1024, "bf16"),
    ("gpt2 mlp.c_fc 64", 64, 3072, 768, "bf16"),
    ("llama3_8b qkv_proj 256", 256, 6144, 4096, "bf16"),
)
#: Decode-sized rows (M = 64 and 255) at 0.74-0.83x cuBLAS in the H200 run at 2869771
#: (bench/results/2026-12-06_shapes_real_h200_2869771.json), where cuBLAS runs 64 x 32 tiles
#: (``tst_64x32_64x16_4x2``, the issue's profile at 64 x 3584 x 3584): the register-store build's 32-wide tile
#: (``--register-widths 32``) against what the route runs.
SHAPES_DECODE = (
    ("gemma_7b o_proj 64", 64, 3072, 4096, "bf16"),
    ("phi3_mini o_proj 64", 64, 3072, 3072, "bf16"),
    ("gemma_7b q_proj 64", 64, 4096, 3072, "bf16"),
    ("qwen2.5_7b qkv_proj 64", 64, 4608, 3584, "bf16"),
    ("qwen2.5_7b qkv_proj 255", 255, 4608, 3584, "bf16"),
    ("qwen2.5_7b gate_proj 255", 255, 18944, 3584, "bf16"),
)
#: The lowest plain rows of the H100's full runs at ca71b37 and 895c5b6
#: (bench/results/2026-12-06_shapes_real_h100_*.json): Qwen2.5's down_proj at 2048 rows 0.61x cuBLAS (the H100
#: table's pick, the 64-row BN 128 one-CTA build at 6.8 waves, predicted 427 us, took 634), and its o_proj at 2048
#: rows 0.79x (the same build).
SHAPES_H100_LOWS = (
    ("qwen2.5_7b down_proj 2048", 2048, 3584, 18944, "bf16"),
    ("qwen2.5_7b o_proj 2048", 2048, 3584, 3584, "bf16"),
)
#: Real layer shapes at 0.87-0.99x in the same run, and two squares: where a new split policy must not lose.
CHECK_SHAPES = (
    ("square 2048", 2048, 2048, 2048, "bf16"),
    ("square 4096", 4096, 4096, 4096, "bf16"),
    ("gemma_7b q_proj", 4097, 4096, 3072, "bf16"),
    ("phi3_mini qkv_proj", 2048, 9216, 3072, "bf16"),
    ("vit_l16 mlp.fc1", 12608, 4096, 1024, "bf16"),
    ("bert_large output.dense", 16384, 1024, 4096, "fp16"),
    ("qwen2.5_7b down_proj", 1000, 3584, 18944, "bf16"),
    ("llama3_8b down_proj", 1000, 4096, 14336, "fp16"),
)
#: Where cuBLAS's tiles are taller than 128 rows (issue 23's profile: 192 x 128 at 8192 x 768 x 3072, 192 x 192 at
#: 12608 x 3072 x 1024, 256 x 128 at 12608 x 1024 x 4096, 256 x 144 at 1000 x 4608 x 3584) and the large rows
#: still below 0.95x in the H100 full run at f4959e8 (bench/results/2026-12-06_shapes_real_h100_f4959e8.json).
#: A 192-row tile on three consumer warpgroups was forced here against the 128-row builds at ad3e22f and was
#: not faster (docs/library.md, "A 192-row tile"; bench/results/2026-12-06_tiles_forced_tall_h100_ad3e22f.json).
#: Six of them are SHAPES' and CHECK_SHAPES' own entries, taken by name.
SHAPES_TALL = tuple({s[0]: s for s in SHAPES + CHECK_SHAPES}[name] for name in (
    "gpt2 mlp.c_proj 8k", "vit_l16 attn.qkv", "vit_l16 mlp.fc2", "qwen2.5_7b qkv_proj", "gpt2 attn.c_attn",
    "square 4096")) + (
    ("bert_large query 16k", 16384, 1024, 1024, "bf16"),
    ("qwen2.5_7b o_proj 4096", 4096, 3584, 3584, "bf16"),
    ("llama3_8b gate_proj 1000", 1000, 14336, 4096, "bf16"),
)
#: The shape sets a flag adds to SHAPES (its argparse dest: --full-run is full_run).
SHAPE_SETS = {"check": CHECK_SHAPES, "full_run": SHAPES_FULL_RUN, "small_m": SHAPES_SMALL_M, "decode": SHAPES_DECODE,
              "h100_lows": SHAPES_H100_LOWS, "tall": SHAPES_TALL}
SPLITS_TRIED = (1, 2, 4, 8, 16)
MAX_M_TILES = 4


def small_m_buckets(m: int) -> list[int]:
    """The small-M buckets tried for M rows: the one-tile bucket and smaller ones of <= MAX_M_TILES tiles."""
    from gemm_ladder.library.small_m import BUCKETS, SMALL_M_MAX, bucket

    if m > SMALL_M_MAX:
        return []
    return [bn for bn in BUCKETS if bn <= bucket(m) and math.ceil(m / bn) <= MAX_M_TILES]


def general_widths() -> tuple[int, ...]:
    """The general kernel's widths forced here: every width built for a K-major B (the weights here are
    K-major), BN 192 included."""
    from gemm_ladder.dispatch import kernels as K

    return tuple(bn for bn in K.general_bns() if K.general_built("k", bn))


#: The general kernel's cluster sizes forced (--clusters): level 9's pair sharing B, and one CTA.
CLUSTERS = (2, 1)


def general_label(bn: int, split: str, cluster: int, bm: int = 128, creg: bool = False) -> str:
    """A forced general configuration's name: 'general BN 256 tail', 'general c1 BN 256 tail' for one
    CTA per cluster, 'general BM 64 BN 128 none' for a 64-row tile, 'general BM 64 BN 96 creg none' for the
    register-store build (``creg``)."""
    return f"general {'c1 ' if cluster == 1 else ''}{f'BM {bm} ' if bm != 128 else ''}BN {bn} {'creg ' if creg else ''}{split}"


#: The general kernel's tile heights forced (--tile-m): level 9's 128 by default, 64 (one consumer) on request.
TILE_M = (128,)


def configs_for(m: int, dtype: str, clusters=CLUSTERS, tile_m=TILE_M, register_widths=()):
    """The KernelConfigs a shape's forced runs need (general TMA-store builds K-major at each cluster
    size and tile height, the register-store builds at ``register_widths`` likewise, small-M buckets)."""
    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.library.gemm import GEMM
    from gemm_ladder.library.kernel import STORE_REGISTERS

    out = [K.general("k", "k", bn, dtype, cluster, bm) for bn in general_widths() for cluster in clusters
           for bm in tile_m]
    out += [GEMM.config("k", "k", bn, dtype, store=STORE_REGISTERS, cluster=cluster, bm=bm)
            for bn in register_widths for cluster in clusters for bm in tile_m]
    out += [K.small_m(m, bn, dtype) for bn in small_m_buckets(m)]
    return out


def prebuild(shapes, workers: int, clusters=CLUSTERS, tile_m=TILE_M, register_widths=(), *,
             gpu: bool = True) -> list[str]:
    """Compile every forced build the shapes need, in parallel; returns the failures. With ``gpu``, also each
    shape's route build, and load them all; without (``--prebuild``, no GPU), the forced builds only, nothing
    loaded (the routes' builds are the AOT set, tools/build_aot.py)."""
    from gemm_ladder.dispatch.precompile import config_build, run_builds

    configs = {}
    for _, m, n, k, dtype in shapes:
        for c in configs_for(m, dtype, clusters, tile_m, register_widths):
            configs[c] = None
        if gpu:
            x = torch.empty(m, k, dtype=DTYPES[dtype], device="cuda")
            w = torch.empty(n, k, dtype=DTYPES[dtype], device="cuda")
            route = dispatch.decide(x, w.T, torch.empty(m, n, dtype=x.dtype, device="cuda"), given=False)
            configs[route.config] = None
    outcomes = run_builds([config_build(c) for c in configs], workers=workers, load=None if gpu else False)
    return [f"{label}: {o}" for label, o in outcomes.items() if not o.startswith("built")]


def forced_fns(x: torch.Tensor, w: torch.Tensor, dtype: str, clusters=CLUSTERS, tile_m=TILE_M,
               register_widths=(), splits=None) -> dict[str, tuple]:
    """name -> (bound launch, its output c, facts) of every forced configuration on (x, w); the register-store
    builds at ``register_widths`` too; each at every split policy of ``splits`` (None: all)."""
    from gemm_ladder.dispatch import kernels as K
    from gemm_ladder.library.gemm import SPLITS, library_gemm
    from gemm_ladder.library.operand import operand_view
    from gemm_ladder.library.small_m import small_m_kernel

    m, k = x.shape
    n = w.shape[0]
    va, vb = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
    out = {}
    for cluster in clusters:
        for bm in tile_m:
            widths = [(bn, False) for bn in general_widths()] + [(bn, True) for bn in register_widths]
            for bn, creg in widths:
                kernel = library_gemm("k", "k", bn, cluster=cluster, bm=bm, c_from_registers=creg)
                policies = [sp for sp in SPLITS if splits is None or sp in splits]
                for split in sorted(policies, key=lambda sp: (sp not in kernel.splits, sp)):  # ranked ones first
                    c = torch.empty(m, n, dtype=x.dtype, device=x.device)
                    bound = kernel.bind(va, vb, c, split=split)
                    out[general_label(bn, split, cluster, bm, creg)] = (bound, c, {
                        "kernel": "general", "bm": bm, "bn": bn, "split": split, "cluster": cluster,
                        "stages": kernel.stages, "store": "registers" if creg else "tma"})
    for bn in small_m_buckets(m):
        kernel = small_m_kernel(bn)
        resident = kernel.loaded(dtype, x.device).max_active_clusters(x.device)
        grids = {}
        for splits in (None, *SPLITS_TRIED):
            try:
                grid = kernel.ctas(m, n, k, resident, splits)
                kernel.schedule(m, n, k, grid)
            except ValueError:
                continue
            if grid in grids.values():
                continue
            grids[splits] = grid
            c = torch.empty(m, n, dtype=x.dtype, device=x.device)
            bound = kernel.bind(va, vb, c, splits=splits)
            out[f"small_m BN {bn} splits {splits}"] = (bound, c, {
                "kernel": "small_m", "bn": bn, "m_tiles": math.ceil(m / bn), "splits": splits, "grid": grid,
                "stages": kernel.ring_stages(dtype)})
    return out


def route_label(d: dict) -> str:
    """The forced configuration's name that explain's decision corresponds to."""
    if d["kind"] == "general":
        return general_label(d["tile"][1], d["split"], d.get("cluster") or 2, d["tile"][0])
    if d["kind"] == "small_m":
        return f"small_m BN {d['tile'][1]} splits None"
    return d["kind"]


def bench_shape(name, m, n, k, dtype, budget, seed, clusters=CLUSTERS, tile_m=TILE_M, register_widths=(),
                splits=None) -> dict:
    from gemm_ladder.gates.performance import time_fns

    x, w = random_operands(m, n, k, dtype, "cuda", seed)
    ref = reference(x, w)
    ref_absmax = ref.abs().max().item()
    cap = absolute_cap(x, w, ref_absmax, dtype)

    def err(c: torch.Tensor) -> tuple[float, float]:
        d = c.double() - ref
        return (torch.linalg.vector_norm(d) / torch.linalg.vector_norm(ref)).item(), d.abs().max().item()

    cublas_err, _ = err(F.linear(x, w))
    bound = error_bound(cublas_err, dtype)
    forced = forced_fns(x, w, dtype, clusters, tile_m, register_widths, splits)
    rows = {}
    for label, (launch, c, facts) in forced.items():
        c.fill_(float("nan"))
        launch()
        rel, absmax = err(c)
        ok = math.isfinite(rel) and rel <= bound and absmax <= cap
        rows[label] = {**facts, "rel_err": rel, "max_abs_err": absmax, "ok": ok}
    route_out = gemm_ladder.linear(x, w)
    rel, absmax = err(route_out)
    d = gemm_ladder.explain(x, w.T).to_dict()
    rows["route"] = {"kernel": "route", "choice": route_label(d), "rel_err": rel, "max_abs_err": absmax,
                     "ok": math.isfinite(rel) and rel <= bound and absmax <= cap}
    fns = {"cuBLAS": lambda p, q: F.linear(p, q), "route": lambda p, q: gemm_ladder.linear(p, q)}
    fns.update({label: (lambda p, q, launch=launch: launch()) for label, (launch, _, _) in forced.items()
                if rows[label]["ok"]})
    t = time_fns(fns, x, w, budget_s=budget, rounds=4, warmup=3, max_repeats=200)
    cub = t["cuBLAS"].median_ms * 1e3
    for label, tm in t.items():
        rows.setdefault(label, {"kernel": "cuBLAS"})
        rows[label].update(us=tm.median_ms * 1e3, p10_us=tm.p10_ms * 1e3, p90_us=tm.p90_ms * 1e3,
                           vs_cublas=cub / (tm.median_ms * 1e3))
    timed = [lb for lb in forced if "us" in rows[lb]]
    best = min(timed, key=lambda lb: rows[lb]["us"])
    h = d.get("heuristic") or {}
    predicted = {general_label(c["bn"], c["split"], c.get("cluster", 2), c.get("bm", 128)): c["predicted_us"]
                 for c in h.get("candidates", [])}
    for label, p in predicted.items():
        if label in rows:
            rows[label]["predicted_us"] = p
    return {"name": name, "m": m, "n": n, "k": k, "dtype": dtype, "cublas_us": cub, "cublas_rel_err": cublas_err,
            "error_bound": bound, "absolute_cap": cap, "route_choice": route_label(d),
            "route_tile": d.get("tile"), "route_stages": d.get("stages"), "route_cluster": d.get("cluster"),
            "route_grid": d.get("grid"), "route_split": d.get("split"),
            "route_predicted_us": predicted.get(route_label(d)), "best_forced": best,
            "best_forced_us": rows[best]["us"], "best_vs_cublas": rows[best]["vs_cublas"],
            "route_vs_best": rows[best]["us"] / rows["route"]["us"], "configs": rows}


def markdown(results: list[dict]) -> str:
    out = ["| shape | dtype | cuBLAS us | route (choice) us | route/cuBLAS | best forced | best us | best/cuBLAS |",
           "|---|---|---|---|---|---|---|---|"]
    for r in results:
        c = r["configs"]
        out.append(f"| {r['name']} {r['m']}x{r['n']}x{r['k']} | {r['dtype']} | {r['cublas_us']:.1f} | "
                   f"{c['route']['us']:.1f} ({r['route_choice']}) | {c['route']['vs_cublas']:.2f} | {r['best_forced']} | "
                   f"{r['best_forced_us']:.1f} | {r['best_vs_cublas']:.2f} |")
    out.append("")
    for r in results:
        out.append(f"### {r['name']} {r['m']}x{r['n']}x{r['k']} {r['dtype']} (cuBLAS {r['cublas_us']:.1f} us)")
        out.append("| config | us | vs cuBLAS | predicted us | rel err | ok |")
        out.append("|---|---|---|---|---|---|")
        for label, v in sorted(r["configs"].items(), key=lambda kv: kv[1].get("us", math.inf)):
            p = v.get("predicted_us")
            us = v.get("us")
            vs = v.get("vs_cublas")
            cells = ["" if us is None else f"{us:.1f}", "" if vs is None else f"{vs:.2f}", "" if p is None else f"{p:.1f}",
                     f"{v.get('rel_err', float('nan')):.2e}", str(v.get("ok", ""))]
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="", help="comma list of shape names (default: all of SHAPES)")
    p.add_argument("--check", action="store_true", help="also the CHECK_SHAPES (where a change must not lose)")
    p.add_argument("--full-run", action="store_true", help="also SHAPES_FULL_RUN (the 2026-12-04 full run's worst rows)")
    p.add_argument("--small-m", action="store_true", help="also SHAPES_SMALL_M (small-M rows below 0.9x cuBLAS)")
    p.add_argument("--decode", action="store_true", help="also SHAPES_DECODE (M = 64 and 255 rows below 0.85x cuBLAS)")
    p.add_argument("--h100-lows", action="store_true", help="also SHAPES_H100_LOWS (the H100 full runs' lowest rows)")
    p.add_argument("--tall", action="store_true", help="also SHAPES_TALL (where cuBLAS's tiles are taller than 128 rows)")
    p.add_argument("--prebuild", action="store_true",
                   help="compile the selected shapes' forced builds (not the route's: the AOT set) and exit; no GPU")
    p.add_argument("--clusters", default="2,1", help="the general kernel's cluster sizes forced (default 2,1)")
    p.add_argument("--tile-m", default="128", help="the general kernel's tile heights forced: 128, 64 or 128,64 (default 128)")
    p.add_argument("--splits", default="", help="the split policies forced, a comma list (default: every one)")
    p.add_argument("--register-widths", default="",
                   help="also the register-store builds at these widths, a comma list (e.g. 96,144: library/gemm.py's "
                        "REGISTER_STORE_TILE_N, which the route does not offer yet; or any width TILE_N or "
                        "K_MAJOR_B_TILE_N has)")
    p.add_argument("--budget", type=float, default=0.03, help="seconds of timed calls per configuration")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="parallel builds")
    p.add_argument("-o", "--output", default=None, help="output folder (default $OUT/tiles or ./tiles_out)")
    args = p.parse_args()
    want = [s.strip() for s in args.shapes.split(",") if s.strip()]
    # a shape in two sets (the same name, the same problem) runs once
    pool = tuple(dict.fromkeys(SHAPES + sum((sets for flag, sets in SHAPE_SETS.items() if getattr(args, flag)), ())))
    shapes = [s for s in pool if not want or s[0] in want]
    if want and len(shapes) != len(want):
        names = [s[0] for s in SHAPES + sum(SHAPE_SETS.values(), ())]
        flags = ", ".join("--" + flag.replace("_", "-") for flag in SHAPE_SETS)
        print(f"tiles_forced.py: unknown shapes in {want} ({flags} add their sets); names: {names}", file=sys.stderr)
        return 2
    try:
        clusters = tuple(int(c) for c in args.clusters.split(","))
        if not clusters or any(c not in CLUSTERS for c in clusters):
            raise ValueError
    except ValueError:
        print(f"tiles_forced.py: --clusters {args.clusters!r}: a comma list of {', '.join(map(str, CLUSTERS))}", file=sys.stderr)
        return 2
    from gemm_ladder.library.gemm import TILE_M as TILE_M_BUILT

    try:
        tile_m = tuple(int(c) for c in args.tile_m.split(","))
        if not tile_m or any(c not in TILE_M_BUILT for c in tile_m):
            raise ValueError
    except ValueError:
        print(f"tiles_forced.py: --tile-m {args.tile_m!r}: a comma list of {', '.join(map(str, TILE_M_BUILT))}",
              file=sys.stderr)
        return 2
    from gemm_ladder.library.gemm import K_MAJOR_B_TILE_N, REGISTER_STORE_TILE_N, SPLITS, TILE_N

    splits = tuple(c.strip() for c in args.splits.split(",") if c.strip()) or None
    if splits is not None and any(sp not in SPLITS for sp in splits):
        print(f"tiles_forced.py: --splits {args.splits!r}: a comma list of {', '.join(SPLITS)}", file=sys.stderr)
        return 2

    try:
        register_widths = tuple(int(c) for c in args.register_widths.split(",") if c.strip())
        if any(bn not in REGISTER_STORE_TILE_N + TILE_N + K_MAJOR_B_TILE_N for bn in register_widths):
            raise ValueError
    except ValueError:
        print(f"tiles_forced.py: --register-widths {args.register_widths!r}: a comma list of "
              f"{', '.join(map(str, REGISTER_STORE_TILE_N + TILE_N + K_MAJOR_B_TILE_N))}", file=sys.stderr)
        return 2
    if args.prebuild:
        failures = prebuild(shapes, args.workers, clusters, tile_m, register_widths, gpu=False)
        print(f"prebuilt; failures: {failures}")
        return 1 if failures else 0
    require_gpu(__file__)
    out_dir = Path(args.output or Path(os.environ.get("OUT", "."), "tiles"))
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    failures = prebuild(shapes, args.workers, clusters, tile_m, register_widths)
    print(f"builds: {time.time() - t0:.1f} s; failures: {failures}", flush=True)
    results = []
    for i, (name, m, n, k, dtype) in enumerate(shapes):
        t1 = time.time()
        r = bench_shape(name, m, n, k, dtype, args.budget, seed=23000 + i, clusters=clusters, tile_m=tile_m,
                        register_widths=register_widths, splits=splits)
        results.append(r)
        bad = [lb for lb, v in r["configs"].items() if v.get("ok") is False]
        print(f"{name} {m}x{n}x{k} {dtype}: cuBLAS {r['cublas_us']:.1f} us, route {r['configs']['route']['us']:.1f} us "
              f"({r['route_choice']}), best {r['best_forced']} {r['best_forced_us']:.1f} us "
              f"({r['best_vs_cublas']:.2f}x cuBLAS){'; WRONG: ' + ', '.join(bad) if bad else ''} "
              f"[{time.time() - t1:.1f} s]", flush=True)
    from suite import meta as suite_meta

    doc = {"meta": suite_meta(), "budget_s": args.budget, "build_failures": failures,
           "table_provenance": cost_table_provenance(), "rows": results}
    (out_dir / "tiles_forced.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(results)
    (out_dir / "tiles_forced.md").write_text(md + "\n")
    print(md)
    wrong = sum(v.get("ok") is False for r in results for v in r["configs"].values())
    print(f"total {time.time() - t0:.1f} s; wrong configurations: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
