"""The correctness gate of a fused epilogue: is ``fn(a, b, **inputs)`` equal to the epilogue's own
PyTorch reference applied to the float64 product, as closely as the eager torch composition is?

One check of one shape, on fresh random operands and inputs (a new seed per call):

1. **Value**: ``ref = reference(a @ b.T in float64, **inputs in float64)``. The eager composition a
   user would write (cuBLAS's product in the dtype, the reference in fp32, rounded to the dtype) is
   the baseline: the relative Frobenius error must be within ``2 x`` the baseline's plus the dtype's
   unit roundoff (correctness.error_bound), and the largest element error within the plain gate's
   absolute cap plus twice the baseline's largest element error (an epilogue may magnify the
   product's rounding, e.g. a scale; the baseline measures by how much).
2. **Coverage**: the output is allocated right after a NaN-filled block of its size is freed (the
   plain gate's poisoning); NaN where the reference is finite counts as unwritten.
3. **Non-finite inputs**: NaN, +Inf and -Inf planted in ``a`` and ``b``; the output must be NaN/Inf
   exactly where the float64 reference of the whole epilogue is.
4. **K = 0 and empty shapes**: the result is the epilogue of zeros (within the unit roundoff), or empty.

Inputs: vectors and tiles standard normal in the operands' dtype; scalars the epilogue's
``examples`` (1.0 where it gives none).
"""

from __future__ import annotations

import math
import secrets
from typing import Any, Callable

import torch

from gemm_ladder.contract import DTYPES, cublas, reference
from gemm_ladder.gates.correctness import (UNIT_ROUNDOFF, CorrectnessResult, _plant_nonfinite, _rel_err,
                                           absolute_cap, check_nonfinite, error_bound, is_device_error,
                                           random_operands)
from gemm_ladder.library.epilogue import Epilogue


def epilogue_inputs(epilogue: Epilogue, m: int, n: int, dtype: str, device: torch.device, seed: int) -> dict[str, Any]:
    """Random inputs of ``epilogue`` for an (m, n) output: vectors and tiles standard normal in ``dtype``,
    scalars from ``epilogue.examples`` (default 1.0); reproducible from ``seed``."""
    gen = torch.Generator(device=device).manual_seed(seed ^ 0xE91)
    out: dict[str, Any] = {}
    for name, kind in epilogue.inputs.items():
        if kind == "scalar":
            out[name] = float(epilogue.examples.get(name, 1.0))
            continue
        shape = {"row": (m,), "col": (n,), "tile": (m, n)}[kind]
        out[name] = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(DTYPES[dtype])
    return out


def _poisoned_call(fn: Callable, a: torch.Tensor, b: torch.Tensor, inputs: dict) -> torch.Tensor:
    poison = torch.full((a.shape[0], b.shape[0]), float("nan"), dtype=a.dtype, device=a.device)
    del poison  # back to the caching allocator for fn's output to reuse
    return fn(a, b, **inputs)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_epilogue_correctness(fn: Callable, epilogue: Epilogue, m: int, n: int, k: int, dtype: str, *,
                               device: str | torch.device = "cuda", seed: int | None = None) -> CorrectnessResult:
    """Run the epilogue correctness gate on one shape (the module docstring says what is checked).

    Args:
        fn: ``fn(a, b, **inputs) -> c`` computing the epilogue of ``a @ b.T``: a (M, K), b (N, K), c (M, N),
            all ``dtype`` (e.g. ``lambda a, b, **i: gemm_ladder.linear(a, b, epilogue=ep, **i)``).
        epilogue: the :class:`~gemm_ladder.library.epilogue.Epilogue` whose reference is the truth.
        m, n, k: the shape (zeros allowed). dtype: 'bf16' or 'fp16'. device: 'cuda' (or 'cpu': a
            callable that needs CUDA is then "not run").

    Returns a CorrectnessResult; never raises for a misbehaving ``fn``.
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())  # one name for the device every input is on
    seed = secrets.randbits(31) if seed is None else seed
    a, b = random_operands(m, n, k, dtype, device, seed)
    inputs = epilogue_inputs(epilogue, m, n, dtype, device, seed)
    try:
        c = fn(a, b, **inputs)
        _sync(device)
        if m and n and k:
            del c
            c = _poisoned_call(fn, a, b, inputs)
            _sync(device)
    except Exception as exc:  # noqa: BLE001 - the callable's failure is the result
        text = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if device.type == "cpu" and is_device_error(exc):
            return CorrectnessResult("not run", f"needs a GPU: {text}", seed=seed)
        return CorrectnessResult("error", text, seed=seed)
    if not isinstance(c, torch.Tensor) or tuple(c.shape) != (m, n) or c.dtype != a.dtype:
        got = f"{type(c).__name__} {tuple(c.shape)} {c.dtype}" if isinstance(c, torch.Tensor) else type(c).__name__
        return CorrectnessResult("fail", f"returned {got}, expected ({m}, {n}) {a.dtype}", seed=seed)
    call = epilogue.bind(inputs, m, n, device)
    if m == 0 or n == 0:
        return CorrectnessResult("pass", "empty shape: result shape checked", seed=seed)
    ref = call.reference(reference(a, b))
    u = UNIT_ROUNDOFF[dtype]
    if k == 0:
        rel = _rel_err(c, ref)
        ok = rel <= u and check_nonfinite(c, ref) is None
        return CorrectnessResult("pass" if ok else "fail", f"K = 0: the epilogue of zeros, rel err {rel:.2e}",
                                 rel_err=rel, bound=u, seed=seed)
    unwritten = int((torch.isnan(c) & torch.isfinite(ref)).sum().item())
    rel = _rel_err(c, ref)
    fin = torch.isfinite(ref)
    baseline = call.reference(cublas(a, b).float().double()).to(a.dtype)  # torch's product, the epilogue, one rounding
    base_rel = _rel_err(baseline, ref)
    base_max = (baseline.double() - ref)[fin].abs().nan_to_num(nan=math.inf).max().item() if fin.any() else 0.0
    bound = error_bound(base_rel, dtype)
    max_abs = (c.double() - ref)[fin].abs().nan_to_num(nan=math.inf).max().item() if fin.any() else 0.0
    cap = absolute_cap(a, b, ref[fin].abs().max().item() if fin.any() else 0.0, dtype) + 2 * base_max
    del baseline
    problems = []
    if unwritten:
        problems.append(f"{unwritten} of {m * n} outputs unwritten (NaN where the reference is finite)")
    if not rel <= bound:
        problems.append(f"relative error {rel:.3g} > bound {bound:.3g} (2 x the eager composition's {base_rel:.3g} + u)")
    if not max_abs <= cap:
        problems.append(f"max |c - ref| = {max_abs:.3g} > cap {cap:.3g}")
    if (msg := check_nonfinite(c, ref)) is not None:
        problems.append(f"non-finite placement: {msg}")
    nonfinite = _nonfinite(fn, call, a, b, inputs, seed)
    if nonfinite is not None:
        problems.append(f"NaN/Inf inputs: {nonfinite}")
    result = CorrectnessResult("pass", "", rel_err=rel, cublas_rel_err=base_rel, bound=bound, max_abs_err=max_abs,
                               abs_cap=cap, unwritten=unwritten, nonfinite_ok=nonfinite is None, seed=seed)
    if problems:
        result.status, result.message = "fail", "; ".join(problems)
    else:
        result.message = f"rel err {rel:.2e} (eager composition {base_rel:.2e})"
    return result


def _nonfinite(fn: Callable, call, a: torch.Tensor, b: torch.Tensor, inputs: dict, seed: int) -> str | None:
    a, b = a.clone(), b.clone()
    _plant_nonfinite(a, b, seed)
    try:
        c = fn(a, b, **inputs)
        _sync(a.device)
    except Exception as exc:  # noqa: BLE001
        return f"raised {type(exc).__name__}: {exc}".splitlines()[0]
    return check_nonfinite(c, call.reference(reference(a, b)))


__all__ = ["check_epilogue_correctness", "epilogue_inputs"]
