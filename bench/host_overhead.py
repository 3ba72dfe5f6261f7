"""Host time per call of the launch path: gemm_ladder's API and registered ops against cuBLAS
(torch), and optionally the ladder's levels (development tool).

    python bench/host_overhead.py [--shapes 256x256x256,16x4096x4096] [--calls 2000] [--levels] [-o OUT.json]
    python bench/host_overhead.py --profile          # + cProfile of each gemm_ladder path (where the time goes)
    python bench/host_overhead.py --fake-gpu         # no GPU: the Python path alone, GPU parts faked
    python bench/host_overhead.py --model            # + the model's case (Parameter weight, new activation
                                                     #   every call, grad off and on) against F.linear
    python bench/host_overhead.py --extra            # + mm(out=), linear(out=), swiglu (information)
    python bench/host_overhead.py --fp8              # + scaled_mm per scaling, the model's case, against
                                                     #   torch._scaled_mm (issue 25, information)

Wall time of ``--calls`` back-to-back calls divided by their number (best of ``--repeats`` rounds),
on shapes small enough that the GPU keeps up, so the figure is what the host spends per call. The
paths, on ``a`` (M, K) and ``w`` (N, K) row-major: ``F.linear(a, w)`` and ``torch.mm(a, w.T)`` (cuBLAS),
``gemm_ladder.mm(a, w.T)`` and ``gemm_ladder.linear(a, w)`` (the direct path: call cache, bound
launch), ``torch.ops.gemm_ladder.mm`` / ``.linear`` (the registered ops: the dispatcher's boundary
on top). The target (issue 14): every gemm_ladder path at most cuBLAS's ``F.linear`` on each shape;
``meets_target`` in the result says whether it did. ``--model`` adds what a model passes (issue 21):
an ``nn.Parameter`` weight and bias and one of ROTATE activations in turn (a new tensor and address
each call), grad off and on, against F.linear on the same Parameters (``verdict[shape]["model"]``).

``--fake-gpu`` runs on a machine without a GPU: CPU tensors, the call cache's entry made by hand,
the bound launch a no-op, the stream handle a constant. It times the Python that a repeated call
runs (signature, lookups, output allocation on the CPU allocator instead of CUDA's) and profiles it;
what it leaves out is the driver call and CUDA's allocator.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time

import torch
import torch.nn.functional as F

from suite import add_output_argument, require_gpu, save

from gemm_ladder.shapes import parse_shape


def per_call_us(fn, calls: int, repeats: int, sync) -> float:
    for _ in range(50):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        sync()
    return best


def profile_rows(fn, calls: int, top: int = 25) -> list[dict]:
    """cProfile of ``calls`` calls: the ``top`` functions by own time, in us per call."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, name), (cc, nc, tt, ct, _) in stats.stats.items():
        rows.append({"function": f"{file.split('/src/')[-1]}:{line}({name})", "calls_per_call": nc / calls,
                     "own_us_per_call": tt / calls * 1e6, "cumulative_us_per_call": ct / calls * 1e6})
    rows.sort(key=lambda r: -r["own_us_per_call"])
    return rows[:top]


def paths(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> dict:
    import gemm_ladder
    import gemm_ladder.ops  # noqa: F401

    op_mm, op_linear = torch.ops.gemm_ladder.mm.default, torch.ops.gemm_ladder.linear.default
    wt = w.T
    return {
        "cuBLAS F.linear + bias": lambda: F.linear(a, w, bias),
        "gemm_ladder.linear + bias": lambda: gemm_ladder.linear(a, w, bias),  # nn.Linear(bias=True)'s call
        "cuBLAS F.linear": lambda: F.linear(a, w),
        "cuBLAS torch.mm": lambda: torch.mm(a, wt),
        "gemm_ladder.mm": lambda: gemm_ladder.mm(a, wt),
        "gemm_ladder.linear": lambda: gemm_ladder.linear(a, w),
        "torch.ops.gemm_ladder.mm": lambda: op_mm(a, wt),
        "torch.ops.gemm_ladder.linear": lambda: op_linear(a, w),
    }


def extra_paths(a: torch.Tensor, w: torch.Tensor) -> dict:
    """out= (issue 21: still launched from Python, not the compiled host module) and swiglu (the compiled host
    module's since 2026-12-07), each beside torch's nearest call: ``torch.mm(out=)``, and F.silu(F.linear) *
    F.linear for SwiGLU."""
    import gemm_ladder
    import gemm_ladder.ops  # noqa: F401 - gemm_ladder.ops.linear(out=): the linear_out op

    wt = w.T
    c_torch = torch.empty(a.shape[0], w.shape[0], device=a.device, dtype=a.dtype)
    c_gl = torch.empty_like(c_torch)
    return {
        "extra: cuBLAS torch.mm(out=)": lambda: torch.mm(a, wt, out=c_torch),
        "extra: gemm_ladder.mm(out=)": lambda: gemm_ladder.mm(a, wt, out=c_gl),
        # linear's out= exists as the op (gemm_ladder::linear_out), not in gemm_ladder.linear's signature
        "extra: gemm_ladder.ops.linear(out=)": lambda: gemm_ladder.ops.linear(a, w, out=c_gl),
        "extra: cuBLAS silu(F.linear) * F.linear": lambda: F.silu(F.linear(a, w)) * F.linear(a, w),
        "extra: gemm_ladder.swiglu": lambda: gemm_ladder.swiglu(a, w, w),
    }


def extra_verdict(times: dict) -> dict:
    """out= and swiglu against torch's nearest call (information: out= launches from Python)."""
    pairs = {"mm(out=)": ("extra: cuBLAS torch.mm(out=)", "extra: gemm_ladder.mm(out=)"),
             "linear(out=)": ("extra: cuBLAS torch.mm(out=)", "extra: gemm_ladder.ops.linear(out=)"),
             "swiglu": ("extra: cuBLAS silu(F.linear) * F.linear", "extra: gemm_ladder.swiglu")}
    return {name: {"torch_us": times[t], "ours_us": times[o], "at_most_torch": times[o] <= times[t]}
            for name, (t, o) in pairs.items() if t in times and o in times}


def fake_gpu(args) -> dict:
    """The Python of a repeated call, GPU parts faked (see the module docstring)."""
    from gemm_ladder import api
    from gemm_ladder.dispatch import calls
    from gemm_ladder.library.epilogue import linear_epilogue

    class _Path:
        workspace = None
        transposed = False

    class _Route:
        a_path = b_path = c_path = _Path()

    calls.raw_stream = lambda device: 0
    calls.bind_route = lambda route, a, b, c, epilogue=None: (lambda: None)
    lib = torch.library.Library("gemm_ladder", "IMPL")  # the op's CPU kernel: the same direct path
    import gemm_ladder.ops as ops

    lib.impl("mm", ops._mm_cuda, "CPU")
    lib.impl("linear", ops._linear_cuda, "CPU")
    ops.DIRECT_KERNELS["mm"][torch._C.DispatchKey.CPU] = ops._mm_cuda  # the Autograd kernel's direct call
    ops.DIRECT_KERNELS["linear"][torch._C.DispatchKey.CPU] = ops._linear_cuda
    ops.clear_direct_kernels()
    rows, profiles = [], {}
    for spec in args.shapes.split(","):
        m, n, k = parse_shape(spec)
        a, w = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16()
        for key, shape in ((calls.mm_key(a, w.T, None, None), (m, n)), (calls.linear_key(a, w, None), (m, n))):
            calls.CALLS.put(key, calls.Call("bound", shape, a.dtype, m, n, k, _Route()))
        bias = torch.randn(n).bfloat16()
        fns = paths(a, w, bias)
        calls.CALLS.put(calls.linear_key(a, w, None, bias), calls.Call(
            "bound", (m, n), a.dtype, m, n, k, _Route(),
            epilogue=linear_epilogue(bias=True, activation=None, residual=False, alpha=False)))
        fns.pop("cuBLAS torch.mm")
        fns.pop("cuBLAS F.linear + bias")
        fns["cuBLAS F.linear (CPU, for scale)"] = fns.pop("cuBLAS F.linear")
        fns["torch.empty (CPU)"] = lambda: torch.empty((m, n), dtype=a.dtype)
        if m * n * k > 2**26:  # the CPU matmul itself would dominate
            fns.pop("cuBLAS F.linear (CPU, for scale)")
        for name, fn in fns.items():
            us = per_call_us(fn, args.calls, args.repeats, lambda: None)
            rows.append({"path": name, "m": m, "n": n, "k": k, "host_us_per_call": us, "gpu": "faked"})
            print(rows[-1], flush=True)
        if args.profile:
            for name in ("gemm_ladder.mm", "torch.ops.gemm_ladder.mm"):
                profiles[f"{name} {spec}"] = profile_rows(fns[name], args.calls)
    return {"rows": rows, "profile": profiles, "fake_gpu": True}


#: Distinct activations the model case cycles through: more than any per-address cache keeps, so no
#: call finds the one before it by address (a model's next activation is a new tensor).
ROTATE = 97


def model_paths(m: int, n: int, k: int) -> dict:
    """The model's case (issue 21): an ``nn.Parameter`` weight (and bias) and a different activation
    tensor every call, grad mode off and on (on: the call records an autograd node, as in training;
    no backward is run), for F.linear and gemm_ladder.linear on the same Parameters."""
    import gemm_ladder

    w = torch.nn.Parameter(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5)
    b = torch.nn.Parameter(torch.randn(n, device="cuda", dtype=torch.bfloat16))
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATE)]
    it = [0]

    def nxt():
        it[0] = (it[0] + 1) % ROTATE
        return xs[it[0]]

    def mode(fn, grad):
        def run():
            with torch.set_grad_enabled(grad):
                fn()
        return run

    out = {}
    for grad in (False, True):
        g = "grad on" if grad else "grad off"
        out[f"model: cuBLAS F.linear ({g})"] = mode(lambda: F.linear(nxt(), w), grad)
        out[f"model: gemm_ladder.linear ({g})"] = mode(lambda: gemm_ladder.linear(nxt(), w), grad)
        out[f"model: cuBLAS F.linear + bias ({g})"] = mode(lambda: F.linear(nxt(), w, b), grad)
        out[f"model: gemm_ladder.linear + bias ({g})"] = mode(lambda: gemm_ladder.linear(nxt(), w, b), grad)
    # the gated MLP at inference (swiglu has no backward: grad off only), gate and up as two Parameters
    up = torch.nn.Parameter(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5)
    out["model: cuBLAS silu(F.linear) * F.linear (grad off)"] = mode(
        lambda: F.silu(F.linear(x := nxt(), w)) * F.linear(x, up), False)
    out["model: gemm_ladder.swiglu (grad off)"] = mode(lambda: gemm_ladder.swiglu(nxt(), w, up), False)
    return out


def model_verdict(times: dict) -> dict:
    """Per grad mode and bias: gemm_ladder's time against F.linear's (the target: at most it); swiglu's against
    torch's composition (``silu(F.linear) * F.linear``)."""
    out = {}
    for key, theirs in times.items():
        if key.startswith("model: cuBLAS"):
            ours_key = (key.replace("cuBLAS silu(F.linear) * F.linear", "gemm_ladder.swiglu") if "silu" in key
                        else key.replace("cuBLAS F.linear", "gemm_ladder.linear"))
            if ours_key in times:
                out[key[len("model: cuBLAS "):]] = {"cublas_us": theirs, "ours_us": times[ours_key],
                                                    "meets_target": times[ours_key] <= theirs}
    return out


def fp8_paths(m: int, n: int, k: int) -> dict:
    """scaled_mm as a model calls it (issue 25): one e4m3 weight (N, K) with its scales, and one of ROTATE
    quantized activations in turn (new tensors and addresses every call: the per-address tensor-map cache
    misses on ``a`` as in a model), each scaling, ours and ``torch._scaled_mm`` on the same arguments, and
    ours with the compiled host entry switched off ("python path": library/fp8.py's launch). A scaling
    torch refuses at this shape is left out of torch's side."""
    import gemm_ladder
    import gemm_ladder.ops_fp8 as ops_fp8
    from gemm_ladder.library.quantized import SCHEME_BLOCKS, quantize_fp8

    def python_path(fn):
        def run():
            with ops_fp8.python_launch():
                fn()
        return run

    out = {}
    w = torch.randn(n, k, device="cuda") / k ** 0.5
    for scheme, (ba, bw) in SCHEME_BLOCKS.items():
        qw, sw = quantize_fp8(w, bw)
        b, sb = qw.T, (sw.T if sw.dim() == 2 else sw)
        calls = [(qa, b, sa, sb) for qa, sa in (quantize_fp8(torch.randn(m, k, device="cuda"), ba)
                                                for _ in range(ROTATE))]
        it = [0]

        def nxt(calls=calls, it=it):
            it[0] = (it[0] + 1) % ROTATE
            return calls[it[0]]

        out[f"fp8: gemm_ladder.scaled_mm {scheme}"] = lambda nxt=nxt: gemm_ladder.scaled_mm(*nxt())
        out[f"fp8: python path scaled_mm {scheme}"] = python_path(lambda nxt=nxt: gemm_ladder.scaled_mm(*nxt()))
        try:
            torch._scaled_mm(*calls[0], out_dtype=torch.bfloat16)
        except (RuntimeError, ValueError):
            continue
        out[f"fp8: torch._scaled_mm {scheme}"] = lambda nxt=nxt: torch._scaled_mm(*nxt(), out_dtype=torch.bfloat16)
    return out


def fp8_verdict(times: dict) -> dict:
    """Per scaling: our host time against torch._scaled_mm's (information; None where torch refused)."""
    out = {}
    for key, ours in times.items():
        if key.startswith("fp8: gemm_ladder.scaled_mm "):
            scheme = key.rsplit(" ", 1)[1]
            theirs = times.get(f"fp8: torch._scaled_mm {scheme}")
            out[scheme] = {"ours_us": ours, "torch_us": theirs,
                           "python_path_us": times.get(f"fp8: python path scaled_mm {scheme}"),
                           "at_most_torch": None if theirs is None else ours <= theirs}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="256x256x256,16x4096x4096")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--levels", action="store_true", help="also the ladder's levels 3-9 (at 256^3-like shapes)")
    p.add_argument("--profile", action="store_true", help="cProfile each gemm_ladder path (top functions by own time)")
    p.add_argument("--fake-gpu", action="store_true", help="no GPU: time and profile the Python path alone")
    p.add_argument("--model", action="store_true",
                   help="also the model's case: a Parameter weight, a new activation every call, grad off and on")
    p.add_argument("--extra", action="store_true",
                   help="also mm(out=), linear(out=) and swiglu against torch's nearest calls (information)")
    p.add_argument("--fp8", action="store_true",
                   help="also scaled_mm per scaling (the model's case) against torch._scaled_mm (information)")
    add_output_argument(p)
    args = p.parse_args()
    if args.fake_gpu:
        save(fake_gpu(args), "host_overhead_fake_gpu", args.output)
        return 0
    require_gpu(__file__)
    rows, profiles, verdicts = [], {}, {}
    for spec in args.shapes.split(","):
        m, n, k = parse_shape(spec)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        fns = paths(a, w, torch.randn(n, device="cuda", dtype=torch.bfloat16))
        if args.model:
            fns.update(model_paths(m, n, k))
        if args.extra:
            fns.update(extra_paths(a, w))
        if args.fp8:
            fns.update(fp8_paths(m, n, k))
        if args.levels:
            from gemm_ladder.levels import LEVELS

            fns.update({f"L{i}": (lambda lv=LEVELS[i]: lv(a, w)) for i in range(3, 10)})
        times = {}
        for name, fn in fns.items():
            try:
                times[name] = per_call_us(fn, args.calls, args.repeats, torch.cuda.synchronize)
            except Exception as exc:  # noqa: BLE001 - a level outside its domain: reported, not timed
                rows.append({"path": name, "m": m, "n": n, "k": k, "error": f"{type(exc).__name__}: {exc}"[:200]})
                print(rows[-1], flush=True)
                continue
            rows.append({"path": name, "m": m, "n": n, "k": k, "calls": args.calls, "host_us_per_call": times[name]})
            print(rows[-1], flush=True)
        ours = {k_: v for k_, v in times.items() if "gemm_ladder" in k_ and "+ bias" not in k_
                and not k_.startswith(("model:", "extra:", "fp8:"))}
        failed = [r["path"] for r in rows if "error" in r and r["m"] == m and r["n"] == n and r["k"] == k]
        if failed or "gemm_ladder.linear + bias" not in times:
            verdicts[spec] = {"meets_target": False, "failed": failed}  # a path that raised is not timed, never met
            print(spec, verdicts[spec], flush=True)
            continue
        verdicts[spec] = {"cublas_us": times["cuBLAS F.linear"], "worst_ours_us": max(ours.values()),
                          "meets_target": max(ours.values()) <= times["cuBLAS F.linear"],
                          # with a bias (fused epilogue, cached as a plain call): against F.linear with bias
                          "bias": {"cublas_us": times["cuBLAS F.linear + bias"],
                                   "ours_us": times["gemm_ladder.linear + bias"],
                                   "meets_target": times["gemm_ladder.linear + bias"] <= times["cuBLAS F.linear + bias"]}}
        if args.extra:
            verdicts[spec]["extra"] = extra_verdict(times)  # information, not part of meets_target
        if args.fp8:
            verdicts[spec]["fp8"] = fp8_verdict(times)  # information, not part of meets_target
        if args.model:
            verdicts[spec]["model"] = model_verdict(times)
            verdicts[spec]["meets_target"] = verdicts[spec]["meets_target"] and all(
                v["meets_target"] for v in verdicts[spec]["model"].values())
        print(spec, verdicts[spec], flush=True)
        if args.profile:
            for name in ("gemm_ladder.mm", "torch.ops.gemm_ladder.mm") + tuple(
                    f for f in fns if f.startswith("fp8: gemm_ladder")):
                profiles[f"{name} {spec}"] = profile_rows(fns[name], args.calls)
                torch.cuda.synchronize()
    save({"rows": rows, "verdict": verdicts, "profile": profiles,
          "meets_target": all(v["meets_target"] for v in verdicts.values())}, "host_overhead", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
