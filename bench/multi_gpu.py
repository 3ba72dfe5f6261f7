"""gemm-ladder on several GPUs (issue 27), against torch's own layers under the same parallelism:

    python bench/multi_gpu.py                      # spread over 2 and 4 GPUs, tensor parallel at 2, 4, 8
    python bench/multi_gpu.py --spread 2 --tp 2,4 --quick
    python bench/multi_gpu.py --spread 1 --tp 1 --quick   # one GPU: the code paths, nothing parallel

* **spread** (one process): a stack of Llama-3-8B MLP blocks (hidden 4096, intermediate 14336, bf16),
  block i on GPU ``i * G // blocks`` (as accelerate's ``device_map`` places layers), the activation
  moved between GPUs; torch's ``nn.Linear`` against the same model after ``replace_linear``. Checks
  that the current device is unchanged and the outputs agree.
* **tp** (one process per GPU, torch.multiprocessing spawn, NCCL): the same MLP tensor-parallel
  (gate/up column-parallel, down row-parallel with an all-reduce): gemm-ladder's layers
  (``gemm_ladder.nn.ColumnParallelLinear`` / ``RowParallelLinear``, the SwiGLU fused) against the
  same layers on ``F.linear`` (the same collectives) and against torch's own tensor parallelism
  (``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel`` on DTensor), at prefill
  (4096 tokens) and decode (16 tokens) sizes. Time per step: the slowest rank's, median of rounds.

Asking for more GPUs than are visible is refused before any work: one line, exit status 2 (as is a
machine without a GPU). NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1, set before NCCL starts). Result:
``DATE_multi_gpu_COMMIT.json`` with ``spread`` and ``tp`` rows (t_torch_ms, t_gl_ms, speedup, rel_err).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

from gemm_ladder.parallel import NO_MULTICAST

os.environ.update(NO_MULTICAST)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from suite import add_output_argument, require_gpu, save  # noqa: E402

BF16 = torch.bfloat16
HIDDEN, INTER = 4096, 14336


def sizes(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()] if text else []


class MLP(torch.nn.Module):
    """Llama's MLP: down(silu(gate(x)) * up(x)), on nn.Linear."""

    def __init__(self, hidden, inter, device, dtype=BF16):
        super().__init__()
        self.gate = torch.nn.Linear(hidden, inter, bias=False, device=device, dtype=dtype)
        self.up = torch.nn.Linear(hidden, inter, bias=False, device=device, dtype=dtype)
        self.down = torch.nn.Linear(inter, hidden, bias=False, device=device, dtype=dtype)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def timed(fn, rounds: int, iters: int, sync) -> float:
    """Median over ``rounds`` of the mean ms per call of ``iters`` calls (after warm-up)."""
    for _ in range(3):
        fn()
    sync()
    out = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        out.append((time.perf_counter() - t0) / iters * 1e3)
    return statistics.median(out)


def rel(y, ref) -> float:
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


# --- one process, layers spread over GPUs ------------------------------------------------------------


def spread(gpus: int, args) -> dict:
    from gemm_ladder.nn import replace_linear

    torch.manual_seed(0)
    blocks = args.blocks
    devices = [torch.device("cuda", i * gpus // blocks) for i in range(blocks)]
    model = torch.nn.ModuleList(MLP(HIDDEN, INTER, d) for d in devices)
    for m in model:  # a residual stream of unit scale
        for lin in (m.gate, m.up, m.down):
            torch.nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)

    def forward(x):
        for d, m in zip(devices, model):
            x = x.to(d)
            x = x + m(x)
        return x

    def sync():
        for i in range(gpus):
            torch.cuda.synchronize(i)

    rows = []
    for tokens in args.tokens:
        x = torch.randn(tokens, HIDDEN, device=devices[0], dtype=BF16)
        with torch.no_grad():
            ref = forward(x)
            t_torch = timed(lambda: forward(x), args.rounds, args.iters, sync)
            saved = [(m.gate, m.up, m.down) for m in model]
            replace_linear(model)
            before = torch.cuda.current_device()
            y = forward(x)
            sync()
            same_device = torch.cuda.current_device() == before
            t_gl = timed(lambda: forward(x), args.rounds, args.iters, sync)
            for m, (g, u, dn) in zip(model, saved):
                m.gate, m.up, m.down = g, u, dn
        rows.append({"mode": "spread", "gpus": gpus, "blocks": blocks, "tokens": tokens, "t_torch_ms": t_torch,
                     "t_gl_ms": t_gl, "speedup": t_torch / t_gl, "rel_err": rel(y, ref),
                     "current_device_unchanged": same_device})
        print(rows[-1], flush=True)
    return {"rows": rows}


# --- tensor parallel, one process per GPU ---------------------------------------------------------


def _torch_gemm(x, w, bias=None, *, activation=None):
    y = F.linear(x, w, bias)
    return y if activation is None else {"silu": F.silu, "gelu": F.gelu, "relu": F.relu}[activation](y)


def _tp_rank(rank: int, world: int, args, port: int, path: str) -> None:
    import gemm_ladder
    from gemm_ladder.nn import ColumnParallelLinear, RowParallelLinear

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    try:
        torch.manual_seed(0)  # the same whole layers on every rank
        full = MLP(HIDDEN, INTER, device)
        for lin in (full.gate, full.up, full.down):
            torch.nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)
        layers = {}
        for name, gemm in (("gl", None), ("torch", _torch_gemm)):
            layers[name] = (ColumnParallelLinear.from_linear(full.gate, gemm=gemm),
                            ColumnParallelLinear.from_linear(full.up, gemm=gemm),
                            RowParallelLinear.from_linear(full.down, gemm=gemm))
        g_gl, u_gl, d_gl = layers["gl"]
        g_t, u_t, d_t = layers["torch"]
        wg, wu = g_gl.weight.detach(), u_gl.weight.detach()
        steps = {"gl": lambda x: d_gl(gemm_ladder.swiglu(x, wg, wu)),
                 "torch_same_collectives": lambda x: d_t(F.silu(g_t(x)) * u_t(x))}
        try:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            mesh = init_device_mesh("cuda", (world,))
            dt = MLP(HIDDEN, INTER, device)
            dt.load_state_dict(full.state_dict())
            parallelize_module(dt, mesh, {"gate": ColwiseParallel(), "up": ColwiseParallel(),
                                          "down": RowwiseParallel()})
            steps["torch_dtensor"] = dt
        except Exception as exc:  # noqa: BLE001 - reported in the result, the other rows still run
            steps_error = f"{type(exc).__name__}: {exc}"[:300]
        else:
            steps_error = None

        def sync():
            torch.cuda.synchronize(device)
            dist.barrier()

        rows = []
        for tokens in args.tokens:
            x = torch.randn(tokens, HIDDEN, device=device, dtype=BF16, generator=torch.Generator(device).manual_seed(1))
            with torch.no_grad():
                ref = full(x)
                outs, times = {}, {}
                for name, step in steps.items():
                    outs[name] = step(x)
                    t = torch.tensor(timed(lambda: step(x), args.rounds, args.iters, sync), device=device)
                    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's
                    times[name] = t.item()
            row = {"mode": "tp", "world": world, "tokens": tokens, "t_gl_ms": times["gl"],
                   "t_torch_ms": times["torch_same_collectives"],
                   "speedup": times["torch_same_collectives"] / times["gl"],
                   "rel_err": rel(outs["gl"], ref), "rel_err_torch": rel(outs["torch_same_collectives"], ref)}
            if "torch_dtensor" in times:
                row.update(t_torch_dtensor_ms=times["torch_dtensor"],
                           speedup_vs_dtensor=times["torch_dtensor"] / times["gl"],
                           rel_err_dtensor=rel(outs["torch_dtensor"], ref))
            else:
                row["dtensor_error"] = steps_error
            rows.append(row)
        if rank == 0:
            torch.save(rows, path)
    finally:
        dist.destroy_process_group()


def tp(world: int, args) -> list[dict]:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.pt")
        mp.spawn(_tp_rank, args=(world, args, port, path), nprocs=world, join=True)
        rows = torch.load(path)
    for r in rows:
        print(r, flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spread", default="2,4", help="GPU counts for the one-process spread model ('' for none)")
    p.add_argument("--tp", default="2,4,8", help="world sizes for the tensor-parallel MLP ('' for none)")
    p.add_argument("--blocks", type=int, default=8, help="MLP blocks of the spread model")
    p.add_argument("--quick", action="store_true", help="fewer rounds and iterations")
    add_output_argument(p)
    args = p.parse_args()
    require_gpu(__file__)
    spreads, worlds = sizes(args.spread), sizes(args.tp)
    have = torch.cuda.device_count()
    need = max(spreads + worlds + [1])
    if need > have:
        print(f"bench/multi_gpu.py: needs {need} GPUs, {have} visible; nothing run", file=sys.stderr)
        return 2
    if any(INTER % w for w in worlds):
        print(f"bench/multi_gpu.py: world sizes must divide {INTER}; nothing run", file=sys.stderr)
        return 2
    args.rounds, args.iters = (3, 5) if args.quick else (7, 20)
    args.tokens = [4096, 16]
    rows = []
    for g in spreads:
        rows += spread(g, args)["rows"]
    for w in worlds:
        rows += tp(w, args)
    save({"rows": rows, "gpus_visible": have, "no_multicast": NO_MULTICAST}, "multi_gpu", args.output)
    bad = [r for r in rows if r["rel_err"] > 2e-2 or r.get("current_device_unchanged") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
