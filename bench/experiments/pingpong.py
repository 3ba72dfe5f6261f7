"""The ping-pong build of the layouts kernel forced on issue 23's short-K and fused-epilogue shapes,
against level 9's cooperative builds, the route, cuBLAS and eager torch, interleaved in one process
(one-off): does one consumer storing while the other computes pay, and where?

    python bench/experiments/pingpong.py [--shapes NAME,...] [--budget 0.03] [-o OUT_DIR]
    python bench/experiments/pingpong.py --sanitize   # one small launch of each ping-pong build, no timing

Configurations per shape (x (M, K), w (N, K) row-major, ``F.linear(x, w, bias)`` with the shape's
activation; all K-major):

* ``torch``: cuBLAS ``F.linear`` followed by the activation (eager torch; plain: ``F.linear`` alone);
* ``route``: ``gemm_ladder.linear`` as dispatched (its explain choice recorded);
* ``coop BM b BN n [c1] split``: level 9's cooperative builds (128 x BN: two consumers of 64 rows, stream-K
  "tail" or "none", 2-CTA clusters or one CTA; 64 x BN: one consumer), bound in place with the fused epilogue;
* ``pp BN n cC``: the ping-pong build (64 x BN tiles taken in turn by two consumers, clusters of C CTAs);
* ``pp128 BN n cC [reg]``: its 128-row tiles (each consumer two 64-row fragments of its own tile; cuBLAS's
  kernel names at mid-size M in issue 23's profile suggest ping-pong there), the TMA store at BN 64-192,
  the register store (``reg``) at BN 96-192;
* ``tall BN n cC [reg]``: the cooperative 256-row tile (``library_gemm(..., bm=256)``: each consumer 128 rows as
  two 64-row fragments, both on one tile, every unit whole; cuBLAS's 256-row tiles on issue 23's mid-M layers):
  fewer, larger tiles, each stage's B shared by 256 rows; the TMA store at BN 64-192 (three stages at 192), the
  register store at BN 96-192.

``--set mid`` takes issue 23's mid-M misses (M 255-1576, the plain GEMMs below 0.86x cuBLAS on the H200 at
d726cbf, ``bench/results/2026-12-06_shapes_real_h200_d726cbf.json``) and a few large short-K shapes;
``--configs REGEX`` keeps the forced builds whose label matches (default: the 128-row builds with ``--set mid``
only). ``best_pp`` and ``pp_vs_coop`` are the 64-row builds' (dispatch/pingpong.py's), ``best_pp128`` the 128-row
ping-pong builds', ``best_tall`` the 256-row builds'.

Method: fresh random operands and bias per shape (gates.correctness.random_operands); every output
NaN-poisoned, computed once and compared with the float64 reference of the whole call (the GEMM, bias
and activation in float64): relative Frobenius error within gates.correctness's error_bound of eager
torch's error, max error within its absolute_cap (for a plain GEMM) or 4x torch's max error plus one
output ulp (with an activation). A configuration that fails is reported and not timed. Ping-pong
outputs are also launched 3 more times and compared bit for bit. Then all are timed interleaved
(gates.performance.time_fns: L2 flushed by writes, launch hidden, median of 4 rounds). Writes
``pingpong.json`` and ``pingpong.md`` into the output folder (default ``$OUT/pingpong``); exits 1 when any
of our configurations is wrong.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from suite import require_gpu  # noqa: E402

import gemm_ladder  # noqa: E402
from gemm_ladder.contract import DTYPES  # noqa: E402
from gemm_ladder.gates.correctness import absolute_cap, error_bound, random_operands  # noqa: E402

#: (name, M, N, K, activation or None for a plain GEMM, bias): issue 23's short-K shapes and fused calls.
SHAPES = (
    ("vit_l16 fc1 bias+gelu", 12608, 4096, 1024, "gelu", True),
    ("bert_large fc1 bias+gelu", 16384, 4096, 1024, "gelu", True),
    ("gpt2 c_fc bias+gelu_tanh", 8192, 3072, 768, "gelu_tanh", True),
    ("gpt2 c_fc 1023 bias+gelu_tanh", 1023, 3072, 768, "gelu_tanh", True),
    ("vit_l16 fc1 1576 bias+gelu", 1576, 4096, 1024, "gelu", True),
    ("vit_l16 fc1 bias+silu", 12608, 4096, 1024, "silu", True),
    ("vit_l16 fc1 bias+relu", 12608, 4096, 1024, "relu", True),
    ("llama3_8b up 4096 silu", 4096, 14336, 4096, "silu", False),
    ("vit_l16 qkv", 12608, 3072, 1024, None, False),
    ("vit_l16 qkv bias", 12608, 3072, 1024, None, True),
    ("gpt2 c_attn 1023", 1023, 2304, 768, None, False),
    ("gpt2 c_proj 8k", 8192, 768, 3072, None, False),
    ("vit_l16 fc2", 12608, 1024, 4096, None, False),
    ("qwen2.5_7b qkv 1000", 1000, 4608, 3584, None, False),
    ("square 4096", 4096, 4096, 4096, None, False),
    # issue 23's mid-M misses (--set mid)
    ("vit_l16 qkv 1576", 1576, 3072, 1024, None, False),
    ("vit_l16 qkv 1576 bias", 1576, 3072, 1024, None, True),
    ("vit_l16 proj 1576", 1576, 1024, 1024, None, False),
    ("vit_l16 fc2 1576", 1576, 1024, 4096, None, False),
    ("gpt2 c_attn 1023 bias", 1023, 2304, 768, None, True),
    ("gpt2 c_proj 1023", 1023, 768, 3072, None, False),
    ("gpt2 c_proj 4096 bias", 4096, 768, 768, None, True),
    ("qwen2.5_7b qkv 255", 255, 4608, 3584, None, False),
    ("phi3_mini down 333", 333, 3072, 8192, None, False),
    ("phi3_mini o 333", 333, 3072, 3072, None, False),
    ("bert_large output 512", 512, 1024, 4096, None, False),
    ("t5_base wo 512", 512, 768, 3072, None, False),
)
MID = ("vit_l16 qkv 1576", "vit_l16 qkv 1576 bias", "vit_l16 proj 1576", "vit_l16 fc2 1576", "vit_l16 fc1 1576 bias+gelu",
       "gpt2 c_attn 1023", "gpt2 c_attn 1023 bias", "gpt2 c_proj 1023", "gpt2 c_fc 1023 bias+gelu_tanh",
       "gpt2 c_proj 4096 bias", "qwen2.5_7b qkv 1000", "qwen2.5_7b qkv 255", "phi3_mini down 333", "phi3_mini o 333",
       "bert_large output 512", "t5_base wo 512", "vit_l16 qkv", "vit_l16 fc2", "gpt2 c_proj 8k", "square 4096",
       "vit_l16 fc1 bias+gelu", "gpt2 c_fc bias+gelu_tanh")
PP_WIDTHS = (64, 128, 192, 256)
PP_CLUSTERS = (2, 1)
#: The 128-row ping-pong builds: (BN, CTAs per cluster, register store).
PP128 = ((64, 1, False), (64, 2, False), (128, 1, False), (128, 2, False), (192, 1, False), (128, 1, True),
         (96, 1, True), (144, 1, True), (192, 1, True))
#: The cooperative 256-row builds: (BN, CTAs per cluster, register store).
TALL = ((64, 1, False), (128, 1, False), (128, 2, False), (192, 1, False), (192, 2, False), (96, 1, True), (128, 1, True),
        (144, 1, True), (192, 1, True))
#: Level 9's cooperative builds forced beside them: (BM, BN, split, CTAs per cluster).
COOP = ((128, 128, "tail", 2), (128, 192, "tail", 2), (128, 256, "tail", 2), (128, 256, "none", 2),
        (128, 256, "none", 1), (128, 192, "none", 1), (64, 128, "none", 2), (64, 256, "none", 2))
ACT = {None: lambda t: t, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu,
       "relu": F.relu}


def kernels():
    """label -> (library kernel, split) of every forced build."""
    from gemm_ladder.library.gemm import library_gemm

    out = {f"coop BM {bm} BN {bn}{' c1' if cl == 1 else ''} {split}": (library_gemm("k", "k", bn, bm=bm, cluster=cl), split)
           for bm, bn, split, cl in COOP}
    out.update({f"pp BN {bn} c{cl}": (library_gemm("k", "k", bn, bm=64, pingpong=True, cluster=cl), "none")
                for bn in PP_WIDTHS for cl in PP_CLUSTERS})
    out.update({f"pp128 BN {bn} c{cl}{' reg' if reg else ''}":
                (library_gemm("k", "k", bn, bm=128, pingpong=True, cluster=cl, c_from_registers=reg), "none")
                for bn, cl, reg in PP128})
    out.update({f"tall BN {bn} c{cl}{' reg' if reg else ''}":
                (library_gemm("k", "k", bn, bm=256, cluster=cl, c_from_registers=reg), "none")
                for bn, cl, reg in TALL})
    return {lb: v for lb, v in out.items() if CONFIG_FILTER.search(lb)}


#: Which forced builds run (--configs).
CONFIG_FILTER = re.compile("")


def builds(shapes, dtype: str) -> list:
    """Every (config, epilogue) build the shapes bind, to compile in parallel before any is timed."""
    from gemm_ladder.dispatch.precompile import EpilogueVariant, linear_epilogue_source

    sources = {None if act is None and not has_bias else
               linear_epilogue_source(EpilogueVariant("same" if has_bias else None, act, None, False), dtype, swap=False)
               for _, _, _, _, act, has_bias in shapes}
    return [kern.config(dtype, epilogue_source=src) for kern, _ in kernels().values() for src in sources]


def bind_all(x, w, bias, activation, forced):
    """label -> (bound launch, output) with the call's fused epilogue (dispatch.validate.linear_call)."""
    from gemm_ladder.dispatch.validate import linear_call
    from gemm_ladder.library.operand import operand_view

    va, vb = operand_view(x, k_dim=1), operand_view(w, k_dim=1)
    out = {}
    for label, (kernel, split) in forced.items():
        c = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
        ep = linear_call(x, w, bias, activation=activation, check_grad=False)
        out[label] = (kernel.bind(va, vb, c, split=split, epilogue=ep), c)
    return out


def bench_shape(name, m, n, k, activation, has_bias, dtype, budget, seed) -> dict:
    from gemm_ladder.gates.performance import time_fns

    x, w = random_operands(m, n, k, dtype, "cuda", seed)
    bias = torch.randn(n, device="cuda", dtype=torch.float32).to(x.dtype) if has_bias else None
    act = ACT[activation]
    ref = act(x.double() @ w.double().T + (bias.double() if has_bias else 0))
    ulp = 2.0 ** (-8 if dtype == "bf16" else -11)

    def err(c):
        d = c.double() - ref
        return (torch.linalg.vector_norm(d) / torch.linalg.vector_norm(ref)).item(), d.abs().max().item()

    def torch_call(p, q):
        return act(F.linear(p, q, bias))

    t_rel, t_max = err(torch_call(x, w))
    bound = error_bound(t_rel, dtype)
    cap = (absolute_cap(x, w, ref.abs().max().item(), dtype) if activation is None and not has_bias
           else 4 * t_max + ulp * ref.abs().max().item())
    forced = kernels()
    bound_launches = bind_all(x, w, bias, activation, forced)
    rows = {}
    for label, (launch, c) in bound_launches.items():
        c.fill_(float("nan"))
        launch()
        rel, mx = err(c)
        ok = math.isfinite(rel) and rel <= bound and mx <= cap
        row = {"rel_err": rel, "max_abs_err": mx, "ok": ok, "stages": forced[label][0].stages}
        if label.startswith(("pp", "tall")) and ok:  # both ping-pong heights, the 256-row tile
            first = c.clone()
            repeat = True
            for _ in range(3):
                c.fill_(float("nan"))
                launch()
                repeat = repeat and torch.equal(c, first)
            row["bitwise_repeatable"] = repeat
            row["ok"] = ok and repeat
        rows[label] = row
    route = gemm_ladder.linear(x, w, bias, activation=activation) if activation else gemm_ladder.linear(x, w, bias)
    rel, mx = err(route)
    d = gemm_ladder.explain(x, w.T, bias=bias, activation=activation).to_dict()  # the fused call's route, not mm's
    rows["route"] = {"rel_err": rel, "max_abs_err": mx, "ok": math.isfinite(rel) and rel <= bound and mx <= cap,
                     "choice": {k2: d.get(k2) for k2 in ("kind", "tile", "split", "cluster", "stages")}
                     | {"consumers": (d.get("kernel") or {}).get("consumers")}}
    fns = {"torch": torch_call,
           "route": (lambda p, q: gemm_ladder.linear(p, q, bias, activation=activation)) if activation
           else (lambda p, q: gemm_ladder.linear(p, q, bias))}
    fns.update({label: (lambda p, q, launch=launch: launch()) for label, (launch, _) in bound_launches.items()
                if rows[label]["ok"]})
    t = time_fns(fns, x, w, budget_s=budget, rounds=4, warmup=3, max_repeats=200)
    base = t["torch"].median_ms * 1e3
    for label, tm in t.items():
        rows.setdefault(label, {})
        rows[label].update(us=tm.median_ms * 1e3, vs_torch=base / (tm.median_ms * 1e3))
    pp = [lb for lb in rows if lb.startswith("pp ") and "us" in rows[lb]]  # the 64-row builds (dispatch/pingpong.py's)
    coop = [lb for lb in rows if lb.startswith("coop") and "us" in rows[lb]]
    best_pp = min(pp, key=lambda lb: rows[lb]["us"]) if pp else None
    best_coop = min(coop, key=lambda lb: rows[lb]["us"]) if coop else None
    pp128 = [lb for lb in rows if lb.startswith("pp128") and "us" in rows[lb]]
    best_pp128 = min(pp128, key=lambda lb: rows[lb]["us"]) if pp128 else None
    tall = [lb for lb in rows if lb.startswith("tall") and "us" in rows[lb]]
    best_tall = min(tall, key=lambda lb: rows[lb]["us"]) if tall else None
    return {"name": name, "m": m, "n": n, "k": k, "dtype": dtype, "activation": activation, "bias": has_bias,
            "torch_us": base, "torch_rel_err": t_rel, "error_bound": bound, "cap": cap,
            "best_pp": best_pp, "best_coop": best_coop,
            "pp_vs_coop": rows[best_coop]["us"] / rows[best_pp]["us"] if best_pp and best_coop else None,
            "best_pp_vs_torch": rows[best_pp]["vs_torch"] if best_pp else None,
            "route_vs_torch": rows["route"].get("vs_torch"), "best_pp128": best_pp128,
            "pp128_vs_route": rows["route"]["us"] / rows[best_pp128]["us"] if best_pp128 else None,
            "best_pp128_vs_torch": rows[best_pp128]["vs_torch"] if best_pp128 else None, "best_tall": best_tall,
            "tall_vs_route": rows["route"]["us"] / rows[best_tall]["us"] if best_tall else None,
            "best_tall_vs_torch": rows[best_tall]["vs_torch"] if best_tall else None, "configs": rows}


def sanitize(dtype: str = "bf16") -> int:
    """One launch of each ping-pong (and 256-row) build on a shape with tails and several tiles per CTA per
    consumer, with and without a fused epilogue, checked against float64: for compute-sanitizer."""
    forced = {lb: v for lb, v in kernels().items() if lb.startswith(("pp", "tall"))}
    bad = 0
    for m, n, k, act in ((1000, 520, 200, None), (333, 4104, 640, "gelu"), (2304, 2048, 136, "gelu_tanh")):
        x, w = random_operands(m, n, k, dtype, "cuda", m + n + k)
        bias = None if act is None else torch.randn(n, device="cuda").to(x.dtype)  # the first with no epilogue
        ref = ACT[act](x.double() @ w.double().T + (0 if bias is None else bias.double()))
        for label, (launch, c) in bind_all(x, w, bias, act, forced).items():
            c.fill_(float("nan"))
            launch()
            torch.cuda.synchronize()
            rel = ((c.double() - ref).norm() / ref.norm()).item()
            ok = math.isfinite(rel) and rel < 1e-2
            bad += not ok
            print(f"{m}x{n}x{k} {act or 'plain'} {label}: rel {rel:.2e} {'ok' if ok else 'WRONG'}", flush=True)
    print(f"sanitize: {bad} wrong")
    return 1 if bad else 0


def markdown(results: list[dict]) -> str:
    out = ["| shape | torch us | route/torch | best coop | best pp | pp/torch | pp vs coop | best pp128 | pp128/torch | "
           "pp128 vs route | best tall | tall/torch | tall vs route |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    def group(r, best: str, *ratios: str) -> str:
        """' label us | ratio | ... |' of the group's best build, blanks where none of it ran (--configs)."""
        lb = r.get(best)
        if not lb:
            return " |" * (1 + len(ratios))
        return f" {lb} {r['configs'][lb]['us']:.1f} |" + "".join(
            f" {r[x]:.2f} |" if r.get(x) is not None else " |" for x in ratios)

    for r in results:
        out.append(f"| {r['name']} {r['m']}x{r['n']}x{r['k']} | {r['torch_us']:.1f} | {r['route_vs_torch']:.2f} |"
                   + group(r, "best_coop") + group(r, "best_pp", "best_pp_vs_torch", "pp_vs_coop")
                   + group(r, "best_pp128", "best_pp128_vs_torch", "pp128_vs_route")
                   + group(r, "best_tall", "best_tall_vs_torch", "tall_vs_route"))
    out.append("")
    for r in results:
        out.append(f"### {r['name']} {r['m']}x{r['n']}x{r['k']} {r['dtype']} (torch {r['torch_us']:.1f} us)")
        out.append("| config | us | vs torch | rel err | ok |")
        out.append("|---|---|---|---|---|")
        for label, v in sorted(r["configs"].items(), key=lambda kv: kv[1].get("us", math.inf)):
            us, vs = v.get("us"), v.get("vs_torch")
            out.append(f"| {label} | {'' if us is None else f'{us:.1f}'} | {'' if vs is None else f'{vs:.2f}'} | "
                       f"{v.get('rel_err', float('nan')):.2e} | {v.get('ok', '')} |")
        out.append("")
    return "\n".join(out)


def _regex(text: str) -> re.Pattern:
    """--configs: a regular expression, or argparse's one-line error before anything runs."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="", help="comma list of shape names (default: all)")
    p.add_argument("--set", choices=("all", "mid"), default="all", help="mid: issue 23's mid-M misses (MID)")
    p.add_argument("--configs", default="", type=_regex, help="regular expression: the forced builds whose label matches")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--budget", type=float, default=0.03, help="seconds of timed calls per configuration")
    p.add_argument("--sanitize", action="store_true", help="one small launch of each ping-pong build, no timing")
    p.add_argument("-o", "--output", default=None, help="output folder (default $OUT/pingpong or ./pingpong_out)")
    args = p.parse_args()
    require_gpu(__file__)
    global CONFIG_FILTER
    # The 128- and 256-row builds only where asked for (--set mid or --configs): the default run is the one
    # bench/device/smoke_pingpong.sh has timed since 2026-12-04.
    CONFIG_FILTER = re.compile(args.configs.pattern or ("" if args.set == "mid" else "^(?!pp128|tall)"))
    if args.sanitize:
        return sanitize(args.dtype)
    want = [s.strip() for s in args.shapes.split(",") if s.strip()] or (list(MID) if args.set == "mid" else [])
    shapes = [s for s in SHAPES if not want or s[0] in want]
    if want and len(shapes) != len(want):
        print(f"pingpong.py: unknown shapes in {want}; names: {[s[0] for s in SHAPES]}", file=sys.stderr)
        return 2
    from gemm_ladder.dispatch.precompile import config_build, run_builds

    configs = {c: None for c in builds(shapes, args.dtype)}
    failed = [f"{lb}: {o}" for lb, o in run_builds([config_build(c) for c in configs]).items() if not o.startswith("built")]
    out_dir = Path(args.output or (Path(os.environ["OUT"]) / "pingpong" if os.environ.get("OUT") else "pingpong_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for i, (name, m, n, k, act, has_bias) in enumerate(shapes):
        r = bench_shape(name, m, n, k, act, has_bias, args.dtype, args.budget, seed=1000 + i)
        results.append(r)
        print(f"{name} {m}x{n}x{k}: torch {r['torch_us']:.1f} us, route {r['route_vs_torch']:.2f}x, best coop "
              f"{r['best_coop']}, best pp {r['best_pp']} {r['best_pp_vs_torch'] or 0:.2f}x torch, pp/coop "
              f"{r['pp_vs_coop'] or 0:.2f}, "
              f"best pp128 {r['best_pp128']} {r['best_pp128_vs_torch'] or 0:.2f}x torch, {r['pp128_vs_route'] or 0:.2f}x route, "
              f"best tall {r['best_tall']} {r['best_tall_vs_torch'] or 0:.2f}x torch, {r['tall_vs_route'] or 0:.2f}x route",
              flush=True)
        (out_dir / "pingpong.json").write_text(json.dumps({"meta": _meta(args.dtype), "build_failures": failed,
                                                           "results": results}, indent=1))
    (out_dir / "pingpong.md").write_text(markdown(results))
    print(markdown(results))
    wrong = [(r["name"], lb) for r in results for lb, v in r["configs"].items() if lb != "torch" and not v.get("ok", True)]
    if wrong or failed:
        print(f"WRONG or not built: {wrong} {failed}", file=sys.stderr)
        return 1
    return 0


def _meta(dtype: str) -> dict:
    from gemm_ladder.results import run_meta

    return {**run_meta("python " + " ".join(["bench/experiments/pingpong.py", *sys.argv[1:]])), "dtype": dtype}


if __name__ == "__main__":
    sys.exit(main())
