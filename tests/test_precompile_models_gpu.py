"""After ``gemm_ladder.precompile(model, example_inputs)`` a model's first forward and backward build
nothing: each run in a fresh process on an empty kernel cache, whose files are counted before and
after the first real calls (the in-process build caches start empty too). The outputs are checked
against torch on the same weights. GPU only (skipped elsewhere with the reason)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SRC = Path(__file__).resolve().parent.parent / "src"

COUNT = textwrap.dedent("""
    import copy, os, torch, gemm_ladder
    from pathlib import Path
    cache = Path(os.environ["GEMM_LADDER_CACHE"])
    def count():
        return sum(1 for p in cache.iterdir() if (p / "kernel.cubin").exists()) if cache.exists() else 0
    def rel(a, b):
        return ((a.double() - b.double()).norm() / b.double().norm()).item()
""")

MLP_SCRIPT = COUNT + textwrap.dedent("""
    class Block(torch.nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.up, self.down = torch.nn.Linear(d, h), torch.nn.Linear(h, d, bias=False)
        def forward(self, x):
            if isinstance(self.up, gemm_ladder.nn.Linear):  # fused: bias + GELU(tanh), then the residual
                h = gemm_ladder.linear(x, self.up.weight, self.up.bias, activation="gelu_tanh")
                return gemm_ladder.linear(h, self.down.weight, residual=x)
            h = torch.nn.functional.gelu(self.up(x), approximate="tanh")
            return self.down(h) + x
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.SiLU(), torch.nn.Linear(1024, 512, bias=False),
                              Block(512, 1536), torch.nn.Linear(512, 300)).cuda().bfloat16()
    model = gemm_ladder.nn.replace_linear(copy.deepcopy(ref)).train()
    x = torch.randn(4, 100, 512, device="cuda", dtype=torch.bfloat16)
    outcome = gemm_ladder.precompile(model, (x,), rows=(7,))
    print("PRECOMPILE", outcome.summary())
    assert not outcome.failed and len(outcome.compiled) == outcome.ready > 0, dict(outcome)
    before = count()
    y = model(x)
    y.float().square().mean().backward()
    with torch.no_grad():
        y7 = model(torch.randn(7, 512, device="cuda", dtype=torch.bfloat16))
    torch.cuda.synchronize()
    print("NEW FILES", count() - before)
    assert count() == before
    r = ref(x)
    r.float().square().mean().backward()
    assert rel(y, r) < 2e-2, rel(y, r)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert rel(p.grad, q.grad) < 5e-2, rel(p.grad, q.grad)
    again = gemm_ladder.precompile(model, (x,), rows=(7,))
    print("AGAIN", again.summary())
    assert not again.compiled and len(again.cached) == outcome.ready
""")

LLAMA_SCRIPT = COUNT + textwrap.dedent("""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1376, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512)
    ref = LlamaForCausalLM(config).cuda().bfloat16().eval()
    model = gemm_ladder.nn.replace_linear(copy.deepcopy(ref))
    ids = torch.randint(0, 1000, (2, 77), device="cuda")
    with torch.no_grad():
        outcome = gemm_ladder.precompile(model, (ids,), mode="fake")
    print("PRECOMPILE", outcome.summary())
    assert not outcome.failed and outcome.ready > 0, dict(outcome)
    before = count()
    with torch.no_grad():
        logits = model(ids).logits
    torch.cuda.synchronize()
    print("NEW FILES", count() - before)
    assert count() == before
    with torch.no_grad():
        expect = ref(ids).logits
    assert rel(logits, expect) < 2e-2, rel(logits, expect)
""")


def _run(script: str, tmp_path) -> str:
    env = {**os.environ, "GEMM_LADDER_CACHE": str(tmp_path / "empty_cache"),
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_precompiled_mlp_trains_and_serves_without_a_build(tmp_path):
    out = _run(MLP_SCRIPT, tmp_path)
    assert "NEW FILES 0" in out and "AGAIN" in out, out


def test_a_precompiled_llama_forward_builds_nothing(tmp_path):
    pytest.importorskip("transformers", reason="needs transformers (the [models] extra)")
    out = _run(LLAMA_SCRIPT, tmp_path)
    assert "NEW FILES 0" in out, out
