"""Where the host time of a transformers MoE layer on gemm-ladder goes (issue 24: the two-layer Qwen3-MoE model
paid about 0.4 ms a layer more than transformers' ``grouped_mm`` path at decode and at 333 tokens, bench/moe_models.py).

One experts layer of Qwen3-30B-A3B's dimensions (transformers 5.x, random weights, bf16): its forward through
``gemm_ladder.moe.experts_forward`` and through transformers' ``grouped_mm`` function, each timed per call as the
wall time of a loop of calls on fresh hidden states (launches queue faster than they run only where the GPU is
the bound: at decode the loop measures the host), under ``torch.no_grad()``; then the pieces of ours alone (the
routing ops, ``grouped_swiglu``, ``grouped_linear``, their checks, a tensor map's encoding, a launch) and of torch's
(``torch._grouped_mm``), and a ``cProfile`` of the whole layer (the functions with the most own time), and a torch.profiler trace of each side (kernels' device time, ops' CPU
time). With
``--train`` also a forward and backward of the layer with grad mode on (nn.Parameter weights).

    python bench/experiments/moe_host_profile.py [--tokens 16,128,333] [--calls 200] [--train] [-o FILE]

Writes ``DATE_moe_host_profile_COMMIT.json`` (``$OUT`` or bench/results/): ``rows: [{tokens, what, us}]`` and
``profile: {tokens: [[function, calls, own us per layer call, cumulative us per layer call]]}``, ``trace: {tokens:
{side: {device_us_per_call, cpu_self_us_per_call, kernels, cpu_ops}}}``. Needs a CUDA GPU
and transformers >= 5 (else one line, exit 2).
"""

from __future__ import annotations

import argparse
import cProfile
import copy
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from suite import add_output_argument, require_gpu, require_transformers, save  # noqa: E402

CONFIG = dict(vocab_size=4096, hidden_size=2048, num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=4,
              head_dim=128, moe_intermediate_size=768, intermediate_size=6144, num_experts=128, num_experts_per_tok=8,
              norm_topk_prob=True, decoder_sparse_step=1, max_position_embeddings=4096)


def experts_layer():
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(copy.deepcopy(transformers.Qwen3MoeConfig(**CONFIG)),
                                               dtype=torch.bfloat16).cuda().eval()
    return model.layers[0].mlp.experts


def per_call_us(fn, args_list, repeats: int = 3) -> float:
    """Median over ``repeats`` of the wall time of calling ``fn`` on each of ``args_list`` (synchronized at both
    ends), per call, in microseconds."""
    fn(*args_list[0])
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for args in args_list:
            fn(*args)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / len(args_list) * 1e6)
    return sorted(times)[len(times) // 2]


def inputs(tokens: int, calls: int, experts: int, top_k: int, hidden: int):
    out = []
    for i in range(calls):
        g = torch.Generator(device="cuda").manual_seed(i)
        h = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
        logits = torch.randn(tokens, experts, device="cuda", generator=g)
        w, idx = torch.topk(torch.softmax(logits, -1), top_k, dim=-1)
        out.append((h, idx, (w / w.sum(-1, keepdim=True)).to(torch.bfloat16)))
    return out


def routed(layer, h, idx):
    """The grouped rows and offs experts_forward makes (for timing the products alone)."""
    e, top_k = layer.down_proj.shape[0], idx.shape[-1]
    sorted_ids, order = torch.sort(idx.reshape(-1), stable=True)
    offs = torch.searchsorted(sorted_ids, torch.arange(1, e + 1, device=h.device, dtype=sorted_ids.dtype),
                              out_int32=True)
    return h[order // top_k].contiguous(), offs


def run(tokens: int, calls: int, train: bool) -> tuple[list[dict], list]:
    from transformers.integrations.moe import grouped_mm_experts_forward

    import gemm_ladder
    from gemm_ladder import moe
    from gemm_ladder.api_grouped import check_grouped_mm, grouped_mm_direct
    from gemm_ladder.library.grouped import _encode
    from gemm_ladder.ops_grouped_swiglu import check_grouped_swiglu, fused_kernel

    layer = experts_layer()
    e, hidden = layer.down_proj.shape[0], layer.down_proj.shape[1]
    half = layer.gate_up_proj.shape[1] // 2
    wg, wu, wd = layer.gate_up_proj[:, :half], layer.gate_up_proj[:, half:], layer.down_proj
    args = inputs(tokens, calls, e, 8, hidden)
    rows = [(routed(layer, h, idx)) for h, idx, _ in args]
    mids = [(torch.randn(r.shape[0], half, device="cuda", dtype=torch.bfloat16), offs) for r, offs in rows]
    kernel = fused_kernel()
    x0, offs0 = rows[0]
    out0 = torch.empty(x0.shape[0], half, device="cuda", dtype=torch.bfloat16)
    plan = kernel.plan(x0.shape[0], half, hidden, e, "bf16", ldx=hidden, w_strides=kernel.w_strides(wg))
    timed = {
        "ours: experts_forward": (lambda h, i, w: moe.experts_forward(layer, h, i, w), args),
        "torch: grouped_mm_experts_forward": (lambda h, i, w: grouped_mm_experts_forward(layer, h, i, w), args),
        "ours: routing ops only (sort, offs, gather)": (lambda h, i, w: routed(layer, h, i), args),
        "ours: grouped_swiglu": (lambda x, offs: gemm_ladder.grouped_swiglu(x, wg, wu, offs), rows),
        "ours: grouped_linear (down)": (lambda x, offs: gemm_ladder.grouped_linear(x, wd, offs), mids),
        "ours: check_grouped_swiglu": (lambda x, offs: check_grouped_swiglu(x, wg, wu, offs), rows),
        "ours: check_grouped_mm": (lambda x, offs: check_grouped_mm(x, wg.transpose(-2, -1), offs), rows),
        "ours: supports_swiglu": (lambda x, offs: kernel.supports_swiglu(x, wg, wu, offs, out0), [rows[0]] * calls),
        "ours: launch_swiglu (same tensors: maps cached)": (lambda x, offs: kernel.launch_swiglu(x, wg, wu, offs, out0),
                                                             [rows[0]] * calls),
        "ours: encode x's map (cuda-python)": (lambda x, offs: _encode(x.device, (plan.tensor_maps["x"], x)), rows),
        "torch: _grouped_mm (down)": (lambda x, offs: torch._grouped_mm(x, wd.transpose(-2, -1), offs), mids),
        "torch: empty_like": (lambda x, offs: torch.empty_like(x), rows),
    }
    for bn in (128, 256):  # the down projection's tile width forced (choose_bn takes 256 at N = 2048)
        timed[f"ours: down at BN {bn} (grouped_mm_direct)"] = (
            lambda x, offs, bn=bn: grouped_mm_direct(x, wd.transpose(-2, -1), offs, bn=bn), mids)
        timed[f"ours: down at BN {bn}, one CTA"] = (
            lambda x, offs, bn=bn: grouped_mm_direct(x, wd.transpose(-2, -1), offs, bn=bn, cluster=1), mids)
    out = []
    with torch.no_grad():
        for what, (fn, a) in timed.items():
            out.append({"tokens": tokens, "what": what, "us": round(per_call_us(fn, a), 2)})
        prof = cProfile.Profile()
        prof.enable()
        for h, i, w in args:
            moe.experts_forward(layer, h, i, w)
        torch.cuda.synchronize()
        prof.disable()
        trace = kernel_trace({"ours": lambda h, i, w: moe.experts_forward(layer, h, i, w),
                              "torch": lambda h, i, w: grouped_mm_experts_forward(layer, h, i, w)}, args[:20])
    if train:
        for p in layer.parameters():
            p.requires_grad_(True)
        targs = [(h.requires_grad_(True), i, w) for h, i, w in args[: max(20, calls // 4)]]

        def step(fn):
            return lambda h, i, w: fn(layer, h, i, w).float().square().mean().backward()

        out.append({"tokens": tokens, "what": "ours: forward+backward", "us": round(per_call_us(step(moe.experts_forward), targs), 2)})
        out.append({"tokens": tokens, "what": "torch: forward+backward",
                    "us": round(per_call_us(step(grouped_mm_experts_forward), targs), 2)})
        trace |= {f"{k} train": v for k, v in kernel_trace({"ours": step(moe.experts_forward),
                                                            "torch": step(grouped_mm_experts_forward)},
                                                           targs[:10]).items()}
    stats = pstats.Stats(prof)
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:30]
    profile = [[f"{Path(f).name}:{line}({name})", nc, round(tt / calls * 1e6, 2), round(ct / calls * 1e6, 2)]
               for (f, line, name), (_, nc, tt, ct, _) in top]
    return out, profile, trace


def kernel_trace(sides: dict, args_list) -> dict:
    """Per side, torch.profiler over ``args_list``'s calls: each CUDA kernel's device time and each op's CPU self
    time, per layer call (us), the 15 largest of each; and the device total per call."""
    from torch.profiler import ProfilerActivity, profile

    result = {}
    for side, fn in sides.items():
        fn(*args_list[0])
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for a in args_list:
                fn(*a)
            torch.cuda.synchronize()
        n = len(args_list)
        events = prof.key_averages()
        dev = sorted(((e.key, e.count / n, e.self_device_time_total / n) for e in events
                      if e.self_device_time_total > 0), key=lambda r: -r[2])
        cpu = sorted(((e.key, e.count / n, e.self_cpu_time_total / n) for e in events), key=lambda r: -r[2])
        result[side] = {"device_us_per_call": round(sum(r[2] for r in dev), 2),
                        "cpu_self_us_per_call": round(sum(r[2] for r in cpu), 2),
                        "kernels": [[k[:90], round(c, 2), round(t, 2)] for k, c, t in dev[:15]],
                        "cpu_ops": [[k[:90], round(c, 2), round(t, 2)] for k, c, t in cpu[:15]]}
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="16,128,333", help="comma-separated token counts (default 16,128,333)")
    p.add_argument("--calls", type=int, default=200, help="calls per timing loop (default 200)")
    p.add_argument("--train", action="store_true", help="also time a forward and backward with grad mode on")
    add_output_argument(p)
    args = p.parse_args()
    try:
        tokens = [int(v) for v in args.tokens.split(",")]
        if min(tokens) < 1 or args.calls < 1:
            raise ValueError
    except ValueError:
        print(f"moe_host_profile.py: --tokens {args.tokens!r} --calls {args.calls}: positive integers", file=sys.stderr)
        return 2
    require_gpu(__file__)
    require_transformers(__file__)
    from gemm_ladder import moe
    moe.register_transformers()
    rows, profiles, traces = [], {}, {}
    for t in tokens:
        r, prof, trace = run(t, args.calls, args.train)
        traces[t] = trace
        rows += r
        profiles[t] = prof
        for row in r:
            print(f"T={t:5d}  {row['what']:<52s} {row['us']:9.2f} us")
        print(f"T={t}: cProfile of experts_forward, per layer call (own us, cumulative us):")
        for name, nc, tt, ct in prof[:25]:
            print(f"    {name:<70s} {nc:7d} {tt:8.2f} {ct:8.2f}")
        for side, tr in trace.items():
            print(f"T={t} {side}: torch.profiler, device {tr['device_us_per_call']} us a call, CPU self "
                  f"{tr['cpu_self_us_per_call']} us; kernels (count, us a call) then CPU ops:")
            for k, c, us in tr["kernels"]:
                print(f"    dev {us:8.2f} x{c:5.2f} {k}")
            for k, c, us in tr["cpu_ops"][:10]:
                print(f"    cpu {us:8.2f} x{c:5.2f} {k}")
    save({"rows": rows, "profile": profiles, "trace": traces}, "moe_host_profile", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
