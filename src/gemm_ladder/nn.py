"""``gemm_ladder.nn.Linear`` (a drop-in for ``torch.nn.Linear`` on gemm-ladder's kernels) and
:func:`replace_linear`, which swaps a model's ``torch.nn.Linear`` layers for it.

``Linear`` is a subclass of ``torch.nn.Linear``: the same parameters (``weight`` (out, in), ``bias``
(out,) or None), the same ``state_dict`` keys, the same initialisation (torch's own
``reset_parameters``), and ``isinstance(layer, torch.nn.Linear)`` stays true. Only ``forward``
differs: ``gemm_ladder.linear(x, weight, bias)``, differentiable through the registered op. A layer
with a bias calls ``linear`` with it: until issue 13's fused epilogue lands, its forward raises
NotSupportedError (the library never adds a bias in a separate pass, and never falls back to torch).
"""

from __future__ import annotations

import warnings

import torch

from gemm_ladder.contract import DTYPES
from gemm_ladder.dispatch.validate import NotSupportedError, check_epilogue


class Linear(torch.nn.Linear):
    """``y = x @ weight.T (+ bias)`` by :func:`gemm_ladder.linear`.

    Args: as ``torch.nn.Linear(in_features, out_features, bias=True, device=None, dtype=None)``.
    Inputs: x (*, in_features) in the weight's dtype (bf16 or fp16) on its CUDA device; output
    (*, out_features). Raises what gemm_ladder.linear raises (NotSupportedError for a bias, today).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from gemm_ladder.api import linear

        return linear(x, self.weight, self.bias)

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
    (bf16 or fp16 only), its device (CUDA, or meta for planning), or a bias while the kernels have no
    bias epilogue (asked of validate.check_epilogue, so biased layers are swapped once issue 13 lands)."""
    w = layer.weight
    if w.dtype not in DTYPES.values():
        return f"weight dtype {w.dtype} (gemm-ladder computes bfloat16 and float16)"
    if w.device.type not in ("cuda", "meta"):
        return f"weight on {w.device} (gemm-ladder runs on CUDA devices only)"
    if layer.bias is not None:
        try:
            check_epilogue(bias=layer.bias)
        except NotSupportedError:
            return "bias (the kernels have no bias epilogue yet: issue 13)"
    return None


def replace_linear(model: torch.nn.Module, *, strict: bool = False) -> torch.nn.Module:
    """Swap every ``torch.nn.Linear`` in ``model`` (exactly that class: subclasses and our own Linear
    are left as they are) for :class:`Linear` holding the same parameters; returns ``model`` (changed
    in place). ``model`` itself may be a Linear: then the new layer is returned.

    A layer :func:`unsupported_reason` refuses is left alone: one UserWarning names every such layer
    and why; with ``strict=True`` NotSupportedError is raised instead, before anything is swapped.
    Activations that follow a layer are not fused yet (issue 13's epilogue).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    swaps, skipped = [], []
    for name, module in model.named_modules():
        if type(module) is torch.nn.Linear:
            reason = unsupported_reason(module)
            (skipped if reason else swaps).append((name, module, reason))
    if skipped:
        listed = "; ".join(f"{name or '<model>'}: {reason}" for name, _, reason in skipped)
        if strict:
            raise NotSupportedError(f"replace_linear(strict=True): {len(skipped)} Linear layer(s) cannot run on "
                                    f"gemm-ladder's kernels: {listed}")
        warnings.warn(f"replace_linear left {len(skipped)} torch.nn.Linear layer(s) as they are: {listed}",
                      stacklevel=2)
    for name, module, _ in swaps:
        new = Linear.from_linear(module)
        if not name:
            return new
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
    return model


__all__ = ["Linear", "replace_linear", "unsupported_reason"]
