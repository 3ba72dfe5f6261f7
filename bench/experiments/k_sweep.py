"""Where each library kernel's time goes: a mainloop rate and a fixed cost, from a sweep of K (one-off).

    python bench/experiments/k_sweep.py [--ops mm,fp8,grouped] [--quick] [--budget S] [-o OUT.json]

For a problem (M, N, K0), ours and torch's are timed at K = K0 x (1/4, 1/2, 1, 3/2, 2) (K rounded to a
multiple of 128: the kernels' K block and the fp8 block scales'), and a least-squares line
t(K) = a + b K is fitted to each side's times. The slope gives the mainloop's rate, 2 M N / b
(TFLOP/s of the K loop); the intercept a (us) is what does not grow with K: launch, prologue and
pipeline fill, epilogue and store, per-tile scheduling. R^2 says whether a line describes the times at
all. Everything that grows with K lands in the slope: the MMA issue rate, the operands' load bandwidth,
and how many waves the tiles take (a partial last wave runs its whole K loop, so wave quantization
lowers the rate, not the intercept, unless a stream-K split spreads it). The gap at K0 splits as
t_ours(K0) - t_torch(K0) ~ (a_ours - a_torch) + (b_ours - b_torch) K0: ``miss_fixed_us`` and
``miss_mainloop_us`` in the result.

Ops (the problems the issues' targets miss, plus one control):

* ``mm``: gemm_ladder.mm against torch.mm, bf16, b = w.T of an (N, K) weight, at 1000x4608x3584,
  12608x1024x4096, 8192x768x3072 and 4096x4096x4096 (control). The dispatcher may pick another tile or
  split at another K, so besides ``ours`` (as dispatched) the route it takes at K0 is launched pinned at
  every K (``ours_pinned``: library_gemm(...).launch(split=...)): that side fits one kernel.
* ``fp8``: gemm_ladder.scaled_mm against torch._scaled_mm, e4m3 to bf16, tensorwise, rowwise and
  blockwise (1 x 128 on a, 128 x 128 on w), inputs as bench/fp8.py makes them, at 4096x7168x16384 and
  4096x24576x1536.
* ``grouped``: gemm_ladder's grouped kernel (api_grouped.grouped_mm_direct, as bench/grouped.py times
  it) against torch._grouped_mm, bf16, bench/grouped.py's Qwen3 gate+up (E = 128) and Mixtral down
  (E = 8, skewed) cases: ``fwd`` sweeps K with the routing fixed; ``grad_w`` (grouped along K) sweeps
  the tokens, every group's size scaled by the factor, so its "K" is the total rows and M x N the
  weight's K x N.

At K0 each op is also timed with a float32 output on both sides (``alt``: the epilogue writes twice
the bytes), beside the bf16 one in the same interleaved call: ``alt.extra_us`` per side.

Timing: gates.performance.time_fns (ours and torch's interleaved in rounds, L2 flushed before every
call, the launch hidden behind a spin, median). Inputs are made fresh for every K. Before timing, every
output, ours and torch's, is compared once with float64 of the same inputs on a leading slice (the first
256 rows; grouped grad_w: the first two experts; fp8: the dequantized inputs), relative Frobenius error
<= 2e-2. A wrong kernel of ours cannot look fast: its case is marked ``correct: false`` and the run
exits 1. A wrong torch output is recorded (``torch_wrong``: side and K) and its comparison flagged, not
taken for ours: torch 2.11's ``_scaled_mm`` blockwise is wrong at K = 768 on the H200
(bench/experiments/fp8_reference_check.py), which the first version of this script, checking ours
against torch's output, reported as ours wrong. Kernels are built first, in
parallel (dispatch.precompile.run_builds), so no timed call compiles; GEMM_LADDER_HOST defaults to 0
here (the events time GPU work only, and the compiled host module's build would cost a minute).

Result: one JSON (bench/suite.py: DATE_k_sweep[_quick]_COMMIT.json in $OUT or bench/results/, or -o)
with ``cases: [{op, case, M, N, K0, ks, us: {side: [...]}, fits: {side: {a_us, b_us_per_k, rate_tflops,
r2}}, vs_torch: {side: {rate, a_us_diff, miss_fixed_us, miss_mainloop_us, ...}}, alt, rel_err,
correct}]`` and nvidia-smi's clocks before and after each op; a rich table on stdout.
``--quick``: three points (K0/2, K0, 2 K0) and a shorter budget; ``--ops`` a subset; ``--deadline S``:
no case starts after S seconds (the rest recorded as not run, exit 1), so a time-limited run still
writes its JSON.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("GEMM_LADDER_HOST", "0")  # GPU time is what is measured: skip the host module's build

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: suite.py, grouped.py
from outputs import check_output, positive  # noqa: E402
from suite import add_output_argument, require_gpu, save  # noqa: E402

import torch  # noqa: E402

from gemm_ladder.gates.performance import time_fns  # noqa: E402
from gemm_ladder.library.quantized import SCHEME_BLOCKS  # noqa: E402

#: K = K0 x factor, rounded to a multiple of K_MULTIPLE.
FACTORS = (0.25, 0.5, 1.0, 1.5, 2.0)
QUICK_FACTORS = (0.5, 1.0, 2.0)
#: The fp8 kernel's BK and the block scales' K extent (the bf16 kernels' 64 divides it).
K_MULTIPLE = 128
#: Every side within this relative Frobenius error of the float64 reference (or, for a case without
#: one, ours of torch's output), or it is wrong.
MAX_REL_ERR = 2e-2
#: The float64 reference covers this leading slice of the output (rows; grouped grad_w: 2 experts).
CHECK_ROWS = 256

MM_SHAPES = [(1000, 4608, 3584), (12608, 1024, 4096), (8192, 768, 3072), (4096, 4096, 4096)]
FP8_SHAPES = [(4096, 7168, 16384), (4096, 24576, 1536)]
GROUPED_CASES = ("qwen3_gate_up", "mixtral_down_skewed")
OPS = ("mm", "fp8", "grouped")


# --- the arithmetic (no GPU: tests/test_k_sweep.py) ----------------------------------------------


def k_points(k0: int, factors=FACTORS, multiple: int = K_MULTIPLE) -> list[int]:
    """K0 x each factor rounded to a multiple of ``multiple`` (at least one multiple), sorted, distinct.
    Raises ValueError for k0 < 1 or fewer than two distinct points (a line needs two)."""
    if k0 < 1:
        raise ValueError(f"K0 = {k0}: must be >= 1")
    ks = sorted({max(multiple, round(k0 * f / multiple) * multiple) for f in factors})
    if len(ks) < 2:
        raise ValueError(f"K0 = {k0} with factors {factors}: fewer than two distinct K")
    return ks


def fit_line(xs, ys) -> dict:
    """Least squares of ys = a + b xs: ``{"a", "b", "r2"}`` (r2 = 1 - residual / total sum of squares;
    1.0 when every y is equal and the line is flat). Raises ValueError for fewer than two points, unequal
    lengths or all xs equal."""
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"fit_line: {len(xs)} xs and {len(ys)} ys: two or more pairs needed")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("fit_line: every x is equal: no slope")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    return {"a": a, "b": b, "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0}


def describe_fit(xs, us, flop_per_k: float) -> dict:
    """The fit of times ``us`` (microseconds) at ``xs``: intercept a (us), slope (us per unit of K), the
    mainloop rate flop_per_k / slope in TFLOP/s (None for a slope <= 0: no rate), and R^2."""
    f = fit_line(xs, us)
    rate = flop_per_k / (f["b"] * 1e-6) / 1e12 if f["b"] > 0 else None
    return {"a_us": f["a"], "b_us_per_k": f["b"], "rate_tflops": rate, "r2": f["r2"]}


def versus(fit: dict, ref: dict, k0: float, t_k0_us: float, ref_t_k0_us: float) -> dict:
    """One side's fit against the reference's (torch's): ``rate`` (its mainloop rate / the reference's,
    > 1 faster), ``a_us_diff`` (its intercept minus the reference's), and the measured gap at K0,
    ``gap_us`` = t(K0) - t_ref(K0), split by the fits into ``miss_fixed_us`` (a - a_ref) and
    ``miss_mainloop_us`` ((b - b_ref) K0); ``speed_k0`` = t_ref(K0) / t(K0) (> 1 faster)."""
    rate = (fit["rate_tflops"] / ref["rate_tflops"]) if fit["rate_tflops"] and ref["rate_tflops"] else None
    return {"rate": rate, "a_us_diff": fit["a_us"] - ref["a_us"], "gap_us": t_k0_us - ref_t_k0_us,
            "miss_fixed_us": fit["a_us"] - ref["a_us"],
            "miss_mainloop_us": (fit["b_us_per_k"] - ref["b_us_per_k"]) * k0,
            "speed_k0": ref_t_k0_us / t_k0_us if t_k0_us > 0 else None}


def summarize(xs, us: dict[str, list[float]], flop_per_k: float, x0: float, ref: str = "torch") -> dict:
    """Fits of every side in ``us`` ({side: times at xs, us}) and each non-reference side ``versus``
    the reference at x0 (which must be one of xs)."""
    i0 = list(xs).index(x0)
    fits = {side: describe_fit(xs, ts, flop_per_k) for side, ts in us.items()}
    vs = {side: versus(fits[side], fits[ref], x0, us[side][i0], us[ref][i0]) for side in us if side != ref}
    return {"fits": fits, "vs_torch": vs}


def check_outputs(outs: dict, ref64: torch.Tensor | None) -> dict[str, float]:
    """Each side's relative error: against ``ref64`` (float64 of the slice ``out[:len(ref64)]``) where
    given, every side torch's included; else ours against torch's output (float32 sides against
    ``torch_fp32`` where torch gave one)."""
    if ref64 is not None:
        return {side: rel_err(out[: ref64.shape[0]], ref64) for side, out in outs.items()}
    ref, ref32 = outs["torch"], outs.get("torch_fp32", outs["torch"])
    return {side: rel_err(out, ref32 if side.endswith("fp32") else ref)
            for side, out in outs.items() if side not in ("torch", "torch_fp32")}


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error of ``got`` against ``ref`` (float32 arithmetic; inf for a NaN)."""
    d = (got.float() - ref.float()).norm().item()
    r = ref.float().norm().item()
    e = d / max(r, 1e-30)
    return e if math.isfinite(e) else math.inf


# --- the cases ----------------------------------------------------------------------------------------


class Case:
    """One problem swept along its reduction extent: ``make(x, alt)`` builds fresh inputs for that extent
    and returns ({side: callable}, {side: output}); ``alt`` adds the float32-output pair (``ours_fp32``,
    ``torch_fp32``; a refusal is kept in ``refused``). ``outs["float64"]``, where the case gives one, is
    the float64 result of a leading slice of the output (``out[:len(ref)]``), which every side is checked
    against; without it ours is checked against torch's output."""

    op = ""
    device = "cuda"  # where the timing probe lives (a test's case runs on the CPU)
    swept = "K"  # what x is (grouped grad_w sweeps the rows)

    def __init__(self, label: str, m: int, n: int, x0: int, xs: list[int]):
        self.label, self.m, self.n, self.x0, self.xs = label, m, n, x0, xs
        self.refused: dict[str, str] = {}
        self.notes: dict = {}

    def builds(self) -> list:
        return []

    def make(self, x: int, alt: bool):
        raise NotImplementedError

    def _alt(self, fns: dict, ours, theirs) -> None:
        fns["ours_fp32"] = ours
        try:
            theirs()
            fns["torch_fp32"] = theirs
        except (RuntimeError, ValueError, TypeError) as exc:
            self.refused["torch_fp32"] = str(exc).splitlines()[0][:200]


class MmCase(Case):
    op = "mm"

    def __init__(self, m, n, k0, factors):
        super().__init__(f"{m}x{n}x{k0}", m, n, k0, k_points(k0, factors))
        self.pinned = None  # (bn, split) of the route at K0

    def route_at(self, k: int, device: str = "meta", out_dtype=None) -> dict:
        import gemm_ladder

        a = torch.empty(self.m, k, dtype=torch.bfloat16, device=device)
        w = torch.empty(self.n, k, dtype=torch.bfloat16, device=device)
        e = gemm_ladder.explain(a, w.T, out_dtype=out_dtype)
        return {"kind": e.kind, "tile": e.tile, "stages": e.stages, "cluster": e.cluster, "split": e.split,
                "kernel": (e.kernel or {}).get("name"), "grid": e.grid}

    def builds(self):
        from gemm_ladder.dispatch.precompile import Build
        from gemm_ladder.library.gemm import library_gemm
        from gemm_ladder.model_precompile import RecordedCall, _meta_of, model_builds

        calls = []
        for k in self.xs:
            a = torch.empty(self.m, k, dtype=torch.bfloat16, device="meta")
            b = torch.empty(self.n, k, dtype=torch.bfloat16, device="meta").T
            calls.append(RecordedCall("mm", _meta_of(a), _meta_of(b), None))
            if k == self.x0:
                calls.append(RecordedCall("mm", _meta_of(a), _meta_of(b), torch.float32))
        out = model_builds(calls)
        r0 = self.route_at(self.x0)
        if r0["kind"] == "general" and r0["tile"]:
            bn = r0["tile"][1]
            out.append(Build(f"k_sweep pinned general A k B k BN {bn} bf16",
                             lambda bn=bn: library_gemm("k", "k", bn).build("bf16")))
        return out

    def make(self, k, alt):
        import gemm_ladder
        from gemm_ladder.library.gemm import library_gemm
        from gemm_ladder.library.operand import operand_view

        m, n = self.m, self.n
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") / math.sqrt(k)
        b = w.T
        if self.pinned is None:  # the route at K0, on the real device
            r0 = self.route_at(self.x0, "cuda")
            self.notes["route_k0"] = r0
            if r0["kind"] != "general":
                raise RuntimeError(f"{self.label}: the route at K0 is {r0['kind']}, not the general kernel: "
                                   "nothing to pin")
            self.pinned = (r0["tile"][1], r0["split"])
        self.notes.setdefault("routes", {})[k] = self.route_at(k, "cuda")
        bn, split = self.pinned
        kernel = library_gemm("k", "k", bn)
        va, vb = operand_view(a, k_dim=1), operand_view(w, k_dim=1)
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        fns = {"ours": lambda *_: gemm_ladder.mm(a, b), "ours_pinned": lambda *_: kernel.launch(va, vb, c, split=split),
               "torch": lambda *_: torch.mm(a, b)}
        c.fill_(float("nan"))
        fns["ours_pinned"]()
        outs = {"ours": fns["ours"](), "ours_pinned": c, "torch": fns["torch"](),
                "float64": a[:CHECK_ROWS].double() @ b.double()}
        if alt:
            self._alt(fns, lambda *_: gemm_ladder.mm(a, b, out_dtype=torch.float32),
                      lambda *_: torch.mm(a, b, out_dtype=torch.float32))
            outs["ours_fp32"] = fns["ours_fp32"]()
            if "torch_fp32" in fns:
                outs["torch_fp32"] = fns["torch_fp32"]()
        return fns, outs


class Fp8Case(Case):
    op = "fp8"

    def __init__(self, m, n, k0, mode, factors):
        super().__init__(f"{m}x{n}x{k0} {mode}", m, n, k0, k_points(k0, factors))
        self.mode = mode

    def builds(self):
        from fp8 import _meta_operands  # bench/fp8.py's
        from gemm_ladder.dispatch.precompile import Build
        from gemm_ladder.library import fp8

        sms = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 132
        # The launch's own build at each K and output (library/fp8.py default_build: the tile, the split and the
        # blockwise scale_b source all depend on the shape).
        kernels = []
        for out_dtype in (torch.bfloat16, torch.float32):
            for k in self.xs:
                args = _meta_operands(self.m, self.n, k, self.mode)
                call = fp8.check_scaled_mm(*args, out_dtype=out_dtype, device_type=None)
                kernels.append(fp8.default_build(call, args[0], args[1], None, None, sms)[0])
        return [Build(f"k_sweep fp8 {k}", k.build) for k in dict.fromkeys(kernels)]

    def make(self, k, alt):
        import gemm_ladder
        from gemm_ladder.library.quantized import dequantize, quantize_fp8

        ba, bw = SCHEME_BLOCKS[self.mode]
        qa, sa = quantize_fp8(torch.randn(self.m, k, device="cuda"), ba)
        qw, sw = quantize_fp8(torch.randn(self.n, k, device="cuda") / math.sqrt(k), bw)
        args = (qa, qw.T, sa, sw.T if sw.dim() == 2 else sw)
        fns = {"ours": lambda *_: gemm_ladder.scaled_mm(*args),
               "torch": lambda *_: torch._scaled_mm(*args, out_dtype=torch.bfloat16)}
        outs = {name: fn() for name, fn in fns.items()}
        outs["float64"] = (dequantize(qa[:CHECK_ROWS], sa[:CHECK_ROWS] if sa.dim() == 2 else sa, ba).double()
                           @ dequantize(qw, sw, bw).double().T)
        if alt:
            self._alt(fns, lambda *_: gemm_ladder.scaled_mm(*args, out_dtype=torch.float32),
                      lambda *_: torch._scaled_mm(*args, out_dtype=torch.float32))
            outs["ours_fp32"] = fns["ours_fp32"]()
            if "torch_fp32" in fns:
                outs["torch_fp32"] = fns["torch_fp32"]()
        return fns, outs


class GroupedCase(Case):
    """bench/grouped.py's case ``name``; ``fwd``: K swept, routing fixed; ``grad_w``: every group's
    rows scaled by the factor (its reduction is the rows), M x N the weight's K x N."""

    op = "grouped"

    def __init__(self, name, direction, factors):
        from grouped import CASES, group_sizes

        e, rows, n, k, lo, hi = CASES[name]
        self.e, self.sizes = e, group_sizes(e, rows, lo, hi)
        self.direction = direction
        if direction == "fwd":
            super().__init__(f"{name} fwd", rows, n, k, k_points(k, factors))
            self.scaled = {}
        else:
            self.scaled = {}
            for f in factors:
                sizes = [round(s * f) for s in self.sizes]
                self.scaled[sum(sizes)] = sizes
            xs = sorted(self.scaled)
            super().__init__(f"{name} grad_w", k, n, rows, xs)
            self.swept = "rows"
        self.notes = {"E": e, "group_sizes": {"min": min(self.sizes), "max": max(self.sizes),
                                              "empty": self.sizes.count(0)}}

    def builds(self):
        from gemm_ladder.dispatch.precompile import Build
        from gemm_ladder.library.grouped import grouped_gemm

        if self.direction == "fwd":
            cfgs = [(bn, "k", fp32, False, False) for bn in (128, 256) for fp32 in (False, True)]
        else:
            cfgs = [(bn, "mn", fp32, False, True) for bn in (128, 256) for fp32 in (False, True)]
        return [Build(f"k_sweep grouped {c}", lambda c=c: grouped_gemm(*c).build("bf16")) for c in cfgs]

    def make(self, x, alt):
        from gemm_ladder.api_grouped import grouped_mm_direct

        dev, bf = "cuda", torch.bfloat16
        if self.direction == "fwd":
            rows, n, k = self.m, self.n, x
            offs = torch.tensor(self.sizes).cumsum(0).to(torch.int32).to(dev)
            a = torch.randn(rows, k, dtype=bf, device=dev)
            b = (torch.randn(self.e, n, k, dtype=bf, device=dev) / math.sqrt(k)).transpose(1, 2)
        else:
            sizes = self.scaled[x]
            offs = torch.tensor(sizes).cumsum(0).to(torch.int32).to(dev)
            a = torch.randn(x, self.m, dtype=bf, device=dev).t()  # x.t(): (K, rows), stride(0) == 1
            b = torch.randn(x, self.n, dtype=bf, device=dev) / math.sqrt(x)
        fns = {"ours": lambda *_: grouped_mm_direct(a, b, offs), "torch": lambda *_: torch._grouped_mm(a, b, offs)}
        outs = {name: fn() for name, fn in fns.items()}
        outs["float64"] = grouped_reference(a, b, offs, self.direction)
        if alt:
            self._alt(fns, lambda *_: grouped_mm_direct(a, b, offs, out_dtype=torch.float32),
                      lambda *_: torch._grouped_mm(a, b, offs, out_dtype=torch.float32))
            outs["ours_fp32"] = fns["ours_fp32"]()
            if "torch_fp32" in fns:
                outs["torch_fp32"] = fns["torch_fp32"]()
        return fns, outs


def grouped_reference(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, direction: str) -> torch.Tensor:
    """float64 of the leading slice the check covers: ``fwd`` (a (rows, K), b (E, K, N)), the first
    CHECK_ROWS rows, each by its group's weight; ``grad_w`` (a (K, rows), b (rows, N)), the first two
    experts' (K, N) products over their rows (an empty group's is zero)."""
    ends = [0, *offs.tolist()]
    if direction == "fwd":
        rows = min(CHECK_ROWS, a.shape[0])
        ref = torch.zeros(rows, b.shape[-1], dtype=torch.float64, device=a.device)
        for g in range(len(ends) - 1):
            lo, hi = ends[g], min(ends[g + 1], rows)
            if lo < hi:
                ref[lo:hi] = a[lo:hi].double() @ b[g].double()
        return ref
    return torch.stack([a[:, ends[g]:ends[g + 1]].double() @ b[ends[g]:ends[g + 1]].double() for g in range(2)])


def make_cases(ops, factors) -> list[Case]:
    cases: list[Case] = []
    if "mm" in ops:
        cases += [MmCase(m, n, k, factors) for m, n, k in MM_SHAPES]
    if "fp8" in ops:
        cases += [Fp8Case(m, n, k, mode, factors) for m, n, k in FP8_SHAPES for mode in SCHEME_BLOCKS]
    if "grouped" in ops:
        cases += [GroupedCase(name, d, factors) for name in GROUPED_CASES for d in ("fwd", "grad_w")]
    return cases


# --- running ------------------------------------------------------------------------------------------


def clocks() -> dict | None:
    from gemm_ladder.gpu import nvidia_smi_clocks

    return nvidia_smi_clocks()


def run_case(case: Case, budget: float, rounds: int) -> dict:
    """Every point of ``case`` timed (ours, torch and the other sides interleaved), each output checked
    once (check_outputs: against the case's float64 slice, a wrong torch side recorded); then the fits."""
    us: dict[str, list[float]] = {}
    errs: dict[str, float] = {}
    torch_wrong: dict[str, list[int]] = {}
    alt: dict = {}
    probe = torch.empty(1, device=case.device)
    for x in case.xs:
        fns, outs = case.make(x, alt=(x == case.x0))
        ref64 = outs.pop("float64", None)
        for side, e in check_outputs(outs, ref64).items():
            errs[side] = max(errs.get(side, 0.0), e)
            if side.startswith("torch") and not e <= MAX_REL_ERR:
                torch_wrong.setdefault(side, []).append(x)
        del outs, ref64
        t = time_fns(fns, probe, probe, budget_s=budget, rounds=rounds, warmup=3, max_repeats=100)
        for side, tm in t.items():
            if side.endswith("fp32"):
                alt[side] = tm.median_ms * 1e3
            else:
                us.setdefault(side, []).append(tm.median_ms * 1e3)
        if x == case.x0:
            alt["spread"] = {side: round(tm.spread, 4) for side, tm in t.items()}
        del fns
        torch.cuda.empty_cache()
    flop_per_k = 2.0 * case.m * case.n
    out = {"op": case.op, "case": case.label, "M": case.m, "N": case.n, "K0": case.x0, "ks": case.xs, "us": us,
           **summarize(case.xs, us, flop_per_k, case.x0), "rel_err": errs,
           "correct": all(e <= MAX_REL_ERR for side, e in errs.items() if not side.startswith("torch")),
           "torch_wrong": torch_wrong or None, "swept": case.swept, "notes": case.notes}
    i0 = case.xs.index(case.x0)
    if alt:
        extra = {}
        if "ours_fp32" in alt:
            extra["ours"] = alt["ours_fp32"] - us["ours"][i0]
        if "torch_fp32" in alt:
            extra["torch"] = alt["torch_fp32"] - us["torch"][i0]
        out["alt"] = {"out_dtype": "float32", "us": {k: v for k, v in alt.items() if k != "spread"},
                      "extra_us": extra, "spread_k0": alt.get("spread"), "refused": case.refused or None}
    if case.op == "mm":
        routes = case.notes.get("routes", {})
        out["route_changes_with_k"] = len({str(r) for r in routes.values()}) > 1
    return out


def table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="K sweep: t(K) = a + b K per side (rate = 2MN/b; vs torch at K0: gap = fixed + mainloop)")
    for col in ("op", "case", "side", "rate TF/s", "a us", "R2", "t(K0) us", "rate/torch", "speed K0",
                "gap us", "fixed us", "mainloop us", "fp32 out +us", "ok"):
        t.add_column(col, justify="left" if col in ("op", "case", "side") else "right")

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    def ok(r, side):
        wrong_at = (r.get("torch_wrong") or {}).get(side)
        if side.startswith("torch"):
            return f"WRONG at {r.get('swept', 'K')}={','.join(map(str, wrong_at))}" if wrong_at else "yes"
        return "yes" if r["correct"] else "NO"

    for r in rows:
        if "error" in r:
            t.add_row(r["op"], r["case"], "-", *["-"] * 10, "ERROR")
            continue
        i0 = r["ks"].index(r["K0"])
        for side, fit in r["fits"].items():
            vs = r["vs_torch"].get(side, {})
            extra = (r.get("alt") or {}).get("extra_us", {}).get(side)
            t.add_row(r["op"], r["case"], side, f(fit["rate_tflops"], ".0f"), f(fit["a_us"], ".1f"),
                      f(fit["r2"], ".4f"), f(r["us"][side][i0], ".1f"), f(vs.get("rate"), ".3f"),
                      f(vs.get("speed_k0"), ".3f"), f(vs.get("gap_us"), ".1f"), f(vs.get("miss_fixed_us"), ".1f"),
                      f(vs.get("miss_mainloop_us"), ".1f"), f(extra, ".1f"), ok(r, side))
    Console(width=200).print(t)


def prebuild(cases: list[Case]) -> dict:
    """Every kernel the cases launch, compiled in parallel first (so no timed call compiles)."""
    from gemm_ladder.dispatch.precompile import run_builds

    builds, seen = [], set()
    for c in cases:
        for b in c.builds():
            if b.label not in seen:
                seen.add(b.label)
                builds.append(b)
    t0 = time.time()
    outcomes = run_builds(builds, workers=os.cpu_count() or 8)
    summary = {"builds": len(builds), "seconds": round(time.time() - t0, 1), "summary": outcomes.summary(),
               "failed": outcomes.failed or None}
    print(f"prebuild: {summary['summary']} in {summary['seconds']} s", flush=True)
    for label, why in outcomes.failed.items():
        print(f"prebuild: {label}: {why}", file=sys.stderr)
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default=",".join(OPS), help=f"comma list of {', '.join(OPS)}")
    p.add_argument("--quick", action="store_true", help="three K points (K0/2, K0, 2 K0), half the budget")
    p.add_argument("--deadline", type=float, default=None, help="seconds after which no further case starts "
                   "(those left are recorded as not run; the run then exits 1)")
    p.add_argument("--budget", type=float, default=None, help="seconds of timed calls per side and point "
                   "(default 0.06, --quick 0.03)")
    add_output_argument(p)
    args = p.parse_args(argv)
    ops = tuple(o.strip() for o in args.ops.split(",") if o.strip())
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        print(f"bench/experiments/k_sweep.py: --ops {args.ops!r}: use {', '.join(OPS)}", file=sys.stderr)
        return 2
    positive(__file__, "--budget", args.budget)
    positive(__file__, "--deadline", args.deadline)
    check_output(__file__, args.output)
    require_gpu(__file__)
    torch.manual_seed(0)
    budget = args.budget or (0.03 if args.quick else 0.06)
    cases = make_cases(ops, QUICK_FACTORS if args.quick else FACTORS)
    t_start = time.time()
    built = prebuild(cases)
    rows, clock_samples = [], [{"at": "start", **(clocks() or {})}]
    for case in cases:
        if args.deadline is not None and time.time() - t_start > args.deadline:
            rows.append({"op": case.op, "case": case.label, "error": f"not run: --deadline {args.deadline} s passed",
                         "correct": False})
            print(f"{case.op:8s} {case.label:34s} not run (deadline)", flush=True)
            continue
        try:
            row = run_case(case, budget, rounds=2)
        except Exception as exc:  # noqa: BLE001 - recorded; the other cases still run (exit 1 at the end)
            row = {"op": case.op, "case": case.label, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                   "correct": False}
        torch.cuda.empty_cache()
        rows.append(row)
        vs = row.get("vs_torch", {}).get("ours", {})
        print(f"{case.op:8s} {case.label:34s} " + (row["error"] if "error" in row else
              f"ours {row['fits']['ours']['rate_tflops'] or 0:6.0f} TF/s a {row['fits']['ours']['a_us']:7.1f} us | "
              f"torch {row['fits']['torch']['rate_tflops'] or 0:6.0f} TF/s a {row['fits']['torch']['a_us']:7.1f} us | "
              f"gap {vs['gap_us']:7.1f} = fixed {vs['miss_fixed_us']:7.1f} + mainloop {vs['miss_mainloop_us']:7.1f}"
              f"{'' if row['correct'] else '  WRONG'}"
              f"{'  (torch wrong: ' + str(row['torch_wrong']) + ')' if row.get('torch_wrong') else ''}"), flush=True)
        clock_samples.append({"at": f"after {case.op} {case.label}", **(clocks() or {})})
    table(rows)
    result = {"cases": rows, "factors": list(QUICK_FACTORS if args.quick else FACTORS), "k_multiple": K_MULTIPLE,
              "budget_s": budget, "quick": args.quick, "max_rel_err": MAX_REL_ERR, "prebuild": built,
              "clocks": clock_samples, "seconds": round(time.time() - t_start, 1),
              "host_module": os.environ.get("GEMM_LADDER_HOST")}
    save(result, "k_sweep_quick" if args.quick else "k_sweep", args.output)
    wrong = [r["case"] for r in rows if not r["correct"]]
    if wrong:
        print(f"wrong or failed: {', '.join(wrong)}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
