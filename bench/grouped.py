"""The grouped GEMM's benchmark (issue 24): gemm_ladder.grouped_mm against torch._grouped_mm and a loop
of torch.mm per expert, in one run, interleaved, on the same tensors.

    python bench/grouped.py [--quick] [--cases NAME,...] [--directions fwd,grad_x,grad_w] [--swiglu none|NAME,...]
                            [--bn 128|256] [--cluster 1|2|both] [--store tma|registers|both] [--ring R[,R2]]
                            [--check64] [-o OUT.json]
    compute-sanitizer --tool memcheck python bench/grouped.py --sanitize

Cases (rows sorted by expert, group sizes from a fixed-seed log-normal routing clipped to each case's
range, int32 ``offs`` on the device): the issue's table (Mixtral-8x7B gate+up and down (skewed),
Qwen3-30B-A3B gate+up and down, DeepSeek-V3-like 32 experts, Qwen3 decode ``decode_128``), and the
models' own shapes at prefill and decode token counts: Mixtral decode (E 8), DeepSeek-V3 (E 256 routed
experts, hidden 7168, moe intermediate 2048) and gpt-oss-120b (E 128, hidden 2880, intermediate 2880).
E = 8, 32, 128 and 256. Directions: ``fwd`` (x @ w[e].T, the weight K-major), ``grad_x`` (grad_y @ w[e],
the weight N-major) and ``grad_w`` (x[rows_e].T @ grad_y[rows_e], grouped along K; not for decode). The
decode cases also run in the masked layout (a (E, M_max, K) with counts on the device), with their
weight bandwidth against a measured device copy (``ratio_copy_bandwidth``). The gate+up and decode
cases also give ``layout: "swiglu"`` rows: gemm_ladder.grouped_swiglu (w_gate, w_up (E, N / 2, K))
against torch's composition on ``_grouped_mm`` and a loop per expert, direction ``fwd`` or ``fwd_bwd``.
``--quick``: six cases and three swiglu cases, forward only, shorter budget (about 90 s on the H200,
builds cached); ``--directions`` and ``--swiglu`` pick others.

Per case and direction, three callables timed with gates.performance.time_fns (L2 flushed before each
call, interleaved rounds): ``grouped`` (this library), ``torch_grouped`` (torch._grouped_mm, bf16 only),
``loop`` (torch.mm per expert over host-side slices: the group sizes known on the host, which the other
two do not need). The library's output is checked against torch._grouped_mm's first (relative
Frobenius error <= 2e-2) and a row is marked ``"correct": false`` otherwise.

``--cluster``: the grouped kernel's build, 1 (one CTA per cluster), 2 (the cluster build: pairs of M
tiles sharing the weight tile) or ``both`` (default: the library's rule, ``choose_cluster``, recorded
as the row's ``cluster``): ``grouped`` is then cluster 1 and a fourth
callable ``grouped_c2`` the cluster build, timed in the same rounds (``ratio_cluster2``: cluster 1's
time / cluster 2's, > 1 when the cluster build is faster). ``--store``: how a bf16 output leaves the
grouped kernel, ``tma`` (the library's: each consumer's panel ring, a group's partial slices from
registers), ``registers`` (every slice from registers, the same build: library/grouped.py
STORE_DEFAULT), or ``both``: ``grouped`` the TMA store and a callable ``grouped_registers`` the
register store, timed in the same rounds (``ratio_store_tma``: the register store's time / the TMA
store's, > 1 when TMA is faster). ``--ring``: the output's panel buffers per consumer
(library/grouped.py RINGS; default its choose_ring: 4 for the BN 256 weight gradient, else 1): one value builds ``grouped`` with it; a second, e.g.
``--ring 1,4``, adds a callable ``grouped_r4`` with the deeper ring, timed in the same rounds
(``ratio_ring``: the first ring's time / the second's, > 1 when the second is faster). A deeper ring has a
buffer for each of the tile's panels, so it takes that width: 2 with ``--bn 128``, 4 with ``--bn 256`` or
with ``--directions grad_w`` alone (256 wide); anything else is refused before a GPU is asked for. ``--check64``: each callable's output is
also checked against a float64 product per group first (``rel_err_f64``: relative Frobenius error over
all groups; a library output above 1e-2 marks the row ``"correct": false``). These apply to the
contiguous fwd, grad_x and grad_w rows (not to the swiglu or masked decode rows).

Result: ``DATE_grouped_COMMIT.json`` (bench/suite.py) with ``rows: [{case, layout, direction, E, rows,
N, K, tflops, ratio_torch_grouped, ratio_loop, ...}]`` (ratios: library speed / theirs, > 1 faster). A
swiglu case whose tensors the fused build refuses is a row with ``correct`` None and ``not_run`` (the
refusal), and the run goes on.

Exit status: 0 when every row that ran is correct; 1 when one is not; 2 for bad input (one line:
``--cases``, ``--directions``, ``--swiglu``, ``--ring``, an unwritable ``-o``) or no CUDA GPU, before
anything runs.
"""

from __future__ import annotations

import argparse
import sys

import torch

from gemm_ladder.api_grouped import explain_grouped_mm, grouped_mm_direct
from gemm_ladder.gates.performance import time_fns
from gemm_ladder.library import grouped as grouped_lib
from outputs import check_output, comma_list, refuse
from suite import ResultCheck, add_output_argument, require_gpu, save, with_setting
from suite import prebuild as compile_all

#: name -> (E, rows, N, K, smallest, largest group): the issue's table, then the models' own shapes at
#: prefill (rows = tokens x top-k) and decode token counts. Gate+up cases are the two projections side by
#: side (N = 2 x the expert's intermediate size); the grouped_swiglu rows take them as w_gate and w_up.
CASES = {
    "mixtral_gate_up": (8, 16384, 28672, 4096, 2048, 2048),
    "mixtral_down_skewed": (8, 16384, 4096, 14336, 412, 4390),
    "mixtral_decode": (8, 64, 28672, 4096, 2, 20),  # 32 tokens, top-2
    "qwen3_gate_up": (128, 32768, 1536, 2048, 0, 463),
    "qwen3_down": (128, 32768, 2048, 768, 0, 515),
    "decode_128": (128, 512, 1536, 2048, 0, 12),  # Qwen3-30B-A3B decode: 64 tokens, top-8
    "deepseek_v3_32": (32, 32768, 4096, 7168, 21, 2423),  # 32 of the 256 experts on one GPU
    # DeepSeek-V3: 256 routed experts, hidden 7168, moe intermediate 2048, top-8 (4096 tokens; decode 64)
    "deepseek_v3_gate_up": (256, 32768, 4096, 7168, 0, 400),
    "deepseek_v3_down": (256, 32768, 7168, 2048, 0, 400),
    "deepseek_v3_decode": (256, 512, 4096, 7168, 0, 8),
    # gpt-oss-120b: 128 experts, hidden 2880, intermediate 2880, top-4 (8192 tokens; decode 128)
    "gptoss_gate_up": (128, 32768, 5760, 2880, 0, 700),
    "gptoss_down": (128, 32768, 2880, 2880, 0, 700),
    "gptoss_decode": (128, 512, 5760, 2880, 0, 12),
}
QUICK = ("mixtral_down_skewed", "qwen3_gate_up", "decode_128", "deepseek_v3_gate_up", "gptoss_gate_up",
         "gptoss_decode")
#: The grouped_swiglu rows: the gate+up and decode cases (w_gate and w_up (E, N / 2, K) each).
SWIGLU = tuple(n for n in CASES if "gate_up" in n or "decode" in n)
SWIGLU_QUICK = ("qwen3_gate_up", "gptoss_gate_up", "decode_128")


def is_decode(name: str) -> bool:
    return "decode" in name


def group_sizes(e: int, rows: int, lo: int, hi: int, seed: int = 0) -> list[int]:
    """``e`` sizes summing to ``rows``, equal when lo == hi, else log-normal clipped to [lo, hi]."""
    if lo == hi:
        return [rows // e] * (e - 1) + [rows - rows // e * (e - 1)]
    g = torch.Generator().manual_seed(seed)
    w = torch.exp(torch.randn(e, generator=g) * 0.8)
    sizes = (w / w.sum() * rows).round().clamp(lo, hi).long()
    while int(sizes.sum()) != rows:  # move the remainder into groups with room
        d = rows - int(sizes.sum())
        i = int(torch.randint(e, (1,), generator=g))
        sizes[i] += min(d, hi - int(sizes[i])) if d > 0 else max(d, lo - int(sizes[i]))
    return sizes.tolist()


#: --check64's bound on the library's relative Frobenius error against float64 (bf16 inputs and output).
F64_TOL = 1e-2


def library_fns(a, b, offs, bn, clusters, both_stores: bool = False, rings=(None,)) -> dict:
    """The library's callables: ``grouped`` on the first of ``clusters`` and ``rings``, ``grouped_c2`` on a
    second cluster size, ``grouped_r{R}`` on a second ring, ``grouped_registers`` (``both_stores``) the
    first with every slice stored from registers."""
    fns = {"grouped": lambda *_: grouped_mm_direct(a, b, offs, bn=bn, cluster=clusters[0], ring=rings[0])}
    if len(clusters) > 1:
        fns["grouped_c2"] = lambda *_: grouped_mm_direct(a, b, offs, bn=bn, cluster=clusters[1], ring=rings[0])
    if len(rings) > 1:
        fns[f"grouped_r{rings[1]}"] = lambda *_: grouped_mm_direct(a, b, offs, bn=bn, cluster=clusters[0], ring=rings[1])
    if both_stores:
        fns["grouped_registers"] = with_setting(grouped_lib, "STORE_DEFAULT", "registers", fns["grouped"])
    return fns


def check64(fns: dict, pieces) -> dict:
    """Each callable's output against float64: ``pieces(out)`` yields (got, want64) per group; the
    relative Frobenius error over all groups, per callable."""
    errs = {}
    for name, fn in fns.items():
        out = fn()
        errs[name] = rel_err_over(pieces(out))
        del out
    return errs


def rel_err_over(pairs) -> float:
    """Relative Frobenius error over (got, want) pairs (one a group), each accumulated in float64 on its
    own: a whole (E, K, N) output in float64 at once ran out of memory at E = 256."""
    num = den = 0.0
    for got, want in pairs:
        num += float((got.double() - want.double()).square().sum())
        den += float(want.double().square().sum())
    return (num / max(den, 1e-300)) ** 0.5


def cluster_fields(t: dict, flop: float, errs: dict | None, rings=(None,), default_ring: int = 1) -> dict:
    """The row's fields of --cluster both, --store both, --ring and --check64 (``default_ring``: the
    library's choice, explain_grouped_mm's ``ring``, where --ring is not given)."""
    out = {"store": grouped_lib.STORE_DEFAULT, "ring": rings[0] or default_ring}
    if len(rings) > 1:
        alt = t[f"grouped_r{rings[1]}"]
        out.update(ring_alt=rings[1], ratio_ring=t["grouped"].median_ms / alt.median_ms,
                   tflops_ring_alt=flop / alt.median_ms / 1e9)
    if "grouped_registers" in t:
        out.update(ratio_store_tma=t["grouped_registers"].median_ms / t["grouped"].median_ms,
                   tflops_registers=flop / t["grouped_registers"].median_ms / 1e9)
    if "grouped_c2" in t:
        out.update(ratio_cluster2=t["grouped"].median_ms / t["grouped_c2"].median_ms,
                   tflops_c2=flop / t["grouped_c2"].median_ms / 1e9)
    if errs is not None:
        out["rel_err_f64"] = errs
    return out


def run_case(name: str, direction: str, budget: float, bn: int | None, clusters=(None,), f64: bool = False,
             both_stores: bool = False, rings=(None,)) -> dict:
    e, rows, n, k, lo, hi = CASES[name]
    sizes = group_sizes(e, rows, lo, hi)
    dev = "cuda"
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32).to(dev)
    if direction == "grad_w":  # grad_w[e] = x[rows_e].T @ grad_y[rows_e]: (E, K, N), grouped along K
        return run_grad_w(name, e, rows, n, k, sizes, offs, budget, bn, clusters, f64, both_stores, rings)
    if direction == "fwd":  # y = x @ w[e].T, w (E, N, K)
        a = torch.randn(rows, k, dtype=torch.bfloat16, device=dev)
        w = torch.randn(e, n, k, dtype=torch.bfloat16, device=dev) / k**0.5
        b = w.transpose(1, 2)  # (E, K, N), K-major per group
        out_n, red = n, k
    else:  # grad_x = grad_y @ w[e], grad_y (R, N): the weight (E, N, K) is N-major as b
        a = torch.randn(rows, n, dtype=torch.bfloat16, device=dev)
        b = torch.randn(e, n, k, dtype=torch.bfloat16, device=dev) / n**0.5
        out_n, red = k, n
    starts = [0] + torch.tensor(sizes).cumsum(0).tolist()[:-1]
    slices = [(s, s + z, i) for i, (s, z) in enumerate(zip(starts, sizes)) if z]

    def loop(*_):
        out = torch.empty(rows, out_n, dtype=torch.bfloat16, device=dev)
        for s, t, i in slices:
            torch.mm(a[s:t], b[i], out=out[s:t])
        return out

    chosen = explain_grouped_mm(a, b, offs)  # the build the library picks where bn and the cluster are not given
    fns = {
        **library_fns(a, b, offs, bn, clusters, both_stores, rings),
        "torch_grouped": lambda *_: torch._grouped_mm(a, b, offs),
        "loop": loop,
    }
    errs = check64(fns, lambda out: ((out[s:t], a[s:t].double() @ b[i].double()) for s, t, i in slices)) if f64 else None
    ref = torch._grouped_mm(a, b, offs).double()
    got = fns["grouped"]().double()
    err = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
    del ref, got
    t = time_fns(fns, a, b[0], budget_s=budget, rounds=3, warmup=3)
    flop = 2.0 * rows * out_n * red
    ours_ms = t["grouped"].median_ms
    row = {
        "case": name, "layout": "contiguous", "direction": direction, "E": e, "rows": rows, "N": out_n, "K": red,
        "tflops": flop / ours_ms / 1e9, "ratio_torch_grouped": t["torch_grouped"].median_ms / ours_ms,
        "ratio_loop": t["loop"].median_ms / ours_ms, "correct": err <= 2e-2 and _f64_ok(errs), "rel_err_vs_torch": err,
        "cluster": clusters[0] or chosen["cluster"],
        **cluster_fields(t, flop, errs, rings, chosen.get("ring", grouped_lib.C_RING)),
        "group_sizes": {"min": min(sizes), "max": max(sizes), "empty": sizes.count(0)},
        "bn": bn or chosen["tile"][1],
        "ms": {k2: v.median_ms for k2, v in t.items()}, "spread": {k2: round(v.spread, 4) for k2, v in t.items()},
        "tflops_torch_grouped": flop / t["torch_grouped"].median_ms / 1e9, "tflops_loop": flop / t["loop"].median_ms / 1e9,
    }
    _print(row, ours_ms, err)
    return row


def _f64_ok(errs: dict | None) -> bool:
    return errs is None or all(v <= F64_TOL for n, v in errs.items() if n.startswith("grouped"))


def _print(row: dict, ours_ms: float, err: float) -> None:
    extra = f"  x{row['ratio_cluster2']:.3f} cluster2/cluster1" if "ratio_cluster2" in row else ""
    if "ratio_ring" in row:
        extra += f"  x{row['ratio_ring']:.3f} ring{row['ring_alt']}/ring{row['ring']}"
    if "ratio_store_tma" in row:
        extra += f"  x{row['ratio_store_tma']:.3f} tma/registers"
    if "rel_err_f64" in row:
        extra += "  f64 " + " ".join(f"{n} {v:.1e}" for n, v in row["rel_err_f64"].items())
    print(f"{row['case']:22s} {row['direction']:6s} E={row['E']:4d} rows={row['rows']:6d} N={row['N']:6d} "
          f"K={row['K']:6d}  grouped {ours_ms:8.3f} ms {row['tflops']:6.1f} TF/s  x{row['ratio_torch_grouped']:.2f} "
          f"torch_grouped  x{row['ratio_loop']:.2f} loop  err {err:.2e}{extra}", flush=True)


def run_grad_w(name, e, rows, n, k, sizes, offs, budget, bn, clusters=(None,), f64: bool = False,
               both_stores: bool = False, rings=(None,)) -> dict:
    x = torch.randn(rows, k, dtype=torch.bfloat16, device="cuda")
    gy = torch.randn(rows, n, dtype=torch.bfloat16, device="cuda")
    starts = [0] + torch.tensor(sizes).cumsum(0).tolist()[:-1]

    def loop(*_):
        out = torch.zeros(e, k, n, dtype=torch.bfloat16, device="cuda")
        for i, (s, z) in enumerate(zip(starts, sizes)):
            if z:
                torch.mm(x[s:s + z].t(), gy[s:s + z], out=out[i])
        return out

    chosen = explain_grouped_mm(x.t(), gy, offs)  # the build the library picks where bn and the cluster are not given
    fns = {**library_fns(x.t(), gy, offs, bn, clusters, both_stores, rings),
           "torch_grouped": lambda *_: torch._grouped_mm(x.t(), gy, offs), "loop": loop}
    errs = None
    if f64:
        def pieces(out):
            for i, (s, z) in enumerate(zip(starts, sizes)):
                yield out[i], (x[s:s + z].t().double() @ gy[s:s + z].double() if z else torch.zeros_like(out[i], dtype=torch.float64))
        errs = check64(fns, pieces)
    ref, got = torch._grouped_mm(x.t(), gy, offs), fns["grouped"]()
    err = rel_err_over(zip(got, ref))  # group by group
    del ref, got
    t = time_fns(fns, x, gy, budget_s=budget, rounds=3, warmup=3)
    ours_ms = t["grouped"].median_ms
    flop = 2.0 * rows * n * k
    row = {"case": name, "layout": "contiguous", "direction": "grad_w", "E": e, "rows": rows, "N": n, "K": k,
           "tflops": flop / ours_ms / 1e9, "ratio_torch_grouped": t["torch_grouped"].median_ms / ours_ms,
           "ratio_loop": t["loop"].median_ms / ours_ms, "correct": err <= 2e-2 and _f64_ok(errs), "rel_err_vs_torch": err,
           "cluster": clusters[0] or chosen["cluster"], **cluster_fields(t, flop, errs, rings, chosen.get("ring", grouped_lib.C_RING)),
           "bn": bn or chosen["tile"][1], "ms": {k2: v.median_ms for k2, v in t.items()},
           "spread": {k2: round(v.spread, 4) for k2, v in t.items()},
           "tflops_torch_grouped": flop / t["torch_grouped"].median_ms / 1e9, "tflops_loop": flop / t["loop"].median_ms / 1e9}
    _print(row, ours_ms, err)
    return row


class FusedRefused(RuntimeError):
    """The fused swiglu build refuses a case's tensors (its reason the message): the case is not run."""


def swiglu_rows(names, budget: float, quick: bool) -> list[dict]:
    """The swiglu rows of ``names`` (fwd, and fwd_bwd for a prefill case unless ``quick``); a case the fused
    build refuses is a row with ``correct`` None and ``not_run`` its reason, so the rows timed are kept."""
    rows = []
    for nm in names:
        for d in ("fwd",) if quick or is_decode(nm) else ("fwd", "fwd_bwd"):
            try:
                rows.append(run_swiglu(nm, d, budget))
            except FusedRefused as exc:
                print(f"{nm:22s} swiglu {d:7s} not run: {exc}", flush=True)
                rows.append({"case": nm, "layout": "swiglu", "direction": d, "correct": None, "not_run": str(exc)})
    return rows


def exit_status(rows: list[dict]) -> int:
    """1 when a row that ran is wrong (``correct`` false), else 0 (a row not run, ``correct`` None, fails nothing)."""
    return 1 if any(r.get("correct") is False for r in rows) else 0


def run_swiglu(name: str, direction: str, budget: float) -> dict:
    """gemm_ladder.grouped_swiglu on a gate+up case (w_gate, w_up (E, N / 2, K)) against torch's composition
    ``silu(_grouped_mm(x, w_gate^T)) * _grouped_mm(x, w_up^T)`` (``ratio_torch_grouped``) and a loop of
    ``silu(x_e @ w_gate[e]^T) * (x_e @ w_up[e]^T)`` per expert (``ratio_loop``). ``direction`` "fwd", or
    "fwd_bwd": the forward and torch.autograd.grad of x, w_gate and w_up (3 x the forward's FLOPs). The
    forward also times the fused gated-MLP build (ops_grouped_swiglu.FUSED_DEFAULT on during its calls) in
    the same rounds: ``ratio_fused`` (the two-GEMM forward's time over the fused one's: > 1, fused faster),
    ``ratio_torch_grouped_fused`` (torch's composition over the fused one), ``rel_err_fused_vs_torch``."""
    import torch.nn.functional as F

    import gemm_ladder.ops_grouped_swiglu as gs
    from gemm_ladder.ops_grouped_swiglu import grouped_swiglu

    e, rows, n2, k, lo, hi = CASES[name]
    n = n2 // 2
    sizes = group_sizes(e, rows, lo, hi)
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32).to("cuda")
    x = torch.randn(rows, k, dtype=torch.bfloat16, device="cuda")
    wg, wu = (torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda").mul_(k**-0.5) for _ in range(2))
    starts = [0] + torch.tensor(sizes).cumsum(0).tolist()[:-1]
    slices = [(s, s + z, i) for i, (s, z) in enumerate(zip(starts, sizes)) if z]

    def composed(x, wg, wu):
        return F.silu(torch._grouped_mm(x, wg.transpose(1, 2), offs)) * torch._grouped_mm(x, wu.transpose(1, 2), offs)

    def looped(x, wg, wu):
        return torch.cat([F.silu(x[s:t] @ wg[i].T) * (x[s:t] @ wu[i].T) for s, t, i in slices])

    # The two-GEMM forward whatever GL_GROUPED_SWIGLU_FUSED says; the fused one beside it, where its build takes
    # these tensors (else it would time the two GEMMs under the fused label: refused instead).
    impls = {"grouped": with_setting(gs, "FUSED_DEFAULT", False, lambda x, wg, wu: grouped_swiglu(x, wg, wu, offs)),
             "torch_grouped": composed, "loop": looped}
    if direction == "fwd":
        refusal = gs.fused_kernel().supports_swiglu(x, wg, wu, offs, torch.empty(rows, n, dtype=x.dtype, device="cuda"))
        if refusal is not None:
            raise FusedRefused(f"{name}: the fused swiglu build refuses these tensors: {refusal}")
        impls["grouped_fused"] = with_setting(gs, "FUSED_DEFAULT", True, lambda x, wg, wu: grouped_swiglu(x, wg, wu, offs))
        fns = {nm: (lambda f: lambda *_: f(x, wg, wu))(f) for nm, f in impls.items()}
    else:
        leaves = [t.detach().requires_grad_() for t in (x, wg, wu)]
        gy = torch.randn(rows, n, dtype=torch.bfloat16, device="cuda")
        fns = {nm: (lambda f: lambda *_: torch.autograd.grad(f(*leaves), leaves, gy))(f) for nm, f in impls.items()}
    ref = composed(x, wg, wu).double()  # torch's composition in bf16, as the GEMM rows compare with torch's
    got = impls["grouped"](x, wg, wu).double()
    err = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
    t = time_fns(fns, x, wg[0], budget_s=budget, rounds=3, warmup=3)
    flop = 2.0 * 2 * rows * n * k * (3 if direction == "fwd_bwd" else 1)
    ours = t["grouped"].median_ms
    row = {"case": name, "layout": "swiglu", "direction": direction, "E": e, "rows": rows, "N": n, "K": k,
           "tflops": flop / ours / 1e9, "ratio_torch_grouped": t["torch_grouped"].median_ms / ours,
           "ratio_loop": t["loop"].median_ms / ours, "correct": err <= 2e-2, "rel_err_vs_torch": err,
           "group_sizes": {"min": min(sizes), "max": max(sizes), "empty": sizes.count(0)},
           "ms": {k2: v.median_ms for k2, v in t.items()}, "spread": {k2: round(v.spread, 4) for k2, v in t.items()},
           "tflops_torch_grouped": flop / t["torch_grouped"].median_ms / 1e9, "tflops_loop": flop / t["loop"].median_ms / 1e9}
    if "grouped_fused" in t:
        fused = t["grouped_fused"].median_ms
        err_fused = float((impls["grouped_fused"](x, wg, wu).double() - ref).norm() / ref.norm().clamp_min(1e-30))
        row.update(ratio_fused=ours / fused, ratio_torch_grouped_fused=t["torch_grouped"].median_ms / fused,
                   tflops_fused=flop / fused / 1e9, rel_err_fused_vs_torch=err_fused)
        row["correct"] = row["correct"] and err_fused <= 2e-2
    print(f"{name:22s} swiglu {direction:7s} E={e:4d} rows={rows:6d} N={n:6d} K={k:6d}  grouped {ours:8.3f} ms "
          f"{row['tflops']:6.1f} TF/s  x{row['ratio_torch_grouped']:.2f} torch composition  x{row['ratio_loop']:.2f} loop"
          f"  err {err:.2e}" + (f"  fused x{row['ratio_fused']:.2f} the two GEMMs, x{row['ratio_torch_grouped_fused']:.2f} "
                                 f"torch, err {row['rel_err_fused_vs_torch']:.2e}" if "ratio_fused" in row else ""),
          flush=True)
    return row


def copy_bandwidth_gbs(nbytes: int) -> float:
    """A device-to-device copy of ``nbytes`` (read + write bytes per second, GB/s): the decode rows'
    bandwidth yardstick (issue 24: decode >= 85% of the measured copy bandwidth in weight bytes read)."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    t = time_fns({"copy": lambda *_: dst.copy_(src)}, src, dst, budget_s=0.3, rounds=1)["copy"]
    return 2 * nbytes / t.median_ms / 1e6


def run_masked_decode(name: str, budget: float, bn: int | None, copy_gbs: float) -> dict:
    """The decode case in the masked layout: a (E, M_max, K) with the same routing's counts on the device."""
    from gemm_ladder.api_grouped import grouped_mm_masked_direct

    e, rows, n, k, lo, hi = CASES[name]
    sizes = group_sizes(e, rows, lo, hi)
    m_max = max(16, max(sizes))
    counts = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    a = torch.randn(e, m_max, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(e, n, k, dtype=torch.bfloat16, device="cuda") / k**0.5
    b = w.transpose(1, 2)
    x = torch.cat([a[i, :z] for i, z in enumerate(sizes)])
    offs = counts.cumsum(0).to(torch.int32)
    starts = [0] + torch.tensor(sizes).cumsum(0).tolist()[:-1]
    slices = [(s, s + z, i) for i, (s, z) in enumerate(zip(starts, sizes)) if z]

    def loop(*_):
        out = torch.empty(rows, n, dtype=torch.bfloat16, device="cuda")
        for s, t, i in slices:
            torch.mm(x[s:t], b[i], out=out[s:t])
        return out

    fns = {"grouped": lambda *_: grouped_mm_masked_direct(a, b, counts, bn=bn),
           "torch_grouped": lambda *_: torch._grouped_mm(x, b, offs), "loop": loop}
    got = fns["grouped"]()
    ref = torch._grouped_mm(x, b, offs).double()
    mine = torch.cat([got[i, :z] for i, z in enumerate(sizes)]).double()
    err = float((mine - ref).norm() / ref.norm().clamp_min(1e-30))
    t = time_fns(fns, a, w, budget_s=budget, rounds=3, warmup=3)
    ours = t["grouped"].median_ms
    flop = 2.0 * rows * n * k
    weight_bytes = sum(1 for z in sizes if z) * n * k * 2
    row = {"case": name, "layout": "masked", "direction": "fwd", "E": e, "rows": rows, "N": n, "K": k,
           "tflops": flop / ours / 1e9, "ratio_torch_grouped": t["torch_grouped"].median_ms / ours,
           "ratio_loop": t["loop"].median_ms / ours, "correct": err <= 2e-2, "rel_err_vs_torch": err, "m_max": m_max,
           "ms": {k2: v.median_ms for k2, v in t.items()}, "weights_gbs": weight_bytes / ours / 1e6,
           "copy_gbs": copy_gbs, "ratio_copy_bandwidth": weight_bytes / ours / 1e6 / copy_gbs}
    print(f"{name:22s} masked E={e:4d} rows={rows:6d} N={n:6d} K={k:6d}  grouped {ours:8.3f} ms  weights "
          f"{row['weights_gbs']:.0f} GB/s ({row['ratio_copy_bandwidth']:.2f} of copy)  x{row['ratio_torch_grouped']:.2f} "
          f"torch_grouped  x{row['ratio_loop']:.2f} loop  err {err:.2e}", flush=True)
    return row


#: The (BN, ring) builds --sanitize runs on more tiles than CTAs, grouped along M and along K (library/grouped.py
#: RINGS: one buffer, or one per panel).
SANITIZE_RINGS = {"m": ((128, 2), (256, 4)), "k": ((256, 1), (256, 4), (128, 2))}


def ring_builds() -> list:
    """The deeper-ring builds --sanitize and --ring 1,4 (grad_w) launch, as library/grouped.py objects: what
    --prebuild compiles beside the builds the public calls take."""
    out = [grouped_lib.grouped_gemm(bn, "k", ring=ring) for bn, ring in SANITIZE_RINGS["m"]]
    out += [grouped_lib.grouped_gemm(bn, "mn", k_grouped=True, ring=ring) for bn, ring in SANITIZE_RINGS["k"]]
    return out


def case_builds(names, directions, clusters=(None,), rings=(None,), bn: int | None = None) -> list:
    """The library builds a run of these cases and directions launches (bf16, the library's own tile-width
    and cluster rules where not given, each of ``clusters`` and ``rings``; ``bn``: the width --bn forces
    along M), as library/grouped.py objects."""
    from gemm_ladder.api_grouped import choose_bn, grouped_build
    from gemm_ladder.library.kernel import GROUP_K, GROUP_M

    out = []
    for nm in names:
        e, rows, n, k, _, _ = CASES[nm]
        for d in directions:
            if d == "grad_w" and is_decode(nm):
                continue
            for cl in clusters:
                for ring in rings:
                    if d == "grad_w":
                        out.append(grouped_build(grouped_lib.grad_w_bn(n), "mn", rows, GROUP_K, False, False, cl, ring)[0])
                    else:
                        out_n, red = (n, k) if d == "fwd" else (k, n)
                        out.append(grouped_build(bn or choose_bn(out_n, rows, e), "k" if d == "fwd" else "mn", red,
                                                 GROUP_M, False, False, cl, ring)[0])
    return list(dict.fromkeys(out))


def prebuild() -> int:
    """Compile into the kernel cache, with no GPU, the builds a full run (every case and direction, the
    library's rules, cluster 1 and 2; grouped along K rings 1 and 4), ``--directions fwd,grad_x --bn 256
    --ring 1,4 --cluster 1`` (the deeper ring along M, one CTA: PAIR_RING_HANG), --sanitize's deeper rings (:func:`ring_builds`) and the fused
    gated-MLP build launch, bf16; 0 when all are ready."""
    kernels = case_builds(CASES, ("fwd", "grad_x"), (None, 1, 2)) + case_builds(CASES, ("grad_w",), (None, 1, 2), (None, 1, 4))
    kernels += case_builds(CASES, ("fwd", "grad_x"), (1,), (1, 4), bn=256)
    return compile_all(kernels + ring_builds() + [grouped_lib.grouped_gemm(256, "k", swiglu=True)])  # + the fused swiglu


def sanitize() -> int:
    """Every build once on small shapes (both dtypes, both tile widths, K- and N-major weights, bias, fp32
    out, grouped along K, the masked layout, the fused swiglu; empty, one-row and unaligned groups), each checked against
    float64; the cluster build; more tiles than CTAs (the TMA store's panel carried into a CTA's next
    tile); nothing timed or written. For compute-sanitizer (memcheck, racecheck, synccheck)."""
    from gemm_ladder.api_grouped import grouped_mm_masked_direct

    sizes = [0, 1, 70, 129, 0, 33]
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32).cuda()
    ends = [0] + offs.tolist()
    check = ResultCheck(width=40)

    for dt in (torch.bfloat16, torch.float16):
        x = torch.randn(sum(sizes), 200, dtype=dt, device="cuda")
        w = torch.randn(len(sizes), 136, 200, dtype=dt, device="cuda")
        bias = torch.randn(len(sizes), 136, dtype=dt, device="cuda")
        ref = torch.cat([x[ends[i]:ends[i + 1]].double() @ w[i].double().T for i in range(len(sizes))])
        for bn in (128, 256):
            check(f"{dt} fwd bn {bn}", grouped_mm_direct(x, w.transpose(1, 2), offs, bn=bn), ref)
            wn = w.transpose(1, 2).contiguous()  # (E, K, N) row-major: N-major
            check(f"{dt} n-major bn {bn}", grouped_mm_direct(x, wn, offs, bn=bn), ref)
            check(f"{dt} grouped along K bn {bn}", grouped_mm_direct(x.t(), ref.to(dt), offs, bn=bn),
                  torch.stack([x[ends[i]:ends[i + 1]].double().T @ ref[ends[i]:ends[i + 1]].to(dt).double()
                               for i in range(len(sizes))]))
        rows_bias = torch.cat([bias[i].double().expand(ends[i + 1] - ends[i], -1) for i in range(len(sizes))])
        check(f"{dt} bias", grouped_mm_direct(x, w.transpose(1, 2), offs, bias=bias), ref + rows_bias)
        check(f"{dt} fp32 out", grouped_mm_direct(x, w.transpose(1, 2), offs, out_dtype=torch.float32), ref)
        counts = torch.tensor([3, 0, 16, 1, 9, 16], dtype=torch.int32, device="cuda")
        a = torch.randn(len(sizes), 16, 200, dtype=dt, device="cuda")
        got = grouped_mm_masked_direct(a, w.transpose(1, 2), counts)
        cs = counts.tolist()
        check(f"{dt} masked", torch.cat([got[i, :c] for i, c in enumerate(cs)]),
              torch.cat([a[i, :c].double() @ w[i].double().T for i, c in enumerate(cs)]))
        check(f"{dt} fwd cluster 2", grouped_mm_direct(x, w.transpose(1, 2), offs, bn=256, cluster=2), ref)
        # The fused gated MLP (w as the gate, w / 2 as up: 136 outputs, a partial 128-column tile).
        from gemm_ladder.ops_grouped_swiglu import grouped_swiglu_fused_direct

        from gemm_ladder.ops_grouped_swiglu import fused_kernel

        wu = (w / 2).contiguous()
        probe = torch.empty(x.shape[0], w.shape[1], dtype=dt, device="cuda")
        assert fused_kernel().supports_swiglu(x, w, wu, offs, probe) is None, "the fused build refuses the case"
        check(f"{dt} fused swiglu", grouped_swiglu_fused_direct(x, w, wu, offs),
              torch.nn.functional.silu(ref) * (ref / 2))
    # More tiles than CTAs (each CTA's last panel of a tile stored during its next tile: the TMA store's
    # ring carried across tiles), cluster 1 and 2, and grouped along K.
    # Outputs poisoned: a NaN block of the output's size freed just before each call (the allocator hands it back).
    xs = torch.randn(4096, 128, dtype=torch.bfloat16, device="cuda")
    ws = torch.randn(16, 1024, 128, dtype=torch.bfloat16, device="cuda")
    offs16 = (torch.arange(1, 17, device="cuda") * 256).to(torch.int32)
    ref16 = torch.cat([xs[256 * i:256 * (i + 1)].double() @ ws[i].double().T for i in range(16)])
    for cl in (1, 2):  # 256 units (128 pairs) of 128 x 128 on 132 CTAs
        torch.full((4096, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
        check(f"many tiles cluster {cl}", grouped_mm_direct(xs, ws.transpose(1, 2), offs16, bn=128, cluster=cl), ref16)
    for bn, ring in SANITIZE_RINGS["m"]:  # the deeper rings: every panel at the tile's end
        torch.full((4096, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
        check(f"many tiles bn {bn} ring {ring}", grouped_mm_direct(xs, ws.transpose(1, 2), offs16, bn=bn, ring=ring), ref16)
    xk = torch.randn(4096, 512, dtype=torch.bfloat16, device="cuda")
    gy = ref16.to(torch.bfloat16)
    ref_k = torch.stack([xk[256 * i:256 * (i + 1)].double().T @ gy[256 * i:256 * (i + 1)].double() for i in range(16)])
    for bn, ring in SANITIZE_RINGS["k"]:  # 256 units of 128 x 256 (512 of 128 x 128); one buffer and a buffer per panel
        torch.full((16, 512, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
        check(f"many tiles grouped along K bn {bn} ring {ring}", grouped_mm_direct(xk.t(), gy, offs16, bn=bn, ring=ring),
              ref_k)
    torch.cuda.synchronize()
    return 1 if check.wrong else 0


def parse_rings(text: str | None) -> tuple | None:
    """--ring's value as a tuple of one or two rings ((None,) when not given), or None when malformed."""
    if text is None:
        return (None,)
    try:
        rings = tuple(int(r) for r in text.split(","))
    except ValueError:
        return None
    return rings if 1 <= len(rings) <= 2 and set(rings) <= set(grouped_lib.RINGS) else None


def ring_refusal(rings: tuple, bn: int | None, directions: tuple, names: list[str] | tuple = tuple(CASES),
                 cluster: str | None = None) -> str | None:
    """Why the builds cannot have these rings (None when they can): a ring deeper than one buffer is one for
    each of the tile's BN / 64 panels (library/grouped.py RINGS), so it needs that tile width: given by
    --bn, or the weight gradient's own (grad_w_bn of each case's N) when grad_w is the only direction; and
    along M one CTA per cluster (library/grouped.py refuses a pair with it: PAIR_RING_HANG), which --cluster
    2 or both asks for, and the forward's rule (choose_cluster) takes at K >= CLUSTER_MIN_K unless --cluster 1."""
    for r in rings:
        if r in (None, grouped_lib.C_RING):
            continue
        along_m = [d for d in directions if d != "grad_w"]
        pair = cluster in ("2", "both") or (cluster is None and "fwd" in along_m and
                                            any(CASES[nm][3] >= grouped_lib.CLUSTER_MIN_K for nm in names))
        if along_m and pair:
            return ("a deeper ring is refused with a pair of CTAs along M (library/grouped.py PAIR_RING_HANG): "
                    "give --cluster 1 or --directions grad_w")
        widths = {bn} if bn else ({grouped_lib.grad_w_bn(CASES[nm][2]) for nm in names} if set(directions) == {"grad_w"}
                                  else {None})
        if any(width is None or width // 64 != r for width in widths):
            return (f"a ring of {r} buffers is built for {64 * r}-wide tiles only: give --bn {64 * r}"
                    + (" (or --directions grad_w, 256 wide)" if r == 4 else ""))
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cases", default=None, help=f"comma list of {', '.join(CASES)}")
    p.add_argument("--bn", type=int, default=None, choices=(128, 256), help="tile width (default by N)")
    p.add_argument("--directions", default=None, help="comma list of fwd, grad_x, grad_w")
    p.add_argument("--swiglu", default=None, help="grouped_swiglu cases: none or a comma list of gate+up and decode "
                   "cases (default: three with --quick, all of them otherwise)")
    p.add_argument("--cluster", default=None, choices=("1", "2", "both"),
                   help="the grouped build's cluster size; both: cluster 1 as grouped, cluster 2 as grouped_c2 "
                        "(default: the library's rule, choose_cluster)")
    p.add_argument("--store", default=None, choices=("tma", "registers", "both"),
                   help="how a bf16 output leaves the kernel: tma (the library's), registers, or both timed "
                        "(grouped_registers beside grouped)")
    p.add_argument("--ring", default=None, help="the output's panel buffers per consumer: R, or R,R2 to time both "
                   "(grouped_rR2 beside grouped; default library/grouped.py C_RING)")
    p.add_argument("--check64", action="store_true", help="check every callable's output against float64 per group first")
    p.add_argument("--sanitize", action="store_true", help="every build once on small shapes, checked; nothing timed")
    p.add_argument("--prebuild", action="store_true", help="compile the grouped builds and the deeper rings' into the "
                   "kernel cache and exit (no GPU)")
    add_output_argument(p)
    args = p.parse_args(argv)
    if args.prebuild:
        return prebuild()
    names = comma_list(__file__, "--cases", args.cases) if args.cases is not None else list(QUICK if args.quick else CASES)
    for nm in names:
        if nm not in CASES:
            print(f"bench/grouped.py: unknown case {nm!r}: use {', '.join(CASES)}", file=sys.stderr)
            return 2
    directions = ("fwd",) if args.quick else ("fwd", "grad_x", "grad_w")
    if args.directions is not None:
        directions = tuple(comma_list(__file__, "--directions", args.directions))
        if not set(directions) <= {"fwd", "grad_x", "grad_w"}:
            print(f"bench/grouped.py: --directions {args.directions!r}: use fwd, grad_x, grad_w", file=sys.stderr)
            return 2
    budget = 0.3 if args.quick else 0.8
    clusters = {None: (None,), "1": (1,), "2": (2,), "both": (1, 2)}[args.cluster]
    rings = parse_rings(args.ring)
    if rings is None:
        print(f"bench/grouped.py: --ring {args.ring!r}: one or two of {grouped_lib.RINGS}, comma-separated", file=sys.stderr)
        return 2
    reason = ring_refusal(rings, args.bn, directions, names, args.cluster)
    if reason:
        print(f"bench/grouped.py: --ring {args.ring}: {reason}", file=sys.stderr)
        return 2
    swiglu = SWIGLU_QUICK if args.quick else SWIGLU
    if args.swiglu is not None:  # checked before the GPU, not after the contiguous rows are timed
        swiglu = () if args.swiglu == "none" else tuple(comma_list(__file__, "--swiglu", args.swiglu))
        if not set(swiglu) <= set(SWIGLU):
            refuse(__file__, f"--swiglu {args.swiglu!r}: use none or a comma list of {', '.join(SWIGLU)}")
    check_output(__file__, args.output)
    require_gpu(__file__)
    if args.sanitize:
        return sanitize()
    if args.store in ("tma", "registers"):
        grouped_lib.STORE_DEFAULT = args.store
    rows = [run_case(nm, d, budget, args.bn, clusters, args.check64, args.store == "both", rings) for nm in names
            for d in directions if not (d == "grad_w" and is_decode(nm))]
    rows += swiglu_rows(swiglu, budget, args.quick)
    decode = [nm for nm in names if is_decode(nm)]
    if decode:
        e, _, n, k, _, _ = CASES[decode[0]]
        copy_gbs = copy_bandwidth_gbs(min(e * n * k * 2, 2**31))  # a copy's speed is flat past a few hundred MB
        for r in rows:  # the contiguous decode rows' bandwidth too
            if r["case"] in decode and r["direction"] == "fwd" and "ms" in r:  # not a row not run
                _, _, n, k, _, _ = CASES[r["case"]]
                sizes = group_sizes(*[CASES[r["case"]][i] for i in (0, 1, 4, 5)])
                wb = sum(1 for z in sizes if z) * n * k * 2
                r.update(weights_gbs=wb / r["ms"]["grouped"] / 1e6, copy_gbs=copy_gbs,
                         ratio_copy_bandwidth=wb / r["ms"]["grouped"] / 1e6 / copy_gbs)
        rows += [run_masked_decode(nm, budget, args.bn, copy_gbs) for nm in decode]
    save({"rows": rows, "quick": args.quick, "store": args.store or grouped_lib.STORE_DEFAULT}, "grouped" + ("_quick" if args.quick else ""), args.output)
    return exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())
