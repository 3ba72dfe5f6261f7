"""The correctness gate: is ``fn(a, b)`` equal to ``a @ b.T`` as closely as cuBLAS is, everywhere?

One check of one shape runs, on fresh random normal operands (never zeros, a new seed per call):

1. **Value**: relative Frobenius error ``||c - ref|| / ||ref||`` against the float64 reference must
   be within ``2 x`` cuBLAS's own error on the same operands plus a floor, and the largest element
   error within an absolute cap (a few wrong elements hide in a Frobenius norm; not under the cap).
2. **Coverage**: every output element was written. With the exact protocol, a callable that has
   ``check(a, b)`` and ``launch(a, b, c)`` (a ladder :class:`~gemm_ladder.levels.base.Level`), the
   gate allocates ``c`` itself, fills it with NaN and launches into it. For any other callable the
   gate frees a NaN-filled block of the output's size just before the call, so the output most
   likely reuses it (the CUDA caching allocator hands back a freed block of the same size); both
   count NaNs where the reference is finite as "unwritten".
3. **Non-finite inputs**: a few NaN and +-Inf planted in ``a`` and ``b``; the output must be NaN
   exactly where the float64 reference is NaN and Inf (of the same sign) exactly where it is Inf.
4. **Domain**: a shape outside the declared :class:`~gemm_ladder.contract.Domain` must raise
   :class:`~gemm_ladder.contract.OutsideDomainError` before launch (status "refused", not a
   failure); computing it anyway, or refusing a shape inside the domain, fails.

The device is a parameter: without a GPU, a callable that runs on CPU tensors is checked on CPU
(torch's CPU matmul standing in for cuBLAS). One that raises a device error there (it needs CUDA:
:func:`is_device_error`) gets the status "not run", never "pass".
"""

from __future__ import annotations

import math
import re
import secrets
from dataclasses import dataclass
from typing import Any, Callable

import torch

from gemm_ladder.contract import DTYPES, Domain, OutsideDomainError, cublas, reference

#: Unit roundoff of the output dtype: the largest relative error of round-to-nearest into it
#: (bf16 keeps 8 significant bits, so 2^-8; fp16 keeps 11, so 2^-11; IEEE 754 / Higham, "Accuracy
#: and Stability of Numerical Algorithms", 2nd ed., section 2.1).
UNIT_ROUNDOFF: dict[str, float] = {"bf16": 2.0**-8, "fp16": 2.0**-11}

#: fp32 accumulation's unit roundoff (24 significant bits).
FP32_UNIT_ROUNDOFF = 2.0**-24

#: Multiplier on cuBLAS's relative error: a kernel may be at most this much less accurate.
CUBLAS_ERROR_FACTOR = 2.0

#: Safety factor on the probabilistic fp32 accumulation term of the absolute cap.
ACCUMULATION_FACTOR = 16.0

#: NaN and Inf values planted per operand in the non-finite check.
PLANTED_PER_OPERAND = 3

Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: What a callable under test may raise that counts as its failure: any Exception, and SystemExit (a
#: ``sys.exit()`` inside it must fail the check, not end the gate with the callable's status and no
#: verdict). KeyboardInterrupt is not one: Ctrl-C still stops the run.
CALLABLE_FAILURES = (Exception, SystemExit)


@dataclass
class CorrectnessResult:
    """Outcome of one correctness check of one shape.

    ``status``: 'pass', 'fail', 'refused' (OutsideDomainError before launch, outside the declared
    domain: correct behaviour), 'error' (an unexpected exception) or 'not run' (on CPU operands the
    callable raised a device error: it needs a GPU, so nothing was checked). ``passed`` is True for
    'pass' and 'refused' only. Errors are relative (dimensionless) except ``max_abs_err`` and ``abs_cap``, which
    are in the output's units. Fields not measured (a refusal, an error, an empty shape) are None.
    """

    status: str
    message: str = ""
    rel_err: float | None = None
    cublas_rel_err: float | None = None
    bound: float | None = None
    max_abs_err: float | None = None
    abs_cap: float | None = None
    unwritten: int | None = None
    nonfinite_ok: bool | None = None
    seed: int | None = None

    @property
    def passed(self) -> bool:
        return self.status in ("pass", "refused")

    def to_json(self) -> dict[str, Any] | None:
        """The ``correctness`` object of a result row (docs/results-schema.md); None when refused or not run."""
        if self.status in ("refused", "not run"):
            return None
        return {
            "rel_err": self.rel_err, "cublas_rel_err": self.cublas_rel_err, "bound": self.bound,
            "max_abs_err": self.max_abs_err, "abs_cap": self.abs_cap, "unwritten": self.unwritten,
            "nonfinite_ok": self.nonfinite_ok, "passed": self.passed, "seed": self.seed,
        }


def error_bound(cublas_rel_err: float, dtype: str) -> float:
    """Largest acceptable relative Frobenius error: ``2 x cublas_rel_err + u``.

    The floor ``u`` is the output dtype's unit roundoff (2^-8 bf16, 2^-11 fp16): a correctly
    rounded output can be off by up to ``u`` relative per element, hence by up to ``u`` in the
    relative Frobenius norm, even when cuBLAS happens to be exact (tiny K, representable sums). So
    the bound never fails a correctly rounded answer, and it stays tight: cuBLAS's own error on
    random data is about ``0.4 u`` (measured: 1.65e-3 bf16, 2.1e-4 fp16), so the bound is about ``1.8 u``.
    """
    return CUBLAS_ERROR_FACTOR * cublas_rel_err + UNIT_ROUNDOFF[dtype]


def absolute_cap(a: torch.Tensor, b: torch.Tensor, ref_absmax: float, dtype: str) -> float:
    """Largest acceptable ``max |c - ref|`` for operands ``a`` (M, K) and ``b`` (N, K).

    ``2 u max|ref| + 16 sqrt(K) u32 max_i ||a_i|| max_j ||b_j||``: the first term is twice the worst
    rounding of the largest output element into the dtype; the second bounds the fp32 accumulation
    error of a K-term dot product with the probabilistic model of Higham and Mary (SIAM J. Sci.
    Comput. 41(5), 2019: error grows like sqrt(K) u32 sum|a_ik b_jk|, and sum|a_ik b_jk| <=
    ||a_i|| ||b_j|| by Cauchy-Schwarz), with a safety factor of 16 for summation order and tensor-core
    accumulation. It catches a handful of wrong elements that the Frobenius norm would average away
    (an element off by 10 in a 4096 x 4096 output moves the relative norm by ~1e-5).
    """
    k = a.shape[1]
    row_a = torch.linalg.vector_norm(a.double(), dim=1).max().item()
    row_b = torch.linalg.vector_norm(b.double(), dim=1).max().item()
    return 2 * UNIT_ROUNDOFF[dtype] * ref_absmax + ACCUMULATION_FACTOR * math.sqrt(k) * FP32_UNIT_ROUNDOFF * row_a * row_b


def random_operands(
    m: int, n: int, k: int, dtype: str, device: str | torch.device, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Standard normal ``a`` (M, K) and ``b`` (N, K) in ``dtype``, reproducible from ``seed``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32).to(DTYPES[dtype])
    b = torch.randn((n, k), generator=gen, device=device, dtype=torch.float32).to(DTYPES[dtype])
    return a, b


def _rel_err(c: torch.Tensor, ref: torch.Tensor) -> float:
    """||c - ref|| / ||ref|| over the elements where ``ref`` is finite (inf if c is not finite there)."""
    mask = torch.isfinite(ref)
    diff = (c.double() - ref)[mask]
    denom = torch.linalg.vector_norm(ref[mask]).item()
    num = torch.linalg.vector_norm(diff).item()
    if math.isnan(num):
        return math.inf
    return num / denom if denom > 0 else (0.0 if num == 0 else math.inf)


def _call_exact(fn: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exact-coverage protocol: check, then launch into a NaN-filled output we own."""
    fn.check(a, b)
    m, n = a.shape[0], b.shape[0]
    c = torch.full((m, n), float("nan"), dtype=a.dtype, device=a.device)
    domain = getattr(fn, "domain", None)
    if isinstance(domain, Domain):
        domain.check_pointers(c=c)
    fn.launch(a, b, c)
    return c


def _call_poisoned(fn: Fn, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Call ``fn`` right after freeing a NaN-filled block of the output's size (best effort)."""
    poison = torch.full((a.shape[0], b.shape[0]), float("nan"), dtype=a.dtype, device=a.device)
    del poison  # back to the caching allocator, NaNs and all, for fn's output to reuse
    return fn(a, b)


#: What a callable says when it needs CUDA and finds none: our contract's "must be on a cuda
#: device", torch's "Torch not compiled with CUDA enabled" / "No CUDA GPUs are available" / "Found no
#: NVIDIA driver", cuda-python's CUDA_ERROR_NO_DEVICE, Triton's "0 active drivers".
_DEVICE_ERROR = re.compile(r"\bcuda|\bgpus?\b|\bnvidia\b|active drivers", re.IGNORECASE)


def is_device_error(exc: BaseException) -> bool:
    """True when ``exc``, raised by a callable given CPU tensors, says that it needs a CUDA GPU.

    A heuristic on the exception's text (see ``_DEVICE_ERROR``); a refusal of the shape
    (OutsideDomainError) is never a device error. Misreading a plain failure as a device error
    costs a "not run" (the run's verdict is then incomplete, never passed).
    """
    if isinstance(exc, OutsideDomainError):
        return False
    return bool(_DEVICE_ERROR.search(f"{type(exc).__name__}: {exc}"))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _exact_protocol(fn: Any) -> bool:
    return callable(getattr(fn, "launch", None)) and callable(getattr(fn, "check", None))


def _check_output(c: Any, m: int, n: int, a: torch.Tensor) -> str | None:
    if not isinstance(c, torch.Tensor):
        return f"returned {type(c).__name__}, not a tensor"
    if tuple(c.shape) != (m, n):
        return f"returned shape {tuple(c.shape)}, expected ({m}, {n})"
    if c.dtype != a.dtype:
        return f"returned dtype {c.dtype}, expected {a.dtype}"
    if c.device != a.device:
        return f"returned a tensor on {c.device}, expected {a.device}"
    return None


def check_nonfinite(c: torch.Tensor, ref: torch.Tensor) -> str | None:
    """None if ``c`` is NaN exactly where ``ref`` is NaN and same-signed Inf exactly where ``ref``
    is Inf; else a one-line description of the first disagreement."""
    c64 = c.double()
    for what, got, want in (
        ("NaN", torch.isnan(c64), torch.isnan(ref)),
        ("+Inf", c64 == math.inf, ref == math.inf),
        ("-Inf", c64 == -math.inf, ref == -math.inf),
    ):
        missing = (want & ~got).nonzero()
        extra = (got & ~want).nonzero()
        if len(missing):
            i, j = missing[0].tolist()
            return f"{len(missing)} elements not {what} where the reference is {what}, e.g. c[{i}, {j}] = {c64[i, j].item()}"
        if len(extra):
            i, j = extra[0].tolist()
            return f"{len(extra)} elements {what} where the reference is {ref[i, j].item()}, e.g. c[{i}, {j}]"
    return None


def _plant_nonfinite(a: torch.Tensor, b: torch.Tensor, seed: int) -> None:
    """Write NaN, +Inf and -Inf at a few random positions of ``a`` and ``b`` (in place)."""
    gen = torch.Generator().manual_seed(seed ^ 0x5EED)
    values = (float("nan"), float("inf"), float("-inf"))
    for t in (a, b):
        rows, cols = t.shape
        for i in range(PLANTED_PER_OPERAND):
            r = int(torch.randint(rows, (1,), generator=gen))
            col = int(torch.randint(cols, (1,), generator=gen))
            t[r, col] = values[i % len(values)]


def check_correctness(
    fn: Fn,
    m: int,
    n: int,
    k: int,
    dtype: str,
    *,
    device: str | torch.device = "cuda",
    seed: int | None = None,
    domain: Domain | None = None,
) -> CorrectnessResult:
    """Run the correctness gate on one shape (see the module docstring for what is checked).

    Args:
        fn: ``fn(a, b) -> c`` computing ``a @ b.T``; a (M, K), b (N, K), c (M, N), all ``dtype``.
            If it has ``check(a, b)`` and ``launch(a, b, c)``, the exact coverage protocol is used.
        m, n, k: the shape; zero dimensions are allowed (the result must be empty, or zeros for K=0).
        dtype: 'bf16' or 'fp16'.
        device: where operands live ('cuda', or 'cpu' for tests of the gate itself).
        seed: operand seed; a fresh random one if None (recorded in the result to reproduce).
        domain: the shapes ``fn`` declares it handles (defaults to ``fn.domain`` if present);
            outside it, ``fn`` must raise OutsideDomainError.

    Returns:
        CorrectnessResult; never raises for a misbehaving ``fn`` (its exception becomes 'error').
    """
    device = torch.device(device)
    seed = secrets.randbits(31) if seed is None else seed
    domain = domain if domain is not None else getattr(fn, "domain", None)
    outside = None
    if isinstance(domain, Domain):
        try:
            domain.check(m, n, k, dtype)
        except OutsideDomainError as exc:
            outside = str(exc)

    a, b = random_operands(m, n, k, dtype, device, seed)
    exact = _exact_protocol(fn)
    try:
        if m == 0 or n == 0 or k == 0:
            c = fn(a, b)
        elif exact:
            c = _call_exact(fn, a, b)
        else:
            c = fn(a, b)  # warm-up call: JIT builds and workspaces must not eat the poisoned block
            _sync(device)
            if (msg := _check_output(c, m, n, a)) is not None:
                return CorrectnessResult("fail", msg, seed=seed)
            del c
            c = _call_poisoned(fn, a, b)
        _sync(device)
    except OutsideDomainError as exc:
        if outside is None and isinstance(domain, Domain):
            return CorrectnessResult("fail", f"refused a shape inside its declared domain: {exc}", seed=seed)
        return CorrectnessResult("refused", str(exc), seed=seed)
    except CALLABLE_FAILURES as exc:  # noqa: BLE001 - any other exception is the callable's failure
        text = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if device.type == "cpu" and is_device_error(exc):
            return CorrectnessResult("not run", f"needs a GPU: {text}", seed=seed)
        return CorrectnessResult("error", text, seed=seed)

    if outside is not None:
        return CorrectnessResult("fail", f"computed a shape outside its declared domain ({outside})", seed=seed)
    if (msg := _check_output(c, m, n, a)) is not None:
        return CorrectnessResult("fail", msg, seed=seed)
    if m == 0 or n == 0 or k == 0:
        if k == 0 and c.numel() and bool((c != 0).any()):
            return CorrectnessResult("fail", "K = 0 must give zeros (the empty sum)", seed=seed)
        return CorrectnessResult("pass", "empty shape: result shape and values checked", seed=seed)

    ref = reference(a, b)
    unwritten = int((torch.isnan(c) & torch.isfinite(ref)).sum().item())
    rel = _rel_err(c, ref)
    base = cublas(a, b)
    cublas_rel = _rel_err(base, ref)
    bound = error_bound(cublas_rel, dtype)
    max_abs = (c.double() - ref).abs().nan_to_num(nan=math.inf).max().item()
    cap = absolute_cap(a, b, ref.abs().max().item(), dtype)
    del base, ref

    nonfinite_msg = _nonfinite_check(fn, a, b, seed, exact)
    result = CorrectnessResult(
        "pass", "", rel_err=rel, cublas_rel_err=cublas_rel, bound=bound, max_abs_err=max_abs,
        abs_cap=cap, unwritten=unwritten, nonfinite_ok=nonfinite_msg is None, seed=seed,
    )
    problems = []
    if unwritten:
        problems.append(f"{unwritten} of {m * n} outputs unwritten (NaN where the reference is finite)")
    if not rel <= bound:
        problems.append(f"relative error {rel:.3g} > bound {bound:.3g} (2 x cuBLAS {cublas_rel:.3g} + floor)")
    if not max_abs <= cap:
        problems.append(f"max |c - ref| = {max_abs:.3g} > cap {cap:.3g}")
    if nonfinite_msg is not None:
        problems.append(f"NaN/Inf inputs: {nonfinite_msg}")
    if problems:
        result.status, result.message = "fail", "; ".join(problems)
    else:
        result.message = f"rel err {rel:.2e} ({rel / cublas_rel:.2f}x cuBLAS)" if cublas_rel > 0 else f"rel err {rel:.2e}"
    return result


def _nonfinite_check(fn: Fn, a: torch.Tensor, b: torch.Tensor, seed: int, exact: bool) -> str | None:
    """Plant NaN/Inf in copies of ``a`` and ``b``; None if the output's non-finite pattern matches."""
    a, b = a.clone(), b.clone()
    _plant_nonfinite(a, b, seed)
    try:
        c = _call_exact(fn, a, b) if exact else fn(a, b)
        _sync(a.device)
    except CALLABLE_FAILURES as exc:  # noqa: BLE001
        return f"raised {type(exc).__name__}: {exc}".splitlines()[0]
    return check_nonfinite(c, reference(a, b))
