"""A tensor-parallel Llama block's linears on gemm-ladder: the MLP (gate and up column-parallel with
the SwiGLU fused, down row-parallel) and the attention projections (q, k, v column-parallel by
heads, o row-parallel), checked against the same layers unsharded on one GPU.

    python examples/tp_llama_mlp.py --world 2          # spawns 2 processes, one GPU each (NCCL)
    torchrun --nproc-per-node 2 examples/tp_llama_mlp.py

Every rank builds the whole layers from one seed (bf16), keeps its shards
(``ColumnParallelLinear.from_linear`` / ``RowParallelLinear.from_linear``) and runs:

* MLP: ``h_r = silu(x @ Wg_r.T) * (x @ Wu_r.T)`` by ``gemm_ladder.swiglu`` on the rank's gate and up
  rows (both GEMMs and the product in one kernel), then ``y = all_reduce(h_r @ Wd_r.T)``;
* attention: ``q_r, k_r, v_r`` for the rank's heads (its rows of Wq, Wk, Wv), causal attention on
  them (torch's scaled_dot_product_attention), then ``o = all_reduce(attn_r @ Wo_r.T)``.

Rank 0 compares each output with the same computation unsharded (gemm-ladder on one GPU) and both with
a float64 reference, prints one line per check, and exits 1 when the tensor-parallel error exceeds
the single-GPU one by more than bf16 rounding of the reduction allows (2x, plus 2e-3). Exit status 2
(one line) when fewer GPUs than ``--world`` are visible. NVLink multicast stays off
(gemm_ladder.parallel.NO_MULTICAST is set before NCCL starts).
"""

from __future__ import annotations

import argparse
import os
import sys
import types

from gemm_ladder.parallel import NO_MULTICAST

os.environ.update(NO_MULTICAST)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gemm_ladder  # noqa: E402
from gemm_ladder.nn import ColumnParallelLinear, RowParallelLinear  # noqa: E402

BF16 = torch.bfloat16


def build(args, device):
    """The whole layers (the same on every rank: one seed), bf16 on ``device``."""
    g = torch.Generator().manual_seed(args.seed)
    h, i, d = args.hidden, args.intermediate, args.head_dim

    def lin(n, k):
        layer = torch.nn.Linear(k, n, bias=False, dtype=torch.float32)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(n, k, generator=g) / k ** 0.5)
        return layer.to(device=device, dtype=BF16)

    layers = {"gate": lin(i, h), "up": lin(i, h), "down": lin(h, i), "q": lin(args.heads * d, h),
              "k": lin(args.kv_heads * d, h), "v": lin(args.kv_heads * d, h), "o": lin(h, args.heads * d)}
    x = torch.randn(args.tokens, h, generator=g).to(device=device, dtype=BF16)
    return layers, x


def attention(q, k, v, heads, kv_heads, head_dim):
    """Causal attention over (T, heads * head_dim) projections (grouped-query: kv heads repeated)."""
    t = q.shape[0]
    q = q.view(t, heads, head_dim).transpose(0, 1)
    k = k.view(t, kv_heads, head_dim).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
    v = v.view(t, kv_heads, head_dim).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(t, heads * head_dim)


def unsharded(layers, x, args, gemm):
    """The MLP and the attention block on one GPU with ``gemm(x, w)`` (gemm-ladder or float64)."""
    w = {name: layer.weight for name, layer in layers.items()}
    mlp = gemm(F.silu(gemm(x, w["gate"])) * gemm(x, w["up"]), w["down"])
    a = attention(gemm(x, w["q"]), gemm(x, w["k"]), gemm(x, w["v"]), args.heads, args.kv_heads, args.head_dim)
    return mlp, gemm(a, w["o"])


def sharded(layers, x, args):
    """The same on this rank's shards (tensor parallel over the default process group)."""
    p = dist.get_world_size() if dist.is_initialized() else 1
    gate = ColumnParallelLinear.from_linear(layers["gate"])
    up = ColumnParallelLinear.from_linear(layers["up"])
    down = RowParallelLinear.from_linear(layers["down"])
    mlp = down(gemm_ladder.swiglu(x, gate.weight.detach(), up.weight.detach()))  # swiglu has no backward
    q, k, v = (ColumnParallelLinear.from_linear(layers[n]) for n in ("q", "k", "v"))
    o = RowParallelLinear.from_linear(layers["o"])
    a = attention(q(x), k(x), v(x), args.heads // p, args.kv_heads // p, args.head_dim)
    return mlp, o(a)


def rel(y, ref) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


def run(rank: int, world: int, args) -> dict:
    """One rank's work (the process group already made); on rank 0 the checks as a dict."""
    device = torch.device("cuda", torch.cuda.current_device())
    layers, x = build(args, device)
    with torch.no_grad():
        tp = sharded(layers, x, args)
        if rank != 0:
            return {}
        one = unsharded(layers, x, args, lambda a, w: gemm_ladder.linear(a, w))
        weights64 = {n: types.SimpleNamespace(weight=l.weight.double()) for n, l in layers.items()}
        ref = unsharded(weights64, x.double(), args, lambda a, w: a @ w.T)
    out = {}
    for name, t, o, r in zip(("mlp", "attention"), tp, one, ref):
        e_tp, e_one = rel(t, r), rel(o, r)
        out[name] = {"rel_err_tp": e_tp, "rel_err_one_gpu": e_one, "tp_vs_one_gpu": rel(t, o.double()),
                     "ok": e_tp <= 2 * e_one + 2e-3}
    return out


def _worker(rank: int, world: int, args, port: int, path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        result = run(rank, world, args)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        torch.save(result, path)  # the parent reports (a worker's SystemExit would print a traceback)


def report(result: dict, world: int) -> None:
    bad = False
    for name, r in result.items():
        print(f"{name}: world {world}: rel err tensor-parallel {r['rel_err_tp']:.2e}, one GPU {r['rel_err_one_gpu']:.2e}"
              f" (vs float64); tensor-parallel vs one GPU {r['tp_vs_one_gpu']:.2e}: {'ok' if r['ok'] else 'MISMATCH'}")
        bad |= not r["ok"]
    if bad:
        raise SystemExit(1)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=None, help="processes to spawn (default: 1, or torchrun's)")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        try:
            result = run(rank, world, args)
        finally:
            dist.destroy_process_group()
        if rank == 0:
            report(result, world)
        return
    world = args.world or 1
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < world:
        print(f"examples/tp_llama_mlp.py: needs {world} GPUs, {have} visible; nothing run", file=sys.stderr)
        raise SystemExit(2)
    for what, n in (("--intermediate", args.intermediate), ("--heads", args.heads), ("--kv-heads", args.kv_heads)):
        if n % world:
            print(f"examples/tp_llama_mlp.py: {what} {n} does not split over {world} ranks", file=sys.stderr)
            raise SystemExit(2)
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.pt")
        mp.spawn(_worker, args=(world, args, port, path), nprocs=world, join=True)
        report(torch.load(path), world)


if __name__ == "__main__":
    main()
