"""Tensor parallelism on ``torch.distributed`` (issue 27): the column- and row-parallel linears of
Megatron-LM's scheme (Shoeybi et al., 2019, "Megatron-LM", section 3), on gemm-ladder's GEMM, with
the communication done by ``torch.distributed`` (NCCL on GPUs; gloo works for the CPU tests).

* :class:`ColumnParallelLinear` holds rows ``[r * N/P, (r+1) * N/P)`` of the (N, K) weight and the
  same slice of the bias: ``y_r = act(x @ W_r.T + b_r)``. Bias and an elementwise activation are
  fused into each shard's GEMM (each output feature lives on one rank, so both are applied exactly
  once). ``gather_output=True`` all-gathers the shards along the last dimension.
* :class:`RowParallelLinear` holds columns ``[r * K/P, (r+1) * K/P)`` of the weight and the whole
  bias: ``y = sum_r x_r @ W_r.T + b``, the sum by all-reduce (or reduce-scatter along dimension 0).
  The bias is fused into rank 0's GEMM only, so the reduction adds it once (when autograd records,
  it is added after the reduction on every rank instead, so each rank's copy gets its gradient); no
  activation (it does not commute with the sum).

Autograd follows the same scheme: a column layer's input is the identity forward and an all-reduce
of its gradient backward (every rank's x is one replicated tensor); a row layer's reduction is the
identity backward (every rank computes the same loss from the replicated output); a gather's
backward takes the rank's slice; a scatter's backward gathers. Outside an initialised process group
(or with ``group`` of size 1) the layers are plain linears.

The GEMM is ``gemm(x, w, bias, activation=...)``: :func:`gemm_ladder.linear` unless a layer is given
another (the CPU tests pass ``torch.nn.functional``'s, and bench/multi_gpu.py uses it for torch's
own layers under the same parallelism). Never NVLink multicast: the collectives are plain NCCL ones;
the bench and example set ``NCCL_NVLS_ENABLE=0`` (:data:`NO_MULTICAST`).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

#: Environment that keeps NCCL, symmetric memory and NVSHMEM off NVLink multicast (on a shared host a
#: multicast object can take every GPU out of service): set before the process group is made.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

REDUCTIONS = ("all_reduce", "reduce_scatter")


def world(group=None) -> tuple[int, int]:
    """(rank, world size) in ``group`` (the default group when None); (0, 1) without an initialised
    process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def shard(size: int, rank: int, world_size: int, what: str = "size") -> slice:
    """The slice of ``range(size)`` that rank ``rank`` of ``world_size`` holds: equal contiguous
    parts. Raises ValueError when ``size`` does not divide evenly (naming ``what``)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} of a world of {world_size}")
    if size % world_size:
        raise ValueError(f"{what} = {size} does not split evenly over {world_size} ranks")
    part = size // world_size
    return slice(rank * part, (rank + 1) * part)


def _gemm_default(x, w, bias=None, *, activation=None):
    from gemm_ladder.api import linear

    return linear(x, w, bias, activation=activation)


# --- communication, with Megatron's gradients -------------------------------------------------------

_gather_single = getattr(dist, "all_gather_single", None) or getattr(dist, "all_gather_into_tensor", None)
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or getattr(dist, "reduce_scatter_tensor", None)


def _all_reduce(t: torch.Tensor, group) -> torch.Tensor:
    t = t.contiguous()
    dist.all_reduce(t, group=group)
    return t


def _gather(t: torch.Tensor, dim: int, group) -> torch.Tensor:
    """The ranks' ``t`` concatenated along ``dim`` (one all-gather into a (P, ...) buffer)."""
    _, p = world(group)
    t = t.contiguous()
    out = t.new_empty((p * t.shape[0], *t.shape[1:]))  # the ranks' t stacked along dimension 0
    _gather_single(out, t, group=group)
    if dim in (0, -t.dim()):
        return out
    return torch.cat(out.view(p, *t.shape).unbind(0), dim=dim)


def _split(t: torch.Tensor, dim: int, group) -> torch.Tensor:
    r, p = world(group)
    return t.narrow(dim, shard(t.shape[dim], r, p, f"dimension {dim}").start, t.shape[dim] // p)


def _reduce_scatter(t: torch.Tensor, group) -> torch.Tensor:
    _, p = world(group)
    if t.shape[0] % p:
        raise ValueError(f"reduce_scatter: dimension 0 = {t.shape[0]} does not split evenly over {p} ranks")
    t = t.contiguous()
    out = t.new_empty((t.shape[0] // p, *t.shape[1:]))
    _reduce_scatter_single(out, t, group=group)
    return out


class _CopyToParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return _all_reduce(g.clone(), ctx.group), None


class _ReduceFromParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, group):
        return _all_reduce(y, group)

    @staticmethod
    def backward(ctx, g):
        return g, None


class _GatherFromParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, group):
        ctx.group = group
        return _gather(y, -1, group)

    @staticmethod
    def backward(ctx, g):
        return _split(g, -1, ctx.group).contiguous(), None


class _ScatterToParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _split(x, -1, group)

    @staticmethod
    def backward(ctx, g):
        return _gather(g, -1, ctx.group), None


class _ReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, group):
        ctx.group = group
        return _reduce_scatter(y, group)

    @staticmethod
    def backward(ctx, g):
        return _gather(g, 0, ctx.group), None


def _recording(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


# --- the layers ------------------------------------------------------------------------------------


class _ParallelLinear(torch.nn.Module):
    def _init(self, in_features, out_features, w_shape, b_shape, device, dtype, gemm, group):
        self.in_features, self.out_features = in_features, out_features
        self.group = group
        self.rank, self.world_size = world(group)
        self.gemm = gemm or _gemm_default
        self.weight = torch.nn.Parameter(torch.empty(w_shape, device=device, dtype=dtype))
        self.bias = None if b_shape is None else torch.nn.Parameter(torch.empty(b_shape, device=device, dtype=dtype))
        if not self.weight.is_meta:
            self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch.nn.Linear's initialisation with the whole layer's fan-in (each shard draws its own)."""
        bound = 1 / math.sqrt(self.in_features) if self.in_features else 0.0
        torch.nn.init.uniform_(self.weight, -bound, bound)  # kaiming_uniform(a=sqrt(5)) is this bound
        if self.bias is not None:
            torch.nn.init.uniform_(self.bias, -bound, bound)


class ColumnParallelLinear(_ParallelLinear):
    """A linear whose weight is split by output features over the ranks of ``group``.

    Args:
        in_features (K), out_features (N): the whole layer's; N must divide by the world size P.
        bias: hold this rank's N/P slice of a bias (fused into the GEMM).
        gather_output: all-gather the shards so every rank returns (*, N); else (*, N/P).
        activation: None or one of gemm_ladder.linear's ("relu", "gelu", "gelu_tanh", "silu"),
            fused into the shard's GEMM (elementwise per output feature: exact under the split).
        group: a torch.distributed process group (None: the default one; no group initialised:
            world size 1).
        device, dtype: of the shards (bf16 or fp16 on CUDA for gemm-ladder's kernels).
        gemm: ``gemm(x, w, bias, activation=...)``; default :func:`gemm_ladder.linear`.

    ``weight`` is (N/P, K), ``bias`` (N/P,). Input x: (*, K), replicated on every rank. Raises
    ValueError when N does not split evenly; the GEMM's errors otherwise.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, gather_output: bool = False,
                 activation: str | None = None, group=None, device=None, dtype=None, gemm=None):
        super().__init__()
        rank, p = world(group)
        rows = shard(out_features, rank, p, "out_features")
        self.rows = rows
        self.gather_output, self.activation = gather_output, activation
        n = rows.stop - rows.start
        self._init(in_features, out_features, (n, in_features), (n,) if bias else None, device, dtype, gemm, group)

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear, **kwargs) -> "ColumnParallelLinear":
        """This rank's shard of ``layer`` (a copy of its weight rows and bias slice); ``kwargs`` as
        the constructor's (gather_output, activation, group, gemm)."""
        new = cls(layer.in_features, layer.out_features, layer.bias is not None, device="meta",
                  dtype=layer.weight.dtype, **kwargs)
        new.weight = torch.nn.Parameter(layer.weight.detach()[new.rows].clone())
        if layer.bias is not None:
            new.bias = torch.nn.Parameter(layer.bias.detach()[new.rows].clone())
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1 and _recording(x, self.weight, self.bias):
            x = _CopyToParallel.apply(x, self.group)
        y = self.gemm(x, self.weight, self.bias, activation=self.activation)
        if self.gather_output and self.world_size > 1:
            y = _GatherFromParallel.apply(y, self.group) if _recording(y) else _gather(y, -1, self.group)
        return y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features} (rows {self.rows.start}:"
                f"{self.rows.stop} of rank {self.rank}/{self.world_size}), bias={self.bias is not None}, "
                f"activation={self.activation}, gather_output={self.gather_output}")


class RowParallelLinear(_ParallelLinear):
    """A linear whose weight is split by input features over the ranks of ``group``.

    Args:
        in_features (K), out_features (N): the whole layer's; K must divide by the world size P.
        bias: a whole (N,) bias, the same on every rank, fused into rank 0's GEMM only (the
            reduction then adds it once); added after the reduction when autograd records.
        input_is_parallel: x is already this rank's (*, K/P) slice (a column-parallel layer's
            output); False: x is (*, K), replicated, and this rank takes its slice.
        reduce: "all_reduce" (every rank returns (*, N)) or "reduce_scatter" (rank r returns rows
            ``[r * D/P, (r+1) * D/P)`` of dimension 0, D = y.shape[0], which must divide by P).
        group, device, dtype, gemm: as :class:`ColumnParallelLinear`'s.

    ``weight`` is (N, K/P), ``bias`` (N,). Raises ValueError when K (or D for reduce_scatter) does not
    split evenly, or ``reduce`` is unknown; the GEMM's errors otherwise.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, input_is_parallel: bool = True,
                 reduce: str = "all_reduce", group=None, device=None, dtype=None, gemm=None):
        super().__init__()
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce = {reduce!r}: use one of {', '.join(REDUCTIONS)}")
        rank, p = world(group)
        self.cols = shard(in_features, rank, p, "in_features")
        self.input_is_parallel, self.reduce = input_is_parallel, reduce
        k = self.cols.stop - self.cols.start
        self._init(in_features, out_features, (out_features, k), (out_features,) if bias else None, device, dtype,
                   gemm, group)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.bias is not None and self.world_size > 1 and not self.bias.is_meta:
            dist.broadcast(self.bias.data, src=dist.get_global_rank(self.group, 0) if self.group else 0,
                           group=self.group)  # one bias: rank 0's

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear, **kwargs) -> "RowParallelLinear":
        """This rank's shard of ``layer`` (a copy of its weight columns and the whole bias)."""
        new = cls(layer.in_features, layer.out_features, layer.bias is not None, device="meta",
                  dtype=layer.weight.dtype, **kwargs)
        new.weight = torch.nn.Parameter(layer.weight.detach()[:, new.cols].clone())
        if layer.bias is not None:
            new.bias = torch.nn.Parameter(layer.bias.detach().clone())
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.world_size
        recording = p > 1 and _recording(x, self.weight, self.bias)
        if not self.input_is_parallel and p > 1:
            x = _ScatterToParallel.apply(x, self.group) if recording else _split(x, -1, self.group)
        if p == 1:
            return self.gemm(x, self.weight, self.bias)
        if not recording:  # the bias fused into rank 0's GEMM: the reduction adds it once
            y = self.gemm(x, self.weight, self.bias if self.rank == 0 else None)
            return _all_reduce(y, self.group) if self.reduce == "all_reduce" else _reduce_scatter(y, self.group)
        # Recording: the bias after the reduction on every rank, so that each rank's copy of it gets
        # its gradient (the rows' sum of the output's), as a replicated parameter must.
        y = self.gemm(x, self.weight, None)
        y = (_ReduceFromParallel if self.reduce == "all_reduce" else _ReduceScatter).apply(y, self.group)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features} (columns {self.cols.start}:{self.cols.stop} of rank "
                f"{self.rank}/{self.world_size}), out_features={self.out_features}, bias={self.bias is not None}, "
                f"reduce={self.reduce}, input_is_parallel={self.input_is_parallel}")


def reduction_plan(layer: torch.nn.Module) -> list[str]:
    """The collectives one forward of ``layer`` runs, in order (empty at world size 1): what the CPU
    tests compare with the layer's settings."""
    if layer.world_size == 1:
        return []
    if isinstance(layer, ColumnParallelLinear):
        return ["all_gather(dim=-1)"] if layer.gather_output else []
    if isinstance(layer, RowParallelLinear):
        return [*([] if layer.input_is_parallel else ["split(dim=-1)"]),
                "all_reduce" if layer.reduce == "all_reduce" else "reduce_scatter(dim=0)"]
    raise TypeError(f"not a parallel linear: {type(layer).__name__}")


__all__ = ["ColumnParallelLinear", "NO_MULTICAST", "REDUCTIONS", "RowParallelLinear", "reduction_plan", "shard",
           "world"]
