"""Hugging Face ``transformers``' mixture-of-experts layers on gemm-ladder's grouped kernel.

``transformers`` (5.x) lets a model's experts run through a registered function (its
``ExpertsInterface``, chosen by ``config._experts_implementation``: ``"eager"`` is a loop over experts,
``"grouped_mm"`` (the default) ``torch._grouped_mm``). :func:`register_transformers` adds
``"gemm_ladder"``, which runs :func:`experts_forward`::

    import gemm_ladder.moe
    gemm_ladder.moe.register_transformers()
    model = AutoModelForCausalLM.from_config(config, experts_implementation="gemm_ladder")
    # or, on a model already built: model.set_experts_implementation("gemm_ladder")

Every product runs on the grouped kernel (docs/grouped.md), never cuBLAS; what runs for a layer is
:func:`experts_plan` (``path`` and why):

* ``"fused_swiglu"``: the usual gated MLP (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3...: ``gate_up_proj``
  (E, 2I, H) with the gate's rows first, ``down_proj`` (E, H, I), SiLU, no bias) runs
  :func:`gemm_ladder.grouped_swiglu` on the two halves of ``gate_up_proj`` (views, no copy), then
  :func:`gemm_ladder.grouped_linear` for ``down_proj``, where the call needs no backward (the gated MLP in one
  launch). A call with a backward runs ``gate_up_proj`` whole in one grouped GEMM, the gate after it in PyTorch
  (as ``"grouped_gemms"`` does), so that its weight gradient is one grouped GEMM into the parameter's own
  layout: the halves' gradients would each be scattered into a zeroed copy of it and summed (what that cost:
  docs/grouped.md).
* ``"grouped_gemms"``: anything else the decorator describes (a bias, weights stored (E, in, out), another
  gate such as gpt-oss's clamped one, an activation other than SiLU): the two projections on the grouped
  kernel, the layer's own ``_apply_gate`` (or ``act_fn``) between them in PyTorch, and a bias of weights
  stored (E, in, out) added by PyTorch after the product (the kernel's fused bias takes (E, out, in) weights).

Around the products, PyTorch ops that keep the group sizes on the device (CUDA graphs and
``torch.compile(fullgraph=True)`` hold): the (token, choice) pairs sorted by expert (a stable sort),
``offs`` by ``searchsorted`` (pairs routed to an id >= E, expert parallelism's "not here", fall past the
last group and contribute zero), the rows gathered; after the products the rows gathered back to (token,
choice) order (no atomics: bitwise repeatable), each scaled by its routing weight in fp32 and a token's
top-k summed in fp32, rounded once to the input's dtype. These are the ops transformers' ``grouped_mm``
path runs too; under ``torch.compile`` they fuse.
"""

from __future__ import annotations

import torch

from gemm_ladder.contract import DTYPES
from gemm_ladder.dispatch.validate import NotSupportedError
from gemm_ladder.ops_grouped import grouped_linear, grouped_mm
from gemm_ladder.ops_grouped_swiglu import grouped_swiglu

#: The name :func:`register_transformers` registers by default.
NAME = "gemm_ladder"


def _flags(module) -> tuple[bool, bool, bool, bool]:
    """(has_gate, has_bias, is_transposed, is_concatenated) as ``use_experts_implementation`` sets them
    (its defaults where a layer predates the flags)."""
    return (getattr(module, "has_gate", True), getattr(module, "has_bias", False),
            getattr(module, "is_transposed", False), getattr(module, "is_concatenated", True))


def _default_gate(module) -> bool:
    """True when the layer's gate is transformers' default: ``act_fn(gate) * up`` over the two halves."""
    gate = getattr(type(module), "_apply_gate", None)
    return gate is None or getattr(gate, "__name__", "") == "_default_apply_gate"


def _is_silu(act) -> bool:
    return isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation" or act is torch.nn.functional.silu


def experts_plan(module) -> dict:
    """What :func:`experts_forward` runs for ``module`` (a transformers experts layer): a dict with ``path``
    (``"fused_swiglu"`` or ``"grouped_gemms"``), ``why`` (the path's reason), ``experts`` (E), and
    ``bias`` (``"epilogue"``, ``"pytorch"`` or None: where a bias is added). Reads the layer's attributes
    only (CUDA or meta parameters). Raises NotSupportedError for a layer it cannot run (see
    :func:`unsupported_reason`)."""
    reason = unsupported_reason(module)
    if reason is not None:
        raise NotSupportedError(f"{type(module).__name__}: {reason}")
    has_gate, has_bias, transposed, _ = _flags(module)
    plan = {"experts": module.down_proj.shape[0],
            "bias": None if not has_bias else ("pytorch" if transposed else "epilogue")}
    why = []
    if not has_gate:
        why.append("no gate (an activation between two projections)")
    elif not _default_gate(module):
        why.append(f"the layer's own _apply_gate ({type(module).__name__})")
    elif not _is_silu(getattr(module, "act_fn", None)):
        why.append(f"activation {type(getattr(module, 'act_fn', None)).__name__}, not SiLU")
    if has_bias:
        why.append("a bias")
    if transposed:
        why.append("weights stored (E, in, out)")
    if why:
        return plan | {"path": "grouped_gemms", "why": "; ".join(why)}
    return plan | {"path": "fused_swiglu", "why": "SiLU gate over gate_up_proj's two halves, no bias: one launch of the "
                                                  "gated MLP without a backward; with one, gate_up_proj whole in one "
                                                  "grouped GEMM (its weight gradient in the parameter's layout)"}


def unsupported_reason(module) -> str | None:
    """Why :func:`experts_forward` cannot run ``module``, or None: it needs ``down_proj`` and ``gate_up_proj``
    (``up_proj`` without a gate) as 3-D parameters in bf16 or fp16 on a CUDA (or meta) device; interleaved
    gate and up with transformers' default gate are refused (the default gate splits halves)."""
    has_gate, _, _, concatenated = _flags(module)
    names = ("gate_up_proj" if has_gate else "up_proj", "down_proj")
    for name in names:
        w = getattr(module, name, None)
        if not isinstance(w, torch.Tensor) or w.dim() != 3:
            return f"{name} is not a 3-D tensor (a transformers experts layer holds (E, out, in) weights)"
        if w.dtype not in DTYPES.values():
            return f"{name} dtype {w.dtype} (gemm-ladder computes bfloat16 and float16)"
        if w.device.type not in ("cuda", "meta"):
            return f"{name} on {w.device} (gemm-ladder runs on CUDA devices only)"
    if has_gate and not concatenated and _default_gate(module):
        return "gate and up interleaved with the default gate (it splits gate_up_proj into halves)"
    return None


def _gate(module, y: torch.Tensor) -> torch.Tensor:
    """The layer's gate over the first projection's output: its own ``_apply_gate``, else transformers' default
    (``act_fn`` of the first half times the second)."""
    if hasattr(module, "_apply_gate"):
        return module._apply_gate(y)
    gate, up = y.chunk(2, dim=-1)
    return module.act_fn(gate) * up


def _needs_backward(module, rows: torch.Tensor) -> bool:
    """Whether autograd records this call: grad mode on and the rows or a weight requiring grad."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in (rows, module.gate_up_proj, module.down_proj))


def _products(module, plan: dict, rows: torch.Tensor, offs: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """The layer's two projections (``plan``: :func:`experts_plan`'s) on rows grouped by ``offs``; ``group`` (S,)
    each row's expert, clamped to E."""
    has_gate, has_bias, transposed, _ = _flags(module)

    def project(x, w, bias):  # w (E, out, in), or (E, in, out) where the layer stores it transposed
        if not transposed:
            return grouped_linear(x, w, offs, bias)
        y = grouped_mm(x, w, offs)
        return y if bias is None else y + bias[group]

    if plan["path"] == "fused_swiglu" and not _needs_backward(module, rows):
        half = module.gate_up_proj.shape[1] // 2
        h = grouped_swiglu(rows, module.gate_up_proj[:, :half], module.gate_up_proj[:, half:], offs)
    else:
        w_in = module.gate_up_proj if has_gate else module.up_proj
        b_in = getattr(module, "gate_up_proj_bias" if has_gate else "up_proj_bias", None) if has_bias else None
        y = project(rows, w_in, b_in)
        h = _gate(module, y) if has_gate else module.act_fn(y)
    return project(h, module.down_proj, getattr(module, "down_proj_bias", None) if has_bias else None)


def experts_forward(module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """A transformers experts layer's forward on the grouped kernel (the ``ExpertsInterface`` contract).

    Args:
        module: the experts layer (``gate_up_proj`` (E, 2I, H) or, stored transposed, (E, H, 2I); ``down_proj``
            (E, H, I) or (E, I, H); the flags ``use_experts_implementation`` sets).
        hidden_states: (T, H) bf16/fp16, the layer's dtype, on its CUDA device.
        top_k_index: (T, k) integer expert ids; an id >= E (expert parallelism's "not on this rank")
            contributes zero.
        top_k_weights: (T, k) routing weights (any float dtype; applied in fp32).
    Returns (T, H) in hidden_states' dtype: sum over j of top_k_weights[t, j] * expert_{top_k_index[t, j]}(x_t).
    Raises NotSupportedError (a layer :func:`unsupported_reason` refuses), GemmInputError / GemmTypeError from
    the grouped ops (shapes, dtypes, strides), before any launch.
    """
    plan = experts_plan(module)  # a layer it cannot run is refused before anything is launched
    experts = module.down_proj.shape[0]
    tokens = hidden_states.shape[0]
    top_k = top_k_index.shape[-1]
    if top_k_weights.shape != top_k_index.shape:
        raise NotSupportedError(f"top_k_weights {tuple(top_k_weights.shape)} must match top_k_index "
                                f"{tuple(top_k_index.shape)} (one weight per chosen expert)")
    ids = top_k_index.reshape(-1)
    pairs = ids.shape[0]
    sorted_ids, order = torch.sort(ids, stable=True)
    # offs[e] = pairs with an id <= e: the cumulative ends, on the device (no size reaches the host)
    ends = torch.arange(1, experts + 1, device=ids.device, dtype=sorted_ids.dtype)
    offs = torch.searchsorted(sorted_ids, ends, out_int32=True)
    rows = hidden_states[order // top_k]
    if rows.requires_grad:  # the backward leaves rows past the last group unwritten: keep them out of x's grad
        rows = rows.masked_fill((sorted_ids >= experts).unsqueeze(-1), 0)
    out = _products(module, plan, rows, offs, sorted_ids.clamp(max=experts - 1))
    # Back to (token, choice) order by a gather (no atomics: deterministic). A pair on no expert here has no
    # computed row (rows past the last group are undefined): it reads row 0 with weight 0, and a token whose
    # pairs are all elsewhere is set to 0 (row 0 itself is undefined when no pair at all is here).
    rank = torch.empty_like(order).index_copy_(0, order, torch.arange(pairs, device=order.device))
    here = ids < experts
    rank = torch.where(here, rank, 0)
    acc = torch.promote_types(hidden_states.dtype, torch.float32)  # fp32 for bf16/fp16 (float64 stays so: tests)
    weights = torch.where(here, top_k_weights.reshape(-1).to(acc), 0.0)
    y = (out[rank].view(tokens, top_k, out.shape[-1]) * weights.view(tokens, top_k, 1)).sum(dim=1)
    y = torch.where(here.view(tokens, top_k).any(dim=1, keepdim=True), y, 0.0)
    return y.to(hidden_states.dtype)


def register_transformers(name: str = NAME) -> str:
    """Register :func:`experts_forward` in transformers' ``ExpertsInterface`` as ``name``; returns ``name``.
    Then ``from_config(..., experts_implementation=name)`` or ``model.set_experts_implementation(name)``
    selects it. Raises ImportError (with the reason) where transformers has no ``ExpertsInterface``
    (before 5.0)."""
    try:
        from transformers.integrations.moe import ExpertsInterface
    except ImportError as e:
        raise ImportError(f"gemm_ladder.moe.register_transformers needs transformers >= 5 (its ExpertsInterface): {e}") from e
    ExpertsInterface.register(name, experts_forward)
    return name


__all__ = ["NAME", "experts_forward", "experts_plan", "register_transformers", "unsupported_reason"]
