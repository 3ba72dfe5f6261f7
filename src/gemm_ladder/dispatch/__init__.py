"""Dispatch: from (shapes, strides, dtypes) to one kernel configuration, and ``explain`` as data.

Layers (importing downwards only): :mod:`validate` (the input rules), :mod:`heuristic` (the cost
model and its table), :mod:`small_m_tiles` (the small-M kernel's M-tile rule, from the same table),
:mod:`kernels` (the kernels behind one protocol), :mod:`route` (the search and the choice),
:mod:`explain` (the decision as data), :mod:`execute` (running a route).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace

import torch

from gemm_ladder.contract import OutsideDomainError
from gemm_ladder.dispatch import autotune
from gemm_ladder.dispatch.heuristic import CostModel, load_table, table_path_for
from gemm_ladder.dispatch.pingpong import ACTIVATIONS as PINGPONG_ACTIVATIONS
from gemm_ladder.dispatch.pingpong import pingpong_route
from gemm_ladder.dispatch.route import DeviceFacts, Route, choose, device_facts, find_routes, general_alternatives
from gemm_ladder.dispatch.small_m_tiles import TilesRule, load_rule
from gemm_ladder.dispatch.validate import NotSupportedError
from gemm_ladder.library.quantized import QUANT_OUT

#: Routes kept (least recently used dropped first): a model calls a few dozen shapes.
ROUTE_CACHE_SIZE = 256

_routes: OrderedDict = OrderedDict()
_lock = threading.Lock()
_tune_lock = threading.Lock()  # one autotune timing at a time (dispatch/autotune.py)
#: Tuned routes by route key, apart from the route cache's LRU (so a signature's build does not change when
#: its route is dropped and decided again: it is timed once per process); cleared at TUNED_CACHE_SIZE.
TUNED_CACHE_SIZE = 4096
_tuned: dict = {}
_models: dict = {}  # table path -> CostModel
_table_paths: dict = {}  # device name (None: none to ask) -> table path
_tiles: TilesRule | None = None


def cost_model(device: DeviceFacts | None = None) -> CostModel:
    """The package's cost model for ``device``: the table fitted on a GPU of its name where the package has
    one (dispatch/table_<name>.json, heuristic.table_path_for), else dispatch/table.json (also for None and
    for a device only assumed: meta tensors); each device's table found once and each table read once (every
    decide asks: no file is read per call)."""
    name = None if device is None or device.assumed else device.name
    path = _table_paths.get(name)
    if path is None:
        with _lock:
            if name not in _table_paths:
                _table_paths[name] = table_path_for(name)
            path = _table_paths[name]
    model = _models.get(path)
    if model is None:
        with _lock:  # read once: threads deciding at once share one model (its id is in the route key)
            if path not in _models:
                _models[path] = load_table(path)
            model = _models[path]
    return model


def tiles_rule() -> TilesRule:
    """The package's small-M M-tile rule (dispatch/table.json's "small_m" entry), read once."""
    global _tiles
    tiles = _tiles
    if tiles is None:
        with _lock:  # as cost_model
            if _tiles is None:
                _tiles = load_rule()
            tiles = _tiles
    return tiles


def tiles_rule_small_m_only() -> TilesRule:
    """:func:`tiles_rule` with every decision's kernel the small-M one, its tile counts kept
    (TilesRule.small_m_only, made once per rule): swiglu's small-M path (dispatch/swiglu_small_m.py) decides its
    two products with it, since the table's general answers were timed for plain GEMMs, not for a float32
    up product and a gated epilogue (taking them ran Llama-3's swiglu at M = 64 in 93.5 us against the
    small-M kernel's 80.2: bench/results/2026-12-04_shapes_real_5models_bf16_cd0fc03.json and
    ..._dd7709e.json)."""
    return tiles_rule().small_m_only


def _signature(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.data_ptr() % 16)


def decide(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, given: bool, device: DeviceFacts | None = None,
           model: CostModel | None = None, tiles: TilesRule | None = None, activation: str | None = None,
           narrow: bool = False, tune: bool = True) -> Route:
    """The route for ``c = a @ b`` (operands already checked by validate.check_mm; ``c`` the output,
    allocated when not ``given``). CUDA or meta tensors; cached by shapes, strides, dtypes and base
    residues mod 16. ``model``/``tiles``: the cost model and the small-M M-tile rule (default: the
    package's tables, the cost model the one for ``device``: :func:`cost_model`). ``activation``: the
    activation a ``linear`` call fuses (None: none), which may take the general kernel's ping-pong build
    (dispatch/pingpong.py). ``narrow``: the fused epilogue reads a residual or a float32 bias, which narrows a
    quantized (e4m3) output's tiles (route.QUANTIZED_NARROW_MAX_BN).
    With autotune on (dispatch/autotune.py), a general route is the fastest of the model's leading
    candidates timed on these tensors (``route.tuning`` says which and their times); ``tune`` False (what
    ``explain`` passes) times nothing: on CUDA tensors the model's choice comes back, kept by no cache,
    with the candidates a first call would time (on meta tensors, never timed, it is kept).

    Raises NotSupportedError when only float32 output stands in the way, OutsideDomainError naming
    the kernels' refusals when no kernel computes it.
    """
    device = device or device_facts(a.device)
    model = model or cost_model(device)
    tiles = tiles or tiles_rule()
    key = (a.device.type, a.device.index, a.dtype, c.dtype, given, _signature(a), _signature(b), _signature(c),
           device, id(model), id(tiles), activation if activation in PINGPONG_ACTIVATIONS else None,
           narrow and c.dtype == QUANT_OUT, autotune.enabled())
    route = _cached(key)
    if route is not None:
        return route
    routes, unfit = find_routes(a, b, c, given=given, device=device, tiles_rule=tiles, narrow=narrow)
    route = choose(routes, model)
    keep = True
    if route is None:
        reasons = "; ".join(dict.fromkeys(unfit)) or "no kernel fits"
        if c.dtype in (torch.float32, QUANT_OUT):
            name = "float32" if c.dtype == torch.float32 else "quantized e4m3"
            raise NotSupportedError(f"out_dtype={c.dtype}: no library kernel writes a {name} output for "
                                    f"this call yet ({reasons}); use the input dtype")
        raise OutsideDomainError(f"no library kernel computes this call: {reasons}")
    ping = pingpong_route(route, activation)
    if ping is not route:  # a ping-pong rule's build, which the autotune does not time (dispatch/pingpong.py)
        route = ping
    elif autotune.enabled():
        with _tune_lock:  # one timing at a time; a thread that waited finds the route the other kept
            kept = _cached(key)
            if kept is not None:
                return kept
            route, keep = _autotuned(route, routes, model, a, b, c, tune)
            route = replace(route, unfit=tuple(unfit))
            if keep and not autotune.enabled():  # the setting changed while it timed: no cache keeps it
                keep, route = False, replace(route, tuning=replace(route.tuning, kept=False))
            if keep and route.tuning is not None and route.tuning.state == "tuned":
                with _lock:
                    if len(_tuned) >= TUNED_CACHE_SIZE:
                        _tuned.clear()
                    _tuned[key] = route
            return _keep(key, route, keep)
    return _keep(key, replace(route, unfit=tuple(unfit)), keep)


def _cached(key: tuple) -> Route | None:
    """The route kept under ``key``: the route cache's (made most recent), else a tuned one the LRU dropped
    (put back in the route cache); None."""
    with _lock:
        route = _routes.get(key)
        if route is not None:
            _routes.move_to_end(key)
            return route
        route = _tuned.get(key)
    return None if route is None else _keep(key, route, True)


def _keep(key: tuple, route: Route, keep: bool) -> Route:
    """``route``, kept in the route cache under ``key`` when ``keep``."""
    if keep:
        with _lock:
            _routes[key] = route
            while len(_routes) > ROUTE_CACHE_SIZE:
                _routes.popitem(last=False)
    return route


def _autotuned(route: Route, routes: list[Route], model: CostModel, a, b, c, tune: bool) -> tuple[Route, bool]:
    """The autotune's route for a call whose model choice is ``route`` (dispatch/autotune.py), and whether
    the signature keeps it (not when the call could have been timed but was not: a capture, explain)."""
    if route.kind != "general" or route.small_m_table is not None or c.dtype == QUANT_OUT:
        return route, True
    alternatives = general_alternatives(routes, model, margin=autotune.MARGIN, limit=autotune.LIMIT)
    if len(alternatives) < 2:
        return route, True
    why = autotune.untimed_reason(a, tune=tune)
    if why is None:
        try:
            return autotune.tune(alternatives, a, b, c), True
        except Exception as exc:  # noqa: BLE001 - the call still runs, on the model's choice
            # Kept (timed again only once the LRU drops it), so a timing that fails for want of memory is
            # not tried at every call.
            why = f"the timing failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            return autotune.not_tuned(route, alternatives, why, kept=True), True
    transient = a.device.type == "cuda"  # meta tensors are never timed: their answer is final
    return autotune.not_tuned(route, alternatives, why, kept=not transient), not transient


def set_autotune(on: bool) -> bool:
    """Turn the autotune (dispatch/autotune.py) on or off and forget every route decided so far (they
    were decided under the other setting); returns the previous setting. Raises TypeError for a non-bool."""
    prev = autotune.set_enabled(on)
    clear_cache()
    return prev


def clear_cache() -> None:
    """Forget every route, the tables read, the API's per-call cache and the compiled host path's launch
    templates, which keep their routes (after a table is regenerated, say: the next call decides again)."""
    from gemm_ladder.dispatch.calls import CALLS

    global _tiles
    with _lock:
        _routes.clear()
        _tuned.clear()
        _models.clear()
        _table_paths.clear()
        _tiles = None
    CALLS.clear()
    from gemm_ladder.host import loaded

    module = loaded()
    if module is not None:
        module.clear()  # the compiled host path's templates hold routes decided from the old tables


__all__ = ["CostModel", "DeviceFacts", "Route", "TilesRule", "clear_cache", "cost_model", "decide", "set_autotune",
           "tiles_rule", "tiles_rule_small_m_only"]
