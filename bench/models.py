"""Real models at full speed: Hugging Face ``transformers`` and ``timm`` model code with random weights,
each run with torch's ``nn.Linear`` and, side by side in the same run, after
``gemm_ladder.nn.replace_linear`` (a deep copy with the same weights).

    python bench/models.py [--quick] [--only llama_prefill,llama_decode,bert,vit,train,compile_prefill,reduce_overhead]
                           [--no-precompile] [--no-breakdown] [--gated-mlp] [--reps N] [-o OUT.json]

``--gated-mlp``: gemm-ladder's side also gets ``gemm_ladder.nn.replace_gated_mlp`` (the Llama MLPs' gate and up
projections in one ``gemm_ladder.swiglu`` launch where no gradient is needed; training rows run the MLPs' own
formula on gemm-ladder's Linear); the result is named ``..._gated_mlp``.

The cases (bf16 unless said; models built from a config, never downloaded):

* ``llama_prefill``   LlamaForCausalLM at Llama-3-8B's dimensions with 2 layers, eager forward of
                      batch x length 1x2048, 4x500, 1x7, 3x333 (odd lengths among them);
* ``llama_decode``    the same model, greedy decode with its KV cache (``use_cache=True``) after a
                      32-token prompt, batch 1, 16 and 64: wall time per decode step (ms/token);
* ``bert``            BertModel at BERT-large's dimensions with 4 layers, fp16, 32 x 384;
* ``vit``             timm ``vit_large_patch16_224``, batch 64;
* ``train``           LlamaForCausalLM, hidden 1024, 4 layers, one AdamW training step on 8 x 512
                      (grad mode on, loss from the labels, backward, optimizer step);
* ``compile_prefill`` the Llama-3-8B-dims model under ``torch.compile`` (default mode), 2 x 1000;
* ``reduce_overhead`` one token through that model (batch 1, no cache) under
                      ``torch.compile(mode="reduce-overhead")`` (CUDA graphs).

Method: both sides run in turn, interleaved (the first one alternating), ``--reps`` times after a
warm-up; each timing is wall time between two ``torch.cuda.synchronize()`` (what a user waits for,
host included: that is the point of this benchmark, whose issue is the host path), and the row
gives the medians and ``speedup`` = t_torch / t_gl. Outputs are compared on the same inputs:
``rel_err`` is the relative Frobenius error of the logits (BERT: the last hidden state; training:
the relative difference of the losses after the timed steps) against the torch model, and
``argmax_agreement`` the fraction of positions whose argmax agrees.

Decode is compared teacher-forced: both models are fed the same tokens (the prompt, then the tokens
torch's greedy decode chose), one step at a time with their KV caches, and each step's logits are
compared (``rel_err``: the largest step's relative error; ``per_step_rel_err``; ``argmax_agreement``
over every step and sequence). A free-running greedy decode of random-weight models meets a near-tie
within a few steps, and after one differing token every later one differs: its agreement
(``free_running_agreement``) is reported as information only, never judged.

Why a row is below 1.0: unless ``--no-breakdown``, each side is also run under ``torch.profiler``
and the row gets the GPU time of its GEMM-class kernels (``gemm_gpu_ms_torch`` / ``gemm_gpu_ms_gl``,
by kernel name: cuBLAS's and gemm-ladder's GEMM, GEMV, SwiGLU and repack kernels), of all kernels
(``gpu_ms_*``), and the host time to issue one call (``host_ms_*``: wall time of the call without
the closing synchronization), each per call (decode: per token); ``slower_because`` says "kernels"
when the GEMM kernels' difference covers at least half of the wall-time difference, else "host".

Kernel builds: unless ``--no-precompile``, each model is first precompiled
(``gemm_ladder.precompile(model, example_inputs, rows=..., mode="fake")``: its forward, and backward
for training, traced on fake tensors and every kernel it uses built in parallel); either way the
kernel cache's files are counted before and after the first gemm-ladder forward of each model
(``first_call``: ``new_cache_files`` 0 means nothing was compiled at first use).

A row that fails records its error (``error``) and the script goes on with the others. Needs a CUDA
GPU (else one line, exit 2) and the ``[models]`` extra (``transformers``, ``timm``): a case whose
library is missing is recorded as skipped with the reason (all requested skipped: one line, exit 2).
Exit 1 when a row failed or its outputs disagree (``rel_err`` above 0.05 or argmax agreement below
0.9; decode: teacher-forced), else 0. Result: ``DATE_models[_quick]_COMMIT.json`` (bench/suite.py) with ``rows`` and
``summary`` (geometric mean of the speedups, and whether every row reached 1.0x). The full run is
estimated at 4-6 minutes on the H200 (not yet timed there), most of it torch.compile's and the first
precompile's; ``--quick``: fewer shapes and repetitions.
"""

from __future__ import annotations

import argparse
import copy
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from outputs import check_output
from suite import add_output_argument, require_gpu, save

CASES = ("llama_prefill", "llama_decode", "bert", "vit", "train", "compile_prefill", "reduce_overhead")
#: What each case needs beyond torch.
NEEDS = {"vit": "timm"} | {c: "transformers" for c in CASES if c != "vit"}

LLAMA_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0)
LLAMA_TRAIN = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                   num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
BERT_LARGE = dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=4, num_attention_heads=16,
                  intermediate_size=4096, max_position_embeddings=512)
VIT = "vit_large_patch16_224"
#: Output agreement that counts as the same result (bf16 logits of random-weight models).
MAX_REL_ERR = 0.05
MIN_ARGMAX = 0.9


@dataclass
class Settings:
    """What one run does; the defaults are the H200 run's, tests pass tiny ones."""

    device: str = "cuda"
    warmup: int = 3
    reps: int = 15
    prefill: tuple = ((1, 2048), (4, 500), (1, 7), (3, 333))
    decode_batches: tuple = (1, 16, 64)
    prompt: int = 32
    decode_steps: int = 16
    bert_shape: tuple = (32, 384)
    vit_batch: int = 64
    train_shape: tuple = (8, 512)
    compile_shape: tuple = (2, 1000)
    llama: dict = field(default_factory=lambda: dict(LLAMA_8B))
    llama_train: dict = field(default_factory=lambda: dict(LLAMA_TRAIN))
    bert: dict = field(default_factory=lambda: dict(BERT_LARGE))
    vit: str = VIT
    dtype: torch.dtype | None = None  # None: each case's own (bf16; BERT fp16)
    precompile: bool = True
    #: gemm-ladder's side from torch's model: a deep copy with replace_linear (tests: a plain copy).
    convert: Callable | None = None
    #: Profile each row's two sides (GEMM kernels' GPU time, host time): CUDA devices only.
    breakdown: bool = True
    #: gemm-ladder's side also gets gemm_ladder.nn.replace_gated_mlp (--gated-mlp).
    gated_mlp: bool = False


def quick(settings: Settings) -> Settings:
    settings.warmup, settings.reps = 2, 5
    settings.prefill = ((1, 2048), (4, 500), (1, 7))
    settings.decode_steps = 8
    return settings


# --- measuring ------------------------------------------------------------------------------------------------


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved_ms(fns: list[Callable], warmup: int, reps: int, device: str, per: int = 1) -> list[float]:
    """Median wall ms of each callable (divided by ``per``), run in turn ``reps`` times after ``warmup``
    rounds, the first one alternating; each timing between two synchronizations."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    sync(device)
    times = [[] for _ in fns]
    for r in range(reps):
        order = list(range(len(fns)))
        if r % 2:
            order.reverse()
        for i in order:
            sync(device)
            t0 = time.perf_counter()
            fns[i]()
            sync(device)
            times[i].append((time.perf_counter() - t0) * 1e3 / per)
    return [statistics.median(t) for t in times]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref64 = ref.double()
    return ((out.double() - ref64).norm() / ref64.norm().clamp_min(1e-30)).item()


def argmax_agreement(out: torch.Tensor, ref: torch.Tensor) -> float:
    return (out.argmax(-1) == ref.argmax(-1)).double().mean().item()


#: Kernels that count as GEMM work, by name: cuBLAS(Lt)'s (nvjet, cutlass, xmma, gemm, gemv) and
#: gemm-ladder's (gemm_kernel, sm90_gemm_small_m, the SwiGLU kernel, repack_kernel).
GEMM_KERNEL = re.compile(r"gemm|gemv|nvjet|cutlass|xmma|cublas|swiglu|repack", re.IGNORECASE)


def kernel_ms(kernels: list[tuple[str, float]], per: int = 1) -> tuple[float, float]:
    """(GEMM-class ms, all kernels' ms) of ``kernels`` ((name, microseconds) pairs), divided by ``per``."""
    gemm = sum(us for name, us in kernels if GEMM_KERNEL.search(name))
    total = sum(us for _, us in kernels)
    return gemm / 1e3 / per, total / 1e3 / per


def profiled_kernels(fn: Callable) -> list[tuple[str, float]]:
    """(name, microseconds) of every GPU kernel, memcpy and memset ``fn()`` ran (torch.profiler)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type == DeviceType.CUDA]


def host_ms(fn: Callable, reps: int = 3) -> float:
    """Median wall ms of ``fn()`` without the closing synchronization: the host's time to issue it
    (where the GPU keeps up, also the call's wall time)."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def breakdown(fns: list[Callable], per: int = 1) -> dict:
    """GPU kernel time (GEMM class and all) and host time per call (``per``: calls in one fn) of
    the torch side and the gemm-ladder side (``fns``, in that order)."""
    out = {}
    for side, fn in zip(("torch", "gl"), fns):
        gemm, total = kernel_ms(profiled_kernels(fn), per)
        out.update({f"gemm_gpu_ms_{side}": round(gemm, 4), f"gpu_ms_{side}": round(total, 4),
                    f"host_ms_{side}": round(host_ms(fn) / per, 4)})
    return out


def slower_because(r: dict) -> str | None:
    """'kernels' when the GEMM kernels' GPU time explains at least half of a row's wall-time deficit,
    'host' when they do not, None when the row is not slower (or was not broken down)."""
    if r.get("speedup") is None or r["speedup"] >= 1.0 or r.get("gemm_gpu_ms_gl") is None:
        return None
    deficit = r["t_gl_ms"] - r["t_torch_ms"]
    return "kernels" if r["gemm_gpu_ms_gl"] - r["gemm_gpu_ms_torch"] >= 0.5 * deficit else "host"


def cache_files() -> int:
    """Kernel-cache entries holding a cubin (runtime/compiler.py's layout)."""
    from gemm_ladder.runtime.compiler import cache_root

    root = cache_root()
    return sum(1 for p in root.iterdir() if (p / "kernel.cubin").exists()) if root.exists() else 0


def gl_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` (same weights) with every nn.Linear on gemm-ladder's kernels."""
    import gemm_ladder

    return gemm_ladder.nn.replace_linear(copy.deepcopy(model))


def coverage(torch_model, gl_model) -> dict:
    """How many nn.Linear the torch model has and how many the gemm-ladder copy runs on gemm-ladder."""
    linears = sum(1 for m in torch_model.modules() if isinstance(m, torch.nn.Linear))
    try:
        from gemm_ladder.nn import Linear
        replaced = sum(1 for m in gl_model.modules() if isinstance(m, Linear))
    except ImportError:
        replaced = 0
    return {"linears": linears, "replaced": replaced}


class Pair:
    """A torch model and its gemm-ladder copy, with what the first gemm-ladder call built."""

    def __init__(self, name: str, torch_model: torch.nn.Module, s: Settings):
        self.name = name
        self.torch = torch_model
        self.gl = (s.convert or gl_copy)(torch_model)
        self.info = {"model": name, **coverage(self.torch, self.gl)}
        if s.gated_mlp:
            from gemm_ladder.nn import GatedMLP, replace_gated_mlp

            self.gl = replace_gated_mlp(self.gl)
            self.info["gated_mlps"] = sum(isinstance(m, GatedMLP) for m in self.gl.modules())
        self.first_done = False
        self.s = s

    def precompile(self, example_inputs, example_kwargs=None, rows=()) -> None:
        """gemm_ladder.precompile of the gemm-ladder copy on fake tensors (recorded in ``info``; a
        failure is recorded, not raised: the first call then builds what it needs, and says so)."""
        if not self.s.precompile or self.s.convert is not None:
            return
        import gemm_ladder

        t0 = time.perf_counter()
        try:
            with torch.no_grad():  # as the inference rows run (a training model's backward is traced anyway)
                out = gemm_ladder.precompile(self.gl, example_inputs, example_kwargs, rows=rows, mode="fake")
            self.info.setdefault("precompile", []).append({"summary": out.summary(), "failed": out.failed,
                                                           "seconds": round(time.perf_counter() - t0, 2)})
        except Exception as exc:  # noqa: BLE001 - reported in the result
            self.info.setdefault("precompile", []).append({"error": f"{type(exc).__name__}: {exc}".splitlines()[0]})

    def first(self, fn: Callable) -> None:
        """Run ``fn`` (the gemm-ladder side's first call) with the kernel cache counted around it."""
        if self.first_done:
            return
        before = cache_files()
        t0 = time.perf_counter()
        fn()
        sync(self.s.device)
        self.info["first_call"] = {"seconds": round(time.perf_counter() - t0, 3), "cache_files_before": before,
                                   "new_cache_files": cache_files() - before}
        self.first_done = True


def row(model: str, mode: str, shape: str, t: list[float] | None, err: float | None, agree: float | None,
        **extra) -> dict:
    out = {"model": model, "mode": mode, "shape": shape, "t_torch_ms": None, "t_gl_ms": None, "speedup": None,
           "rel_err": err, "argmax_agreement": agree}
    if t is not None:
        out.update(t_torch_ms=round(t[0], 4), t_gl_ms=round(t[1], 4), speedup=round(t[0] / t[1], 4))
    out.update(extra)
    if "gemm_gpu_ms_gl" in out:
        out["slower_because"] = slower_because(out)
    return out


# --- models -------------------------------------------------------------------------------------------------


def llama(config: dict, dtype: torch.dtype, device: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**config))
    return model.to(dtype).eval()


def bert(config: dict, dtype: torch.dtype, device: str):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    with torch.device(device):
        model = BertModel(BertConfig(**config))
    return model.to(dtype).eval()


def vit(name: str, dtype: torch.dtype, device: str):
    import timm

    torch.manual_seed(0)
    with torch.device(device):
        model = timm.create_model(name, pretrained=False)
    return model.to(dtype).eval()


def ids(batch: int, length: int, vocab: int, device: str, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=g).to(device)


# --- cases: each appends its rows; a failing shape is a row with its error ----------------------------------


class Cases:
    def __init__(self, s: Settings):
        self.s = s
        self._llama: Pair | None = None
        self.pairs: list[Pair] = []

    def dtype(self, default: torch.dtype) -> torch.dtype:
        return self.s.dtype or default

    def llama_pair(self) -> Pair:
        if self._llama is None:
            self._llama = Pair("llama3_8b_dims_2_layers", llama(self.s.llama, self.dtype(torch.bfloat16), self.s.device),
                               self.s)
            self.pairs.append(self._llama)
        return self._llama

    def why(self, fns: list[Callable], per: int = 1) -> dict:
        """The row's :func:`breakdown` (CUDA only, unless turned off); a failure is recorded."""
        if not (self.s.breakdown and self.s.device.startswith("cuda")):
            return {}
        try:
            return breakdown(fns, per)
        except Exception as exc:  # noqa: BLE001 - the timing stands without it
            return {"breakdown_error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}

    def guarded(self, rows: list, model: str, mode: str, shape: str, fn: Callable[[], dict]) -> None:
        try:
            r = fn()
        except Exception as exc:  # noqa: BLE001 - a failing row is recorded and the run goes on
            r = row(model, mode, shape, None, None, None, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
            if self.s.device.startswith("cuda"):
                torch.cuda.synchronize()
        rows.append(r)
        print(describe(r), flush=True)

    def llama_prefill(self, rows: list) -> None:
        pair = self.llama_pair()
        vocab = self.s.llama["vocab_size"]
        pair.precompile((ids(*self.s.prefill[0], vocab, self.s.device, 0),),
                        rows=[b * n for b, n in self.s.prefill] + list(self.s.decode_batches))
        for i, (b, n) in enumerate(self.s.prefill):
            def one(b=b, n=n, i=i):
                x = ids(b, n, vocab, self.s.device, 10 + i)
                with torch.no_grad():
                    pair.first(lambda: pair.gl(x))
                    ref, out = pair.torch(x).logits, pair.gl(x).logits
                    fns = [lambda: pair.torch(x), lambda: pair.gl(x)]
                    t = interleaved_ms(fns, self.s.warmup, self.s.reps, self.s.device)
                    why = self.why(fns)
                return row(pair.name, "prefill", f"{b}x{n}", t, rel_err(out, ref), argmax_agreement(out, ref), **why)
            self.guarded(rows, pair.name, "prefill", f"{b}x{n}", one)

    def _greedy(self, model, prompt: torch.Tensor, steps: int, timed: list | None = None,
                synchronize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decode: the prompt, then ``steps`` one-token steps with the KV cache; returns the
        tokens and the last step's logits; ``timed``: the decode steps' wall ms is appended;
        ``synchronize=False``: no synchronization (the breakdown's host time)."""
        out = model(input_ids=prompt, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        cache, tokens = out.past_key_values, [tok]
        if synchronize:
            sync(self.s.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=tok, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            tok = out.logits[:, -1:].argmax(-1)
            tokens.append(tok)
        if synchronize:
            sync(self.s.device)
        if timed is not None:
            timed.append((time.perf_counter() - t0) * 1e3 / steps)
        return torch.cat(tokens, 1), out.logits[:, -1]

    def _forced(self, model, prompt: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced decode: ``model`` fed the prompt, then ``tokens`` (B, S) one at a time with its
        KV cache; the (B, S + 1, V) logits of each step's last position (the prompt's, then each token's)."""
        out = model(input_ids=prompt, use_cache=True)
        cache, logits = out.past_key_values, [out.logits[:, -1]]
        for i in range(tokens.shape[1]):
            out = model(input_ids=tokens[:, i:i + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits.append(out.logits[:, -1])
        return torch.stack(logits, 1)

    def llama_decode(self, rows: list) -> None:
        pair = self.llama_pair()
        vocab = self.s.llama["vocab_size"]
        # the prompts, the one-token steps, and the comparison's forward of prompt + generated tokens
        pair.precompile((ids(1, self.s.prompt, vocab, self.s.device, 0),),
                        rows=[b * m for b in self.s.decode_batches
                              for m in (self.s.prompt, 1, self.s.prompt + self.s.decode_steps)])
        for b in self.s.decode_batches:
            def one(b=b):
                prompt = ids(b, self.s.prompt, vocab, self.s.device, 100 + b)
                steps = self.s.decode_steps
                with torch.no_grad():
                    pair.first(lambda: self._greedy(pair.gl, prompt, 1))
                    ref_tokens, ref_logits = self._greedy(pair.torch, prompt, steps)
                    tokens, logits = self._greedy(pair.gl, prompt, steps)
                    # teacher-forced: both fed the prompt and torch's tokens, each step's logits compared
                    fed = ref_tokens[:, :-1]
                    forced, ref_forced = self._forced(pair.gl, prompt, fed), self._forced(pair.torch, prompt, fed)
                    per_step = [rel_err(forced[:, i], ref_forced[:, i]) for i in range(forced.shape[1])]
                    for _ in range(self.s.warmup):
                        self._greedy(pair.torch, prompt, steps)
                        self._greedy(pair.gl, prompt, steps)
                    times: list[list[float]] = [[], []]
                    for r in range(self.s.reps):
                        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                            self._greedy((pair.torch, pair.gl)[i], prompt, steps, times[i])
                    # per token, prompt included (the breakdown times whole greedy calls)
                    why = self.why([lambda: self._greedy(pair.torch, prompt, steps, synchronize=False),
                                    lambda: self._greedy(pair.gl, prompt, steps, synchronize=False)], per=steps)
                t = [statistics.median(x) for x in times]
                return row(pair.name, "greedy decode (ms/token)", f"batch {b}, prompt {self.s.prompt}, {steps} steps", t,
                           max(per_step), argmax_agreement(forced, ref_forced),
                           per_step_rel_err=[round(e, 6) for e in per_step], compared="teacher-forced",
                           free_running_agreement=(tokens == ref_tokens).double().mean().item(),
                           free_running_last_step_rel_err=rel_err(logits, ref_logits), **why)
            self.guarded(rows, pair.name, "greedy decode (ms/token)", f"batch {b}", one)

    def bert(self, rows: list) -> None:
        b, n = self.s.bert_shape
        pair = Pair("bert_large_dims_4_layers", bert(self.s.bert, self.dtype(torch.float16), self.s.device), self.s)
        self.pairs.append(pair)
        x = ids(b, n, self.s.bert["vocab_size"], self.s.device, 1)
        pair.precompile((x,))

        def one():
            with torch.no_grad():
                pair.first(lambda: pair.gl(x))
                ref, out = pair.torch(x).last_hidden_state, pair.gl(x).last_hidden_state
                fns = [lambda: pair.torch(x), lambda: pair.gl(x)]
                t = interleaved_ms(fns, self.s.warmup, self.s.reps, self.s.device)
                why = self.why(fns)
            return row(pair.name, "forward", f"{b}x{n}", t, rel_err(out, ref), None, dtype=str(ref.dtype), **why)
        self.guarded(rows, pair.name, "forward", f"{b}x{n}", one)

    def vit(self, rows: list) -> None:
        pair = Pair(self.s.vit, vit(self.s.vit, self.dtype(torch.bfloat16), self.s.device), self.s)
        self.pairs.append(pair)
        g = torch.Generator(device="cpu").manual_seed(2)
        cfg = getattr(pair.torch, "pretrained_cfg", None) or {}
        size = tuple(cfg.get("input_size", (3, 224, 224)))
        x = torch.randn((self.s.vit_batch, *size), generator=g).to(self.s.device, next(pair.torch.parameters()).dtype)
        pair.precompile((x,))

        def one():
            with torch.no_grad():
                pair.first(lambda: pair.gl(x))
                ref, out = pair.torch(x), pair.gl(x)
                fns = [lambda: pair.torch(x), lambda: pair.gl(x)]
                t = interleaved_ms(fns, self.s.warmup, self.s.reps, self.s.device)
                why = self.why(fns)
            return row(pair.name, "forward", f"batch {self.s.vit_batch}", t, rel_err(out, ref), argmax_agreement(out, ref),
                       **why)
        self.guarded(rows, pair.name, "forward", f"batch {self.s.vit_batch}", one)

    def train(self, rows: list) -> None:
        b, n = self.s.train_shape
        model = llama(self.s.llama_train, self.dtype(torch.bfloat16), self.s.device).train()
        pair = Pair("llama_1024_4_layers", model, self.s)
        pair.gl.train()
        self.pairs.append(pair)
        x = ids(b, n, self.s.llama_train["vocab_size"], self.s.device, 3)
        pair.precompile((x,), {"labels": x})
        opts = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in (pair.torch, pair.gl)]
        losses: list[list[float]] = [[], []]

        def step(i: int) -> None:
            m, opt = (pair.torch, pair.gl)[i], opts[i]
            opt.zero_grad(set_to_none=True)
            loss = m(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            losses[i].append(loss.detach())

        def one():
            # the first step of each (the gemm-ladder one with the cache counted), then the timed ones;
            # both take the same steps on the same data, so their losses stay comparable
            step(0)
            pair.first(lambda: step(1))
            t = interleaved_ms([lambda: step(0), lambda: step(1)], self.s.warmup, self.s.reps, self.s.device)
            why = self.why([lambda: step(0), lambda: step(1)])  # the same number of extra steps on each side
            first = [float(v[0]) for v in losses]
            last = [float(v[-1]) for v in losses]
            return row(pair.name, "training step (AdamW)", f"{b}x{n}", t, abs(last[1] - last[0]) / abs(last[0]), None,
                       loss_first=first, loss_last=last, steps=len(losses[0]), **why)
        self.guarded(rows, pair.name, "training step (AdamW)", f"{b}x{n}", one)

    def compile_prefill(self, rows: list) -> None:
        pair = self.llama_pair()
        b, n = self.s.compile_shape
        x = ids(b, n, self.s.llama["vocab_size"], self.s.device, 4)
        pair.precompile((x,))

        def one():
            ct, cg = torch.compile(pair.torch), torch.compile(pair.gl)
            with torch.no_grad():
                pair.first(lambda: pair.gl(x))
                t0 = time.perf_counter()
                ref = ct(x).logits
                compile_torch = time.perf_counter() - t0
                t0 = time.perf_counter()
                out = cg(x).logits
                compile_gl = time.perf_counter() - t0
                t = interleaved_ms([lambda: ct(x), lambda: cg(x)], self.s.warmup, self.s.reps, self.s.device)
                why = self.why([lambda: ct(x), lambda: cg(x)])
            return row(pair.name, "torch.compile prefill", f"{b}x{n}", t, rel_err(out, ref), argmax_agreement(out, ref),
                       first_compile_s=[round(compile_torch, 1), round(compile_gl, 1)], **why)
        self.guarded(rows, pair.name, "torch.compile prefill", f"{b}x{n}", one)

    def reduce_overhead(self, rows: list) -> None:
        pair = self.llama_pair()
        x = ids(1, 1, self.s.llama["vocab_size"], self.s.device, 5)
        pair.precompile((x,))

        def one():
            def stepper(model):
                compiled = torch.compile(model, mode="reduce-overhead")

                def step():
                    # a fresh input each call, as a decode loop passes; the graph's output cloned
                    # before the next replay overwrites it
                    return compiled(input_ids=x.clone(), use_cache=False).logits.clone()
                return step
            st, sg = stepper(pair.torch), stepper(pair.gl)
            with torch.no_grad():
                pair.first(lambda: pair.gl(x, use_cache=False))
                ref = [st() for _ in range(3)][-1]
                out = [sg() for _ in range(3)][-1]
                t = interleaved_ms([st, sg], self.s.warmup, self.s.reps, self.s.device)
                why = self.why([st, sg])
            return row(pair.name, 'torch.compile(mode="reduce-overhead") one-token step', "1x1", t, rel_err(out, ref),
                       argmax_agreement(out, ref), **why)
        self.guarded(rows, pair.name, 'torch.compile(mode="reduce-overhead") one-token step', "1x1", one)


def describe(r: dict) -> str:
    head = f"{r['model']:28s} {r['mode']:50s} {r['shape']:28s}"
    if r.get("error"):
        return f"{head} FAILED: {r['error']}"
    if r.get("skipped"):
        return f"{head} skipped: {r['skipped']}"
    agree = "" if r["argmax_agreement"] is None else f", argmax {r['argmax_agreement']:.3f}"
    why = ""
    if r.get("gemm_gpu_ms_gl") is not None:
        why = (f"; GEMM GPU torch {r['gemm_gpu_ms_torch']:.3f} / gl {r['gemm_gpu_ms_gl']:.3f} ms, host torch "
               f"{r['host_ms_torch']:.3f} / gl {r['host_ms_gl']:.3f} ms")
        if r.get("slower_because"):
            why += f": slower because of the {r['slower_because']}"
    return (f"{head} torch {r['t_torch_ms']:8.3f} ms  gl {r['t_gl_ms']:8.3f} ms  {r['speedup']:.3f}x  "
            f"rel_err {r['rel_err']:.2e}{agree}{why}")


def missing(case: str) -> str | None:
    """Why ``case`` cannot run here (its library is not installed), or None."""
    import importlib.util

    lib = NEEDS[case]
    if importlib.util.find_spec(lib) is None:
        return f"needs {lib} (pip install -e '.[models]')"
    return None


def run(cases: list[str], s: Settings) -> dict:
    """Run ``cases`` in order; returns {rows, models, summary}. A case whose library is missing is a
    skipped row; a case that fails before its rows (building the model) is one row with its error."""
    runner = Cases(s)
    rows: list[dict] = []
    for case in cases:
        reason = missing(case)
        if reason:
            rows.append(row(case, case, "-", None, None, None, skipped=reason))
            print(describe(rows[-1]), flush=True)
            continue
        before = len(rows)
        try:
            getattr(runner, case)(rows)
        except Exception as exc:  # noqa: BLE001 - the model could not be built or prepared: one row says why
            if len(rows) == before:
                rows.append(row(case, case, "-", None, None, None, error=f"{type(exc).__name__}: {exc}".splitlines()[0]))
                print(describe(rows[-1]), flush=True)
    return {"rows": rows, "models": [p.info for p in runner.pairs], "summary": summarize(rows)}


def summarize(rows: list[dict]) -> dict:
    timed = [r["speedup"] for r in rows if r.get("speedup")]
    bad = [f"{r['model']} {r['mode']} {r['shape']}" for r in rows if r.get("error") or not agrees(r)]
    return {"rows_timed": len(timed), "rows_failed": sum(1 for r in rows if r.get("error")),
            "rows_skipped": sum(1 for r in rows if r.get("skipped")),
            "geomean_speedup": math.exp(sum(map(math.log, timed)) / len(timed)) if timed else None,
            "every_row_at_least_1x": bool(timed) and min(timed) >= 1.0 and len(timed) == len(rows),
            "min_speedup": min(timed) if timed else None, "disagreeing_or_failed": bad}


def agrees(r: dict) -> bool:
    if r.get("skipped") or r.get("error"):
        return True  # counted elsewhere
    ok = r["rel_err"] is not None and r["rel_err"] <= MAX_REL_ERR
    return ok and (r["argmax_agreement"] is None or r["argmax_agreement"] >= MIN_ARGMAX)


def parse_only(spec: str | None) -> list[str]:
    if not spec:
        return list(CASES)
    names = [c.strip() for c in spec.split(",") if c.strip()]
    unknown = [c for c in names if c not in CASES]
    if unknown or not names:
        raise ValueError(f"--only {spec!r}: use a comma list of {', '.join(CASES)}")
    return names


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer shapes and repetitions (about 3 minutes)")
    p.add_argument("--only", default=None, help=f"comma list of cases: {', '.join(CASES)}")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per row (default 15, --quick 5)")
    p.add_argument("--no-precompile", action="store_true",
                   help="do not precompile the models first (the first call then builds; counted in the result)")
    p.add_argument("--no-breakdown", action="store_true",
                   help="do not profile the rows (GEMM kernels' GPU time and host time per side)")
    p.add_argument("--gated-mlp", action="store_true",
                   help="gemm-ladder's side also runs its gated MLPs on gemm_ladder.swiglu (nn.replace_gated_mlp)")
    add_output_argument(p)
    args = p.parse_args()
    try:
        cases = parse_only(args.only)
        if args.reps is not None and args.reps < 1:
            raise ValueError(f"--reps {args.reps}: at least 1")
    except ValueError as exc:
        print(f"bench/models.py: {exc}", file=sys.stderr)
        return 2
    check_output(__file__, args.output)
    require_gpu(__file__)
    reasons = {c: missing(c) for c in cases}
    if all(reasons.values()):
        print(f"bench/models.py: nothing to run: {'; '.join(sorted(set(reasons.values())))}", file=sys.stderr)
        return 2
    s = quick(Settings()) if args.quick else Settings()
    if args.reps is not None:
        s.reps = args.reps
    s.precompile = not args.no_precompile
    s.breakdown = not args.no_breakdown
    s.gated_mlp = args.gated_mlp
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    t0 = time.perf_counter()
    result = run(cases, s)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    from gemm_ladder.runtime.compiler import cache_root

    result["settings"] = {"quick": args.quick, "cases": cases, "warmup": s.warmup, "reps": s.reps,
                          "precompile": s.precompile, "breakdown": s.breakdown, "gated_mlp": s.gated_mlp,
                          "kernel_cache": str(cache_root())}
    summary = result["summary"]
    if summary["geomean_speedup"]:
        print(f"geomean speedup {summary['geomean_speedup']:.3f}x over {summary['rows_timed']} rows; "
              f"min {summary['min_speedup']:.3f}x; {summary['rows_failed']} failed, {summary['rows_skipped']} skipped")
    save(result, ("models_quick" if args.quick else "models") + ("_gated_mlp" if args.gated_mlp else ""), args.output)
    return 1 if summary["disagreeing_or_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
