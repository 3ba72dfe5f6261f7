"""``swiglu`` at small M: two GEMMs of the dispatcher's small-M route, the second's epilogue pairing
gate with up.

At small M the gated MLP is bound by reading its two weights (2 N K elements against M K of x), and
the one-kernel swiglu (``kernels/library/sm90_swiglu.cu``, 128 x 256 tiles over ceil(M / 256) x
ceil(N / 128) work units) leaves most of the GPU's bandwidth unused there. This path runs instead:

1. ``up = x @ w_up^T`` into a float32 (M, N) buffer: the dispatcher's route for the plain GEMM with a
   float32 output (for M <= 256, the small-M kernel: the weight's N on wgmma's M, split-K over the CTAs
   with its deterministic reduction, C written from registers in fp32);
2. ``out = silu(x @ w_gate^T) * up`` by the same route with a fused epilogue (library/epilogue.py's
   mechanism: :data:`GATED`, a tile input ``up`` read in the output's coordinates), rounded once to
   x's dtype.

Each weight is read once, as in the fused kernel; x (M K elements) is read twice and ``up`` (M N fp32)
is written and read once, a few percent of the weights' bytes at the M this path takes. The result
is the fused kernel's: silu(g) * u in fp32 from two fp32 accumulators, one rounding (``up`` is kept in
fp32, never rounded to the input dtype). Both launches are deterministic (the small-M kernel's split-K
reduction is in a fixed order), so the result is bitwise repeatable.

With :data:`ONE_LAUNCH` on (the default) and M <= :data:`ONE_LAUNCH_MAX_M`, the two products run in one launch
instead: the small-M kernel's gated build (library/swiglu_small_m.py), whose stages hold both weights' rows of
the same output columns, so gate and up meet in registers and nothing goes through a float32 buffer; M in one
tile of its bucket (:func:`one_launch_bn`). Above ONE_LAUNCH_MAX_M rows, up to
the device's threshold, the pair runs.

Which route the two GEMMs take is :data:`PAIR_ROUTE`: "small_m", the small-M kernel in the table's tile
counts (the shipped choice), or "route", the dispatcher's own route for each GEMM as ``linear`` would take it
(the general kernel's 64- and 128-row builds among its candidates; a measuring switch, bench/swiglu_small_m.py
``pair_route``).

Which path runs is :func:`takes`: M <= :func:`small_m_max` of the device (:data:`SMALL_M_MAX`, the largest M at
which this path was measured faster than the fused kernel on Llama-3-8B's MLP on the H200, or the device's own
measured value in :data:`SMALL_M_MAX_BY_DEVICE`; ``bench/swiglu_small_m.py`` prints the threshold its run
supports), except from :data:`FUSED_FILL_MIN_M` rows on where the fused kernel's work units fill
whole waves (its wave fill at least :data:`FUSED_MIN_WAVE_FILL`): there, the fused kernel. :func:`explain` returns the decision and both launches' routes as data.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

from gemm_ladder.dispatch.route import ASSUMED_DEVICE
from gemm_ladder.library.epilogue import Epilogue
from gemm_ladder.library.swiglu import work_units

#: Largest M routed here (``bench/swiglu_small_m.py`` measures where this path stops beating the fused
#: kernel; docs/library.md gives the run). Above it, the fused kernel.
SMALL_M_MAX = 192

#: Per device name, the largest M routed here where bench/swiglu_small_m.py measured it elsewhere than
#: SMALL_M_MAX (the H200's), with :data:`ONE_LAUNCH` on. On an H100 (ce34b43,
#: bench/results/2026-12-06_swiglu_small_m_bf16_h100_ce34b43.json) one launch of the gated build ran 1.16x and 1.13x
#: the fused kernel at 96 and 128 rows on Llama-3-8B's MLP (97.2 against 112.8 us, 96.9 against 109.6) and 1.09x and
#: 1.05x on Qwen2.5-7B's (124.8 against 135.9, 125.9 against 131.8); at 160 and 192 rows the fused kernel beat the
#: pair (Llama 111.4 against 119.0 us, Qwen 132.4 against 168.6; one launch is not taken there): 128. Phi-3-mini's
#: MLP, where the fused kernel ran 1.07x one launch at 96 and 128 rows, takes the fused kernel from FUSED_FILL_MIN_M
#: rows on by its wave fill (takes), not by this threshold.
SMALL_M_MAX_BY_DEVICE = {"NVIDIA H100 80GB HBM3": 128}
#: The same with ONE_LAUNCH off (the pair alone). On an H100 (21d6484,
#: bench/results/2026-12-06_swiglu_small_m_bf16_h100_21d6484.json) the pair ran 1.14x and 1.13x the fused kernel at
#: 64 rows on Llama-3-8B's and Qwen2.5-7B's MLPs (105.2 against 120.3 us, 134.5 against 151.4), and the fused kernel
#: 1.04x and 1.09x the pair at 128 and 192 rows on Llama's (109.2 against 113.2, 110.1 against 120.6), 1.16x and
#: 1.31x on Qwen's (132.0 against 153.5, 132.1 against 173.7): 64, the largest M measured where the pair won
#: (65-127 not measured).
PAIR_SMALL_M_MAX_BY_DEVICE = {"NVIDIA H100 80GB HBM3": 64}

#: The fused kernel's wave fill (its work units over whole waves of the device's 2-CTA clusters) at and above
#: which it runs from FUSED_FILL_MIN_M rows on: measured on an H100 (bench/swiglu_small_m.py at 21d6484,
#: bench/results/2026-12-06_swiglu_small_m_bf16_h100_21d6484.json), Phi-3-mini's MLP (8192 output columns: 64
#: units on 66 clusters, fill 0.97) ran the fused kernel 1.00-1.01x the pair at M = 1 and 16 and 1.18-1.52x
#: at 64-192, while Llama-3-8B's (112 units, 0.85) and Qwen2.5-7B's (148, 0.75) ran the pair 1.09-1.39x
#: faster at M <= 64.
FUSED_MIN_WAVE_FILL = 0.9
#: The fewest rows at which a full-wave fused kernel is taken over the pair: in bench/shapes_real.py at 52ff5c7
#: (H100, bench/results/2026-12-06_shapes_real_mlps_h100_52ff5c7.json) Phi-3-mini's fused kernel took 59.4 us at
#: 7 rows (0.97x eager) where the pair had run 1.01-1.02x eager (the full run at f4959e8); at 1 and 16 rows the
#: two tied in bench/swiglu_small_m.py at 21d6484.
FUSED_FILL_MIN_M = 64

#: The two GEMMs' routes: "small_m" (the small-M kernel, as measured for SMALL_M_MAX) or "route" (the
#: dispatcher's choice per GEMM). GL_SWIGLU_PAIR_ROUTE in the environment at import, else "small_m"; a
#: benchmark sets the attribute to time both.
PAIR_ROUTES = ("small_m", "route")
PAIR_ROUTE = os.environ.get("GL_SWIGLU_PAIR_ROUTE", "small_m")

#: Whether the small-M path runs as one launch of the small-M kernel's gated build (library/swiglu_small_m.py)
#: instead of the pair of GEMMs, up to ONE_LAUNCH_MAX_M rows. Measured on an H100 (ce34b43,
#: bench/results/2026-12-06_swiglu_small_m_bf16_h100_ce34b43.json: bf16, the three MLPs at M = 1-128): one launch
#: 1.065-1.242x the pair's speed at every one of the 21 points (Llama-3-8B 91.4-97.2 us against 97.7-113.6;
#: Qwen2.5-7B 107.8-125.9 against 116.4-154.3; Phi-3-mini 48.8-57.5 against 55.1-71.4), 1.037-1.178x eager torch.
#: Not yet on an H200. GL_SWIGLU_SMALL_M_ONE_LAUNCH ("1" or "0") in the environment at import, else on; a
#: benchmark sets the attribute to time both (bench/swiglu_small_m.py).
ONE_LAUNCH = os.environ.get("GL_SWIGLU_SMALL_M_ONE_LAUNCH", "1") == "1"
#: The most rows one launch takes: the gated build's widest bucket (BN 128) in one tile. In two tiles (160 and 192
#: rows, the same run) it read the weights twice and took 192.4 and 194.0 us on Llama-3-8B's MLP and 217.9 and
#: 219.3 on Qwen2.5-7B's, against the pair's 119.0, 119.9, 168.6 and 175.2.
ONE_LAUNCH_MAX_M = 128

#: The second GEMM's epilogue: ``silu(gate) * up`` in fp32, ``up`` the first GEMM's float32 output.
GATED = Epilogue("gl::act_silu(acc) * up", lambda acc, up: F.silu(acc) * up, {"up": "tile"},
                 name="swiglu_small_m:silu(gate)*up")


def fused_wave_fill(m: int, n: int, clusters: int) -> float:
    """The fused kernel's work units (library/swiglu.py ``work_units``) over the whole waves of ``clusters``
    resident 2-CTA clusters they take: 1.0 when the last wave is full. The callers pass DeviceFacts.clusters
    (SMs / 2), which the fused launch's occupancy query (max_active_clusters) matched on 132 SMs: 66."""
    units = work_units(m, n)
    return units / (math.ceil(units / clusters) * clusters)


def small_m_max(device_name: str | None = None) -> int:
    """The largest M this path takes on a device of that name: its entry in :data:`SMALL_M_MAX_BY_DEVICE` (with
    :data:`ONE_LAUNCH` off, :data:`PAIR_SMALL_M_MAX_BY_DEVICE`), else :data:`SMALL_M_MAX` (also for None: no device
    to ask, the assumed H200)."""
    table = SMALL_M_MAX_BY_DEVICE if ONE_LAUNCH else PAIR_SMALL_M_MAX_BY_DEVICE
    return table.get(device_name, SMALL_M_MAX) if device_name else SMALL_M_MAX


def takes(m: int, n: int, k: int, clusters: int = ASSUMED_DEVICE.clusters, max_m: int = SMALL_M_MAX) -> bool:
    """Whether ``swiglu`` on (M, N, K) runs this path, not the fused kernel: M <= ``max_m`` (the device's
    :func:`small_m_max`), and below :data:`FUSED_FILL_MIN_M` rows or where the fused kernel's wave fill on
    ``clusters`` 2-CTA clusters (the device's: DeviceFacts.clusters; 66 on 132 SMs) is below
    :data:`FUSED_MIN_WAVE_FILL`."""
    return (1 <= m <= max_m and n >= 1 and k >= 1
            and (m < FUSED_FILL_MIN_M or fused_wave_fill(m, n, clusters) < FUSED_MIN_WAVE_FILL))


def reason(m: int, n: int = 1, clusters: int = ASSUMED_DEVICE.clusters, max_m: int = SMALL_M_MAX) -> str:
    """Why ``swiglu`` on (M, N) takes the path it takes, in one sentence (``max_m``: the device's
    :func:`small_m_max`)."""
    where = ("dispatch/swiglu_small_m.SMALL_M_MAX" if max_m == SMALL_M_MAX else
             "this device's entry in dispatch/swiglu_small_m.SMALL_M_MAX_BY_DEVICE")
    if m > max_m:
        return (f"M = {m} > {max_m} ({where}): the fused swiglu kernel (sm90_swiglu), x read once for both "
                "products")
    fill = fused_wave_fill(m, n, clusters)
    if fill >= FUSED_MIN_WAVE_FILL and m < FUSED_FILL_MIN_M:
        return (f"M = {m} < {FUSED_FILL_MIN_M} (dispatch/swiglu_small_m.FUSED_FILL_MIN_M; measured by "
                f"bench/swiglu_small_m.py and bench/shapes_real.py), though the fused kernel's waves are {fill:.2f} full: "
                "two GEMMs on the small-M route, up into float32, then gate with silu(gate) * up fused in its epilogue")
    if fill >= FUSED_MIN_WAVE_FILL:
        return (f"M = {m} <= {max_m}, but the fused kernel's {work_units(m, n)} work units fill their waves of "
                f"{clusters} clusters to {fill:.2f} >= {FUSED_MIN_WAVE_FILL} (dispatch/swiglu_small_m.FUSED_MIN_WAVE_FILL, "
                "measured by bench/swiglu_small_m.py): the fused swiglu kernel, x read once for both products")
    return (f"M = {m} <= {max_m} ({where}, measured by bench/swiglu_small_m.py) and "
            f"the fused kernel's {work_units(m, n)} work units fill their waves of {clusters} clusters to only {fill:.2f}: "
            "two GEMMs on the small-M route, up into float32, then gate with silu(gate) * up fused in its epilogue")


def one_launch_bn(m: int) -> int:
    """The gated build's bucket for M rows: the smallest that holds M in one tile (small_m.bucket), as measured (on
    the three MLPs the small-M table gives one tile at every M <= 128), or its widest, 128, past it (M in
    ceil(M / 128) tiles, which read the weights again: the path stops at ONE_LAUNCH_MAX_M; a bench may time it).
    Raises ValueError for M outside 1..256."""
    from gemm_ladder.library.small_m import bucket
    from gemm_ladder.library.swiglu_small_m import BUCKETS

    if m < 1:
        raise ValueError(f"M = {m}: at least one row")
    return min(bucket(m), BUCKETS[-1])


def one_launch(x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, out2: torch.Tensor):
    """(the gated build's kernel, its operand views) when :data:`ONE_LAUNCH` is on, M <= :data:`ONE_LAUNCH_MAX_M` and
    the build takes the call, else None."""
    m, k = x2.shape
    if not ONE_LAUNCH or m > ONE_LAUNCH_MAX_M:
        return None
    from gemm_ladder.library.operand import operand_view
    from gemm_ladder.library.swiglu_small_m import swiglu_small_m_kernel

    kernel = swiglu_small_m_kernel(one_launch_bn(m))
    views = [operand_view(t, k_dim=1) for t in (x2, w_gate, w_up)]
    if None in views or kernel.supports(*views, out2) is not None:
        return None
    return kernel, views


def pair_routes(x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, up: torch.Tensor, out2: torch.Tensor, *,
                device=None):
    """The two products' routes: with :data:`PAIR_ROUTE` "small_m", on the small-M kernel in the table's tile
    counts (never its general answers, timed for plain GEMMs: dispatch.tiles_rule_small_m_only); with
    "route", the dispatcher's route for each as given. ``device``: the DeviceFacts decided for (default the
    tensors' device's; precompile passes the GPU it builds for). Raises ValueError for another PAIR_ROUTE."""
    from gemm_ladder.dispatch import decide, tiles_rule_small_m_only

    if PAIR_ROUTE not in PAIR_ROUTES:
        raise ValueError(f"swiglu_small_m.PAIR_ROUTE = {PAIR_ROUTE!r}: one of {', '.join(PAIR_ROUTES)}")
    kw = {"tiles": tiles_rule_small_m_only()} if PAIR_ROUTE == "small_m" else {}
    return (decide(x2, w_up.T, up, given=True, device=device, **kw),
            decide(x2, w_gate.T, out2, given=True, device=device, **kw))


def run(x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, out2: torch.Tensor) -> None:
    """``out2 (M, N) = silu(x2 @ w_gate^T) * (x2 @ w_up^T)`` by two launches, or by one of the gated build with
    :data:`ONE_LAUNCH` on (see the module docstring).

    x2 (M, K), w_gate and w_up (N, K), out2 (M, N) contiguous, one dtype (bf16/fp16), one CUDA device,
    already checked by the caller (api.swiglu_direct: validate.check_swiglu, check_swiglu_layout).
    Raises what dispatch.decide raises when no kernel computes a step (OutsideDomainError)."""
    from gemm_ladder.dispatch.execute import run as run_route

    one = one_launch(x2, w_gate, w_up, out2)
    if one is not None:
        kernel, views = one
        kernel.launch(*views, out2)
        return
    m, n = out2.shape
    up = torch.empty((m, n), dtype=torch.float32, device=out2.device)
    route_up, route_gate = pair_routes(x2, w_gate, w_up, up, out2)
    run_route(route_up, x2, w_up.T, up)
    call = GATED.bind({"up": up}, m, n, out2.device, check_grad=False)
    run_route(route_gate, x2, w_gate.T, out2, epilogue=call)


def explain(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> dict:
    """What ``gemm_ladder.swiglu(x, w_gate, w_up)`` runs and why, as data, without running it.

    CUDA or meta tensors (x (*, K), w_gate and w_up (N, K)). Keys: ``path`` ('small_m_gated', 'small_m_pair' or
    'fused'; 'empty' or 'zeros' where ``swiglu`` launches nothing: an empty output, or K = 0 and silu(0) * 0),
    ``m``, ``n``, ``k``, ``threshold`` (the device's :func:`small_m_max`), ``reason`` (one sentence), ``launches``
    (in order; for the small-M pair each launch's ``gemm_ladder.explain`` of its GEMM as a dict, the epilogue
    named; for the gated build its kernel, bucket and M tiles). Raises
    what ``swiglu`` raises for bad input, in its order: the arguments, then the extents and the layouts of a
    non-empty problem."""
    from gemm_ladder.dispatch import cost_model
    from gemm_ladder.dispatch.explain import explain_route
    from gemm_ladder.dispatch.route import device_facts
    from gemm_ladder.dispatch.validate import MmShape, check_domain, check_swiglu, check_swiglu_layout
    from gemm_ladder.contract import dtype_name
    from gemm_ladder.library.small_m import small_m_kernel

    k, n = check_swiglu(x, w_gate, w_up, device_types=("cuda", "meta"), check_grad=False)
    m = math.prod(x.shape[:-1])
    facts = device_facts(x.device)
    max_m = small_m_max(facts.name)
    if m == 0 or n == 0 or k == 0:  # as swiglu: decided before the extent and layout rules, nothing launched
        what = ("empty", "an empty output: nothing is launched") if m == 0 or n == 0 else \
            ("zeros", "K = 0: the output is silu(0) * 0, zeros written by a fill, no GEMM launched")
        return {"path": what[0], "m": m, "n": n, "k": k, "threshold": max_m, "reason": what[1], "launches": []}
    check_domain(MmShape(m, n, k, x.dtype))
    check_swiglu_layout(x.reshape(m, k), w_gate, w_up, addresses=x.device.type != "meta")
    clusters = facts.clusters
    pair = takes(m, n, k, clusters, max_m)
    out = {"path": "small_m_pair" if pair else "fused", "m": m, "n": n, "k": k, "threshold": max_m,
           "fused_wave_fill": fused_wave_fill(m, n, clusters), "reason": reason(m, n, clusters, max_m), "launches": []}
    if not pair:
        out["launches"] = [f"sm90_swiglu ({m} x {n} x {k}): one kernel, x read once for both products"]
        return out
    x2 = x.reshape(m, k)
    out2 = torch.empty((m, n), dtype=x.dtype, device=x.device)
    one = one_launch(x2, w_gate, w_up, out2)
    if one is not None:
        from gemm_ladder.library.swiglu_small_m import SWIGLU_SMALL_M

        kernel = one[0]
        config = kernel.config(dtype_name(x.dtype))
        tiles = math.ceil(m / kernel.bn)
        out["path"] = "small_m_gated"
        out["reason"] = (out["reason"].split(": two GEMMs on the small-M route")[0]
                         + f": in one launch (dispatch/swiglu_small_m.ONE_LAUNCH, M <= {ONE_LAUNCH_MAX_M}): the small-M "
                         "kernel's gated build, both weights' rows of the same output columns in each stage, "
                         "silu(gate) * up in registers")
        out["launches"].append({"step": "out = silu(x @ w_gate^T) * (x @ w_up^T)", "kind": "small_m_gated",
                                "kernel": SWIGLU_SMALL_M.describe(config), "m_tiles": tiles,
                                "split": small_m_kernel(kernel.bn).split_text(),
                                "launches": [f"{config.family} ({m} x {n} x {k}): BN {kernel.bn}, {tiles} M tile(s)"]})
        return out
    up = torch.empty((m, n), dtype=torch.float32, device=x.device)
    routes = pair_routes(x2, w_gate, w_up, up, out2)
    for what, route, out_dtype in (("up = x @ w_up^T into float32", routes[0], torch.float32),
                                   (f"out = silu(x @ w_gate^T) * up, epilogue {GATED.name!r}", routes[1], x.dtype)):
        e = explain_route(route, m, n, k, out_dtype, cost_model(route.device)).to_dict()
        e.pop("plan", None)  # the designer's plan is gemm_ladder.explain's; here the route suffices
        out["launches"].append({"step": what, "kind": e["kind"], "kernel": e["kernel"], "split": e["split"],
                                "launches": e["launches"], "explain": e})
    return out


__all__ = ["FUSED_FILL_MIN_M", "FUSED_MIN_WAVE_FILL", "GATED", "ONE_LAUNCH", "ONE_LAUNCH_MAX_M",
           "PAIR_ROUTE", "PAIR_ROUTES", "PAIR_SMALL_M_MAX_BY_DEVICE", "SMALL_M_MAX", "SMALL_M_MAX_BY_DEVICE", "explain", "fused_wave_fill", "one_launch", "one_launch_bn", "pair_routes", "reason", "run",
           "small_m_max", "takes"]
