"""Autotune: time the cost model's leading general routes on the call's own tensors, keep the fastest.

The cost model (dispatch/heuristic.py) ranks the general kernel's builds (tile width, 64 or 128 rows,
one or two CTAs per cluster, split) by a fit over many shapes; at one shape its choice can be a few
percent off the fastest build (measured on an H100 at fd9e283: GPT-2's c_attn, 1023 x 2304 x 768, ran
14.6 us on the route and 13.3 us on the one-CTA BN 192 build; bench/results/2026-12-05_tiles_forced_register_widths_h100_fd9e283.json).
With autotune on, the first call of a signature (shapes, strides, dtypes, alignment: the dispatcher's
route key) times the model's choice and the candidates it predicts within :data:`MARGIN` of it (at most
:data:`LIMIT` in all), and the signature keeps the fastest: another build only when its median is more
than :data:`TIE` below the model's choice's. Every candidate is one of the library's own builds; nothing
falls back to cuBLAS.

Off by default (a first call costs the timing, set by the budget below: about BUDGET_S of timed calls per
candidate, between MIN_REPEATS and MAX_REPEATS calls each, plus warm-up; not measured as a whole), plus
compiling each candidate not yet built, unless ``gemm_ladder.precompile`` ran with the autotune on; and two
processes may choose differently where candidates are within the run's noise, which changes the low bits of a split result).
On with ``GEMM_LADDER_AUTOTUNE=1`` in the environment at import, or ``gemm_ladder.set_autotune(True)``;
``GEMM_LADDER_AUTOTUNE=0`` (or unset) leaves it off, and any other value is refused (:func:`environment_setting`).
A signature is timed once per process: its tuned route is kept apart from the route cache's LRU
(dispatch.TUNED_CACHE_SIZE signatures, then that store starts over), so its build does not change when the
LRU drops and re-decides it. Each distinct signature is timed: a call whose M changes from call to call
(serving prompts of any length) pays a timing at each new M, so there warm up the shapes you serve first
or leave the autotune off. Timings are serialised (one signature at a time, a lock), so two threads never
time at once.

What is timed: the plain product ``a @ b`` into a scratch output laid out as the call's (same strides and
base residue mod 16), through the same Python launch path for every candidate, interleaved in rounds
(:func:`gemm_ladder.timing.time_fns`, launch latency hidden, L2 not flushed: a flush buffer is twice
the L2 and would be allocated in the user's process). A timing that fails (out of memory for the
scratch, say) leaves the signature on the model's choice (``explain`` says why; timed again only once the
route cache drops it). A fused epilogue is not in the timing; a call
a ping-pong rule takes (dispatch/pingpong.py: the 128-row rule any call, plain ones too; the 64-row rule a fused GELU)
keeps that rule's choice, untimed.
Not tuned (the model's choice runs, and is not kept as the signature's tuned route): meta tensors
(nothing to time), a stream capturing a CUDA graph (no synchronisation allowed), ``explain`` (which
launches nothing: it lists the candidates the first call will time), the small-M kernel's routes (its
own table is measured: dispatch/small_m_tiles.py), the quantized (e4m3) output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch

#: Environment variable read at import: "1" turns autotune on, "0" (or unset, or empty) leaves it off.
ENV = "GEMM_LADDER_AUTOTUNE"
#: The values :data:`ENV` takes (surrounding blanks ignored), and the setting each gives.
ENV_VALUES = {"1": True, "0": False, "": False}
#: Candidates timed per signature, the model's choice included.
LIMIT = 6
#: Candidates predicted more than this fraction slower than the model's choice are not timed.
MARGIN = 0.30
#: Another candidate replaces the model's choice only when its median is more than this fraction below.
TIE = 0.02
#: time_fns settings: rounds (the first callable rotating), warm-up calls, timed calls per candidate.
ROUNDS, WARMUP, MIN_REPEATS, MAX_REPEATS = 5, 2, 10, 40
#: Seconds of timed calls per candidate (time_fns' budget; MIN_REPEATS and MAX_REPEATS bound it).
BUDGET_S = 0.01


def environment_setting() -> bool:
    """Whether ``GEMM_LADDER_AUTOTUNE`` turns autotune on (:data:`ENV_VALUES`: 1 on; 0, empty or unset off).
    Raises ValueError naming the variable and the values it takes for any other value (``true``, ``yes``: refused,
    never read as off), as a bad ``GEMM_LADDER_COMPILER`` is refused. Read at import (so a bad value stops the
    import of the library), and by the CLI's check of its environment before a command runs."""
    value = os.environ.get(ENV, "0")
    if value.strip() not in ENV_VALUES:
        raise ValueError(f"{ENV}={value!r}: use 1 (autotune on) or 0 (off, the default; unset is off too)")
    return ENV_VALUES[value.strip()]


_state = {"on": environment_setting()}


def enabled() -> bool:
    """Whether autotune is on (see the module docstring)."""
    return _state["on"]


def set_enabled(on: bool) -> bool:
    """Turn autotune on or off; returns the previous setting. The caller forgets the routes decided
    under the other setting (gemm_ladder.set_autotune does: dispatch.clear_cache)."""
    if not isinstance(on, bool):
        raise TypeError(f"autotune: on must be a bool, got {type(on).__name__}")
    prev, _state["on"] = _state["on"], on
    return prev


def label(route) -> str:
    """A general route's build in a few words: rows, width, CTAs per cluster, split, schedule."""
    cfg = route.config
    split = dict(route.options).get("split", "none")
    cta = "1 CTA" if cfg.cluster == 1 else f"{cfg.cluster} CTAs"
    return f"{cfg.tile[0]}x{route.bn} {cta} split {split}" + (" ping-pong" if cfg.pingpong else "")


@dataclass(frozen=True)
class Tuning:
    """What the autotune did for a route.

    ``state``: 'tuned' (timed; ``times_us`` the medians, in ``labels``' order, the model's choice first;
    ``chosen`` the label kept) or 'not tuned' (``why``; ``labels`` the candidates a first call timing them
    would time)."""

    state: str
    labels: tuple[str, ...]
    chosen: str | None = None
    times_us: tuple[float | None, ...] = ()  # None: that candidate raised
    why: str | None = None
    routes: tuple = ()  # the candidate routes, the model's choice first (what precompile builds; what a bench runs)
    #: False where a later call may time them (a capture, explain, the setting changed during the timing):
    #: the route is then kept by neither dispatch.decide's cache nor the call cache, and the compiled host
    #: path runs that signature (capture flag included) through Python from then on.
    kept: bool = True

    def to_json(self) -> dict:
        out = {"state": self.state, "candidates": list(self.labels)}
        if self.times_us:
            out["times_us"] = [None if t is None else round(t, 2) for t in self.times_us]
            out["chosen"] = self.chosen
            out["tie"] = TIE
        if self.why:
            out["why"] = self.why
        return out


def untimed_reason(a: torch.Tensor, *, tune: bool) -> str | None:
    """Why a call on ``a``'s device is not timed now (None: it may be)."""
    if a.device.type != "cuda":
        return f"{a.device.type} tensors: nothing to time"
    if not tune:
        return "explain launches nothing: a first call times these"
    if torch.cuda.is_current_stream_capturing():
        return "a CUDA graph is being captured (no synchronisation): the model's choice runs"
    return None


def scratch_like(t: torch.Tensor) -> torch.Tensor:
    """Uninitialised memory laid out as ``t`` (shape, strides, base address residue mod 16), so a
    route decided for ``t`` runs on it unchanged."""
    e = t.element_size()
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) if t.numel() else 1
    buf = torch.empty(span + 16 // e, dtype=t.dtype, device=t.device)
    shift = ((t.data_ptr() - buf.data_ptr()) % 16) // e
    return torch.as_strided(buf, tuple(t.shape), tuple(t.stride()), shift)


def time_routes(routes: list, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> list[float | None]:
    """Median microseconds of each route computing ``a @ b`` into a scratch output laid out as ``c``,
    interleaved (None for a candidate past the first that raised: it is not chosen)."""
    from gemm_ladder.dispatch.execute import run
    from gemm_ladder.timing import time_fns

    out = scratch_like(c)
    fns, failed = {}, set()
    for i, r in enumerate(routes):
        try:
            run(r, a, b, out)  # builds or loads it first; a failure of the model's own choice propagates
        except Exception:  # noqa: BLE001 - another candidate that cannot run is simply not chosen
            if i == 0:
                raise
            failed.add(i)
            continue
        fns[i] = lambda a_, b_, r=r: run(r, a, b, out)
    t = time_fns({str(i): f for i, f in fns.items()}, a, b, budget_s=BUDGET_S, rounds=ROUNDS, warmup=WARMUP,
                 min_repeats=MIN_REPEATS, max_repeats=MAX_REPEATS, flush_l2=False)
    return [None if i in failed else t[str(i)].median_ms * 1e3 for i in range(len(routes))]


def pick(times_us: list[float | None], tie: float = TIE) -> int:
    """The index kept: the fastest, unless the first (the model's choice) is within ``tie`` of it (its
    time at most (1 + tie) times the fastest's)."""
    timed = [(t, i) for i, t in enumerate(times_us) if t is not None]
    best_t, best_i = min(timed)
    return 0 if times_us[0] is not None and times_us[0] <= best_t * (1 + tie) else best_i


def tune(routes: list, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, timer=None):
    """The fastest of ``routes`` (the model's choice first: route.general_alternatives) on these
    tensors, with its :class:`Tuning`. ``timer(routes, a, b, c)`` (default :func:`time_routes`, looked up
    at the call) gives each one's median microseconds (None: not chosen)."""
    times = (timer or time_routes)(routes, a, b, c)
    if len(times) != len(routes) or times[0] is None:
        raise ValueError(f"autotune: the timer gave {times} for {len(routes)} routes (the first must be timed)")
    i = pick(times)
    labels = tuple(label(r) for r in routes)
    tuning = Tuning("tuned", labels, labels[i], tuple(times), routes=tuple(routes))
    return replace(routes[i], tuning=tuning)


def not_tuned(route, routes: list, why: str, *, kept: bool):
    """``route`` (the model's choice) marked not tuned, with the candidates a tuning call would time;
    ``kept``: whether a cache may keep it (False: a later call may time them)."""
    return replace(route, tuning=Tuning("not tuned", tuple(label(r) for r in routes), why=why, routes=tuple(routes),
                                        kept=kept))


def transient(route) -> bool:
    """Whether ``route`` is the model's choice standing in for a timing a later call may make (no cache
    keeps it)."""
    tuning = getattr(route, "tuning", None)
    return tuning is not None and not tuning.kept


__all__ = ["ENV", "LIMIT", "MARGIN", "TIE", "Tuning", "enabled", "label", "not_tuned", "pick", "scratch_like",
           "set_enabled", "time_routes", "transient", "tune", "untimed_reason"]
