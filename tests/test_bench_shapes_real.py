"""bench/shapes_real.py's harness without a GPU: its model data (published dimensions, M ranges, the
--quick subset), the rows it writes (schema, ratios, a wrong or failing row recorded and the run going
on), the summary's targets and the result file, with torch's own functions standing in for the library
on the CPU."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import shapes_real as sr  # noqa: E402
import suite  # noqa: E402


def torch_linear(x, w, b=None, activation=None):
    y = F.linear(x, w, b)
    return {None: y, "gelu": F.gelu(y) if activation == "gelu" else None,
            "gelu_tanh": F.gelu(y, approximate="tanh") if activation == "gelu_tanh" else None,
            "relu": F.relu(y)}[activation]


def torch_swiglu(x, wg, wu):
    return F.silu(F.linear(x, wg)) * F.linear(x, wu)


TORCH = sr.Impl(linear=torch_linear, swiglu=torch_swiglu)
TINY = (
    sr.Model("tiny_mlp", "test data", (sr.Layer("fc1", 48, 32, "bias+gelu"), sr.Layer("fc2", 32, 48, "bias"),
                                       sr.Layer("proj", 40, 32)), (1, 7)),
    sr.Model("tiny_llm", "test data", (sr.Layer("gate", 24, 32, "swiglu"), sr.Layer("wi", 16, 32, "relu"),
                                       sr.Layer("fc", 48, 32, "bias+gelu_tanh")), (3, 300)),
)


def cpu(**kw) -> sr.Settings:
    base = dict(device="cpu", budget_s=0.002, rounds=1, warmup=1, compile=False, impl=TORCH)
    return sr.Settings(**{**base, **kw})


def test_the_model_data_covers_nine_families_from_1_to_16384_with_odd_m():
    names = [m.name for m in sr.MODELS]
    assert len(names) == len(set(names)) >= 8
    for family in ("gpt2", "bert", "vit", "t5", "llama3", "qwen2.5", "mixtral", "phi3", "gemma"):
        assert any(n.startswith(family) for n in names), family
    ms = {m for model in sr.MODELS for m in model.ms}
    assert min(ms) == 1 and max(ms) == 16384 and sum(m % 2 for m in ms) >= 5
    for model in sr.MODELS:
        assert len(model.source) > 20 and model.layers
        assert all(layer.n > 0 and layer.k > 0 and layer.epilogue in (None, *sr.EPILOGUES) for layer in model.layers)
        assert len({layer.name for layer in model.layers}) == len(model.layers)


def test_published_dimensions():
    def dims(model, layer):
        lay = sr.layer_named(sr.model_named(model), layer)
        return lay.n, lay.k

    assert dims("llama3_8b", "self_attn.qkv_proj") == (4096 + 2 * 8 * 128, 4096)
    assert dims("llama3_8b", "mlp.down_proj") == (4096, 14336)
    assert dims("qwen2.5_7b", "self_attn.qkv_proj") == (3584 + 2 * 4 * 128, 3584)
    assert dims("qwen2.5_7b", "mlp.gate_proj") == (18944, 3584)
    assert dims("gpt2", "lm_head") == (50257, 768) and dims("gpt2", "attn.c_attn") == (3 * 768, 768)
    assert dims("phi3_mini", "self_attn.qkv_proj") == (3 * 3072, 3072) and dims("phi3_mini", "mlp.down_proj") == (3072, 8192)
    assert dims("gemma_7b", "self_attn.q_proj") == (16 * 256, 3072) and dims("gemma_7b", "lm_head") == (256000, 3072)
    assert dims("mixtral_8x7b", "experts.w1") == (14336, 4096) and dims("mixtral_8x7b", "block_sparse_moe.gate") == (8, 4096)
    assert dims("vit_l16", "mlp.fc1") == (4096, 1024) and 197 in sr.model_named("vit_l16").ms
    assert dims("bert_large", "intermediate.dense") == (4096, 1024) and dims("t5_base", "DenseReluDense.wi") == (3072, 768)


def test_quick_is_30_plain_and_8_fused_rows_over_every_family_and_both_dtypes():
    cases = sr.quick_cases()
    plain = [c for c in cases if c.epilogue is None]
    fused = [c for c in cases if c.epilogue is not None]
    assert len(plain) == 30 and len(fused) == 8 and len({c.key + (c.model, c.layer) for c in cases}) == 38
    assert {c.model for c in plain} == {m.name for m in sr.MODELS}
    assert {c.dtype for c in cases} == {"bf16", "fp16"} and any(c.m % 2 and c.m > 1 for c in plain)
    assert {c.epilogue for c in fused} == set(sr.EPILOGUES)
    assert any(c.epilogue == "swiglu" and c.m < 16 for c in fused)  # the small-M swiglu


def test_the_full_set_has_each_layer_plain_and_fused_in_both_dtypes_under_the_flop_cap():
    cases = sr.full_cases()
    assert all(c.flops() <= sr.FLOP_CAP for c in cases)
    keys = {(c.model, c.layer, c.m, c.dtype, c.epilogue) for c in cases}
    assert len(keys) == len(cases)
    assert ("llama3_8b", "mlp.gate_proj", 7, "fp16", "swiglu") in keys and ("llama3_8b", "mlp.gate_proj", 7, "fp16", None) in keys
    assert ("llama3_8b", "lm_head", 16384, "bf16", None) not in keys  # 2 x 16384 x 128256 x 4096 > FLOP_CAP
    assert ("gpt2", "lm_head", 16384, "bf16", None) in keys
    assert ("t5_base", "DenseReluDense.wi", 8192, "bf16", "relu") in keys
    assert {c.m for c in cases} >= {1, 7, 197, 12608, 16384}
    with pytest.raises(KeyError):
        sr.model_named("gpt5")


def test_rows_are_checked_timed_and_written_in_the_issue_schema():
    cases = sr.full_cases(TINY, dtypes=("bf16", "fp16"))
    rows = sr.run(cases, cpu(), log=lambda s: None)
    assert len(rows) == len(cases) == 2 * (5 * 2 + 6 * 2)
    for r, c in zip(rows, cases):
        assert r["ok"] and not r.get("error"), r
        assert (r["model"], r["layer"], r["M"], r["N"], r["K"], r["dtype"], r["epilogue"]) == (
            c.model, c.layer, c.m, c.n, c.k, c.dtype, c.epilogue)
        assert r["ours_us"] > 0 and r["cublas_us"] > 0
        assert r["ratio_cublas"] == pytest.approx(r["cublas_us"] / r["ours_us"])
        assert r["rel_err"] <= r["bound"]
        if c.epilogue is None:
            assert "ratio_eager" not in r and "ratio_compile" not in r and "eager_us" not in r
        else:
            assert r["ratio_eager"] == pytest.approx(r["eager_us"] / r["ours_us"]) and r["ratio_compile"] is None
    json.dumps(rows)  # the result is JSON
    s = sr.summarize(rows)
    assert s["rows_timed"] == len(rows) and s["rows_failed"] == 0 and s["plain_geomean_vs_cublas"] > 0


def test_a_repeated_shape_is_timed_once(monkeypatch):
    calls = []
    real = sr.measure
    monkeypatch.setattr(sr, "measure", lambda c, *a, **k: calls.append(c) or real(c, *a, **k))
    twin = sr.Model("twin", "test data", TINY[0].layers, (1, 7))
    rows = sr.run(sr.full_cases((TINY[0], twin), dtypes=("bf16",)), cpu(), log=lambda s: None)
    assert len(calls) == len(rows) // 2 and [r.get("same_as") for r in rows[len(rows) // 2:]] == ["tiny_mlp " + r["layer"] for r in rows[:len(rows) // 2]]
    assert sr.summarize(rows)["rows_timed"] == len(rows) // 2  # the copies do not count twice


def test_torch_compile_column_when_compiling(monkeypatch):
    monkeypatch.setattr(sr, "make_compiled", lambda eps: {e: sr.eager_fn(e) for e in eps})
    rows = sr.run(sr.full_cases(TINY[:1], dtypes=("bf16",)), cpu(compile=True), log=lambda s: None)
    fused = [r for r in rows if r["epilogue"]]
    assert fused and all(r["ratio_compile"] == pytest.approx(r["compile_us"] / r["ours_us"]) for r in fused)


def test_a_wrong_or_failing_row_is_recorded_not_timed_and_the_run_goes_on():
    def wrong_linear(x, w, b=None, activation=None):
        y = torch_linear(x, w, b, activation)
        if x.shape[0] == 7:
            y = y.clone()
            y[-1, 0] += 100  # one element in the last row (a tail) is off
        return y

    def broken_swiglu(x, wg, wu):
        raise RuntimeError("kernel exploded\nsecond line")

    s = cpu(impl=sr.Impl(linear=wrong_linear, swiglu=broken_swiglu))
    rows = sr.run(sr.full_cases(TINY, dtypes=("bf16",)), s, log=lambda s: None)
    bad = [r for r in rows if not r["ok"]]
    assert {(r["model"], r["M"], r["epilogue"]) for r in bad} == {
        ("tiny_mlp", 7, "bias+gelu"), ("tiny_mlp", 7, None), ("tiny_mlp", 7, "bias"), ("tiny_llm", 3, "swiglu"),
        ("tiny_llm", 300, "swiglu")}
    for r in bad:
        assert r["ratio_cublas"] is None and "ours_us" not in r
        assert r["error"].startswith("wrong result: relative error") or r["error"] == "RuntimeError: kernel exploded"
    assert all(r["ok"] and r["ratio_cublas"] for r in rows if r not in bad)
    s = sr.summarize(rows)
    assert s["rows_failed"] == len(bad) and len(s["failed"]) == len(bad)
    assert sr.describe(bad[0]).endswith(bad[0]["error"])


def test_checked_rows_cover_both_ends():
    assert sr.checked_rows(5).tolist() == [0, 1, 2, 3, 4]
    idx = sr.checked_rows(1000).tolist()
    assert idx[:2] == [0, 1] and idx[-1] == 999 and len(idx) == 2 * sr.CHECK_ROWS


def _row(model, m, n, k, ep, cublas_us, ours_us, eager_us=None, compile_us=None):
    r = {"model": model, "layer": "l", "M": m, "N": n, "K": k, "dtype": "bf16", "epilogue": ep, "ok": True,
         "ours_us": ours_us, "cublas_us": cublas_us, "ratio_cublas": cublas_us / ours_us}
    if ep is not None:
        r.update(eager_us=eager_us, ratio_eager=eager_us / ours_us,
                 ratio_compile=None if compile_us is None else compile_us / ours_us)
    return r


def test_summary_targets():
    rows = [_row("a", 1, 8, 8, None, 10.0, 10.0), _row("b", 64, 8, 8, None, 60.0, 64.0),
            _row("c", 64, 8, 8, None, 8.0, 10.0),
            _row("d", 4096, 8, 1024, "bias+gelu", 10.0, 10.0, 12.0, 11.0), _row("e", 7, 8, 8, "swiglu", 10.0, 10.0, 9.0),
            _row("g", 512, 8, 768, "bias", 8.0, 10.0, 8.0, 8.0),  # a bias alone: not a fused target's row
            {"model": "f", "layer": "l", "M": 1, "N": 1, "K": 1, "dtype": "bf16", "epilogue": None, "ok": False,
             "ratio_cublas": None, "error": "x"}]
    s = sr.summarize(rows)
    t = {x["what"]: x for x in s["targets"]}
    assert s["plain_geomean_vs_cublas"] == pytest.approx((1.0 * 60 / 64 * 0.8) ** (1 / 3))
    assert t["plain: geomean vs cuBLAS >= 1.02"]["met"] is False
    assert t["plain: vs cuBLAS >= 0.95 where cuBLAS takes >= 50 us"]["below"] == ["b l 64x8x8 bf16"]
    assert t["plain: vs cuBLAS >= 0.90 everywhere"]["below"] == ["c l 64x8x8 bf16"]
    assert t["bias + activation, K <= 1024: vs eager >= 1.10"]["met"] is True
    assert t["bias + activation, K <= 1024: vs compile >= 1.05"]["met"] is True
    assert t["bias + activation: vs eager >= 1.0 everywhere"]["rows"] == 1  # the bias-only row (0.8x) apart
    assert s["bias_geomean_vs_eager"] == pytest.approx(0.8) and s["activated_geomean_vs_eager"] == pytest.approx(1.2)
    assert t["swiglu: vs eager >= 1.0 at every M"]["met"] is False
    assert t["swiglu: vs eager >= 1.1 at M >= 2048"]["met"] is None  # not run
    assert s["rows_failed"] == 1 and math.isclose(s["fused_geomean_vs_eager"], (1.2 * 0.9 * 0.8) ** (1 / 3))


def test_the_result_file_and_the_command_line(tmp_path, monkeypatch, capsys):
    rows = sr.run(sr.full_cases(TINY[:1], dtypes=("bf16",)), cpu(), log=lambda s: None)
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setenv("GEMM_LADDER_GIT_COMMIT", "abcdef0123")
    path = suite.save({"rows": rows, "summary": sr.summarize(rows)}, "shapes_real_quick")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_shapes_real_quick_abcdef0\.json", path.name)
    data = json.loads(path.read_text())
    assert {"model", "layer", "M", "N", "K", "dtype", "epilogue", "ratio_cublas"} <= set(data["rows"][0])
    assert sr.main(["--models", "gpt2,nope"]) == 2
    assert capsys.readouterr().err.strip().startswith("bench/shapes_real.py: --models 'gpt2,nope'")
    assert sr.main(["--dtype", "fp8"]) == 2
    assert "--dtype 'fp8'" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as refused:  # suite.require_gpu, as every bench script
            sr.main(["--quick"])
        assert refused.value.code == 2
        assert capsys.readouterr().err.strip() == "bench/shapes_real.py: needs a CUDA GPU (sm_90a); nothing run"


def test_rows_past_the_deadline_are_recorded_as_not_run():
    rows = sr.run(sr.full_cases(TINY[:1], dtypes=("bf16",)), cpu(), log=lambda s: None, deadline_s=0.0)
    assert all(r["skipped"].startswith("not run") and r["ok"] is None and r["ratio_cublas"] is None for r in rows)
    s = sr.summarize(rows)
    assert s["rows_not_run"] == len(rows) and s["rows_failed"] == 0 and s["rows_timed"] == 0
    assert all(t["met"] is None for t in s["targets"])


def test_autotune_phase_times_a_second_time_and_restores_the_setting():
    """--autotune: each row but swiglu's timed again with the setting on (checked first), restored after;
    a library without autotune says so per row."""
    state = {"on": False, "sets": []}

    def set_autotune(on):
        prev, state["on"] = state["on"], on
        state["sets"].append(on)
        return prev

    impl = sr.Impl(linear=torch_linear, swiglu=torch_swiglu, set_autotune=set_autotune,
                   tuning=lambda x, w, act: {"state": "tuned", "activation": act},
                   model_fn=lambda x, w: (lambda x_, w_, b_, w2_: torch_linear(x_, w_)))
    rows = sr.run(sr.full_cases(TINY, ("bf16",)), cpu(impl=impl, autotune=True), models=TINY, log=lambda _: None)
    assert state["on"] is False and state["sets"].count(True) == state["sets"].count(False) > 0
    for r in rows:
        if r["epilogue"] == "swiglu":
            assert r["tuned"].startswith("not run") and "ratio_cublas_tuned" not in r
        elif "same_as" not in r:
            assert r["tuned_ok"] and r["ratio_cublas_tuned"] > 0 and r["tuning"]["state"] == "tuned"
            assert r["tuning"]["activation"] == sr.ACT.get(r["epilogue"])
            assert ("ratio_tuned_vs_model" in r) == (r["epilogue"] is None)  # the model's choice: plain rows
    summary = sr.summarize(rows)
    assert summary["plain_geomean_vs_cublas_tuned"] > 0 and summary["plain_geomean_tuned_vs_model"] > 0
    # a model choice that computes the wrong product fails the row's second phase, untimed
    wrong = sr.Impl(linear=torch_linear, swiglu=torch_swiglu, set_autotune=set_autotune,
                    model_fn=lambda x, w: (lambda x_, w_, b_, w2_: torch_linear(x_, w_) * 1.5))
    bad = sr.run(sr.full_cases(TINY[:1], ("bf16",))[:1], cpu(impl=wrong, autotune=True), models=TINY, log=lambda _: None)
    assert bad[0]["model_ok"] is False and bad[0]["model_rel_err"] > 0.1 and bad[0]["tuned_ok"]
    assert "ours_model_us" not in bad[0] and bad[0]["ours_tuned_us"] > 0  # the tuned call still timed
    plain = sr.run(sr.full_cases(TINY[:1], ("bf16",))[:1], cpu(autotune=True), models=TINY, log=lambda _: None)
    assert plain[0]["tuned"] == "not run: the library under test has no autotune"


def test_prebuild_builds_the_calls_the_rows_make(monkeypatch, capsys):
    """--prebuild: each row's library call recorded on meta tensors (the bias where the layer has one, its
    activation, swiglu's two weights, x and w laid out as operands() makes them), routes decided for every
    device of table_devices (with --autotune, the candidates too), every build handed to run_builds unloaded;
    its exit status is run_builds' verdict; no GPU needed."""
    from gemm_ladder import model_precompile
    from gemm_ladder.dispatch import precompile

    cases = {c.epilogue: c for c in sr.full_cases(TINY, dtypes=("fp16",))}
    calls = {e: sr.recorded_call(c) for e, c in cases.items()}
    for e, call in calls.items():
        x, w, b, _ = sr.operands(cases[e], "cpu", 0)
        assert call.a == (tuple(x.shape), x.stride(), x.dtype, 0) and call.b == (tuple(w.shape), w.stride(), w.dtype, 0)
    assert calls[None].op == "linear" and calls[None].bias is None and calls[None].activation is None
    assert calls["bias"].bias == ((32,), (1,), torch.float16, 0) and calls["bias"].activation is None
    assert calls["bias+gelu"].activation == "gelu" and calls["bias+gelu"].bias is not None
    assert calls["bias+gelu_tanh"].activation == "gelu_tanh" and calls["bias+gelu_tanh"].bias is not None
    assert calls["relu"].bias is None and calls["relu"].activation == "relu"
    assert calls["swiglu"].op == "swiglu" and calls["swiglu"].b == calls["swiglu"].w_up

    seen = {"devices": [], "autotune": []}
    real_model_builds = model_precompile.model_builds

    def model_builds(calls, device=None):
        from gemm_ladder.dispatch import autotune

        seen["devices"].append(device)
        seen["autotune"].append(autotune.enabled())
        return real_model_builds(calls, device=device)

    def run_builds(builds, load):
        seen.update(labels=[b.label for b in builds], load=load)
        return type("O", (), {"failed": ["x"] if seen.get("fail") else [], "summary": lambda s: "summary"})()

    monkeypatch.setattr(model_precompile, "model_builds", model_builds)
    monkeypatch.setattr(precompile, "run_builds", run_builds)
    assert sr.main(["--prebuild", "--models", "gpt2", "--dtype", "bf16"]) == 0
    assert seen["load"] is False and "54 rows" in capsys.readouterr().out
    assert seen["devices"] == precompile.table_devices() and len(seen["devices"]) >= 2  # the H200 assumed, the H100
    assert not any(seen["autotune"])
    labels = seen["labels"]
    assert len(labels) == len(set(labels)) and any("epilogue linear:bias #" in lb for lb in labels)
    assert any("epilogue linear:bias+gelu_tanh #" in lb for lb in labels)  # GPT-2's c_fc
    assert any("epilogue" not in lb for lb in labels)  # the plain rows' builds
    plain = set(labels)
    assert sr.main(["--prebuild", "--models", "gpt2", "--dtype", "bf16", "--autotune"]) == 0
    assert all(seen["autotune"][-len(precompile.table_devices()):]) and set(seen["labels"]) > plain  # the candidates
    from gemm_ladder.dispatch import autotune

    assert not autotune.enabled()  # restored
    seen["fail"] = True
    assert sr.main(["--prebuild", "--models", "tiny_mlp"]) == 2  # a bad --models is refused before any build
    assert sr.prebuild(sr.full_cases(TINY[:1], dtypes=("bf16",))) == 1
