"""Cold start: in a fresh process with no CUDA toolkit reachable, how long from after ``import torch``
to the first result of a Llama-style MLP forward through gemm_ladder, and does that first call compile
anything? (Issue 28's target: <= 1 s, and nothing compiled.)

    python3 tools/build_aot.py --workers 16            # first: the default kernels, built ahead of time
    python3 bench/cold_start.py                         # -> $OUT/DATE_cold_start_COMMIT.json
    python3 bench/cold_start.py --tokens 7 --hidden 4096 --intermediate 14336

The parent starts a child Python with nvcc taken off PATH, CUDA_HOME/CUDA_PATH unset, GEMM_LADDER_*
compiler settings removed, an empty kernel cache of its own (GEMM_LADDER_CACHE), and, where a private
mount namespace can be made (root), the toolkit directory behind /usr/local/cuda hidden. First, in
that environment, a child builds the compiled host module into a host cache of its own (the one-time
step an install or the machine's first import pays: timed and recorded apart, `host_module`); the
timed child then loads it from there (GEMM_LADDER_HOST_CACHE), as every later process would. The child
times, from just after ``import torch``: ``import gemm_ladder``; making the weights and input on the
GPU (CUDA's context start-up included: a real server pays it too); the first MLP forward,
``down(silu(gate(x)) * up(x))`` with each projection a ``gemm_ladder.linear`` (bf16, the Llama-3-8B
dims by default), synchronized. It counts the files in the kernel cache before and after the first
``linear`` and after the forward (0 new files: nothing compiled), records which compiler would build
and whether the kernels came from the package (runtime/aot.py), times a second forward, and checks the
output against a float64 reference. The result names the GPU, its clocks, the date and the commit
(bench/suite.py). Exit status: 0 target met, 1 not met (too slow, something compiled, or a wrong
result), 2 no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
TARGET_S = 1.0

CHILD = r"""
import json, os, sys, time
import torch
t0 = time.perf_counter()

def files(root):
    return sum(len(f) for _, _, f in os.walk(root)) if os.path.isdir(root) else 0

cache = os.environ["GEMM_LADDER_CACHE"]
import gemm_ladder
from gemm_ladder.runtime import aot
t_import = time.perf_counter()
m, hidden, inter = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
gen = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(m, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
w_gate, w_up = (torch.randn(inter, hidden, device="cuda", dtype=torch.bfloat16, generator=gen) / hidden ** 0.5 for _ in range(2))
w_down = torch.randn(hidden, inter, device="cuda", dtype=torch.bfloat16, generator=gen) / inter ** 0.5
torch.cuda.synchronize()
t_weights = time.perf_counter()
before = files(cache)
gate = gemm_ladder.linear(x, w_gate)
torch.cuda.synchronize()
after_first_linear = files(cache)
y = gemm_ladder.linear(torch.nn.functional.silu(gate) * gemm_ladder.linear(x, w_up), w_down)
torch.cuda.synchronize()
t_first = time.perf_counter()
after_forward = files(cache)
t1 = time.perf_counter()
y2 = gemm_ladder.linear(torch.nn.functional.silu(gemm_ladder.linear(x, w_gate)) * gemm_ladder.linear(x, w_up), w_down)
torch.cuda.synchronize()
t_second = time.perf_counter() - t1

# float64 reference of the same composition, the hidden activation rounded to bf16 as the kernels' is
g64 = x.double() @ w_gate.double().T
u64 = x.double() @ w_up.double().T
h = (torch.nn.functional.silu(g64.bfloat16().float()) * u64.bfloat16().float()).bfloat16()
ref = h.double() @ w_down.double().T
err = (y.double() - ref).abs().max().item()
scale = ref.abs().max().item()
ref_torch = torch.nn.functional.linear(h, w_down)  # cuBLAS on the same hidden activation, for the bound
err_torch = (ref_torch.double() - ref).abs().max().item()

from gemm_ladder.runtime.compiler import CompilerNotFoundError, compiler_choice
try:
    compiler = compiler_choice()
except CompilerNotFoundError as exc:
    compiler = "none: " + str(exc).splitlines()[0]
shipped = aot.shipped()
print(json.dumps({
    "seconds": {"import_gemm_ladder": t_import - t0,
                "of_which_host_module_load": __import__("gemm_ladder.host").host.load_seconds(),
                "weights_and_cuda_init": t_weights - t_import,
                "first_forward": t_first - t_weights, "total": t_first - t0, "second_forward": t_second},
    "cache_files": {"before": before, "after_first_linear": after_first_linear, "after_forward": after_forward},
    "compiler_if_needed": compiler, "shipped_kernels": shipped.count if shipped else 0,
    "shipped_identity": shipped.identity if shipped else None,
    "max_abs_error": err, "max_abs_reference": scale, "cublas_max_abs_error": err_torch,
    "repeat_bitwise": bool(torch.equal(y, y2)), "launcher": __import__("gemm_ladder.host").host.describe(),
}))
"""

# The install-time step: build (or find) the compiled host module, and say which launcher loaded.
HOST_BUILD = r"""
import gemm_ladder.host as host
host.load()
print(host.describe())
"""


def _hidden_env(cache: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and "cuda" not in p.lower() and not Path(p, "nvcc").exists())
    for var in ("CUDA_HOME", "CUDA_PATH", "GEMM_LADDER_NVCC", "GEMM_LADDER_COMPILER", "GEMM_LADDER_AOT",
                "GEMM_LADDER_JIT_DEBUG"):
        env.pop(var, None)
    env["GEMM_LADDER_CACHE"] = cache
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _child_command(args, code: str = CHILD) -> tuple[list[str], bool]:
    """The child's command line, inside a private mount namespace hiding the toolkit where possible."""
    py = [sys.executable, "-c", code, str(args.tokens), str(args.hidden), str(args.intermediate)]
    toolkit = Path("/usr/local/cuda").resolve()
    if toolkit.is_dir() and shutil.which("unshare") and subprocess.run(["unshare", "-m", "true"],
                                                                       capture_output=True).returncode == 0:
        nvccs = [p for p in ("/usr/local/bin/nvcc", "/usr/bin/nvcc") if Path(p).exists()]
        hide = f"mount --bind $(mktemp -d) {toolkit}" + "".join(f" && mount --bind /dev/null {n}" for n in nvccs)
        return ["unshare", "-m", "sh", "-c", f'{hide} && exec "$@"', "sh", *py], True
    return py, not toolkit.is_dir()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512, help="rows of x (default 512)")
    parser.add_argument("--hidden", type=int, default=4096, help="model width (default 4096, Llama-3-8B)")
    parser.add_argument("--intermediate", type=int, default=14336, help="MLP width (default 14336, Llama-3-8B)")
    sys.path.insert(0, str(HERE))
    from suite import add_output_argument, require_gpu, save

    add_output_argument(parser)
    args = parser.parse_args()
    require_gpu(__file__)  # the forward runs on it
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as host_cache:
        env = _hidden_env(cache)
        env["GEMM_LADDER_HOST_CACHE"] = host_cache
        which = subprocess.run(["sh", "-c", "command -v nvcc"], env=env, capture_output=True, text=True).stdout.strip()
        # The compiled host module is built once per machine (at install, or the first import), not per
        # process: build it first, in the same toolkit-less environment, and time that apart.
        host_cmd, _ = _child_command(args, HOST_BUILD)
        t = time.perf_counter()
        host = subprocess.run(host_cmd, env=env, capture_output=True, text=True)
        host_build_s = time.perf_counter() - t
        host_built = host.returncode == 0 and host.stdout.strip().endswith("C++")
        cmd, hidden = _child_command(args)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        print(f"cold_start.py: the child failed (exit {proc.returncode})", file=sys.stderr)
        return 1
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    files = child["cache_files"]
    compiled_nothing = files["after_first_linear"] == files["before"] == files["after_forward"]
    correct = child["max_abs_error"] <= max(4 * child["cublas_max_abs_error"], 1e-3 * child["max_abs_reference"])
    met = compiled_nothing and correct and child["seconds"]["total"] <= TARGET_S
    result = {
        "shape": {"tokens": args.tokens, "hidden": args.hidden, "intermediate": args.intermediate, "dtype": "bf16"},
        "toolkit_hidden": hidden, "nvcc_on_child_path": which or None,
        "host_module": {"build_s": host_build_s, "built": host_built, "launcher": host.stdout.strip()[-200:],
                        "stderr_tail": host.stderr[-1500:] if not host_built else ""},
        **child,
        "compiled_nothing": compiled_nothing, "correct": correct, "target_s": TARGET_S, "meets_target": met,
    }
    save(result, "cold_start", args.output)
    s = child["seconds"]
    host_s = s.get("of_which_host_module_load")
    print(f"import gemm_ladder {s['import_gemm_ladder']:.3f} s"
          + (f" (host module load {host_s:.3f} s)" if host_s is not None else "")
          + f", weights + CUDA init {s['weights_and_cuda_init']:.3f} s, "
          f"first forward {s['first_forward']:.3f} s: total {s['total']:.3f} s (target {TARGET_S} s); second forward "
          f"{s['second_forward'] * 1e3:.1f} ms; host module built once before ({host_build_s:.1f} s, "
          f"{'C++' if host_built else 'NOT built'}); launcher {child['launcher']}; cache files {files}; compiler if needed: {child['compiler_if_needed']}; "
          f"shipped kernels {child['shipped_kernels']}; toolkit hidden {hidden}; max |err| {child['max_abs_error']:.3g} "
          f"(cuBLAS {child['cublas_max_abs_error']:.3g}): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
