"""The dispatcher's autotune (dispatch/autotune.py) without a GPU: which candidates it would time, the
rule that keeps one, the route cache under it, explain's report, and the scratch output's layout.
The timing itself runs on the GPU (tests/test_autotune_gpu.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.dispatch import autotune
from gemm_ladder.dispatch.route import ASSUMED_DEVICE, find_routes, general_alternatives

#: Layer shapes (M, N, K) where the model's leading candidates differ in width, rows and cluster size.
SHAPES = [(1023, 2304, 768), (1023, 768, 3072), (8192, 768, 3072), (12608, 1024, 4096), (1000, 4608, 3584)]


def meta(m, n, k, dtype=torch.bfloat16):
    a = torch.empty(m, k, dtype=dtype, device="meta")
    w = torch.empty(n, k, dtype=dtype, device="meta")
    return a, w.T, torch.empty(m, n, dtype=dtype, device="meta")


@pytest.fixture
def autotune_on():
    prev = dispatch.set_autotune(True)
    yield
    dispatch.set_autotune(prev)


def alternatives(m, n, k, margin=autotune.MARGIN, limit=autotune.LIMIT):
    a, b, c = meta(m, n, k)
    routes, _ = find_routes(a, b, c, given=False, device=ASSUMED_DEVICE, tiles_rule=dispatch.tiles_rule())
    return general_alternatives(routes, dispatch.cost_model(), margin=margin, limit=limit)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_alternatives_start_with_the_models_choice(m, n, k):
    a, b, c = meta(m, n, k)
    chosen = dispatch.decide(a, b, c, given=False, tune=False)
    alts = alternatives(m, n, k)
    assert alts[0].config == chosen.config and dict(alts[0].options)["split"] == dict(chosen.options)["split"]
    assert 2 <= len(alts) <= autotune.LIMIT
    best = alts[0].candidates[0].predicted_us
    seen = set()
    for r in alts:
        cand = r.candidates[0]  # each route's own candidate first: explain's grid reads it
        assert cand.work.split == dict(r.options)["split"] and cand.work.bn == r.bn
        assert cand.predicted_us <= best * (1 + autotune.MARGIN) + 1e-9
        w = cand.work
        work = (r.config, w.units, w.grid_clusters, w.whole_iters, w.split_iters, w.contributors)
        assert work not in seen, "a split that launches the same work as another is timed once"
        seen.add(work)
    assert sorted(c.predicted_us for c in alts[0].candidates) == [c.predicted_us for c in alts[0].candidates]


def test_alternatives_keep_to_margin_and_limit():
    assert len(alternatives(8192, 768, 3072, limit=3)) == 3
    tight = alternatives(12608, 1024, 4096, margin=0.0)
    assert all(r.candidates[0].predicted_us == tight[0].candidates[0].predicted_us for r in tight)


def test_pick_keeps_the_models_choice_within_the_tie():
    assert autotune.pick([10.0, 9.9, 11.0]) == 0          # 1% faster: within TIE
    assert autotune.pick([10.0, 9.5, 9.7]) == 1           # 5% faster
    assert autotune.pick([10.0, None, 9.0]) == 2          # a candidate that raised is never kept
    assert autotune.pick([10.0, 9.79], tie=0.02) == 1     # just past the tie
    assert autotune.pick([10.0, 9.81], tie=0.02) == 0


def test_tune_keeps_the_fastest_and_says_so():
    alts = alternatives(1023, 2304, 768)
    times = [20.0] * len(alts)
    times[2] = 15.0
    r = autotune.tune(alts, None, None, None, timer=lambda routes, a, b, c: list(times))
    assert r.config == alts[2].config and r.options == alts[2].options
    t = r.tuning.to_json()
    assert t["state"] == "tuned" and t["chosen"] == autotune.label(alts[2]) and t["times_us"][2] == 15.0
    assert t["candidates"] == [autotune.label(x) for x in alts]
    with pytest.raises(ValueError, match="first must be timed"):
        autotune.tune(alts, None, None, None, timer=lambda *_: [None] * len(alts))
    with pytest.raises(ValueError, match="the timer gave"):
        autotune.tune(alts, None, None, None, timer=lambda *_: [1.0])


def test_decide_on_meta_names_the_candidates_and_keeps_the_choice(autotune_on):
    a, b, c = meta(1023, 2304, 768)
    r = dispatch.decide(a, b, c, given=False)
    assert r.tuning.state == "not tuned" and "meta" in r.tuning.why
    assert r.tuning.labels == tuple(autotune.label(x) for x in alternatives(1023, 2304, 768))
    assert dispatch.decide(a, b, c, given=False) is r  # nothing to time on meta: the route is kept
    e = gemm_ladder.explain(torch.empty(1023, 768, dtype=torch.bfloat16, device="meta"),
                            torch.empty(2304, 768, dtype=torch.bfloat16, device="meta").T)
    assert e.heuristic["autotune"]["state"] == "not tuned"
    assert "autotune: not tuned" in str(e)


def test_decide_times_once_per_signature(autotune_on, monkeypatch):
    calls = []

    def fake_timer(routes, a, b, c):
        calls.append(len(routes))
        return [30.0] + [10.0 + i for i in range(len(routes) - 1)]

    monkeypatch.setattr(autotune, "untimed_reason", lambda a, *, tune: None if tune else "explain")
    monkeypatch.setattr(autotune, "time_routes", fake_timer)
    a, b, c = meta(8192, 768, 3072)
    r = dispatch.decide(a, b, c, given=False)
    alts = alternatives(8192, 768, 3072)
    assert calls == [len(alts)] and r.config == alts[1].config and r.tuning.chosen == autotune.label(alts[1])
    assert dispatch.decide(a, b, c, given=False) is r and calls == [len(alts)]  # kept: timed once
    e = gemm_ladder.explain(torch.empty(8192, 3072, dtype=torch.bfloat16, device="meta"),
                            torch.empty(768, 3072, dtype=torch.bfloat16, device="meta").T)
    assert e.heuristic["autotune"]["state"] == "tuned" and "kept " + autotune.label(alts[1]) in str(e)
    assert e.split == dict(alts[1].options)["split"]


def test_a_call_not_timed_now_is_not_kept(autotune_on, monkeypatch):
    """A capture or explain on CUDA tensors gets the model's choice, not kept: a later call times."""
    a, b, c = meta(1023, 768, 3072)
    routes, _ = find_routes(a, b, c, given=False, device=ASSUMED_DEVICE, tiles_rule=dispatch.tiles_rule())
    chosen = dispatch.route.choose(routes, dispatch.cost_model())
    monkeypatch.setattr(autotune, "untimed_reason", lambda a, *, tune: "a CUDA graph is being captured")
    cuda_a = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    r, keep = dispatch._autotuned(chosen, routes, dispatch.cost_model(), cuda_a, b, c, True)
    assert not keep and r.config == chosen.config and r.tuning.state == "not tuned"
    assert len(r.tuning.routes) == len(r.tuning.labels) >= 2
    assert autotune.transient(r) and not r.tuning.kept
    # ... and neither the call cache nor its fast keys keep a call of it (a later call may time it)
    from gemm_ladder.dispatch.calls import CallCache, make_call

    cache = CallCache()
    call = make_call("general", (1023, 768), torch.bfloat16, 1023, 768, 3072, route=r)
    assert cache.put(("k",), call) is call and cache.get(("k",)) is None and len(cache) == 0
    cache.put_fast(("f",), call)
    assert not cache.fast
    kept = make_call("general", (1023, 768), torch.bfloat16, 1023, 768, 3072, route=chosen)
    cache.put(("k",), kept)
    assert cache.get(("k",)) is kept


def test_a_failed_timing_leaves_the_models_choice_kept(autotune_on, monkeypatch):
    def broken(routes, a, b, c):
        raise torch.OutOfMemoryError("CUDA out of memory (the scratch)")

    monkeypatch.setattr(autotune, "untimed_reason", lambda a, *, tune: None)
    monkeypatch.setattr(autotune, "time_routes", broken)
    a, b, c = meta(1023, 768, 3072)
    routes, _ = find_routes(a, b, c, given=False, device=ASSUMED_DEVICE, tiles_rule=dispatch.tiles_rule())
    chosen = dispatch.route.choose(routes, dispatch.cost_model())
    cuda_a = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    r, keep = dispatch._autotuned(chosen, routes, dispatch.cost_model(), cuda_a, b, c, True)
    # kept: not timed again at every call (an out-of-memory would repeat), until the LRU drops it
    assert keep and r.tuning.kept and r.config == chosen.config and "timing failed (OutOfMemoryError" in r.tuning.why


def test_two_threads_time_a_signature_once(autotune_on, monkeypatch):
    import threading
    import time

    calls = []

    def slow_timer(routes, a, b, c):
        calls.append(threading.get_ident())
        time.sleep(0.2)
        return [10.0] * len(routes)

    monkeypatch.setattr(autotune, "untimed_reason", lambda a, *, tune: None)
    monkeypatch.setattr(autotune, "time_routes", slow_timer)
    a, b, c = meta(12608, 1024, 4096)
    out = []
    threads = [threading.Thread(target=lambda: out.append(dispatch.decide(a, b, c, given=False))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(out) == 3 and all(r is out[0] for r in out)


def test_a_setting_changed_during_a_timing_keeps_nothing(autotune_on, monkeypatch):
    def switching_timer(routes, a, b, c):
        autotune.set_enabled(False)  # as set_autotune(False) from another thread would
        return [10.0] * len(routes)

    monkeypatch.setattr(autotune, "untimed_reason", lambda a, *, tune: None)
    monkeypatch.setattr(autotune, "time_routes", switching_timer)
    a, b, c = meta(1023, 2304, 768)
    r = dispatch.decide(a, b, c, given=False)
    assert r.tuning.state == "tuned" and not r.tuning.kept  # nor will the call cache keep it
    from gemm_ladder.dispatch.calls import CallCache, make_call

    cache = CallCache()
    cache.put(("k",), make_call("general", (1023, 2304), torch.bfloat16, 1023, 2304, 768, route=r))
    assert len(cache) == 0
    autotune.set_enabled(True)
    assert dispatch.decide(a, b, c, given=False) is not r  # not kept: decided again


def test_small_m_and_quantized_routes_are_not_tuned(autotune_on):
    a, b, c = meta(16, 4096, 4096)
    r = dispatch.decide(a, b, c, given=False)
    assert r.kind == "small_m" and r.tuning is None


def test_set_autotune_clears_routes_and_refuses_non_bools():
    from gemm_ladder.dispatch.calls import CALLS

    a, b, c = meta(1023, 2304, 768)
    before = dispatch.decide(a, b, c, given=False)
    gemm_ladder.explain(torch.empty(1023, 768, dtype=torch.bfloat16, device="meta"),
                        torch.empty(2304, 768, dtype=torch.bfloat16, device="meta").T)
    CALLS.put(("a signature",), SimpleNamespace(route=before))
    prev = dispatch.set_autotune(True)
    try:
        assert prev is False and len(CALLS) == 0 and not dispatch._routes and not dispatch._tuned  # all forgotten
        assert dispatch.decide(a, b, c, given=False) is not before
        with pytest.raises(TypeError, match="bool"):
            dispatch.set_autotune(1)
        assert gemm_ladder.set_autotune is dispatch.set_autotune
    finally:
        dispatch.set_autotune(False)
    assert dispatch.decide(a, b, c, given=False).tuning is None


def test_the_environment_turns_it_on():
    code = "from gemm_ladder.dispatch import autotune; print(autotune.enabled())"
    for value, expect in (("1", "True"), ("0", "False"), ("", "False")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, autotune.ENV: value})
        assert out.stdout.strip() == expect


@pytest.mark.parametrize("value", ["true", "yes", "on", "2", "01"])
def test_the_environment_refuses_a_value_it_does_not_take(value, monkeypatch):
    """GEMM_LADDER_AUTOTUNE takes 1 (on) or 0 (off; so do unset and empty): anything else is refused, naming the
    variable and the values (``true`` once meant off, silently), at import and where the CLI checks it."""
    monkeypatch.setenv(autotune.ENV, value)
    with pytest.raises(ValueError, match=rf"GEMM_LADDER_AUTOTUNE='{value}': use 1 \(autotune on\) or 0"):
        autotune.environment_setting()
    code = "import torch, gemm_ladder.dispatch"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, autotune.ENV: value})
    assert out.returncode != 0 and f"ValueError: GEMM_LADDER_AUTOTUNE='{value}'" in out.stderr, out.stderr
    for ok, on in (("1", True), (" 1 ", True), ("0", False), ("", False)):
        monkeypatch.setenv(autotune.ENV, ok)
        assert autotune.environment_setting() is on


@pytest.mark.parametrize("offset,stride", [(0, None), (3, None), (5, 1030), (1, (1, 1021))])
def test_scratch_keeps_layout_and_residue(offset, stride):
    base = torch.empty(4096 * 1100, dtype=torch.bfloat16)
    if isinstance(stride, tuple):  # column-major
        t = torch.as_strided(base, (1000, 700), stride, offset)
    else:
        t = torch.as_strided(base, (1000, 700), (stride or 700, 1), offset)
    s = autotune.scratch_like(t)
    assert s.shape == t.shape and s.stride() == t.stride() and s.dtype == t.dtype
    assert s.data_ptr() % 16 == t.data_ptr() % 16
    assert s.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    s.fill_(1)  # every element inside its own storage


def test_precompile_builds_every_candidate(autotune_on):
    from gemm_ladder.dispatch.precompile import route_builds

    a, b, c = meta(1023, 2304, 768)
    r = dispatch.decide(a, b, c, given=False)
    labels = [x.label for x in route_builds(r, "bf16")]
    names = {alt.kernel.name for alt in r.tuning.routes}
    assert len(names) >= 2 and all(any(label.startswith(n + " ") for label in labels) for n in names)
    with_epilogue = route_builds(r, "bf16", epilogue_source="// gelu", epilogue_name="gelu")
    assert len(with_epilogue) == 1 + 2 * (len({alt.config for alt in r.tuning.routes}) - 1)



def test_a_tuned_route_outlives_the_route_caches_lru(autotune_on, monkeypatch):
    """Dropped from the LRU, a tuned signature is not timed again (its build cannot change mid-run)."""
    calls = []

    def fake_timer(routes, a, b, c):
        calls.append(1)
        return [30.0] + [10.0 + i for i in range(len(routes) - 1)]

    monkeypatch.setattr(autotune, "untimed_reason", lambda a, *, tune: None)
    monkeypatch.setattr(autotune, "time_routes", fake_timer)
    a, b, c = meta(8192, 768, 3072)
    first = dispatch.decide(a, b, c, given=False)
    dispatch._routes.clear()  # as the LRU would, past ROUTE_CACHE_SIZE other signatures
    again = dispatch.decide(a, b, c, given=False)
    assert calls == [1] and again is first
