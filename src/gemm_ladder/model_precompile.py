"""Precompile what one model uses: trace its forward (and backward) once without running a kernel,
record every ``torch.ops.gemm_ladder`` GEMM call it makes (mm, linear, swiglu, and the grouped ops of a
mixture-of-experts layer), decide each call's route as the dispatcher (or the grouped launch) will, and
build exactly those kernels (with their fused epilogues) in parallel.

    model = gemm_ladder.nn.replace_linear(model)
    gemm_ladder.precompile(model, (input_ids,))        # or precompile_model(model, (input_ids,))
    model(input_ids)                                   # builds nothing: every kernel is in the cache

How the calls are seen: the model runs on **meta** tensors (``mode="meta"``: its parameters and the
inputs replaced by meta tensors of the same shapes, strides, dtypes and storage offsets, through
``torch.func.functional_call``; no memory, no GPU) or on **fake** tensors (``mode="fake"``:
``FakeTensorMode``; for models whose Python asks for a device, such as Hugging Face models that
build masks on the inputs' device). Either way every gemm-ladder call goes through the registered
op (api.py sends meta tensors and tensor subclasses there), and a ``TorchDispatchMode`` below
autograd records each op's operands' metadata: so the backward's calls (grad_x, grad_w, and the
recomputed pre-activation) are recorded too, by running ``backward`` on the traced output.

From a recorded call to builds: the call's operands as meta tensors (same strides and 16-byte
residues: the caching allocator's bases are 16-byte aligned, so a meta tensor's residue is its
offset's), the dispatcher's :func:`~gemm_ladder.dispatch.decide` on them (for the GPU it will run
on, or the H200 assumed without one), the built-in epilogue of ``linear`` bound and oriented as the
route runs it (library.epilogue), and the route's builds (dispatch.precompile.route_builds).

A model sees other row counts than the example's (a server's batches, decode after prefill):
``rows`` adds, for every recorded ``linear`` call, the same call at each of those row counts (its
batch dimensions merged), so that the small-M buckets and tile widths those pick are built too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gemm_ladder.dispatch.precompile import Build, Outcomes, normalize_dtypes, route_builds, run_builds

#: The registered ops whose calls are recorded (a GEMM each); any other gemm_ladder op runs unrecorded.
RECORDED_OPS = ("mm", "mm_out", "linear", "linear_out")
#: The grouped ops (mixture-of-experts) whose calls are recorded too (:class:`GroupedCall`): the forward's and, the
#: backward being made of ``grouped_mm`` calls, the backward's.
GROUPED_OPS = ("grouped_mm", "grouped_linear", "grouped_linear_act", "grouped_mm_masked", "grouped_swiglu",
               "grouped_swiglu_fused")
#: The gated MLP's op (``gemm_ladder.swiglu``; nn.replace_gated_mlp's call), recorded as :class:`SwigluCall`.
SWIGLU_OPS = ("swiglu",)
#: How a recorded operand is described: shape, strides, dtype, storage offset in elements.
TensorMeta = tuple


def _meta_of(t) -> TensorMeta | None:
    if not isinstance(t, torch.Tensor):
        return None
    return (tuple(t.shape), tuple(t.stride()), t.dtype, t.storage_offset())


def _on_meta(m: TensorMeta | None) -> torch.Tensor | None:
    if m is None:
        return None
    shape, stride, dtype, offset = m
    span = 0 if 0 in shape else 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride))
    return torch.empty(offset + span, dtype=dtype, device="meta").as_strided(shape, stride, offset)


@dataclass(frozen=True)
class RecordedCall:
    """One gemm-ladder op call of a traced model: ``op`` ('mm', 'mm_out', 'linear', 'linear_out'), each
    tensor operand's (shape, strides, dtype, storage offset), and linear's epilogue arguments."""

    op: str
    a: TensorMeta  # mm's a, linear's x
    b: TensorMeta  # mm's b, linear's w
    out_dtype: torch.dtype | None = None
    bias: TensorMeta | None = None
    residual: TensorMeta | None = None
    out: TensorMeta | None = None
    activation: str | None = None
    alpha: float = 1.0
    beta: float = 1.0

    @property
    def is_linear(self) -> bool:
        return self.op.startswith("linear")

    def with_rows(self, m: int) -> "RecordedCall | None":
        """This linear call with x's batch dimensions merged into ``m`` rows (x row-major (m, K); a
        residual, row-major (m, N)); None for an mm or out= call (their rows are not a batch)."""
        if self.op != "linear":
            return None
        k = self.a[0][-1]
        n = self.b[0][0]
        res = None if self.residual is None else ((m, n), (n, 1), self.residual[2], 0)
        return RecordedCall("linear", ((m, k), (k, 1), self.a[2], 0), self.b, self.out_dtype, self.bias, res,
                            None, self.activation, self.alpha, self.beta)


@dataclass(frozen=True)
class GroupedCall:
    """One grouped op call of a traced model (:data:`GROUPED_OPS`): ``a`` (x), ``b`` (grouped_mm's b,
    grouped_linear's w, the swiglu ops' w_gate), ``offs`` (the masked op's counts) as (shape, strides, dtype,
    storage offset), and what else picks the build."""

    op: str
    a: TensorMeta
    b: TensorMeta
    offs: TensorMeta | None = None
    out_dtype: torch.dtype | None = None
    bias: TensorMeta | None = None
    activation: str | None = None

    def with_rows(self, m: int) -> None:
        """None: ``rows`` re-plans linear calls only (a grouped call's rows are the routing's)."""
        return None

    @staticmethod
    def from_arguments(op: str, a: dict) -> "GroupedCall":
        pos = list(a.values())  # schema order: (a or x, b or w or w_gate, ...)
        offs = a.get("offs", a.get("counts"))
        return GroupedCall(op, _meta_of(pos[0]), _meta_of(pos[1]), _meta_of(offs), a.get("out_dtype"),
                           _meta_of(a.get("bias")), a.get("activation"))


@dataclass(frozen=True)
class SwigluCall:
    """One ``swiglu`` call of a traced model: x, w_gate and w_up as (shape, strides, dtype, storage offset)."""

    op: str
    a: TensorMeta  # x
    b: TensorMeta  # w_gate
    w_up: TensorMeta

    def with_rows(self, m: int) -> "SwigluCall":
        """This call with x's batch dimensions merged into ``m`` rows (x row-major (m, K))."""
        k = self.a[0][-1]
        return SwigluCall(self.op, ((m, k), (k, 1), self.a[2], 0), self.b, self.w_up)

    def projections(self) -> list[RecordedCall]:
        """The gate and up projections as two ``linear`` calls: what a GatedMLP over gemm-ladder's Linear runs
        instead of this call below gated_mlp.MIN_ROWS_OVER_GEMM_LADDER rows (its own forward)."""
        return [RecordedCall("linear", self.a, w) for w in (self.b, self.w_up)]


def _arguments(func, args, kwargs) -> dict:
    """The op's arguments by schema name (positional and keyword), whatever their order."""
    names = [a.name for a in func._schema.arguments]
    out = dict(zip(names, args))
    out.update(kwargs)
    return out


class CallRecorder(TorchDispatchMode):
    """A dispatch mode that records every ``gemm_ladder`` op call (:class:`RecordedCall`) and runs it on
    (its fake or meta implementation: the mode is used with meta or fake tensors only)."""

    def __init__(self):
        super().__init__()
        self.calls: list[RecordedCall] = []
        #: The other gemm_ladder ops the run called ({op: calls}: the fp8 ops), which precompile
        #: does not build: they compile at their first call, and record() says so.
        self.unrecorded: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "gemm_ladder":
            op = func._schema.name.split("::")[-1]
            if op in RECORDED_OPS:
                self.calls.append(self._record(func, _arguments(func, args, kwargs)))
            elif op in GROUPED_OPS:
                self.calls.append(GroupedCall.from_arguments(op, _arguments(func, args, kwargs)))
            elif op in SWIGLU_OPS:
                a = _arguments(func, args, kwargs)
                self.calls.append(SwigluCall(op, _meta_of(a["x"]), _meta_of(a["w_gate"]), _meta_of(a["w_up"])))
            else:
                self.unrecorded[op] = self.unrecorded.get(op, 0) + 1
        return func(*args, **kwargs)

    @staticmethod
    def _record(func, a: dict) -> RecordedCall:
        op = func._schema.name.split("::")[-1]
        pos = list(a.values())  # the schema's order: the two operands first, by whatever names it gives them

        def arg(name, index=None, default=None):
            if name in a:
                return a[name]
            return pos[index] if index is not None and index < len(pos) else default

        if op.startswith("mm"):
            return RecordedCall(op, _meta_of(arg("a", 0)), _meta_of(arg("b", 1)), arg("out_dtype"),
                                out=_meta_of(arg("out")))
        if op.startswith("linear"):
            return RecordedCall(op, _meta_of(arg("x", 0)), _meta_of(arg("w", 1)), arg("out_dtype"),
                                _meta_of(arg("bias")), _meta_of(arg("residual")), _meta_of(arg("out")),
                                arg("activation"), float(arg("alpha", default=1.0)), float(arg("beta", default=1.0)))
        raise ValueError(f"gemm_ladder::{op}: not an op precompile knows (mm, mm_out, linear, linear_out)")


def _first_tensor(out):
    """The tensor a traced forward returned, for its backward: the output itself, a Hugging Face
    output's ``loss`` or ``logits`` or its first tensor, the first tensor of a tuple or dict."""
    if isinstance(out, torch.Tensor):
        return out
    for name in ("loss", "logits", "last_hidden_state"):
        v = getattr(out, name, None)
        if isinstance(v, torch.Tensor):
            return v
    values = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    for v in values:
        t = _first_tensor(v)
        if t is not None:
            return t
    return None


def record(model: torch.nn.Module, example_inputs=(), example_kwargs: dict | None = None, *, backward: bool | None = None,
           mode: str = "meta") -> list[RecordedCall | GroupedCall | SwigluCall]:
    """Run ``model(*example_inputs, **example_kwargs)`` once on meta or fake tensors (``mode``, see the
    module docstring) and return every gemm-ladder op call it made, in order; with ``backward`` (default:
    when the model is in training mode and a parameter requires grad) also the backward's calls, by
    ``backward()`` of the output (or its loss, logits, first tensor) with a dense gradient of ones. The forward
    runs in the caller's grad mode (on with ``backward``): call it under ``torch.no_grad()`` for a model that will
    run under it, where a gated MLP or a MoE layer takes its fused path. Nothing is built or
    launched; the model and its parameters are not changed. The ``mm`` and ``linear`` calls (the ops
    :data:`RECORDED_OPS`, as :class:`RecordedCall`) and the grouped ones (:data:`GROUPED_OPS`, as
    :class:`GroupedCall`: a mixture-of-experts layer, ``gemm_ladder.moe``) and ``swiglu``'s (:class:`SwigluCall`:
    nn.replace_gated_mlp's) are recorded; the model's other gemm_ladder calls (the fp8 ops) are named in one
    UserWarning, with their counts: they compile at their first call.

    Raises TypeError for a model that is not an nn.Module, ValueError for another mode, and what the
    model raises on meta or fake tensors (a model whose Python reads tensor values: try the other mode).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if mode not in ("meta", "fake"):
        raise ValueError(f"mode={mode!r}: use 'meta' or 'fake'")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    example_kwargs = dict(example_kwargs or {})
    named = dict(model.named_parameters())
    named.update(dict(model.named_buffers()))
    if backward is None:
        backward = model.training and any(p.requires_grad for p in model.parameters())
    recorder = CallRecorder()

    def run(convert, ctx):
        with ctx:
            state = {k: convert(v) for k, v in named.items()}
            args = [convert(v) if isinstance(v, torch.Tensor) else v for v in example_inputs]
            kwargs = {k: convert(v) if isinstance(v, torch.Tensor) else v for k, v in example_kwargs.items()}
            with recorder, torch.set_grad_enabled(backward or torch.is_grad_enabled()):
                out = torch.func.functional_call(model, state, tuple(args), kwargs, tie_weights=True, strict=False)
                if backward:
                    t = _first_tensor(out)
                    if t is None or not t.requires_grad:
                        raise ValueError("backward=True: the model's output has no tensor that requires grad")
                    t.backward(torch.ones_like(t))  # a dense gradient, as a loss gives (a sum's would be expanded)

    if mode == "meta":
        import contextlib

        def to_meta(t: torch.Tensor) -> torch.Tensor:
            m = _on_meta(_meta_of(t))
            return m.requires_grad_(t.requires_grad) if t.is_floating_point() else m

        run(to_meta, contextlib.nullcontext())
    else:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake = FakeTensorMode(allow_non_fake_inputs=True)

        def to_fake(t: torch.Tensor) -> torch.Tensor:
            f = fake.from_tensor(t.detach())
            return f.requires_grad_(t.requires_grad) if t.is_floating_point() else f

        run(to_fake, fake)
    if recorder.unrecorded:
        import warnings

        ops = ", ".join(f"{op} x{n}" for op, n in recorder.unrecorded.items())
        warnings.warn(f"gemm_ladder.precompile builds mm, linear, swiglu and grouped calls only; the model's other gemm_ladder calls "
                      f"({ops}) compile at their first call", UserWarning, stacklevel=3)
    return recorder.calls


def _linear_problem(call: RecordedCall):
    """(a (M, K), b (K, N), c (M, N), the epilogue call or None) on meta tensors for a recorded
    linear call, as api.linear makes them (x's batch dimensions merged, w.T, the built-in epilogue
    bound to bias and the residual (M, N) when read)."""
    from gemm_ladder.dispatch.validate import result_dtype
    from gemm_ladder.library.epilogue import linear_epilogue

    x, w = _on_meta(call.a), _on_meta(call.b)
    n, k = w.shape
    m = math.prod(x.shape[:-1])
    try:
        x2 = x.view(m, k)
    except RuntimeError:  # batch dimensions that do not merge: api.linear reshapes (a contiguous copy)
        x2 = x.reshape(m, k)
    out_dtype = result_dtype(call.out_dtype, x.dtype)
    c = torch.empty((m, n), dtype=out_dtype, device="meta")
    if call.out is not None:
        out = _on_meta(call.out)
        c = out.reshape(m, n) if out.dim() != 2 else out
    read_residual = call.residual is not None and call.beta != 0
    ep = linear_epilogue(bias=call.bias is not None, activation=call.activation, residual=read_residual,
                         alpha=call.alpha != 1)
    epilogue = None
    if ep is not None:
        tensors = [] if call.bias is None else [_on_meta(call.bias)]
        if read_residual:
            r = _on_meta(call.residual)
            tensors.append(r if r.dim() == 2 else r.reshape(m, n))
        scalars = ([call.alpha] if call.alpha != 1 else []) + ([call.beta] if read_residual else [])
        values = dict(zip(ep.tensor_inputs, tensors))
        values.update(zip(ep.scalar_inputs, scalars))
        epilogue = ep.bind(values, m, n, torch.device("meta"), check_grad=False)
    return x2, w.T, c, epilogue


def grouped_call_builds(call: GroupedCall) -> list[Build]:
    """The build a recorded grouped call runs, as its launch decides it (api_grouped.planned_build on meta
    tensors; grouped_swiglu: the two fp32 grouped GEMMs' build; grouped_swiglu_fused: the gated-MLP build)."""
    from gemm_ladder.api_grouped import planned_build
    from gemm_ladder.contract import dtype_name
    from gemm_ladder.ops_grouped_swiglu import fused_kernel

    a, b, offs = _on_meta(call.a), _on_meta(call.b), _on_meta(call.offs)
    if call.op == "grouped_swiglu_fused":
        kernel = fused_kernel()
    elif call.op == "grouped_swiglu":
        kernel = planned_build(a, b.transpose(-2, -1), offs, out_dtype=torch.float32)[0]
    elif call.op in ("grouped_linear", "grouped_linear_act"):
        kernel = planned_build(a, b.transpose(-2, -1), offs, bias=_on_meta(call.bias), activation=call.activation)[0]
    else:
        kernel = planned_build(a, b, offs, out_dtype=call.out_dtype, masked=call.op == "grouped_mm_masked")[0]
    dtype = dtype_name(a.dtype)
    return [Build(f"{kernel.name} {dtype}", lambda: kernel.build(dtype))]


def swiglu_call_builds(call: SwigluCall, device=None) -> list[Build]:
    """The builds a recorded swiglu call runs, as api.swiglu decides its path for ``device``'s facts (default the
    H200 assumed): the fused kernel, the small-M gated build, or the small-M pair's two routes (the second with the
    gated epilogue); [] for an empty problem or K = 0."""
    from gemm_ladder.contract import dtype_name
    from gemm_ladder.dispatch import decide, swiglu_small_m
    from gemm_ladder.dispatch.route import ASSUMED_DEVICE
    from gemm_ladder.dispatch.swiglu_small_m import GATED
    from gemm_ladder.library.swiglu import swiglu_kernel

    x, w_gate, w_up = _on_meta(call.a), _on_meta(call.b), _on_meta(call.w_up)
    n, k = w_gate.shape
    m = math.prod(x.shape[:-1])
    if min(m, n, k) == 0:
        return []
    dtype = dtype_name(x.dtype)
    facts = device or ASSUMED_DEVICE
    if not swiglu_small_m.takes(m, n, k, facts.clusters, swiglu_small_m.small_m_max(facts.name)):
        kernel = swiglu_kernel()
        return [Build(f"{kernel.name} {dtype}", lambda: kernel.build(dtype))]
    x2 = x.reshape(m, k)
    out2 = torch.empty((m, n), dtype=x.dtype, device="meta")
    one = swiglu_small_m.one_launch(x2, w_gate, w_up, out2)
    if one is not None:
        from gemm_ladder.library.swiglu_small_m import FAMILY

        kernel = one[0]
        return [Build(f"{FAMILY} bn {kernel.bn} {dtype}", lambda: kernel.build(dtype))]
    up = torch.empty((m, n), dtype=torch.float32, device="meta")
    route_up, route_gate = swiglu_small_m.pair_routes(x2, w_gate, w_up, up, out2, device=facts)
    gated = GATED.bind({"up": up}, m, n, out2.device, check_grad=False)
    source = gated.oriented(route_gate.c_path.transposed).source()
    return route_builds(route_up, dtype) + route_builds(route_gate, dtype, source, gated.epilogue.name)


def call_builds(call: RecordedCall | GroupedCall | SwigluCall, device=None) -> list[Build]:
    """The builds a recorded call runs: its route decided on meta tensors for ``device``'s facts
    (dispatch.route.DeviceFacts; default the current CUDA device's, or the H200 assumed), with its
    epilogue's generated source oriented as the route runs it. [] for an empty problem (M, N = 0:
    nothing launched) or K = 0 (zeros, or the epilogue's reference). A grouped call: :func:`grouped_call_builds`."""
    from gemm_ladder.contract import dtype_name
    from gemm_ladder.dispatch import decide
    from gemm_ladder.dispatch.validate import result_dtype

    if isinstance(call, GroupedCall):
        return grouped_call_builds(call)
    if isinstance(call, SwigluCall):
        return swiglu_call_builds(call, device)

    if call.is_linear:
        a, b, c, epilogue = _linear_problem(call)
        given = call.out is not None
    else:
        a, b = _on_meta(call.a), _on_meta(call.b)
        given = call.out is not None
        c = _on_meta(call.out) if given else torch.empty((a.shape[0], b.shape[1]),
                                                         dtype=result_dtype(call.out_dtype, a.dtype), device="meta")
        epilogue = None
    if min(a.shape[0], b.shape[1], a.shape[1]) == 0:
        return []
    route = decide(a, b, c, given=given, device=device, activation=call.activation if call.is_linear else None)
    if epilogue is None:
        return route_builds(route, dtype_name(a.dtype))
    return route_builds(route, dtype_name(a.dtype), epilogue_name=epilogue.epilogue.name,
                        epilogue_call=epilogue.oriented(route.c_path.transposed))


def model_builds(calls: list[RecordedCall | GroupedCall | SwigluCall], *, rows=(), device=None) -> list[Build]:
    """The distinct builds of ``calls`` (:func:`call_builds`), and of every plain ``linear`` and ``swiglu`` call at
    each row count in ``rows`` (:meth:`RecordedCall.with_rows`, :meth:`SwigluCall.with_rows`), in order of first use;
    a swiglu call below gated_mlp.MIN_ROWS_OVER_GEMM_LADDER rows adds its two projections' (:meth:`SwigluCall.projections`:
    a GatedMLP over gemm-ladder's Linear runs those there)."""
    if device is None and torch.cuda.is_available():
        from gemm_ladder.dispatch.route import device_facts

        device = device_facts(torch.device("cuda", torch.cuda.current_device()))
    from gemm_ladder.gated_mlp import MIN_ROWS_OVER_GEMM_LADDER

    todo = list(dict.fromkeys(calls))
    for m in rows:
        todo += [c for c in (call.with_rows(int(m)) for call in calls) if c is not None]
    # a swiglu call at fewer rows than a GatedMLP over gemm-ladder's Linear takes it: its projections' builds too (a
    # superset: over torch's nn.Linear the swiglu call runs and these are not used)
    todo += [p for c in list(todo) if isinstance(c, SwigluCall) and math.prod(c.a[0][:-1]) < MIN_ROWS_OVER_GEMM_LADDER
             for p in c.projections()]
    builds: dict[str, Build] = {}
    for call in dict.fromkeys(todo):
        for b in call_builds(call, device):
            builds.setdefault(b.label, b)
    return list(builds.values())


def precompile_model(model: torch.nn.Module, example_inputs=(), example_kwargs: dict | None = None, *,
                     backward: bool | None = None, rows=(), mode: str = "meta", workers: int | None = None,
                     device=None, load: bool | None = None) -> Outcomes:
    """Build every kernel ``model`` uses on ``example_inputs`` (and its backward, see :func:`record`),
    and the same linear and swiglu calls at each row count in ``rows``, in parallel (dispatch.precompile.run_builds),
    then load them on ``device`` (default: the current CUDA device, when there is one and ``load`` is
    not False). After it, the model's first forward on inputs of those shapes compiles nothing.

    Returns :class:`~gemm_ladder.dispatch.precompile.Outcomes` ({label: outcome}; ``.summary()`` says
    'N builds ready, M compiled, K already cached'). Raises as :func:`record`, and
    CompilerNotFoundError without a compiler (nvcc or NVRTC).
    """
    from gemm_ladder.runtime.compiler import compiler_choice

    calls = record(model, example_inputs, example_kwargs, backward=backward, mode=mode)
    builds = model_builds(calls, rows=rows)
    compiler_choice()  # no compiler: one clear error, not one per build
    return run_builds(builds, workers=workers, device=device, load=load)


def precompile(*args, **kwargs) -> Outcomes:
    """Build gemm-ladder's kernels ahead of their first call, so that no call compiles (a build needed during a
    CUDA-graph capture raises CaptureBuildError instead). Two forms, told apart by the first argument:

    ``precompile(model, example_inputs=(), example_kwargs=None, *, backward=None, rows=(), mode="meta",
    workers=None, device=None, load=None)`` (:func:`precompile_model`): every kernel ``model`` (a
    ``torch.nn.Module`` whose layers call gemm-ladder: ``nn.replace_linear``, ``nn.replace_gated_mlp``,
    ``gemm_ladder.moe``) uses on ``example_inputs`` (a tensor or a tuple of tensors, of the shapes, dtypes and
    strides the model will see; ``example_kwargs`` a dict of keyword inputs), traced once on meta or fake tensors
    (``mode``: "meta" or "fake"; nothing is launched, the model is not changed); with ``backward`` (default: the
    model is training and a parameter requires grad) its backward's kernels too; and the same ``linear`` and
    ``swiglu`` calls at each row count in ``rows`` (ints: the other batch sizes a server will run).

    ``precompile(dtypes=("bf16", "fp16"), *, classes=tuple(CLASSES), workers=None, levels=False, device=None, load=None,
    epilogues="common")`` (:func:`gemm_ladder.dispatch.precompile.precompile`): the library's builds for each
    dtype ("bf16", "fp16", or torch.bfloat16 / torch.float16) and shape class (a sequence of names of
    ``dispatch.precompile.CLASSES``: "large", "small_m", "fp32_out", ...), with the built-in epilogue variants
    of ``epilogues`` ("none", "common" or "all": ``dispatch.precompile.EPILOGUE_LEVELS``) and, with ``levels``,
    the ladder's nine levels.

    Both forms build in parallel on ``workers`` threads (default: the CPU count) into the kernel cache
    (``GEMM_LADDER_CACHE``), then load each build on ``device`` (default: the current CUDA device) when ``load``
    (default: when torch sees a GPU).

    Returns:
        :class:`~gemm_ladder.dispatch.precompile.Outcomes`, a dict ``{label: outcome}`` ('built', 'built, loaded
        on cuda:N', 'not a variant: <rule>', 'failed: <error>'; a failed build does not raise) whose
        ``.summary()`` says how many builds are ready, compiled now and already cached.

    Raises:
        CompilerNotFoundError: no kernel compiler (nvcc or NVRTC).
        ValueError: an unknown dtype, shape class, epilogue level or ``mode``.
        And, with a model, whatever the model raises on meta or fake tensors (a model whose Python reads tensor
        values: try the other ``mode``).
    """
    if args and isinstance(args[0], torch.nn.Module):
        return precompile_model(*args, **kwargs)
    from gemm_ladder.dispatch.precompile import precompile as by_class

    return by_class(*args, **kwargs)


__all__ = ["CallRecorder", "GroupedCall", "RecordedCall", "SwigluCall", "call_builds", "swiglu_call_builds", "grouped_call_builds", "model_builds", "normalize_dtypes", "precompile",
           "precompile_model", "record"]
