"""A model's gated MLPs on one ``gemm_ladder.swiglu`` launch at inference: :func:`replace_gated_mlp`.

Llama-family models compute their MLP as ``down_proj(silu(gate_proj(x)) * up_proj(x))`` (transformers'
``LlamaMLP`` and the 120-odd classes written the same way: Mistral, Qwen2/3, the MoE models' shared experts,
...; Phi-3 as ``down_proj(up * silu(gate))`` on one ``gate_up_proj``). In eager PyTorch that is two GEMMs and
two pointwise kernels; :class:`GatedMLP` runs the gate and up projections and ``silu(gate) * up`` as one
:func:`gemm_ladder.swiglu` (one kernel, x read once, fp32 until one rounding) and then ``down_proj``.

Which modules are swapped (:func:`gated_reason` says why one is not): the module's class computes exactly that
formula, recognised by its ``forward``'s source text, whitespace aside (:data:`FORMS`: no dropout, clamp, norm
or multiplier between the products), or its class is named in ``classes=`` (the caller vouches for the
formula); the projections are ``torch.nn.Linear`` (the gate and up ones exactly it or gemm-ladder's ``Linear``, not a
subclass, and neither they nor the module hooked) with no bias on the gate and up projections (swiglu adds none); the
activation is SiLU; the weights bf16 or fp16 on a CUDA (or meta) device, their rows whole 16-byte chunks.

What runs per call (:meth:`GatedMLP.forward`; :meth:`GatedMLP.path` says which): the one launch where no gradient
is needed (grad mode off, or neither x nor a projection weight requires grad), autocast is off, the rows are at least
:data:`MIN_ROWS_OVER_GEMM_LADDER` where the projections are gemm-ladder's own ``Linear`` (below it their three GEMMs
were measured faster), and x is a row-major
CUDA tensor of the weights' dtype on their device (or a meta tensor: the op's fake, which ``gemm_ladder.precompile``
records); otherwise the original module's own forward on its own submodules, so training, CPU inputs, a model cast
to float32, and a projection or the activation replaced or hooked after the swap (LoRA, offload) are computed as
before. The swapped module shares the original's submodules, parameters and buffers (the same dicts): ``state_dict``
keys, the Parameter objects, an optimizer built on the model, and a submodule replaced later on either are one.
"""

from __future__ import annotations

import functools
import inspect
import warnings

import torch
import torch.nn.functional as F

from gemm_ladder.contract import DTYPES
from gemm_ladder.errors import NotSupportedError

#: The forward bodies (whitespace removed) of the modules computed as ``down(silu(gate(x)) * up(x))``: transformers
#: 5.17's LlamaMLP form (113 classes) and its two shorter spellings, and Phi3MLP's fused gate_up_proj.
FORMS = {
    "separate": ("down_proj=self.down_proj(self.act_fn(self.gate_proj(x))*self.up_proj(x))returndown_proj",
                 "returnself.down_proj(self.act_fn(self.gate_proj(x))*self.up_proj(x))",
                 "returnself.down_proj(self.act_fn(self.gate_proj(hidden_state))*self.up_proj(hidden_state))"),
    "fused": ("up_states=self.gate_up_proj(hidden_states)gate,up_states=up_states.chunk(2,dim=-1)"
              "up_states=up_states*self.activation_fn(gate)returnself.down_proj(up_states)",),
}
#: Each form's submodule names: (gate, up, down, activation) or (gate_up, None, down, activation).
NAMES = {"separate": ("gate_proj", "up_proj", "down_proj", "act_fn"),
         "fused": ("gate_up_proj", None, "down_proj", "activation_fn")}


@functools.lru_cache(maxsize=None)
def _body(cls: type) -> str | None:
    """``cls.forward``'s body with every whitespace character removed, or None without source."""
    try:
        lines = inspect.getsource(cls.forward).splitlines()
    except (OSError, TypeError):
        return None
    start = next((i for i, line in enumerate(lines) if line.rstrip().endswith(":")), None)  # after the signature
    if start is None:
        return None
    body = "".join(line.split("#")[0] for line in lines[start + 1:])
    return "".join(body.split())


def _form(module: torch.nn.Module, classes: tuple) -> str | None:
    """'separate' or 'fused' where the module's class computes the gated MLP (or is in ``classes``), else None."""
    if type(module) in classes:
        return "fused" if hasattr(module, "gate_up_proj") else "separate"
    body = _body(type(module))
    return next((form for form, bodies in FORMS.items() if body in bodies), None)


_SWIGLU: list = []
_PLAIN = (torch.Tensor, torch.nn.Parameter)
#: Rows (x's batch dimensions merged) below which a module whose gate and up projections are gemm-ladder's
#: ``Linear`` (``replace_linear`` applied) keeps its own forward: on an H100 (e15f5a7,
#: bench/results/2026-12-07_gated_mlp_h100_e15f5a7.json, Llama-3-8B's MLP, wall time with host) the swiglu side ran
#: 0.955-0.990x replace_linear's three GEMMs and torch's silu and product at 1-256 rows and 1.07-1.18x from 512 on
#: (against torch's own module: 1.02-1.16x at every row count, so projections on cuBLAS take swiglu at any M).
#: Measured on that one MLP and GPU only.
MIN_ROWS_OVER_GEMM_LADDER = 512


def _swiglu():
    """gemm_ladder.api.swiglu, imported at the first forward (the API imports the dispatcher, which building the
    model does not need) and then kept: no import machinery on every layer call."""
    if not _SWIGLU:
        from gemm_ladder.api import swiglu

        _SWIGLU.append(swiglu)
    return _SWIGLU[0]


def _is_silu(act) -> bool:
    return isinstance(act, torch.nn.SiLU) or act is F.silu or type(act).__name__ == "SiLUActivation"


def _plain_linear(p) -> bool:
    """Whether ``p`` is exactly torch.nn.Linear or gemm-ladder's Linear (whose forward is the same product): a
    subclass may override forward (LoRA, quantized layers), which the fused call would skip. By name, not import:
    gemm_ladder.nn imports this module."""
    t = type(p)
    return t is torch.nn.Linear or (t.__name__ == "Linear" and t.__module__ == "gemm_ladder.nn")


def _hooked(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` runs more than its class's forward: forward hooks or pre-hooks, or a forward set
    on the instance (accelerate's offload hooks, monkeypatching)."""
    return bool(module._forward_hooks or module._forward_pre_hooks or "forward" in module.__dict__)


def gated_reason(module: torch.nn.Module, classes: tuple = ()) -> str | None:
    """Why :func:`replace_gated_mlp` leaves ``module`` alone, or None when it swaps it (the module docstring's
    rules). ``classes``: module classes taken as computing the formula whatever their forward's text."""
    form = _form(module, tuple(classes))
    if form is None:
        return "its forward is not down_proj(silu(gate_proj(x)) * up_proj(x)) as written in transformers' LlamaMLP"
    gate, up, down, act = (getattr(module, n, None) if n else None for n in NAMES[form])
    projections = (gate, down) + ((up,) if form == "separate" else ())
    if not all(isinstance(p, torch.nn.Linear) for p in projections):
        return f"its {', '.join(n for n in NAMES[form][:3] if n)} are not all torch.nn.Linear"
    if not all(_plain_linear(p) for p in (gate, up) if p is not None):
        return "its gate or up projection is a subclass of torch.nn.Linear (its own forward would be skipped)"
    if any(_hooked(m) for m in (module, gate, up, act) if isinstance(m, torch.nn.Module)):
        return ("it, its gate or up projection or its activation has hooks or an instance forward (the fused call "
                "would skip them)")
    if not _is_silu(act):
        return f"its activation is {type(act).__name__}, not SiLU"
    if gate.bias is not None or (up is not None and up.bias is not None):
        return "its gate and up projections have a bias (swiglu adds none)"
    w = gate.weight
    if w.dtype not in DTYPES.values() or (up is not None and up.weight.dtype != w.dtype):
        return f"weight dtype {w.dtype} (swiglu computes bfloat16 and float16, both weights one dtype)"
    if w.device.type not in ("cuda", "meta"):
        return f"weights on {w.device} (gemm-ladder runs on CUDA devices only)"
    if form == "fused" and w.shape[0] % 2:
        return f"gate_up_proj has {w.shape[0]} output features, not two halves"
    if w.shape[1] * w.element_size() % 16:
        return (f"hidden size {w.shape[1]}: its rows are {w.shape[1] * w.element_size()} bytes, not whole 16-byte "
                "chunks (TMA reads the weights in place)")
    return None


def _rows_in_place(x: torch.Tensor) -> bool:
    """Whether swiglu reads ``x`` as (M, K) rows in place or from a fresh copy: the last dimension contiguous, and
    where the batch dimensions merge into a view (``reshape`` copies otherwise, into aligned rows) the merged rows'
    pitch at least K and whole 16-byte chunks; a plain CUDA tensor's base 16-byte aligned (a subclass's, FakeTensor
    among them, and a compiled call's is the op's to check)."""
    k = x.shape[-1]
    if k > 1 and x.stride(-1) != 1:
        return False
    if type(x) in _PLAIN and x.is_cuda and not torch.compiler.is_compiling() and x.data_ptr() % 16:
        return False
    dims = [(size, stride) for size, stride in zip(x.shape[:-1], x.stride()[:-1]) if size != 1]
    if not dims:
        return True  # one row
    for (_, outer), (size, inner) in zip(dims, dims[1:]):
        if outer != inner * size:
            return True  # not a view: reshape copies into dense rows
    pitch = dims[-1][1]
    return pitch >= k and pitch * x.element_size() % 16 == 0


class GatedMLP(torch.nn.Module):
    """``down_proj(silu(gate(x)) * up(x))`` with the gate and up products in one :func:`gemm_ladder.swiglu` launch
    where no gradient is needed, else the original module's own forward (the module docstring).

    Built by :meth:`from_module` on a module :func:`gated_reason` accepts. It shares the original module's
    submodules, parameters and buffers (the same dicts: a submodule replaced on either, e.g. by a LoRA wrapper or
    replace_linear after the swap, is replaced on both; ``state_dict`` keys are the original's) and calls the
    original's forward for the formula. Input x (*, hidden); output (*, hidden). :meth:`path` says which a call
    runs. Raises what the submodules and gemm_ladder.swiglu raise.
    """

    def __init__(self, form: str, original: torch.nn.Module):
        super().__init__()
        self.form = form
        object.__setattr__(self, "_original", original)  # not registered: its state is shared below
        for name in ("_modules", "_parameters", "_buffers", "_non_persistent_buffers_set"):
            object.__setattr__(self, name, getattr(original, name))

    @classmethod
    def from_module(cls, module: torch.nn.Module, classes: tuple = ()) -> "GatedMLP":
        """A GatedMLP sharing ``module``'s state (no copy); raises NotSupportedError with :func:`gated_reason`'s
        answer where it refuses the module."""
        reason = gated_reason(module, classes)
        if reason is not None:
            raise NotSupportedError(f"{type(module).__name__}: {reason}")
        new = cls(_form(module, tuple(classes)), module)
        new.train(module.training)
        return new

    def train(self, mode: bool = True) -> "GatedMLP":
        super().train(mode)
        self._original.training = mode  # its forward reads its own flag (dropout in a vouched class's formula)
        return self

    def _part(self, name: str):
        return getattr(self._original, name)  # a submodule, or a plain attribute (an activation function)

    def _weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.form == "fused":
            w = self._part("gate_up_proj").weight
            half = w.shape[0] // 2
            return w[:half], w[half:]  # views: rows [0, N) gate, [N, 2N) up (Phi3MLP's chunk order)
        return self._part("gate_proj").weight, self._part("up_proj").weight

    def path(self, x: torch.Tensor) -> str:
        """Which computation a call on ``x`` runs: "swiglu" (one gemm_ladder.swiglu launch, then down_proj), or
        "formula (why)": the original module's forward, on its submodules as they are now."""
        return self._decide(x)[0]

    def _decide(self, x: torch.Tensor) -> tuple:
        """(:meth:`path`'s answer, the gate and up weights where it is "swiglu", else None)."""
        if not (x.is_cuda or x.is_meta):  # meta: the op's fake (what precompile records)
            return f"formula (x on {x.device})", None
        names = NAMES[self.form]
        projections = [self._part(n) for n in names[:2] if n]
        act = self._part(names[3])
        if not all(_plain_linear(p) and not _hooked(p) for p in projections) or not _is_silu(act) or (
                isinstance(act, torch.nn.Module) and _hooked(act)):
            return "formula (a projection or the activation was replaced or hooked since the swap)", None
        w_gate, w_up = self._weights()
        if x.dtype not in DTYPES.values() or not x.dtype == w_gate.dtype == w_up.dtype:
            return f"formula (x {x.dtype}, weights {w_gate.dtype}: swiglu takes one dtype, bfloat16 or float16)", None
        if x.device != w_gate.device:
            return f"formula (x on {x.device}, the weights on {w_gate.device})", None
        if torch.is_grad_enabled() and (x.requires_grad or w_gate.requires_grad or w_up.requires_grad):
            return "formula (a gradient is needed: swiglu has no backward)", None
        if torch.is_autocast_enabled():
            return "formula (autocast is on: the projections run in its dtype)", None
        rows = x.numel() // max(x.shape[-1], 1)
        if rows < MIN_ROWS_OVER_GEMM_LADDER and all(type(p) is not torch.nn.Linear for p in projections):
            return (f"formula ({rows} rows < {MIN_ROWS_OVER_GEMM_LADDER}, gated_mlp.MIN_ROWS_OVER_GEMM_LADDER: the "
                    "projections are gemm-ladder's Linear, measured faster than swiglu there)"), None
        if not _rows_in_place(x):
            return "formula (x's rows are not row-major in 16-byte aligned chunks: swiglu reads them in place)", None
        return "swiglu", (w_gate, w_up)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = self._decide(x)[1]
        if weights is not None:
            return self._part("down_proj")(_swiglu()(x, *weights))
        return self._original.forward(x)


def replace_gated_mlp(model: torch.nn.Module, *, classes: tuple = (), strict: bool = False) -> torch.nn.Module:
    """Swap every gated MLP in ``model`` (the module docstring's rules) for a :class:`GatedMLP` holding the same
    submodules; returns ``model`` (changed in place; ``model`` itself a gated MLP: the new module is returned).

    ``classes``: module classes to take as computing ``down_proj(silu(gate_proj(x)) * up_proj(x))`` (or Phi-3's
    form on ``gate_up_proj``) whatever their forward's text. A module that has these projections but is refused for
    another reason (a bias, another activation, a dtype) is named, with the reason, in one UserWarning; with
    ``strict=True`` NotSupportedError is raised instead, before anything is swapped. Modules whose forward is
    another formula are not gated MLPs and are left alone silently. Compose with
    :func:`gemm_ladder.nn.replace_linear` in either order (the projections then run on gemm-ladder's kernels too:
    the swapped module shares its submodules with the original).
    Raises TypeError for a ``model`` that is not a torch.nn.Module.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    classes = tuple(classes)
    chosen, skipped = {}, []
    for name, module in model.named_modules():
        if isinstance(module, GatedMLP) or _form(module, classes) is None:
            continue
        reason = gated_reason(module, classes)
        if reason:
            skipped.append(f"{name or '<model>'}: {reason}")
        else:
            chosen[id(module)] = module
    if skipped:
        listed = "; ".join(skipped)
        if strict:
            raise NotSupportedError(f"replace_gated_mlp(strict=True): {len(skipped)} gated MLP(s) cannot run on "
                                    f"gemm_ladder.swiglu: {listed}")
        warnings.warn(f"replace_gated_mlp left {len(skipped)} gated MLP(s) as they are: {listed}", stacklevel=2)
    new = {key: GatedMLP.from_module(module, classes) for key, module in chosen.items()}
    if id(model) in new:
        return new[id(model)]
    for _, parent in model.named_modules(remove_duplicate=False):
        for child, module in list(parent._modules.items()):
            if module is not None and id(module) in new:
                setattr(parent, child, new[id(module)])
    return model


__all__ = ["FORMS", "GatedMLP", "MIN_ROWS_OVER_GEMM_LADDER", "gated_reason", "replace_gated_mlp"]
