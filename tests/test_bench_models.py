"""bench/models.py's harness without a GPU: tiny configurations of the real model classes on the CPU,
the gemm-ladder side replaced by a plain deep copy (gemm-ladder's layers need a GPU), so that model
building, the interleaved timing, the comparisons, a failing row, replace_linear's coverage and the
result file are checked. Skipped where transformers (the [models] extra) is not installed."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="needs transformers (the [models] extra: pip install -e '.[models]')")

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import models  # noqa: E402
import suite  # noqa: E402

TINY_LLAMA = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128)
TINY_BERT = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 max_position_embeddings=64)


def tiny(**kw) -> models.Settings:
    s = models.Settings(device="cpu", warmup=1, reps=2, prefill=((1, 9), (2, 5)), decode_batches=(1, 3), prompt=4,
                        decode_steps=3, bert_shape=(2, 8), vit_batch=2, train_shape=(2, 8), compile_shape=(1, 6),
                        llama=dict(TINY_LLAMA), llama_train=dict(TINY_LLAMA), bert=dict(TINY_BERT),
                        vit="vit_tiny_patch16_224", dtype=torch.float32, precompile=False, convert=copy.deepcopy)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_the_harness_runs_compares_and_summarizes_tiny_models():
    result = models.run(["llama_prefill", "llama_decode", "bert", "train", "vit"], tiny())
    rows = result["rows"]
    by_mode = {}
    for r in rows:
        by_mode.setdefault(r["mode"], []).append(r)
    assert [r["shape"] for r in by_mode["prefill"]] == ["1x9", "2x5"]
    assert [r["shape"] for r in by_mode["greedy decode (ms/token)"]] == ["batch 1, prompt 4, 3 steps",
                                                                          "batch 3, prompt 4, 3 steps"]
    timed = [r for r in rows if not r.get("skipped")]
    assert len(timed) == 2 + 2 + 1 + 1
    for r in timed:
        assert not r.get("error"), r
        assert r["t_torch_ms"] > 0 and r["t_gl_ms"] > 0 and r["speedup"] == pytest.approx(r["t_torch_ms"] / r["t_gl_ms"], rel=1e-3)
        # the "gl" side is the same model: its outputs are the torch model's
        assert r["rel_err"] == pytest.approx(0.0, abs=1e-6), r
        assert r["argmax_agreement"] in (None, 1.0), r
    train = by_mode["training step (AdamW)"][0]
    assert train["steps"] == 1 + 1 + 2 and train["loss_last"][0] == pytest.approx(train["loss_last"][1])
    assert train["loss_last"][0] < train["loss_first"][0]  # AdamW moved the weights
    assert by_mode["forward"][0]["model"] == "bert_large_dims_4_layers"
    vit = [r for r in rows if r["model"] in ("vit", "vit_tiny_patch16_224")]
    assert len(vit) == 1 and (vit[0].get("skipped") or vit[0]["rel_err"] == pytest.approx(0.0, abs=1e-6))
    names = [m["model"] for m in result["models"]]
    assert names[:3] == ["llama3_8b_dims_2_layers", "bert_large_dims_4_layers", "llama_1024_4_layers"]
    first = result["models"][0]["first_call"]
    assert first["new_cache_files"] == 0 and first["cache_files_before"] >= 0  # counted around the first gl call
    summary = result["summary"]
    assert summary["rows_timed"] == len(timed) and summary["geomean_speedup"] > 0 and not summary["disagreeing_or_failed"]


def test_a_failing_row_is_recorded_and_the_others_run(monkeypatch):
    real = models.interleaved_ms
    calls = []

    def flaky(fns, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Detected 3 tensor(s) in the cudagraph pool not tracked as outputs\nmore")
        return real(fns, *args, **kwargs)

    monkeypatch.setattr(models, "interleaved_ms", flaky)
    monkeypatch.setattr(models.Cases, "bert", lambda self, rows: (_ for _ in ()).throw(ValueError("no BERT today")))
    result = models.run(["llama_prefill", "bert", "train"], tiny())
    rows = result["rows"]
    assert rows[0]["error"] == "RuntimeError: Detected 3 tensor(s) in the cudagraph pool not tracked as outputs"
    assert rows[0]["speedup"] is None and rows[1]["speedup"] > 0  # the next shape ran
    assert rows[2]["model"] == "bert" and rows[2]["error"] == "ValueError: no BERT today"
    assert rows[3]["mode"] == "training step (AdamW)" and not rows[3].get("error")
    assert result["summary"]["rows_failed"] == 2 and len(result["summary"]["disagreeing_or_failed"]) == 2


def test_disagreeing_outputs_are_flagged():
    ok = models.row("m", "prefill", "1x7", [1.0, 2.0], 1e-3, 0.99)
    bad_err = models.row("m", "prefill", "1x7", [1.0, 2.0], 0.2, 0.99)
    bad_arg = models.row("m", "prefill", "1x7", [1.0, 2.0], 1e-3, 0.5)
    assert ok["speedup"] == 0.5 and models.agrees(ok) and not models.agrees(bad_err) and not models.agrees(bad_arg)
    s = models.summarize([ok, bad_err])
    assert s["geomean_speedup"] == pytest.approx(0.5) and s["disagreeing_or_failed"] == ["m prefill 1x7"]
    assert not s["every_row_at_least_1x"]


def test_replace_linear_covers_every_linear_of_the_real_models():
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        llama = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)).to(torch.bfloat16)
        bert = BertModel(BertConfig(**TINY_BERT)).to(torch.float16)
    layers = TINY_LLAMA["num_hidden_layers"]
    # q, k, v, o, gate, up, down per layer, and lm_head
    assert models.coverage(llama, models.gl_copy(llama)) == {"linears": 7 * layers + 1, "replaced": 7 * layers + 1}
    # query, key, value, attention output, intermediate, output per layer, and the pooler
    assert models.coverage(bert, models.gl_copy(bert)) == {"linears": 6 * layers + 1, "replaced": 6 * layers + 1}


def test_the_llama_and_bert_configs_have_the_published_dimensions():
    from transformers import BertConfig, LlamaConfig

    c = LlamaConfig(**models.LLAMA_8B)
    assert (c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_key_value_heads, c.vocab_size) == (
        4096, 14336, 32, 8, 128256)
    assert c.num_hidden_layers == 2
    b = BertConfig(**models.BERT_LARGE)
    assert (b.hidden_size, b.intermediate_size, b.num_attention_heads, b.num_hidden_layers) == (1024, 4096, 16, 4)


def test_the_result_file_and_the_command_line(tmp_path, monkeypatch, capsys):
    result = models.run(["llama_prefill"], tiny(prefill=((1, 7),)))
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setenv("GEMM_LADDER_GIT_COMMIT", "abcdef0123")
    path = suite.save(result, "models")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_models_abcdef0\.json", path.name)
    data = json.loads(path.read_text())
    assert {"model", "mode", "shape", "t_torch_ms", "t_gl_ms", "speedup", "rel_err", "argmax_agreement"} <= set(data["rows"][0])
    assert "gpu" in data["meta"] and "torch" in data["meta"]["versions"] and data["meta"]["date"]
    with pytest.raises(ValueError, match="--only 'llama,bert'"):
        models.parse_only("llama,bert")
    assert models.parse_only("bert, vit") == ["bert", "vit"] and models.parse_only(None) == list(models.CASES)
    monkeypatch.setattr(sys, "argv", ["bench/models.py", "--only", "nope"])
    assert models.main() == 2
    assert capsys.readouterr().err.strip().startswith("bench/models.py: --only 'nope'")
    if not torch.cuda.is_available():
        monkeypatch.setattr(sys, "argv", ["bench/models.py", "--quick"])
        with pytest.raises(SystemExit) as refused:  # suite.require_gpu, as every bench script
            models.main()
        assert refused.value.code == 2
        assert capsys.readouterr().err.strip() == "bench/models.py: needs a CUDA GPU (sm_90a); nothing run"


def test_decode_is_judged_teacher_forced_and_free_running_is_information():
    result = models.run(["llama_decode"], tiny(decode_batches=(2,)))
    r = result["rows"][0]
    assert r["compared"] == "teacher-forced" and len(r["per_step_rel_err"]) == 3 + 1
    assert r["rel_err"] == pytest.approx(0.0, abs=1e-6) and r["argmax_agreement"] == 1.0
    assert r["free_running_agreement"] == 1.0
    # a free-running divergence alone does not fail a row: only the teacher-forced figures are judged
    diverged = models.row("m", "greedy decode (ms/token)", "b", [1.0, 1.0], 1e-3, 0.99, free_running_agreement=0.1)
    assert models.agrees(diverged)


def test_breakdown_classifies_gemm_kernels_and_says_why_a_row_is_slower():
    kernels = [("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", 900.0), ("gemm_kernel", 1000.0),
               ("sm90_gemm_small_m", 50.0), ("void at::native::vectorized_elementwise_kernel<4>", 300.0),
               ("gemv2T_kernel_val<int, int, __nv_bfloat16>", 40.0), ("repack_kernel", 10.0),
               ("Memset (Device)", 1.0)]
    gemm, total = models.kernel_ms(kernels, per=2)
    assert gemm == pytest.approx((900 + 1000 + 50 + 40 + 10) / 2e3) and total == pytest.approx(2301 / 2e3)
    base = dict(gemm_gpu_ms_torch=1.0, host_ms_torch=0.5, gpu_ms_torch=1.5, host_ms_gl=0.6, gpu_ms_gl=1.8)
    by_kernels = models.row("m", "forward", "s", [2.0, 2.4], 1e-3, None, gemm_gpu_ms_gl=1.3, **base)
    by_host = models.row("m", "forward", "s", [2.0, 2.4], 1e-3, None, gemm_gpu_ms_gl=1.05, **base)
    faster = models.row("m", "forward", "s", [2.0, 1.9], 1e-3, None, gemm_gpu_ms_gl=1.3, **base)
    assert by_kernels["slower_because"] == "kernels" and by_host["slower_because"] == "host"
    assert faster["slower_because"] is None and "slower because of the host" in models.describe(by_host)
