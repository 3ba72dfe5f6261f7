"""Tensor parallelism (gemm_ladder.parallel, issue 27) without a GPU: the sharding math (each
rank's slice, the shards of a whole layer), the forward of every rank at world sizes 2 and 4
against the whole layer (the column shards concatenated, the row partials summed with the bias
once), the reduction plan, and real collectives on gloo at world sizes 1 and 2 (forward and the
gradients of input, weights and biases against the single-process layer). The GEMM is injected
(``torch.nn.functional.linear`` in float64): gemm-ladder's own needs a GPU (tests/test_parallel_gpu.py).
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import gemm_ladder.nn as gnn
from gemm_ladder import parallel
from gemm_ladder.parallel import ColumnParallelLinear, RowParallelLinear, reduction_plan, shard

F64 = torch.float64
ACT = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def gemm(x, w, bias=None, *, activation=None):
    return ACT[activation](F.linear(x, w, bias))


def test_exported_from_gemm_ladder_nn():
    assert gnn.ColumnParallelLinear is ColumnParallelLinear and gnn.RowParallelLinear is RowParallelLinear


def test_shard_slices():
    assert [shard(12, r, 4) for r in range(4)] == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 12)]
    assert shard(8, 0, 1) == slice(0, 8)
    with pytest.raises(ValueError, match="out_features = 10 does not split evenly over 4 ranks"):
        shard(10, 0, 4, "out_features")
    with pytest.raises(ValueError, match="rank 4 of a world of 4"):
        shard(8, 4, 4)
    with pytest.raises(ValueError, match="does not split evenly"):
        shard(10, 1, 3)


def test_world_size_one_is_a_plain_linear():
    torch.manual_seed(0)
    full = torch.nn.Linear(24, 40, dtype=F64)
    x = torch.randn(3, 5, 24, dtype=F64)
    col = ColumnParallelLinear.from_linear(full, gemm=gemm, activation="gelu")
    row = RowParallelLinear.from_linear(full, gemm=gemm)
    torch.testing.assert_close(col(x), F.gelu(full(x)), rtol=0, atol=1e-12)
    torch.testing.assert_close(row(x), full(x), rtol=0, atol=1e-12)
    assert reduction_plan(col) == reduction_plan(row) == []
    fresh = ColumnParallelLinear(24, 40, bias=False, dtype=F64, gemm=gemm)
    assert fresh.weight.shape == (40, 24) and fresh.bias is None
    assert fresh.weight.abs().max() <= 1 / 24 ** 0.5  # torch.nn.Linear's bound
    with pytest.raises(ValueError, match="reduce = 'sum'"):
        RowParallelLinear(24, 40, reduce="sum", gemm=gemm)


@pytest.mark.parametrize("p", [2, 4])
def test_every_rank_of_a_simulated_world(p, monkeypatch):
    """Each rank's layer built with ``world`` answering (rank, p): the column shards concatenated and
    the row partials summed (the all-reduce replaced by a recorder) give the whole layer's output."""
    torch.manual_seed(p)
    full = torch.nn.Linear(32, 48, dtype=F64)
    x = torch.randn(6, 32, dtype=F64)
    cols, partials, plans = [], [], []
    monkeypatch.setattr(parallel, "_all_reduce", lambda t, group: partials.append(t) or t)
    for r in range(p):
        monkeypatch.setattr(parallel, "world", lambda group=None, r=r: (r, p))
        col = ColumnParallelLinear.from_linear(full, gemm=gemm, activation="silu")
        row = RowParallelLinear.from_linear(full, gemm=gemm, input_is_parallel=False)
        assert col.weight.shape == (48 // p, 32) and col.bias.shape == (48 // p,)
        assert row.weight.shape == (48, 32 // p) and row.bias.shape == (48,)
        with torch.no_grad():
            cols.append(col(x))
            row(x)
        plans.append((reduction_plan(col), reduction_plan(row)))
    torch.testing.assert_close(torch.cat(cols, -1), F.silu(full(x)), rtol=0, atol=1e-12)
    torch.testing.assert_close(sum(partials), full(x), rtol=0, atol=1e-12)  # the bias once (rank 0's)
    assert plans[0] == ([], ["split(dim=-1)", "all_reduce"])
    monkeypatch.setattr(parallel, "world", lambda group=None: (1, p))
    scattered = RowParallelLinear.from_linear(full, gemm=gemm, reduce="reduce_scatter")
    assert reduction_plan(scattered) == ["reduce_scatter(dim=0)"]
    assert reduction_plan(ColumnParallelLinear.from_linear(full, gemm=gemm, gather_output=True)) == ["all_gather(dim=-1)"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mlp_rank(rank: int, p: int, port: int, path: str) -> None:
    """One gloo rank: a column(gelu) -> row MLP and a gathered column layer, forward and backward,
    saved for the parent to compare."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=p)
    try:
        torch.manual_seed(0)
        up, down = torch.nn.Linear(16, 32, dtype=F64), torch.nn.Linear(32, 8, dtype=F64)
        x = torch.randn(4, 16, dtype=F64)
        col = ColumnParallelLinear.from_linear(up, gemm=gemm, activation="gelu")
        row = RowParallelLinear.from_linear(down, gemm=gemm)
        gathered = ColumnParallelLinear.from_linear(up, gemm=gemm, gather_output=True)
        xs = x.clone().requires_grad_()
        y = row(col(xs))
        g = gathered(xs)
        (y.square().sum() + g.sum()).backward()
        scattered = RowParallelLinear.from_linear(down, gemm=gemm, input_is_parallel=False, reduce="reduce_scatter")
        with torch.no_grad():
            s = scattered(F.gelu(up(x)))
        torch.save({"y": y.detach(), "g": g.detach(), "s": s, "x_grad": xs.grad, "col_w": col.weight.grad,
                    "gathered_w": gathered.weight.grad,
                    "col_b": col.bias.grad, "row_w": row.weight.grad, "row_b": row.bias.grad}, f"{path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("p", [1, 2])
def test_gloo_collectives_forward_and_backward(p, tmp_path):
    path = str(tmp_path / "rank")
    mp.spawn(_mlp_rank, args=(p, _free_port(), path), nprocs=p, join=True)
    torch.manual_seed(0)
    up, down = torch.nn.Linear(16, 32, dtype=F64), torch.nn.Linear(32, 8, dtype=F64)
    x = torch.randn(4, 16, dtype=F64).requires_grad_()
    up2 = torch.nn.Linear(16, 32, dtype=F64)  # the gathered layer's own copy of up
    up2.load_state_dict(up.state_dict())
    y = down(F.gelu(up(x)))
    g = up2(x)
    (y.square().sum() + g.sum()).backward()
    ranks = [torch.load(f"{path}.{r}") for r in range(p)]
    close = lambda a, b: torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)  # noqa: E731
    for r, got in enumerate(ranks):
        close(got["y"], y.detach())
        close(got["g"], g.detach())
        close(got["x_grad"], x.grad)  # the column input's all-reduce of gradients
        close(got["row_b"], down.bias.grad)  # the row reduction's backward is the identity
        close(got["col_w"], up.weight.grad[shard(32, r, p)])
        close(got["col_b"], up.bias.grad[shard(32, r, p)])
        close(got["gathered_w"], up2.weight.grad[shard(32, r, p)])  # the gather's backward: this rank's slice
        close(got["row_w"], down.weight.grad[:, shard(32, r, p)])
        close(got["s"], y.detach()[shard(4, r, p)])
