"""Tensor parallelism on the GPU (issue 27): the parallel linears with gemm-ladder's GEMM under a
real NCCL process group of world size 1 (one GPU: the collectives run, on one rank) against
float64, forward and backward; the example tensor-parallel Llama MLP and attention at world size 1
against the unsharded layers; at world size 2 (skipped: "needs 2 GPUs" on one GPU) the example in
its own processes.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from gemm_ladder.nn import ColumnParallelLinear, RowParallelLinear
from gemm_ladder.parallel import NO_MULTICAST, reduction_plan

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tp_llama_mlp.py"


@pytest.fixture(scope="module")
def nccl():
    os.environ.update(NO_MULTICAST)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    yield
    dist.destroy_process_group()


def rel(y, ref):
    assert not torch.isnan(y).any()
    return ((y.double() - ref).norm() / ref.norm()).item()


def test_parallel_linears_under_nccl_world_size_one(nccl):
    torch.manual_seed(0)
    up = torch.nn.Linear(512, 1024, device="cuda", dtype=BF16)
    down = torch.nn.Linear(1024, 256, device="cuda", dtype=BF16)
    col = ColumnParallelLinear.from_linear(up, activation="gelu", gather_output=True)
    row = RowParallelLinear.from_linear(down, reduce="reduce_scatter")
    assert col.world_size == 1 and reduction_plan(row) == []
    x = torch.randn(4, 64, 512, device="cuda", dtype=BF16, requires_grad=True)
    y = row(col(x))
    ref = F.linear(F.gelu(F.linear(x.double(), up.weight.double(), up.bias.double())), down.weight.double(),
                   down.bias.double())
    assert rel(y, ref) < 1e-2
    y.float().square().mean().backward()
    xr = x.detach().double().requires_grad_()
    upw, upb = up.weight.detach().double().requires_grad_(), up.bias.detach().double().requires_grad_()
    F.linear(F.gelu(F.linear(xr, upw, upb)), down.weight.double(), down.bias.double()).square().mean().backward()
    assert rel(x.grad, xr.grad) < 3e-2 and rel(col.weight.grad, upw.grad) < 3e-2 and rel(col.bias.grad, upb.grad) < 3e-2


def _example():
    spec = importlib.util.spec_from_file_location("tp_llama_mlp", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_matches_one_gpu_at_world_size_one(nccl):
    ex = _example()
    args = ex.parse(["--hidden", "1024", "--intermediate", "2816", "--heads", "8", "--kv-heads", "4",
                     "--tokens", "200"])
    result = ex.run(0, 1, args)
    for name in ("mlp", "attention"):
        assert result[name]["ok"], result
        assert result[name]["rel_err_tp"] < 2e-2, result


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_example_at_world_size_two():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, str(EXAMPLE), "--world", "2"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": ok") == 2, r.stdout
