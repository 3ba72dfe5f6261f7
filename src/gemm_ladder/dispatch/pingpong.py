"""When a call runs a ping-pong build of the general kernel instead of the cooperative route.

The ping-pong build (library_gemm(..., bm=64, pingpong=True): two consumer warpgroups take 64-row
tiles in turn, one running its epilogue and stores while the other computes) hides a heavy epilogue
behind the other consumer's main loop; its 64 x BN tiles load more operand bytes per flop than the
cooperative 128 x BN tile, which costs where K is long. Measured on the H200 (bench/experiments/pingpong.py,
every configuration forced, two runs: bench/results/2026-12-04_pingpong_a9771d6.json, ..._f3ae3c5.json;
docs/library.md has the table): with a fused GELU and K <= 1024 it beat the best cooperative build by
0-6% (16384 x 4096 x 1024 bias + GELU 258-260 vs 263-265 us, 8192 x 3072 x 768 72 vs 74, 1023 x 3072 x
768 15.0 vs 15.9, 1576 x 4096 x 1024 36.6 vs 38.0; 12608 x 4096 x 1024 a tie, 200 vs 196-203); without
an activation, with ReLU or SiLU (cheap enough to leave exposed), or at K >= 3072 it lost or tied
(12608 x 3072 x 1024 plain 126 vs 120; ReLU 179 vs 168; 4096^3 215 vs 190). One CTA per cluster won or
tied the pair on the GELU shapes; BN 256 and 192 won where each fills the SMs' waves better.

The 128-row build (library_gemm(..., bm=128, pingpong=True): each consumer takes a whole 128 x 192 tile, in two
64-row fragments, while the other stores) holds the 128-row tile's operand reuse and still hides one tile's
epilogue behind the other's main loop. Measured on an H100 (bench/experiments/pingpong.py --set mid, every build
forced beside the route and cuBLAS, interleaved: bench/results/2026-12-08_pingpong_mid_h100_9c2285a.json), with
N a multiple of 192, K <= 1024 and at least 1.5 of its tiles per SM it beat the route with or without an
epilogue: 12608 x 3072 x 1024 plain 109.6 vs 118.0 us (cuBLAS 116.1), 8192 x 3072 x 768 bias + GELU (tanh) 64.1
vs 74.7 (the 64-row ping-pong; eager 99.8), 1576 x 3072 x 1024 23.2 vs 25.4 (with a bias 24.4 vs 27.4). It lost
where a CTA gets about one tile (128 tiles: 1023 x 3072 x 768 + GELU 16.5 vs 15.3, 4096 x 768 x 768 + bias 15.2
vs 14.3), where N is not a multiple of 192 at two waves (1576 x 4096 x 1024 + GELU 43.3 vs 38.3), and at K >=
3072 (1000 x 4608 x 3584 62.4 vs 61.1; 12608 x 1024 x 4096 204.7 vs 141.5). Not measured: an epilogue with a
residual (its build spills 152 bytes there with bias + GELU (tanh), ptxas; the cooperative 128 x 192 build's 64-84),
which the rule takes all the same, since the route is decided before the epilogue is known.

The cost model (dispatch/heuristic.py) has no ping-pong samples yet, so these are rules, taken from the
measurements above and stated in ``explain``: a route keeps its choice unless every condition of one holds,
the 128-row rule's tried first (where both hold it was the faster: 64.1 vs 74.7 us above).
"""

from __future__ import annotations

from dataclasses import replace

from gemm_ladder.design.problem import ceil_div
from gemm_ladder.library.kernel import STORE_TMA

#: The activations measured faster with ping-pong (bench/results above); another keeps the route.
ACTIVATIONS = ("gelu", "gelu_tanh")
#: The fewest rows the rule takes it at: the smallest M measured (1023; below, the small-M kernel's table
#: decides among the kernels it timed, and no ping-pong shape was timed there).
MIN_M = 1000
#: The longest K (elements) for which the rule takes ping-pong: the measured wins were at K 768 and 1024.
MAX_K = 1024
#: Ping-pong tile widths (BN 192: a K-major B only) and each one's tile throughput relative to BN 256's,
#: measured where both fill their waves (16384 x 4096 x 1024: 260 vs 284 us; 12608 x 4096 x 1024: 200 vs
#: 218): the width taken is the one whose wave fill x rate is highest.
WIDTHS = (256, 192)
WIDTH_RATE = {256: 1.0, 192: 0.92}
#: Rows of a ping-pong tile, and the CTAs per cluster the rule launches.
TILE_M, CLUSTER = 64, 1
#: The 128-row rule's tile (rows, columns): any epilogue, :data:`WIDE_MIN_K` <= K <= :data:`WIDE_MAX_K`, M >=
#: :data:`WIDE_MIN_M`, N a multiple of its width, at least :data:`WIDE_MIN_TILES_PER_SM` tiles per SM (the
#: measurements in the module docstring: its wins were at K 768-1024 and M 1576-12608; one CTA per cluster).
WIDE_TILE = (128, 192)
WIDE_MIN_K, WIDE_MAX_K = 768, 1024
WIDE_MIN_M = 1576
WIDE_MIN_TILES_PER_SM = 1.5


def tiles(m: int, n: int, bn: int) -> int:
    """The 64 x ``bn`` ping-pong tiles of an M x N output."""
    return ceil_div(m, TILE_M) * ceil_div(n, bn)


def wave_fill(m: int, n: int, bn: int, ctas: int) -> float:
    """The fraction of the waves' tile slots filled: tiles / (ceil(tiles / ctas) x ctas), in (0, 1]."""
    t = tiles(m, n, bn)
    return t / (ceil_div(t, ctas) * ctas)


def pingpong_route(route, activation: str | None):
    """``route`` with a ping-pong build in place of the cooperative one when a rule holds (module
    docstring), else ``route`` unchanged. Both rules take only a route that is a cooperative TMA-store build of
    the general kernel (128 rows, or 64 rows with one consumer), writing the output as it is (not transposed: the
    swapped epilogue is not measured) and not the small-M table's pick. The 128-row rule (:func:`wide_route`),
    tried first: A and B K-major (the builds measured), :data:`WIDE_MIN_K` <= K <= :data:`WIDE_MAX_K`, M >=
    :data:`WIDE_MIN_M`, N a multiple of 192, at least
    :data:`WIDE_MIN_TILES_PER_SM` of its 128 x 192 tiles per SM; any epilogue. The 64-row rule: an activation of
    :data:`ACTIVATIONS` is fused; M >= :data:`MIN_M`; K <= :data:`MAX_K`; at least one 64 x BN tile per SM; the
    width is the one of :data:`WIDTHS` built for B's major whose wave fill (:func:`wave_fill`) times its rate
    (:data:`WIDTH_RATE`) is highest. Operand and output paths are kept, so the same copies, if any, run. The
    result's ``consumer_schedule`` says why."""
    from gemm_ladder.dispatch import kernels as K

    if route is None or route.kind != "general":
        return route
    cfg = route.config
    if cfg.pingpong or cfg.store != STORE_TMA:
        return route
    if route.small_m_table is not None or route.c_path.transposed:  # measured elsewhere; a swapped epilogue
        return route
    wide = wide_route(route)
    if wide is not None:
        return wide
    if activation not in ACTIVATIONS or route.k > MAX_K or route.m < MIN_M:
        return route
    sms = route.device.sms
    widths = [bn for bn in WIDTHS if K.general_built(cfg.b_major, bn)]
    best = max(widths, key=lambda bn: (wave_fill(route.m, route.n, bn, sms) * WIDTH_RATE[bn], bn))
    count = tiles(route.m, route.n, best)
    if count < sms:
        return route
    config = K.general(cfg.a_major, cfg.b_major, best, cfg.dtype, CLUSTER, TILE_M, pingpong=True)
    why = (f"ping-pong (a fused {activation}, K = {route.k} <= {MAX_K}, "
           f"{count} tiles of {TILE_M} x {best} for {sms} SMs): "
           "two consumers take the tiles in turn, one's epilogue hidden behind the other's main loop "
           "(measured faster than the cooperative route there: dispatch/pingpong.py)")
    return _taken(route, config, best, why)


def wide_route(route):
    """``route`` (a cooperative TMA-store general route, checked by :func:`pingpong_route`) with the 128-row
    ping-pong build at :data:`WIDE_TILE` when the 128-row rule holds, else None."""
    bm, bn = WIDE_TILE
    cfg, sms = route.config, route.device.sms
    if (cfg.a_major, cfg.b_major) != ("k", "k") or not WIDE_MIN_K <= route.k <= WIDE_MAX_K or route.n % bn:
        return None
    if route.m < WIDE_MIN_M:
        return None
    count = ceil_div(route.m, bm) * (route.n // bn)
    if count < WIDE_MIN_TILES_PER_SM * sms:
        return None
    why = (f"ping-pong at {bm} x {bn} (K = {route.k} in [{WIDE_MIN_K}, {WIDE_MAX_K}], M = {route.m} >= {WIDE_MIN_M}, "
           f"N a multiple of {bn}, {count} tiles for "
           f"{sms} SMs, at least {WIDE_MIN_TILES_PER_SM} each): two consumers take whole tiles in turn, one's "
           "epilogue and store hidden behind the other's main loop (measured faster than the cooperative route "
           "there: dispatch/pingpong.py)")
    return _taken(route, wide_config(cfg.dtype), bn, why)


def wide_config(dtype: str):
    """The 128-row rule's build for ``dtype``: the general kernel's 128-row ping-pong build at :data:`WIDE_TILE`, A
    and B K-major, one CTA per cluster (what the rule routes to, and what precompile and the route search list)."""
    from gemm_ladder.dispatch import kernels as K

    bm, bn = WIDE_TILE
    return K.general("k", "k", bn, dtype, CLUSTER, bm, pingpong=True)


def _taken(route, config, bn: int, why: str):
    """``route`` running the ping-pong build ``config`` (tile width ``bn``), unsplit, ``why`` its consumer_schedule."""
    options = tuple((k, v) for k, v in route.options if k != "split") + (("split", "none"),)
    # The cost model's candidates ranked cooperative builds: kept for explain's record, not as the choice
    # (explain's grid and the plan are the ping-pong build's).
    return replace(route, config=config, bn=bn, options=options, consumer_schedule=why)


__all__ = ["ACTIVATIONS", "CLUSTER", "MAX_K", "MIN_M", "TILE_M", "WIDE_MAX_K", "WIDE_MIN_K", "WIDE_MIN_M",
           "WIDE_MIN_TILES_PER_SM", "WIDE_TILE",
           "WIDTHS", "WIDTH_RATE", "pingpong_route", "tiles", "wave_fill", "wide_config", "wide_route"]
