"""The dispatcher's autotune (dispatch/autotune.py) on the GPU: every candidate it may keep computes the
right product (the correctness gate: fresh operands, a poisoned output, float64 reference), the first call
times them and the signature keeps one (``explain`` says which, with the times), later calls launch it
bitwise repeatably, an output laid out oddly (an offset base, a padded pitch) is tuned on a scratch
laid out the same, and a CUDA-graph capture runs the model's choice without timing.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_autotune_gpu.py``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.dispatch import autotune
from gemm_ladder.dispatch.calls import CALLS, linear_key
from gemm_ladder.dispatch.execute import run
from gemm_ladder.dispatch.route import device_facts, find_routes, general_alternatives
from gemm_ladder.gates.correctness import check_correctness

pytestmark = pytest.mark.gpu

#: (M, N, K): GPT-2's c_attn and c_proj at ~1000 rows, c_proj at 8192 rows, a tail in every extent.
SHAPES = [(1023, 2304, 768), (1023, 768, 3072), (8192, 768, 3072), (1000, 520, 1000)]


def alternatives(m, n, k, dtype=torch.bfloat16):
    a = torch.empty(m, k, dtype=dtype, device="cuda")
    w = torch.empty(n, k, dtype=dtype, device="cuda")
    c = torch.empty(m, n, dtype=dtype, device="cuda")
    routes, _ = find_routes(a, w.T, c, given=False, device=device_facts(a.device), tiles_rule=dispatch.tiles_rule())
    return general_alternatives(routes, dispatch.cost_model(device_facts(a.device)), margin=autotune.MARGIN,
                                limit=autotune.LIMIT)


@pytest.fixture(scope="module", autouse=True)
def _built_in_parallel():
    """Every candidate's build at once (compiler processes in threads), not one by one at first use."""
    configs = {r.config: r for m, n, k in SHAPES for r in alternatives(m, n, k)}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda r: r.family.build(r.config), configs.values()))


@pytest.fixture
def autotune_on():
    prev = dispatch.set_autotune(True)
    yield
    dispatch.set_autotune(prev)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_every_candidate_is_correct(m, n, k):
    """Whichever the timing keeps, it is right: each candidate route through the correctness gate."""
    alts = alternatives(m, n, k)
    assert len(alts) >= 2
    for r in alts:
        def fn(a, b, r=r):
            c = torch.full((a.shape[0], b.shape[0]), float("nan"), dtype=a.dtype, device=a.device)
            run(r, a, b.T, c)
            return c
        result = check_correctness(fn, m, n, k, "bf16", device="cuda")
        assert result.status == "pass", (autotune.label(r), result.message)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_first_call_times_and_keeps_one(autotune_on, m, n, k):
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = torch.nn.Parameter(torch.randn(n, k, device="cuda").to(torch.bfloat16))
    e = gemm_ladder.explain(x, w.T)
    assert e.heuristic["autotune"]["state"] == "not tuned"  # explain launches nothing
    first = gemm_ladder.linear(x, w)
    e = gemm_ladder.explain(x, w.T)
    t = e.heuristic["autotune"]
    assert t["state"] == "tuned" and t["chosen"] in t["candidates"]
    assert all(us is None or us > 0 for us in t["times_us"]) and t["times_us"][0] is not None
    ref = (x.double() @ w.detach().double().T)
    err = ((first.double() - ref).norm() / ref.norm()).item()
    assert err < 2 ** -7, err
    for _ in range(3):
        again = gemm_ladder.linear(x, w)
        assert torch.equal(again, first), "a tuned signature launches the same build every call"


def test_odd_output_layout_is_tuned_on_a_matching_scratch(autotune_on):
    """out= at a base 2 bytes past a 16-byte boundary and a padded pitch: poisoned, fully written, and
    nothing outside the view touched (the timing wrote a scratch of that layout, not ``out``)."""
    m, n, k = 1023, 768, 3072
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    buf = torch.full((m * (n + 9) + 1,), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = torch.as_strided(buf, (m, n), (n + 9, 1), 1)
    gemm_ladder.mm(a, b, out=out)
    ref = a.double() @ b.double()
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 2 ** -7
    mask = torch.ones_like(buf, dtype=torch.bool)
    torch.as_strided(mask, (m, n), (n + 9, 1), 1).fill_(False)
    assert torch.isnan(buf[mask]).all(), "nothing outside the output view is written"


def test_capture_runs_the_models_choice_untimed(autotune_on):
    m, n, k = 1023, 2304, 768
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    model_choice = alternatives(m, n, k)[0]
    run(model_choice, x, w.T, torch.empty(m, n, dtype=x.dtype, device="cuda"))  # loaded before the capture
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            y = gemm_ladder.linear(x, w)
    torch.cuda.current_stream().wait_stream(s)
    g.replay()
    torch.cuda.synchronize()
    ref = x.double() @ w.double().T
    assert ((y.double() - ref).norm() / ref.norm()).item() < 2 ** -7
    eager = gemm_ladder.explain(x, w.T)
    assert eager.heuristic["autotune"]["state"] == "not tuned"  # the capture kept nothing
    gemm_ladder.linear(x, w)
    tuned = gemm_ladder.explain(x, w.T).heuristic["autotune"]
    assert tuned["state"] == "tuned"
    # A second capture of the same signature runs the build the eager call kept (not the first capture's).
    from gemm_ladder.dispatch import decide

    kept = decide(x, w.T, torch.empty(m, n, dtype=x.dtype, device="cuda"), given=False)
    assert kept.tuning.state == "tuned"
    with torch.cuda.stream(s):
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, stream=s):
            y2 = gemm_ladder.linear(x, w)
            route = decide(x, w.T, torch.empty(m, n, dtype=x.dtype, device="cuda"), given=False)
            capture_key = linear_key(x, w, None)  # the capturing call's signature (the capture flag set)
    torch.cuda.current_stream().wait_stream(s)
    g2.replay()
    torch.cuda.synchronize()
    assert route is kept and ((y2.double() - ref).norm() / ref.norm()).item() < 2 ** -7
    call = CALLS.get(capture_key)  # what the capturing linear ran (the first capture's stand-in was kept by none)
    assert call is not None and call.route.config == kept.config and call.route.tuning.state == "tuned"
