"""``gemm_ladder.nn.Linear`` (a drop-in for ``torch.nn.Linear`` on gemm-ladder's kernels) and
:func:`replace_linear`, which swaps a model's ``torch.nn.Linear`` layers for it.

``Linear`` is a subclass of ``torch.nn.Linear``: the same parameters (``weight`` (out, in), ``bias``
(out,) or None), the same ``state_dict`` keys, the same initialisation (torch's own
``reset_parameters``), and ``isinstance(layer, torch.nn.Linear)`` stays true. Only ``forward``
differs: ``gemm_ladder.linear(x, weight, bias)``, differentiable through the registered op. A layer
with a bias adds it in the GEMM's fused epilogue (issue 13: one kernel, the bias added in fp32 before
the one rounding; its gradient is the sum of the output's gradient over the rows).

The tensor-parallel layers :class:`ColumnParallelLinear` and :class:`RowParallelLinear` (issue 27,
on torch.distributed) are defined in :mod:`gemm_ladder.parallel`, and :func:`replace_gated_mlp` (a Llama-family
MLP's gate and up projections in one ``gemm_ladder.swiglu`` launch at inference) in :mod:`gemm_ladder.gated_mlp`;
both are exported here.
"""

from __future__ import annotations

import warnings

import torch

from gemm_ladder.contract import DTYPES
from gemm_ladder.dispatch.validate import NotSupportedError
from gemm_ladder.gated_mlp import GatedMLP, gated_reason, replace_gated_mlp
from gemm_ladder.parallel import ColumnParallelLinear, RowParallelLinear


_API: list = []


def _api():
    """The module gemm_ladder.api, imported at the first forward (it imports the dispatcher, which a
    plain ``import gemm_ladder.nn`` does not need) and then kept: a function-level import on every
    forward costs an import-machinery lookup per layer call."""
    if not _API:
        from gemm_ladder import api

        _API.append(api)
    return _API[0]


class Linear(torch.nn.Linear):
    """``y = x @ weight.T (+ bias)`` by :func:`gemm_ladder.linear` (the bias fused into the GEMM).

    Args: as ``torch.nn.Linear(in_features, out_features, bias=True, device=None, dtype=None)``.
    Inputs: x (*, in_features) in the weight's dtype (bf16 or fp16) on its CUDA device; output
    (*, out_features). Raises what gemm_ladder.linear raises.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _api().linear(x, self.weight, self.bias)

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear) -> "Linear":
        """A ``Linear`` holding ``layer``'s own parameters (the same Parameter objects: no copy, an
        optimizer built on the model still updates them; its training flag and hooks-free state kept)."""
        new = cls(layer.in_features, layer.out_features, bias=layer.bias is not None, device="meta",
                  dtype=layer.weight.dtype)
        new.weight = layer.weight
        new.bias = layer.bias
        new.train(layer.training)
        return new


def unsupported_reason(layer: torch.nn.Linear) -> str | None:
    """Why :func:`replace_linear` leaves ``layer`` alone, or None when it swaps it: the weight's dtype
    (bf16 or fp16 only) or its device (CUDA, or meta for planning). A bias is fused (issue 13); a bias
    whose dtype is neither the weight's nor float32 is refused (linear's rule)."""
    w = layer.weight
    if w.dtype not in DTYPES.values():
        return f"weight dtype {w.dtype} (gemm-ladder computes bfloat16 and float16)"
    if w.device.type not in ("cuda", "meta"):
        return f"weight on {w.device} (gemm-ladder runs on CUDA devices only)"
    bias = layer.bias
    if bias is not None and bias.dtype not in (w.dtype, torch.float32):
        return f"bias dtype {bias.dtype} (linear's bias is the weight's dtype {w.dtype} or float32)"
    return None


def replace_linear(model: torch.nn.Module, *, strict: bool = False, subclasses: bool = False) -> torch.nn.Module:
    """Swap every ``torch.nn.Linear`` in ``model`` for :class:`Linear` holding the same parameters;
    returns ``model`` (changed in place). ``model`` itself may be a Linear: then the new layer is returned.

    Only layers of exactly the class ``torch.nn.Linear`` are swapped: a subclass may override
    ``forward`` (LoRA, quantized or custom layers), which the swap would drop. Subclasses are left as
    they are and named in one UserWarning; ``subclasses=True`` swaps them too (their own forward is
    then not called). Our own :class:`Linear` is never swapped.

    A module registered in several places (tied or shared layers) is swapped once: every place gets
    the same new :class:`Linear`, so it stays one module.

    A layer :func:`unsupported_reason` refuses is left alone: one UserWarning names every such layer
    and why; with ``strict=True`` NotSupportedError is raised instead, before anything is swapped.
    Biases are fused into the GEMM; an activation that follows a layer in the model is not (it is a
    separate module: call ``gemm_ladder.linear(x, w, b, activation=...)`` yourself to fuse one).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    chosen: dict[int, tuple[str, torch.nn.Module]] = {}  # id -> (first name, module): one decision per module
    skipped, others = [], []
    for name, module in model.named_modules():  # each module once, at its first name
        if not isinstance(module, torch.nn.Linear) or isinstance(module, Linear):
            continue
        if type(module) is not torch.nn.Linear and not subclasses:
            others.append(f"{name or '<model>'} ({type(module).__qualname__})")
            continue
        reason = unsupported_reason(module)
        if reason:
            skipped.append(f"{name or '<model>'}: {reason}")
        else:
            chosen[id(module)] = (name, module)
    if skipped:
        listed = "; ".join(skipped)
        if strict:
            raise NotSupportedError(f"replace_linear(strict=True): {len(skipped)} Linear layer(s) cannot run on "
                                    f"gemm-ladder's kernels: {listed}")
        warnings.warn(f"replace_linear left {len(skipped)} torch.nn.Linear layer(s) as they are: {listed}",
                      stacklevel=2)
    if others:
        warnings.warn(f"replace_linear left {len(others)} subclass(es) of torch.nn.Linear as they are (a subclass "
                      f"may override forward; pass subclasses=True to swap them too): {'; '.join(others)}",
                      stacklevel=2)
    new = {key: Linear.from_linear(module) for key, (_, module) in chosen.items()}
    if id(model) in new:
        return new[id(model)]
    for _, parent in model.named_modules(remove_duplicate=False):
        for child, module in list(parent._modules.items()):  # every registration, shared ones included
            if module is not None and id(module) in new:
                setattr(parent, child, new[id(module)])
    return model


__all__ = ["ColumnParallelLinear", "GatedMLP", "Linear", "RowParallelLinear", "gated_reason", "replace_gated_mlp",
           "replace_linear", "unsupported_reason"]
