"""Mixture-of-experts models as users run them: Hugging Face ``transformers`` (5.x) model code with random
weights from a config, its experts on transformers' default ``torch._grouped_mm`` path and, with the same
weights, on gemm-ladder's grouped kernel (``gemm_ladder.moe``, ``experts_implementation="gemm_ladder"``).

    python bench/moe_models.py [--quick] [--only qwen3_moe,mixtral] [--modes prefill,decode,train,compile,graphs]
                               [--eager] [--reps N] [-o OUT.json]

Models (bf16, ``AutoModel``: the decoder stack without the LM head, so the layers are what is timed):

* ``qwen3_moe``  Qwen3-30B-A3B's dimensions (hidden 2048, 128 experts, 8 per token, expert width 768, 32 heads,
                 4 KV heads) with 2 layers;
* ``mixtral``    Mixtral-8x7B's (hidden 4096, 8 experts, 2 per token, expert width 14336, 32 heads, 8 KV heads)
                 with 2 layers.

Modes, each timed with both implementations interleaved in the same rounds (wall time between two
synchronizations, the first side alternating; medians):

* ``prefill``  eager forward under ``torch.no_grad()`` of batch x length 4 x 1024 and 1 x 333 (a fresh input each call);
* ``decode``   a one-token forward per sequence with no cache, batch 16 and 128 (the experts' decode shape: a few
               rows per expert);
* ``train``    one training step (grad mode on, the parameters ``nn.Parameter``, a loss on the last hidden state,
               backward, AdamW) at 2 x 1024;
* ``compile``  the prefill under ``torch.compile`` (default mode), 4 x 1024;
* ``graphs``   the decode step under ``torch.compile(mode="reduce-overhead")`` (CUDA-graph trees), batch 16.

``--eager`` adds transformers' ``"eager"`` experts (its loop over experts of cuBLAS ``F.linear``) as a third side
to the prefill rows. Outputs are compared on the same inputs (``rel_err``: relative Frobenius error of the last
hidden state against the ``grouped_mm`` side; training: of the losses after the timed steps). The eager prefill and
decode rows also record, from a hook on each layer's router, ``routing_flips`` (per layer, the tokens whose top-k
differ between the sides) and ``rel_err_routed_alike`` (over the tokens routed alike in every layer): a token routed
differently is another computation, and the disagreement bound applies to the routed-alike error where it is recorded. ``speedup`` is
t_grouped_mm / t_gemm_ladder. A row that fails records its error and the script goes on. Needs a CUDA GPU
(else one line, exit 2) and transformers >= 5 (else one line, exit 2). Exit 1 when a row failed or its outputs
disagree (``rel_err_routed_alike`` where recorded, else ``rel_err``, above 0.05), else 0. Result: ``DATE_moe_models[_quick]_COMMIT.json`` with ``rows`` and
``summary`` (geometric mean of the speedups per mode), written after each model (``finished`` false until the
last). On an H100 the Qwen3-MoE model alone took about 150 s with ``--eager`` (its loop over 128 experts).
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time

import torch

from models import interleaved_ms, rel_err
from suite import add_output_argument, require_gpu, require_transformers, save

MODELS = {
    "qwen3_moe": ("Qwen3MoeConfig", dict(vocab_size=4096, hidden_size=2048, num_hidden_layers=2, num_attention_heads=32,
                                         num_key_value_heads=4, head_dim=128, moe_intermediate_size=768,
                                         intermediate_size=6144, num_experts=128, num_experts_per_tok=8,
                                         norm_topk_prob=True, decoder_sparse_step=1, max_position_embeddings=4096)),
    "mixtral": ("MixtralConfig", dict(vocab_size=4096, hidden_size=4096, num_hidden_layers=2, num_attention_heads=32,
                                      num_key_value_heads=8, intermediate_size=14336, num_local_experts=8,
                                      num_experts_per_tok=2, max_position_embeddings=4096)),
}
MODES = ("prefill", "decode", "train", "compile", "graphs")
PREFILL = ((4, 1024), (1, 333))
DECODE = (16, 128)
TRAIN = (2, 1024)
MAX_REL_ERR = 0.05


def build(name: str, implementation: str, state=None):
    """``AutoModel`` of ``name``'s config with ``implementation`` experts, bf16 on CUDA; ``state``: the weights."""
    import transformers

    cls, kw = MODELS[name]
    config = getattr(transformers, cls)(**kw)
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(copy.deepcopy(config), experts_implementation=implementation,
                                               dtype=torch.bfloat16).cuda().eval()
    if state is not None:
        model.load_state_dict(state)
    return model


def tokens(batch: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, 4096, (batch, length), generator=g).cuda()


def row(model: str, mode: str, shape: str, sides: list[str], t: list[float], err: float | None, **extra) -> dict:
    r = {"model": model, "mode": mode, "shape": shape, "sides": sides, "ms": [round(v, 4) for v in t],
         "speedup": t[0] / t[1], "rel_err": err}
    if len(t) > 2:
        r["speedup_vs_eager"] = t[2] / t[1]
    return r | extra


def hidden(model, x):
    return model(input_ids=x, use_cache=False).last_hidden_state


def _indices(out):
    """A router's top-k expert indices: its integer output."""
    outs = out if isinstance(out, tuple) else (out,)
    return next(t for t in outs if isinstance(t, torch.Tensor) and not t.is_floating_point()).clone()


def routed(model, x):
    """(hidden(model, x), each layer's top-k expert indices per token), the indices recorded by a forward hook on each
    layer's router (``mlp.gate``); {} where a layer has none."""
    picks: dict[int, torch.Tensor] = {}
    gates = [getattr(getattr(layer, "mlp", None), "gate", None) for layer in model.layers]
    if any(g is None for g in gates):
        return hidden(model, x), {}
    handles = [g.register_forward_hook(lambda mod, inp, out, i=i: picks.__setitem__(i, _indices(out)))
               for i, g in enumerate(gates)]
    try:
        return hidden(model, x), picks
    finally:
        for h in handles:
            h.remove()


def agreement(out, ref, picks_out: dict, picks_ref: dict) -> dict:
    """``routing_flips`` (per layer, the tokens whose top-k differ between the two sides) and ``rel_err_routed_alike``
    (rel_err over the tokens routed alike in every layer; None where none is), or {} without the routers' picks. A
    token routed differently is another computation: with a random router's near ties a flip of one Mixtral token's
    top-2 moves rel_err by several 1e-2 (bench/experiments/moe_routing_flips.py)."""
    if not picks_out or picks_out.keys() != picks_ref.keys():
        return {}
    count = out.shape[0] * out.shape[1]
    flipped = torch.zeros(count, dtype=torch.bool, device=out.device)
    per_layer = []
    for k in sorted(picks_ref):
        f = ~(picks_out[k].sort(-1).values == picks_ref[k].sort(-1).values).all(-1).reshape(-1)
        per_layer.append(int(f.sum()))
        flipped |= f
    keep = ~flipped
    o, r = out.reshape(count, -1), ref.reshape(count, -1)
    return {"routing_flips": per_layer, "rel_err_routed_alike": rel_err(o[keep], r[keep]) if keep.any() else None}


def run_model(name: str, modes: list[str], reps: int, warmup: int, eager: bool) -> list[dict]:
    """Every requested mode of one model; a failing mode records its error."""
    rows: list[dict] = []
    ref = build(name, "grouped_mm")
    ours = build(name, "gemm_ladder", ref.state_dict())
    loop = build(name, "eager", ref.state_dict()) if eager else None

    def guarded(mode: str, shape: str, fn):
        t0 = time.perf_counter()
        try:
            r = fn()
        except Exception as e:  # a failing mode is a row with its error; the run goes on
            r = {"model": name, "mode": mode, "shape": shape, "error": f"{type(e).__name__}: {e}"[:500]}
        r["seconds"] = round(time.perf_counter() - t0, 1)
        print(describe(r), flush=True)
        rows.append(r)

    with torch.no_grad():
        if "prefill" in modes:
            for b, n in PREFILL:
                def prefill(b=b, n=n):
                    models = [ref, ours] + ([loop] if loop is not None else [])
                    x = tokens(b, n, 1)
                    outs = [routed(m, x) for m in models]
                    fresh = lambda m: lambda: hidden(m, tokens(b, n, int(time.perf_counter_ns()) % 1000))  # noqa: E731
                    t = interleaved_ms([fresh(m) for m in models], warmup, reps, "cuda")
                    return row(name, "prefill", f"{b}x{n}", ["grouped_mm", "gemm_ladder"] + (["eager"] if loop else []),
                               t, rel_err(outs[1][0], outs[0][0]), **agreement(outs[1][0], outs[0][0], outs[1][1],
                                                                               outs[0][1]))
                guarded("prefill", f"{b}x{n}", prefill)
        if "decode" in modes:
            for b in DECODE:
                def decode(b=b):
                    x = tokens(b, 1, 2)
                    (o, po), (a, pa) = routed(ours, x), routed(ref, x)
                    t = interleaved_ms([lambda m=m: hidden(m, tokens(b, 1, 3)) for m in (ref, ours)], warmup, reps, "cuda")
                    return row(name, "decode step (no cache)", f"{b}x1", ["grouped_mm", "gemm_ladder"], t, rel_err(o, a),
                               **agreement(o, a, po, pa))
                guarded("decode step (no cache)", f"{b}x1", decode)
        if "compile" in modes:
            def compiled():
                b, n = PREFILL[0]
                x = tokens(b, n, 4)
                cr, co = torch.compile(ref), torch.compile(ours)
                t0 = time.perf_counter()
                a = hidden(cr, x)
                first_ref = time.perf_counter() - t0
                t0 = time.perf_counter()
                o = hidden(co, x)
                first_ours = time.perf_counter() - t0
                t = interleaved_ms([lambda: hidden(cr, tokens(b, n, 5)), lambda: hidden(co, tokens(b, n, 5))],
                                   warmup, reps, "cuda")
                return row(name, "torch.compile prefill", f"{b}x{n}", ["grouped_mm", "gemm_ladder"], t, rel_err(o, a),
                           first_call_s=[round(first_ref, 1), round(first_ours, 1)])
            guarded("torch.compile prefill", f"{PREFILL[0][0]}x{PREFILL[0][1]}", compiled)
        if "graphs" in modes:
            def graphs():
                b = DECODE[0]

                def stepper(model):
                    c = torch.compile(model, mode="reduce-overhead")
                    return lambda: c(input_ids=tokens(b, 1, 6), use_cache=False).last_hidden_state.clone()
                sr, so = stepper(ref), stepper(ours)
                a, o = [sr() for _ in range(3)][-1], [so() for _ in range(3)][-1]
                t = interleaved_ms([sr, so], warmup, reps, "cuda")
                return row(name, 'torch.compile(mode="reduce-overhead") decode step', f"{b}x1",
                           ["grouped_mm", "gemm_ladder"], t, rel_err(o, a))
            guarded('torch.compile(mode="reduce-overhead") decode step', f"{DECODE[0]}x1", graphs)
    if "train" in modes:
        def train():
            b, n = TRAIN
            models = [ref.train(), ours.train()]  # the last mode: the eval models themselves (memory)
            opts = [torch.optim.AdamW(m.parameters(), lr=1e-5) for m in models]
            x = tokens(b, n, 7)
            losses: list[list[float]] = [[], []]

            def step(i):
                opts[i].zero_grad(set_to_none=True)
                loss = hidden(models[i], x).float().pow(2).mean()
                loss.backward()
                opts[i].step()
                losses[i].append(loss.detach())
            t = interleaved_ms([lambda: step(0), lambda: step(1)], warmup, reps, "cuda")
            last = [float(v[-1]) for v in losses]
            return row(name, "training step (AdamW)", f"{b}x{n}", ["grouped_mm", "gemm_ladder"], t,
                       abs(last[1] - last[0]) / abs(last[0]), loss_first=[float(v[0]) for v in losses], loss_last=last,
                       steps=len(losses[0]))
        guarded("training step (AdamW)", f"{TRAIN[0]}x{TRAIN[1]}", train)
    return rows


def describe(r: dict) -> str:
    if "error" in r:
        return f"{r['model']:>10} {r['mode']:<48} {r['shape']:>8}  ERROR {r['error']}"
    ms = " / ".join(f"{v:.3f}" for v in r["ms"])
    eager = f", {r['speedup_vs_eager']:.2f}x eager" if "speedup_vs_eager" in r else ""
    alike = ""
    if "routing_flips" in r:
        kept = r["rel_err_routed_alike"]
        alike = f" (routing flips {r['routing_flips']}; routed alike {'-' if kept is None else f'{kept:.1e}'})"
    return (f"{r['model']:>10} {r['mode']:<48} {r['shape']:>8}  {ms} ms ({'/'.join(r['sides'])})  "
            f"{r['speedup']:.3f}x grouped_mm{eager}  rel_err {r['rel_err']:.1e}{alike}")


def compared_err(r: dict) -> float:
    """The error the disagreement bound applies to: over the tokens routed alike where the row recorded them, else
    the whole output's (the compiled modes and training, whose routers are not hooked)."""
    kept = r.get("rel_err_routed_alike")
    return (kept if kept is not None else r.get("rel_err")) or 0.0


def summarize(rows: list[dict]) -> dict:
    by_mode: dict[str, list[float]] = {}
    for r in rows:
        if "speedup" in r:
            by_mode.setdefault(r["mode"], []).append(r["speedup"])
    geo = {m: math.exp(sum(map(math.log, v)) / len(v)) for m, v in by_mode.items()}
    return {"geomean_speedup_by_mode": geo, "failed": sum("error" in r for r in rows),
            "disagree": sum(compared_err(r) > MAX_REL_ERR for r in rows)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions (3 warm-up, 5 timed)")
    p.add_argument("--only", help=f"models, comma-separated, of {','.join(MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {','.join(MODES)}")
    p.add_argument("--eager", action="store_true", help="time transformers' eager experts loop too (prefill rows)")
    p.add_argument("--reps", type=int, default=None, help="timed rounds (default 15; --quick 5)")
    add_output_argument(p)
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(MODELS)
    modes = args.modes.split(",")
    bad = [n for n in names if n not in MODELS] + [m for m in modes if m not in MODES]
    if bad:
        print(f"moe_models.py: unknown model or mode {', '.join(bad)} (models {', '.join(MODELS)}; modes "
              f"{', '.join(MODES)})", file=sys.stderr)
        return 2
    require_gpu(__file__)
    require_transformers(__file__)
    import gemm_ladder.moe

    gemm_ladder.moe.register_transformers()
    reps = args.reps or (5 if args.quick else 15)
    warmup = 3
    rows: list[dict] = []
    for name in names:  # the result written after each model: a run cut short keeps the models it finished
        rows += run_model(name, modes, reps, warmup, args.eager)
        torch.cuda.empty_cache()
        summary = summarize(rows)
        save({"rows": rows, "summary": summary, "models": {n: MODELS[n][1] for n in names}, "quick": args.quick,
              "finished": name == names[-1]}, "moe_models_quick" if args.quick else "moe_models", args.output)
    print(summary)
    return 1 if summary["failed"] or summary["disagree"] else 0


if __name__ == "__main__":
    sys.exit(main())
