"""Every real model's GEMM against cuBLAS, eager torch and torch.compile, in one run (issue 23).

    python bench/shapes_real.py [--quick] [--dtype bf16,fp16] [--models gpt2,llama3_8b] [--strict] [-o OUT.json]
    python bench/shapes_real.py --prebuild [--quick] [--dtype ...] [--models ...] [--autotune]   # compile, no GPU

The linear layers of nine public model families (their dimensions written below as data, each with
the config it comes from), at M from 1 to 16384 (odd M among them: decode batches, 197-token ViT
images, an expert's share of tokens), in bf16 and fp16. Per row, timed interleaved on the same
tensors (gates.performance.time_fns: L2 flushed by writes before every call, launch latency hidden,
medians of rounds whose first callable rotates):

* plain rows (``epilogue`` null): ``gemm_ladder.linear(x, w)`` against cuBLAS (``F.linear(x, w)``);
* fused rows (``epilogue`` one of bias, bias+gelu, bias+gelu_tanh, relu, swiglu): the fused call
  (``gemm_ladder.linear(x, w, b, activation=...)`` or ``gemm_ladder.swiglu``) against the eager torch
  composition (``F.linear`` then the activation as its own op; swiglu: ``F.silu(F.linear(x, wg)) *
  F.linear(x, wu)``), ``torch.compile`` of that composition (static shapes, compiled before timing)
  and cuBLAS's plain GEMM(s) of the same product (``F.linear(x, w)``; swiglu: two of them).

Ratios are the other's time over ours (above 1: ours is faster). Before timing, each row's output
(computed once on the whole input, into fresh memory) is checked on its first and last 128 rows
against the float64 reference of the whole layer (relative Frobenius error within the gates' bound
built on the torch composition's own error, gates.correctness.error_bound, and finite where the
reference is); a row that fails is recorded with its error and not timed.

``--autotune``: each row (but swiglu's) timed a second time with the library's autotune on
(dispatch/autotune.py: its first call times the cost model's leading builds and keeps the fastest), in
its own interleaved rounds against cuBLAS: ``ratio_cublas_tuned``, ``ours_tuned_us``, ``cublas_tuned_us``,
``tuning`` (the candidates, their times and the one kept), ``tuned_ok`` (the output checked again); on plain
rows also the cost model's own choice launched directly (checked, then timed in the same rounds:
``ours_model_us``, ``ratio_tuned_vs_model`` = its time over the tuned call's, above 1 the autotune gained).

``--quick``: 30 plain and 8 fused rows (QUICK_PLAIN, QUICK_FUSED), shorter timing, about 150 s on the
H200 with a warm kernel cache; ``--deadline S`` records the rows not started after S seconds as not
run. The full set skips rows above FLOP_CAP (prefill of the largest vocabularies) and times each
distinct (M, N, K, dtype, epilogue) once (Mixtral's attention is Llama-3-8B's: its rows say ``same_as``).

``--prebuild``: compile every build the run's rows launch, no GPU, and exit (0 when every build is ready): the
rows --quick, or --dtype and --models, select, each as the library call it makes, recorded on meta tensors
(:func:`recorded_call`), its route decided for the H200 assumed and each GPU the package has a cost table for;
with --autotune the candidates its first calls time too; -o, --budget, --deadline and --strict do not apply.
Packed for a device call, the run compiles nothing inside its deadline.

Result (bench/suite.py): ``DATE_shapes_real[_quick]_COMMIT.json`` with ``rows: [{model, layer, M, N, K,
dtype, epilogue, ratio_cublas, ratio_eager, ratio_compile, ours_us, cublas_us, eager_us, compile_us,
rel_err, bound, ok}]`` (plain rows without the eager and compile keys) and ``summary`` (geometric
means, minima and the issue's targets, each with ``met``). Exit status 1 when a row is wrong or
failed (``--strict``: also when a target is missed), 0 otherwise; 2 for bad arguments or no GPU.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

#: Layer epilogues: what the fused row computes after x @ w.T (swiglu: with a second weight).
EPILOGUES = ("bias", "bias+gelu", "bias+gelu_tanh", "relu", "swiglu")
#: Rows above this many FLOPs (2 M N K, per product) are left out of the full set (seconds per row).
FLOP_CAP = 4e12
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
CHECK_ROWS = 128  # first and last rows checked against float64


@dataclass(frozen=True)
class Layer:
    """One linear layer: ``out (M, n) = x (M, k) @ w (n, k)^T``; ``epilogue``: what the model applies
    right after it (None: nothing fusable)."""

    name: str
    n: int
    k: int
    epilogue: str | None = None


@dataclass(frozen=True)
class Model:
    """A model family's linear layers, the config they come from, and the M its calls run at."""

    name: str
    source: str
    layers: tuple[Layer, ...]
    ms: tuple[int, ...]


# Dimensions from the public configs (Hugging Face config.json of the named checkpoint, or timm's model
# definition); attention projections as the reference implementation lays them out (fused where it fuses).
LLM_MS = (1, 7, 16, 64, 255, 1000, 2048, 4096, 8191, 16384)
MODELS: tuple[Model, ...] = (
    Model("gpt2", "openai-community/gpt2 config.json: n_embd 768, n_inner 4 x 768, vocab 50257, activation gelu_new (tanh)",
          (Layer("attn.c_attn", 2304, 768, "bias"), Layer("attn.c_proj", 768, 768, "bias"),
           Layer("mlp.c_fc", 3072, 768, "bias+gelu_tanh"), Layer("mlp.c_proj", 768, 3072, "bias"),
           Layer("lm_head", 50257, 768)),
          (1, 64, 1023, 4096, 8192, 16384)),
    Model("bert_large", "google-bert/bert-large-uncased config.json: hidden 1024, intermediate 4096, hidden_act gelu (erf)",
          (Layer("attention.self.query", 1024, 1024, "bias"), Layer("intermediate.dense", 4096, 1024, "bias+gelu"),
           Layer("output.dense", 1024, 4096, "bias")),
          (128, 512, 4096, 16384)),
    Model("vit_l16", "timm vit_large_patch16_224 (google/vit-large-patch16-224): embed 1024, mlp_ratio 4, GELU (erf), "
          "197 tokens per image",
          (Layer("attn.qkv", 3072, 1024, "bias"), Layer("attn.proj", 1024, 1024, "bias"),
           Layer("mlp.fc1", 4096, 1024, "bias+gelu"), Layer("mlp.fc2", 1024, 4096, "bias")),
          (197, 1576, 12608)),
    Model("t5_base", "google-t5/t5-base config.json: d_model 768, d_ff 3072, 12 heads x d_kv 64, relu, no biases",
          (Layer("SelfAttention.q", 768, 768), Layer("DenseReluDense.wi", 3072, 768, "relu"),
           Layer("DenseReluDense.wo", 768, 3072)),
          (1, 512, 2048, 8192)),
    Model("llama3_8b", "meta-llama/Meta-Llama-3-8B config.json: hidden 4096, intermediate 14336, 32 heads, 8 kv heads, "
          "head_dim 128, vocab 128256, silu",
          (Layer("self_attn.qkv_proj", 6144, 4096), Layer("self_attn.o_proj", 4096, 4096),
           Layer("mlp.gate_proj", 14336, 4096, "swiglu"), Layer("mlp.down_proj", 4096, 14336),
           Layer("lm_head", 128256, 4096)),
          LLM_MS),
    Model("qwen2.5_7b", "Qwen/Qwen2.5-7B config.json: hidden 3584, intermediate 18944, 28 heads, 4 kv heads, head_dim 128, "
          "vocab 152064, qkv bias",
          (Layer("self_attn.qkv_proj", 4608, 3584, "bias"), Layer("self_attn.o_proj", 3584, 3584),
           Layer("mlp.gate_proj", 18944, 3584, "swiglu"), Layer("mlp.down_proj", 3584, 18944),
           Layer("lm_head", 152064, 3584)),
          LLM_MS),
    Model("mixtral_8x7b", "mistralai/Mixtral-8x7B-v0.1 config.json: hidden 4096, one expert's intermediate 14336, 32 heads, "
          "8 kv heads, 8 experts (top 2): an expert sees about M / 4 tokens",
          (Layer("block_sparse_moe.gate", 8, 4096), Layer("experts.w1", 14336, 4096, "swiglu"),
           Layer("experts.w2", 4096, 14336), Layer("self_attn.qkv_proj", 6144, 4096), Layer("self_attn.o_proj", 4096, 4096)),
          (1, 3, 37, 511, 2047, 8191)),
    Model("phi3_mini", "microsoft/Phi-3-mini-4k-instruct config.json: hidden 3072, intermediate 8192, 32 heads (no GQA), "
          "vocab 32064, fused qkv_proj and gate_up_proj",
          (Layer("self_attn.qkv_proj", 9216, 3072), Layer("self_attn.o_proj", 3072, 3072),
           Layer("mlp.gate_up_proj", 8192, 3072, "swiglu"), Layer("mlp.down_proj", 3072, 8192),
           Layer("lm_head", 32064, 3072)),
          (1, 7, 64, 333, 2048, 4096, 16384)),
    Model("gemma_7b", "google/gemma-7b config.json: hidden 3072, intermediate 24576, 16 heads x head_dim 256, vocab 256000, "
          "gelu (tanh) gate: GeGLU, which gemm_ladder.swiglu does not compute, so its MLP rows are plain",
          (Layer("self_attn.q_proj", 4096, 3072), Layer("self_attn.o_proj", 3072, 4096),
           Layer("mlp.gate_proj", 24576, 3072), Layer("mlp.down_proj", 3072, 24576), Layer("lm_head", 256000, 3072)),
          (1, 7, 64, 511, 2048, 4097, 16384)),
)

#: --quick: (model, layer, M, dtype) plain rows and (model, layer, M, dtype) fused rows (the layer's epilogue).
QUICK_PLAIN: tuple[tuple[str, str, int, str], ...] = (
    ("gpt2", "attn.c_attn", 1023, "bf16"), ("gpt2", "mlp.c_proj", 1023, "bf16"), ("gpt2", "mlp.c_fc", 8192, "bf16"),
    ("gpt2", "mlp.c_proj", 8192, "bf16"), ("gpt2", "lm_head", 1, "bf16"),
    ("bert_large", "attention.self.query", 4096, "fp16"), ("bert_large", "intermediate.dense", 16384, "fp16"),
    ("bert_large", "output.dense", 16384, "fp16"),
    ("vit_l16", "attn.qkv", 12608, "bf16"), ("vit_l16", "mlp.fc1", 12608, "bf16"), ("vit_l16", "mlp.fc2", 12608, "bf16"),
    ("vit_l16", "attn.proj", 197, "fp16"),
    ("t5_base", "DenseReluDense.wi", 2048, "bf16"), ("t5_base", "DenseReluDense.wo", 2048, "bf16"),
    ("t5_base", "SelfAttention.q", 512, "bf16"),
    ("llama3_8b", "self_attn.qkv_proj", 7, "bf16"), ("llama3_8b", "self_attn.qkv_proj", 255, "bf16"),
    ("llama3_8b", "mlp.gate_proj", 4096, "bf16"), ("llama3_8b", "mlp.down_proj", 1000, "fp16"),
    ("qwen2.5_7b", "self_attn.qkv_proj", 1000, "bf16"), ("qwen2.5_7b", "mlp.down_proj", 1000, "bf16"),
    ("qwen2.5_7b", "self_attn.o_proj", 64, "bf16"),
    ("mixtral_8x7b", "experts.w1", 511, "bf16"), ("mixtral_8x7b", "experts.w2", 37, "bf16"),
    ("mixtral_8x7b", "block_sparse_moe.gate", 8191, "bf16"),
    ("phi3_mini", "self_attn.qkv_proj", 2048, "bf16"), ("phi3_mini", "mlp.gate_up_proj", 1, "fp16"),
    ("phi3_mini", "mlp.down_proj", 333, "bf16"),
    ("gemma_7b", "self_attn.q_proj", 4097, "bf16"), ("gemma_7b", "lm_head", 1, "bf16"),
)
QUICK_FUSED: tuple[tuple[str, str, int, str], ...] = (
    ("gpt2", "mlp.c_fc", 8192, "bf16"), ("bert_large", "intermediate.dense", 16384, "fp16"),
    ("vit_l16", "mlp.fc1", 12608, "bf16"), ("t5_base", "DenseReluDense.wi", 2048, "bf16"),
    ("llama3_8b", "mlp.gate_proj", 7, "bf16"), ("llama3_8b", "mlp.gate_proj", 4096, "bf16"),
    ("qwen2.5_7b", "self_attn.qkv_proj", 1000, "bf16"), ("phi3_mini", "mlp.gate_up_proj", 333, "bf16"),
)


@dataclass(frozen=True)
class Case:
    """One row to measure: a model's layer at M in a dtype, plain (epilogue None) or fused."""

    model: str
    layer: str
    m: int
    n: int
    k: int
    dtype: str
    epilogue: str | None

    @property
    def key(self) -> tuple:
        """What the timing depends on: rows with one key are measured once."""
        return (self.m, self.n, self.k, self.dtype, self.epilogue)

    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * (2 if self.epilogue == "swiglu" else 1)


def model_named(name: str, models=MODELS) -> Model:
    for m in models:
        if m.name == name:
            return m
    raise KeyError(name)


def layer_named(model: Model, name: str) -> Layer:
    for layer in model.layers:
        if layer.name == name:
            return layer
    raise KeyError(f"{model.name}: {name}")


def case(model: Model, layer: Layer, m: int, dtype: str, fused: bool) -> Case:
    return Case(model.name, layer.name, m, layer.n, layer.k, dtype, layer.epilogue if fused else None)


def full_cases(models=MODELS, dtypes=("bf16", "fp16"), flop_cap: float = FLOP_CAP) -> list[Case]:
    """Every model's every layer at each of its M, each dtype: the plain row, and the fused row where the
    layer has an epilogue; rows above ``flop_cap`` FLOPs left out."""
    out = []
    for model in models:
        for layer in model.layers:
            for m in model.ms:
                for dtype in dtypes:
                    for fused in (False, True) if layer.epilogue else (False,):
                        c = case(model, layer, m, dtype, fused)
                        if c.flops() <= flop_cap:
                            out.append(c)
    return out


def quick_cases(models=MODELS) -> list[Case]:
    """QUICK_FUSED's fused rows (each at its layer's epilogue), then QUICK_PLAIN's plain rows."""
    out = []
    for fused, table in ((True, QUICK_FUSED), (False, QUICK_PLAIN)):
        for model_name, layer_name, m, dtype in table:
            model = model_named(model_name, models)
            out.append(case(model, layer_named(model, layer_name), m, dtype, fused))
    return out


# --- what is timed ----------------------------------------------------------------------------------
@dataclass
class Impl:
    """The library under test (default: gemm_ladder's); the CPU tests pass torch's own functions."""

    linear: Callable
    swiglu: Callable
    #: ``set_autotune(bool) -> previous`` and ``tuning(x, w, activation) -> dict`` (what the autotune kept
    #: for that product: explain's heuristic["autotune"]); None: the library has no autotune (--autotune skips).
    set_autotune: Callable | None = None
    tuning: Callable | None = None
    #: ``model_fn(x, w) -> f(x, w, b, w2)`` launching the cost model's own choice for the plain product
    #: (the first candidate the autotune timed), or None where there is none to run.
    model_fn: Callable | None = None


def library_impl() -> Impl:
    import gemm_ladder

    def tuning(x, w, activation):
        return gemm_ladder.explain(x, w.T, activation=activation).heuristic.get("autotune")

    def model_fn(x, w):
        from gemm_ladder.dispatch import decide
        from gemm_ladder.dispatch.execute import run

        shape = (x.shape[0], w.shape[0])
        route = decide(x, w.T, torch.empty(shape, dtype=x.dtype, device=x.device), given=False, tune=False)
        t = route.tuning
        if t is None or t.state != "tuned" or not t.routes:
            return None
        model = t.routes[0]

        def f(x_, w_, b_, w2_):
            out = torch.empty(shape, dtype=x_.dtype, device=x_.device)
            run(model, x_, w_.T, out)  # the Python launch path: its host time is hidden by the timer's spin
            return out
        return f

    return Impl(linear=gemm_ladder.linear, swiglu=gemm_ladder.swiglu, set_autotune=gemm_ladder.set_autotune,
                tuning=tuning, model_fn=model_fn)


ACT = {"bias+gelu": "gelu", "bias+gelu_tanh": "gelu_tanh", "relu": "relu"}


def eager_fn(epilogue: str) -> Callable:
    """The torch composition a user writes for ``epilogue``: f(x, w, b, w2), the activation its own op."""
    return {
        "bias": lambda x, w, b, w2: F.linear(x, w, b),
        "bias+gelu": lambda x, w, b, w2: F.gelu(F.linear(x, w, b)),
        "bias+gelu_tanh": lambda x, w, b, w2: F.gelu(F.linear(x, w, b), approximate="tanh"),
        "relu": lambda x, w, b, w2: F.relu(F.linear(x, w)),
        "swiglu": lambda x, w, b, w2: F.silu(F.linear(x, w)) * F.linear(x, w2),
    }[epilogue]


def ours_fn(impl: Impl, epilogue: str | None) -> Callable:
    """The library's call for ``epilogue`` (None: the plain GEMM): f(x, w, b, w2)."""
    if epilogue is None:
        return lambda x, w, b, w2: impl.linear(x, w)
    if epilogue == "swiglu":
        return lambda x, w, b, w2: impl.swiglu(x, w, w2)
    if epilogue == "bias":
        return lambda x, w, b, w2: impl.linear(x, w, b)
    if epilogue == "relu":
        return lambda x, w, b, w2: impl.linear(x, w, activation="relu")
    return lambda x, w, b, w2: impl.linear(x, w, b, activation=ACT[epilogue])


def recorded_call(c: Case):
    """The library call row ``c`` makes (:func:`ours_fn` with the library, on meta tensors laid out as
    :func:`operands` makes them), as gemm_ladder.model_precompile's CallRecorder records it: what --prebuild
    builds."""
    from gemm_ladder.model_precompile import CallRecorder

    dt = DTYPES[c.dtype]
    x, w = torch.empty((c.m, c.k), dtype=dt, device="meta"), torch.empty((c.n, c.k), dtype=dt, device="meta")
    b = torch.empty((c.n,), dtype=dt, device="meta")
    w2 = torch.empty((c.n, c.k), dtype=dt, device="meta") if c.epilogue == "swiglu" else None
    with torch.no_grad(), CallRecorder() as recorder:
        ours_fn(library_impl(), c.epilogue)(x, w, b, w2)
    (call,) = recorder.calls
    return call


def prebuild(cases: list[Case], autotune: bool = False) -> int:
    """Compile every build ``cases`` launch (:func:`recorded_call`; with ``autotune`` the candidates its first
    calls time too), routes decided for each device of dispatch.precompile.table_devices, no GPU needed. 0 when
    every build is ready, else 1."""
    import gemm_ladder
    from gemm_ladder.dispatch.precompile import run_builds, table_devices
    from gemm_ladder.model_precompile import model_builds

    calls = list(dict.fromkeys(recorded_call(c) for c in cases))
    builds = {}
    saved = gemm_ladder.set_autotune(autotune)
    try:
        for device in table_devices():
            for b in model_builds(calls, device=device):
                builds.setdefault(b.label, b)
    finally:
        gemm_ladder.set_autotune(saved)
    outcomes = run_builds(list(builds.values()), load=False)
    print(f"{len(cases)} rows, {len(calls)} calls: {outcomes.summary()}")
    return 1 if outcomes.failed else 0


def cublas_fn(epilogue: str | None) -> Callable:
    """cuBLAS's plain GEMM(s) of the same product (swiglu: both)."""
    if epilogue == "swiglu":
        return lambda x, w, b, w2: (F.linear(x, w), F.linear(x, w2))
    return lambda x, w, b, w2: F.linear(x, w)


def reference(c: Case, x, w, b, w2) -> torch.Tensor:
    """The layer in float64 on the rows of ``x`` given."""
    x64, w64 = x.double(), w.double()
    if c.epilogue is None:
        return x64 @ w64.T
    if c.epilogue == "swiglu":
        return F.silu(x64 @ w64.T) * (x64 @ w2.double().T)
    b64 = None if b is None or c.epilogue == "relu" else b.double()
    return eager_fn(c.epilogue)(x64, w64, b64, None)


def operands(c: Case, device: str, seed: int):
    """x standard normal; weights normal / sqrt(K) (outputs of unit scale, as trained layers); a bias
    of scale 0.1; w2 (swiglu's up weight) like w."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = DTYPES[c.dtype]
    x = torch.randn((c.m, c.k), generator=gen, device=device).to(dt)
    w = (torch.randn((c.n, c.k), generator=gen, device=device) / math.sqrt(c.k)).to(dt)
    b = (0.1 * torch.randn((c.n,), generator=gen, device=device)).to(dt)
    w2 = (torch.randn((c.n, c.k), generator=gen, device=device) / math.sqrt(c.k)).to(dt) if c.epilogue == "swiglu" else None
    return x, w, b, w2


def checked_rows(m: int, rows: int = CHECK_ROWS) -> torch.Tensor:
    """The row indices checked: the first and last ``rows`` (all when M <= 2 rows)."""
    if m <= 2 * rows:
        return torch.arange(m)
    return torch.cat([torch.arange(rows), torch.arange(m - rows, m)])


def check(c: Case, ours: torch.Tensor, theirs: torch.Tensor, x, w, b, w2) -> dict:
    """Ours and the torch composition's (``theirs``) outputs, both of the whole input, on checked_rows
    against float64: ``ok`` when ours is finite where the reference is and its relative error is
    within error_bound(theirs' error)."""
    from gemm_ladder.gates.correctness import _rel_err, error_bound

    idx = checked_rows(c.m).to(x.device)
    ref = reference(c, x[idx], w, b, w2)
    if tuple(ours.shape) != (c.m, c.n):
        return {"rel_err": None, "bound": None, "ok": False, "error": f"wrong shape {tuple(ours.shape)}"}
    rel, base = _rel_err(ours[idx], ref), _rel_err(theirs[idx], ref)
    bound = error_bound(base, c.dtype)
    finite = bool(torch.isfinite(ours[idx])[torch.isfinite(ref)].all())
    ok = finite and math.isfinite(rel) and rel <= bound
    out = {"rel_err": rel, "torch_rel_err": base, "bound": bound, "ok": ok}
    if not ok:
        out["error"] = f"wrong result: relative error {rel:.3e} > bound {bound:.3e}" if finite else "non-finite output"
    return out


@dataclass
class Settings:
    device: str = "cuda"
    budget_s: float = 0.2
    rounds: int = 2
    warmup: int = 3
    compile: bool = True
    impl: Impl | None = None
    timer: Callable | None = None  # time_fns's signature; default gates.performance.time_fns
    autotune: bool = False  # also time each row with the library's autotune on (a second phase: measure)


def make_compiled(epilogues) -> dict[str, Callable]:
    """torch.compile of each composition, static shapes (one compile per shape, before timing)."""
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 1024)
    return {e: torch.compile(eager_fn(e), dynamic=False) for e in epilogues}


def measure(c: Case, s: Settings, compiled: dict[str, Callable], seed: int) -> dict:
    """One row: checked, then timed (times in µs, ratios other / ours); ``error`` when it failed."""
    from gemm_ladder.gates.performance import time_fns

    impl = s.impl or library_impl()
    row = {"model": c.model, "layer": c.layer, "M": c.m, "N": c.n, "K": c.k, "dtype": c.dtype, "epilogue": c.epilogue,
           "ratio_cublas": None}
    if c.epilogue is not None:
        row.update(ratio_eager=None, ratio_compile=None)
    try:
        x, w, b, w2 = operands(c, s.device, seed)
        ours, cublas = ours_fn(impl, c.epilogue), cublas_fn(c.epilogue)
        fns = {"ours": ours, "cublas": cublas}
        theirs = cublas if c.epilogue is None else eager_fn(c.epilogue)
        if c.epilogue is not None:
            fns["eager"] = eager_fn(c.epilogue)
            if s.compile:
                t0 = time.perf_counter()
                fns["compile"] = compiled[c.epilogue]
                fns["compile"](x, w, b, w2)  # compile this shape outside the timing
                _sync(s.device)
                row["compile_s"] = round(time.perf_counter() - t0, 3)
        with torch.no_grad():
            row.update(check(c, ours(x, w, b, w2), theirs(x, w, b, w2), x, w, b, w2))
        if not row["ok"]:
            return row
        timer = s.timer or time_fns
        t = timer({name: (lambda a_, b_, f=f: f(x, w, b, w2)) for name, f in fns.items()}, x, w, budget_s=s.budget_s,
                  rounds=s.rounds, warmup=s.warmup)
        for name, tm in t.items():
            row[f"{name}_us"] = tm.median_ms * 1e3
        ours_us = row["ours_us"]
        row["ratio_cublas"] = row["cublas_us"] / ours_us
        if c.epilogue is not None:
            row["ratio_eager"] = row["eager_us"] / ours_us
            row["ratio_compile"] = row["compile_us"] / ours_us if "compile_us" in row else None
        row["tflops"] = c.flops() / (ours_us * 1e-6) / 1e12
        if s.autotune:
            row.update(tuned_phase(c, s, impl, ours, cublas, theirs, (x, w, b, w2), timer))
    except Exception as e:  # a failing row is recorded; the run goes on
        row["ok"] = False
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return row


def tuned_phase(c: Case, s: Settings, impl: Impl, ours, cublas, theirs, args, timer) -> dict:
    """The row's second phase with the library's autotune on (dispatch/autotune.py): the first call times
    its candidates, then the output is checked again and ours is timed against cuBLAS, interleaved, in
    this phase's own rounds (``ratio_cublas_tuned``; the first phase's ``ratio_cublas`` is the default
    route's). ``tuning``: what the autotune kept. swiglu rows and a library without autotune: ``tuned``
    says why not."""
    if c.epilogue == "swiglu" or impl.set_autotune is None:
        return {"tuned": "not run: " + ("swiglu's products are the small-M kernel's or swiglu's own"
                                        if c.epilogue == "swiglu" else "the library under test has no autotune")}
    x, w, b, w2 = args
    prev = impl.set_autotune(True)
    try:
        first = ours(*args)  # times the candidates and keeps one
        _sync(s.device)
        out = {"tuning": impl.tuning(x, w, ACT.get(c.epilogue)) if impl.tuning else None}
        checked = check(c, ours(*args), theirs(*args), *args)
        del first
        out["tuned_ok"] = checked["ok"]
        if not checked["ok"]:
            out["tuned_rel_err"] = checked["rel_err"]
            return out
        fns = {"ours_tuned": lambda a_, b_: ours(*args), "cublas_tuned": lambda a_, b_: cublas(*args)}
        model = impl.model_fn(x, w) if impl.model_fn and c.epilogue is None else None
        if model is not None:  # the model's own choice, checked, then timed in the same rounds
            checked = check(c, model(*args), theirs(*args), *args)
            out["model_ok"] = checked["ok"]
            if checked["ok"]:
                fns["ours_model"] = lambda a_, b_: model(*args)
            else:
                out["model_rel_err"] = checked["rel_err"]
        t = timer(fns, x, w, budget_s=s.budget_s, rounds=s.rounds, warmup=s.warmup)
        out["ours_tuned_us"] = t["ours_tuned"].median_ms * 1e3
        out["cublas_tuned_us"] = t["cublas_tuned"].median_ms * 1e3
        out["ratio_cublas_tuned"] = out["cublas_tuned_us"] / out["ours_tuned_us"]
        if "ours_model" in t:
            out["ours_model_us"] = t["ours_model"].median_ms * 1e3
            out["ratio_tuned_vs_model"] = out["ours_model_us"] / out["ours_tuned_us"]
        return out
    finally:
        impl.set_autotune(prev)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run(cases: list[Case], s: Settings, *, models=MODELS, log: Callable[[str], None] = print,
        deadline_s: float | None = None) -> list[dict]:
    """Measure every case, each distinct key once (a repeated key's row copies the first's numbers and
    names it in ``same_as``). Cases not started within ``deadline_s`` seconds are recorded as not run
    (``skipped``), so that a time-limited run still writes its result."""
    t0 = time.perf_counter()
    compiled = make_compiled({c.epilogue for c in cases if c.epilogue}) if s.compile else {}
    done: dict[tuple, dict] = {}
    rows = []
    for i, c in enumerate(cases):
        first = done.get(c.key)
        if deadline_s is not None and time.perf_counter() - t0 > deadline_s:
            row = {"model": c.model, "layer": c.layer, "M": c.m, "N": c.n, "K": c.k, "dtype": c.dtype,
                   "epilogue": c.epilogue, "ratio_cublas": None, "ok": None, "skipped": f"not run: past --deadline {deadline_s} s"}
        elif first is not None:
            row = {**first, "model": c.model, "layer": c.layer, "same_as": f"{first['model']} {first['layer']}"}
        else:
            with torch.no_grad():
                row = measure(c, s, compiled, seed=1000 + i)
            done[c.key] = row
        rows.append(row)
        log(describe(row))
    return rows


def describe(r: dict) -> str:
    head = f"{r['model']:>13} {r['layer']:<22} {r['M']:>5}x{r['N']}x{r['K']} {r['dtype']} {r['epilogue'] or 'plain':<14}"
    if r.get("skipped"):
        return f"{head} {r['skipped']}"
    if r.get("error"):
        return f"{head} FAILED: {r['error']}"
    parts = [f"ours {r['ours_us']:8.1f} us", f"vs cuBLAS {r['ratio_cublas']:.3f}"]
    if r.get("ratio_cublas_tuned") is not None:
        parts.append(f"tuned {r['ratio_cublas_tuned']:.3f}")
    if r["epilogue"] is not None:
        parts.append(f"eager {r['ratio_eager']:.3f}")
        if r.get("ratio_compile") is not None:
            parts.append(f"compile {r['ratio_compile']:.3f}")
    return head + " " + ", ".join(parts)


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summarize(rows: list[dict]) -> dict:
    """Geometric means and minima, and the issue-23 targets each with its measured figure and ``met``
    (a target over no measured row: ``met`` None, "not run"). The fused targets are the issue's "fused bias
    + activation": rows whose epilogue has an activation (bias+gelu, bias+gelu_tanh, relu); the bias-only
    rows are summarized apart (``bias_geomean_vs_eager``), as their eager side is cuBLAS's fused bias."""
    timed = [r for r in rows if r.get("ok") and r.get("ratio_cublas") and "same_as" not in r]
    plain = [r for r in timed if r["epilogue"] is None]
    fused = [r for r in timed if r["epilogue"] is not None and r["epilogue"] != "swiglu"]
    # The fused targets are for bias + activation: a bias alone is F.linear's own epilogue on the
    # eager side (cuBLAS fuses it too), so those rows are plain GEMMs against cuBLAS, reported apart.
    activated = [r for r in fused if r["epilogue"] != "bias"]
    bias = [r for r in fused if r["epilogue"] == "bias"]
    swi = [r for r in timed if r["epilogue"] == "swiglu"]

    def target(what, values, threshold, rows_):
        worst = min(values) if values else None
        low = [f"{r['model']} {r['layer']} {r['M']}x{r['N']}x{r['K']} {r['dtype']}" for r, v in zip(rows_, values)
               if v < threshold]
        return {"what": what, "threshold": threshold, "min": worst, "rows": len(values), "below": low,
                "met": None if not values else not low}

    g = geomean([r["ratio_cublas"] for r in plain])
    big = [r for r in plain if r["cublas_us"] >= 50]
    short_k = [r for r in activated if r["K"] <= 1024]
    with_compile = [r for r in activated if r.get("ratio_compile") is not None]
    large_swi = [r for r in swi if r["M"] >= 2048]
    targets = [
        {"what": "plain: geomean vs cuBLAS >= 1.02", "threshold": 1.02, "value": g, "rows": len(plain),
         "met": None if g is None else g >= 1.02},
        target("plain: vs cuBLAS >= 0.95 where cuBLAS takes >= 50 us", [r["ratio_cublas"] for r in big], 0.95, big),
        target("plain: vs cuBLAS >= 0.90 everywhere", [r["ratio_cublas"] for r in plain], 0.90, plain),
        target("bias + activation, K <= 1024: vs eager >= 1.10", [r["ratio_eager"] for r in short_k], 1.10, short_k),
        target("bias + activation, K <= 1024: vs compile >= 1.05", [r["ratio_compile"] for r in short_k if r.get("ratio_compile")],
               1.05, [r for r in short_k if r.get("ratio_compile")]),
        target("bias + activation: vs eager >= 1.0 everywhere", [r["ratio_eager"] for r in activated], 1.0, activated),
        target("bias + activation: vs compile >= 1.0 everywhere", [r["ratio_compile"] for r in with_compile], 1.0, with_compile),
        target("swiglu: vs eager >= 1.0 at every M", [r["ratio_eager"] for r in swi], 1.0, swi),
        target("swiglu: vs eager >= 1.1 at M >= 2048", [r["ratio_eager"] for r in large_swi], 1.1, large_swi),
    ]
    return {
        "rows": len(rows), "rows_timed": len(timed), "rows_failed": sum(1 for r in rows if r.get("ok") is False),
        "rows_not_run": sum(1 for r in rows if r.get("skipped")),
        "failed": [f"{r['model']} {r['layer']} {r['M']} {r['dtype']} {r['epilogue']}: {r.get('error')}"
                   for r in rows if r.get("ok") is False],
        "plain_geomean_vs_cublas": g,
        "plain_geomean_vs_cublas_tuned": geomean([r["ratio_cublas_tuned"] for r in plain if r.get("ratio_cublas_tuned")]),
        "plain_geomean_tuned_vs_model": geomean([r["ratio_tuned_vs_model"] for r in plain if r.get("ratio_tuned_vs_model")]),
        "plain_min_vs_cublas_tuned": min((r["ratio_cublas_tuned"] for r in plain if r.get("ratio_cublas_tuned")),
                                         default=None),
        "plain_min_vs_cublas": min((r["ratio_cublas"] for r in plain), default=None),
        "fused_geomean_vs_eager": geomean([r["ratio_eager"] for r in fused + swi]),
        "fused_geomean_vs_compile": geomean([r["ratio_compile"] for r in fused + swi if r.get("ratio_compile")]),
        "activated_geomean_vs_eager": geomean([r["ratio_eager"] for r in activated]),
        "bias_geomean_vs_eager": geomean([r["ratio_eager"] for r in bias]),
        "targets": targets,
    }


def parse_list(spec: str | None, known: list[str], what: str) -> list[str]:
    """A comma list of names from ``known`` (None: all); ValueError naming the unknown ones."""
    if spec is None:
        return list(known)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise ValueError(f"--{what} {spec!r}: use a comma list of {', '.join(known)}")
    return names


def main(argv: list[str] | None = None) -> int:
    from outputs import check_output
    from suite import add_output_argument, cost_table_provenance, require_gpu, save

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="30 plain and 8 fused rows, shorter timing (about 150 s)")
    p.add_argument("--dtype", default=None, help="comma list of bf16, fp16 (full set; default both)")
    p.add_argument("--models", default=None, help="comma list of model names (full set; default all)")
    p.add_argument("--budget", type=float, default=None, help="seconds of timed calls per callable (default 0.1; --quick 0.03)")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed too")
    p.add_argument("--deadline", type=float, default=None,
                   help="seconds after which rows not yet started are recorded as not run (the result is still written)")
    p.add_argument("--autotune", action="store_true",
                   help="time each row a second time with the library's autotune on (ratio_cublas_tuned)")
    p.add_argument("--prebuild", action="store_true", help="compile every build the rows launch (no GPU) and exit")
    add_output_argument(p)
    args = p.parse_args(argv)
    try:
        dtypes = parse_list(args.dtype, list(DTYPES), "dtype")
        names = parse_list(args.models, [m.name for m in MODELS], "models")
    except ValueError as e:
        print(f"bench/shapes_real.py: {e}", file=sys.stderr)
        return 2
    models = tuple(m for m in MODELS if m.name in names)
    cases = quick_cases() if args.quick else full_cases(models, tuple(dtypes))
    if args.prebuild:
        return prebuild(cases, args.autotune)
    check_output(__file__, args.output)
    require_gpu(__file__)
    s = Settings(budget_s=args.budget or (0.03 if args.quick else 0.1), compile=not args.no_compile,
                 autotune=args.autotune)
    t0 = time.perf_counter()
    rows = run(cases, s, deadline_s=args.deadline)
    summary = summarize(rows)
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    for t in summary["targets"]:
        v = t.get("value", t.get("min"))
        state = "not run" if t["met"] is None else "met" if t["met"] else "MISSED"
        print(f"target {t['what']}: {state}" + ("" if v is None else f" ({v:.3f})"))
    print(f"{summary['rows_timed']} rows timed, {summary['rows_failed']} failed, {summary['rows_not_run']} not run, "
          f"{summary['wall_s']} s")
    from gemm_ladder.dispatch import tiles_rule

    # The tables the routes came from (a table merged on the machine before the run is not the commit's).
    tables = {"cost_model": cost_table_provenance(), "small_m": tiles_rule().provenance}
    if args.autotune:
        print(f"autotune: plain geomean vs cuBLAS {summary['plain_geomean_vs_cublas_tuned'] or float('nan'):.3f} "
              f"(default route {summary['plain_geomean_vs_cublas'] or float('nan'):.3f}); over the model's own "
              f"choice in the same rounds {summary['plain_geomean_tuned_vs_model'] or float('nan'):.3f}")
    save({"quick": args.quick, "autotune": args.autotune, "budget_s": s.budget_s, "rounds": s.rounds, "dispatch_tables": tables,
          "models": [{"name": m.name, "source": m.source} for m in MODELS], "rows": rows, "summary": summary},
         "shapes_real" + ("_quick" if args.quick else ""), args.output)
    missed = any(t["met"] is False for t in summary["targets"])
    return 1 if summary["rows_failed"] or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
