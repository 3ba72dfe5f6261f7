"""What the fp8 tests share: operands for the GPU tests (tests/test_fp8_store_gpu.py,
tests/test_fp8_split_gpu.py, ...): quantized a and w in scaled_mm's scale layouts for each scheme, their
float64 dequantized values, and the error the tests bound; and for the CPU tests, a build's resource
check (:func:`assert_build_clean`) and bench/fp8.py loaded as a module (:func:`load_bench_fp8`). Not a
test module (no test_ prefix); imported like conftest's helpers."""

from __future__ import annotations

import math

import torch

from gemm_ladder.library.quantized import SCHEME_BLOCKS, dequantize, quantize_fp8, quantized_product_error

#: Each scheme's quantization blocks of a and of w (quantize_fp8's ``block``).
BLOCKS = SCHEME_BLOCKS


def fp8_problem(m: int, n: int, k: int, mode: str, *, seed: int = 0):
    """Quantized a (M, K) and w (N, K) of scheme ``mode``, as scaled_mm takes them (a, w.T, scale_a,
    scale_b), then the float64 dequantized a and w. a's columns span two decades of magnitude (logspace),
    so the blocks' scales differ."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), device="cuda", generator=g) * torch.logspace(-1, 1, k, device="cuda")
    w = torch.randn((n, k), device="cuda", generator=g) / math.sqrt(k)
    ba, bw = BLOCKS[mode]
    qa, sa = quantize_fp8(a, ba)
    qw, sw = quantize_fp8(w, bw)
    sb = sw.T if sw.dim() == 2 else sw
    return qa, qw.T, sa, sb, dequantize(qa, sa, ba), dequantize(qw, sw, bw)


def assert_quantized_near_float64(values: torch.Tensor, scales: torch.Tensor, ref: torch.Tensor) -> None:
    """scaled_mm's e4m3 output (values (M, N), 1 x 128 scales) against the float64 product ``ref``: each
    dequantized value within library/quantized.py's quantized_product_error bound (e4m3's rounding of the
    exact result plus the fp8 GEMM's own error), the one bench/fp8.py judges its rows by."""
    worst = quantized_product_error(values, scales, ref)
    assert worst <= 1, f"a quantized value {worst:.3g}x its bound off the float64 product"


def assert_bitwise_repeatable(qa, qb, sa, sb, launches: int = 3) -> None:
    """scaled_mm(qa, qb, sa, sb) into ``launches`` fresh NaN-filled bf16 outputs gives the same bits each time:
    every element written (finite) and the sum grouped the same whichever CTA finishes a tile."""
    import gemm_ladder

    m, n = qa.shape[0], qb.shape[1]
    outs = []
    for _ in range(launches):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        assert gemm_ladder.scaled_mm(qa, qb, sa, sb, out=out) is out
        outs.append(out)
    torch.cuda.synchronize()
    assert torch.isfinite(outs[0]).all()
    for other in outs[1:]:
        assert torch.equal(outs[0].view(torch.int16), other.view(torch.int16))


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest element error over the reference's largest magnitude."""
    return ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def assert_build_clean(kernel) -> str:
    """Build ``kernel`` (an fp8.Fp8Kernel) and assert what every fp8 build must be: no stack and no spill,
    neither wgmma serialised (C7514) nor a wait injected by ptxas (C7517: the overlap is what was written),
    only the 64 x BN x 32 wgmma shape in its SASS, shared memory within a CTA's; return the SASS."""
    import re

    from gemm_ladder.gates.resources import parse_ptxas_log
    from gemm_ladder.library import fp8
    from gemm_ladder.runtime.compiler import disassemble

    built = kernel.build()
    usage = parse_ptxas_log(built.ptxas_log)[fp8.KERNEL_NAME]
    assert (usage.stack_bytes, usage.spill_stores, usage.spill_loads) == (0, 0, 0)
    assert "C7514" not in built.ptxas_log and "C7517" not in built.ptxas_log, built.ptxas_log
    sass = disassemble(built.cubin)
    shapes = set(re.findall(r"QGMMA\.(\d+x\d+x\d+)", sass))
    assert shapes == {f"64x{kernel.bn}x32"}, shapes
    assert kernel.dynamic_smem <= fp8.SMEM_LIMIT
    return sass


def load_bench_fp8(monkeypatch, name: str):
    """bench/fp8.py loaded as module ``name`` (bench/ on sys.path for its ``suite`` import, for the test
    only; the module is not left in sys.modules)."""
    import importlib.util
    from pathlib import Path

    bench = Path(__file__).resolve().parent.parent / "bench"
    monkeypatch.syspath_prepend(str(bench))
    spec = importlib.util.spec_from_file_location(name, bench / "fp8.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_bench_fp8_offering(monkeypatch, capsys, name: str, usage: str):
    """bench/fp8.py loaded as module ``name`` (:func:`load_bench_fp8`) once its ``--help`` has exited 0
    showing ``usage`` (an option the bench documents, e.g. "--split {auto,none,both}")."""
    import pytest

    module = load_bench_fp8(monkeypatch, name)
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0 and usage in capsys.readouterr().out
    return module


class LaunchRecorder:
    """Stands for a loaded fp8 kernel in the CPU tests (``Fp8Kernel.loaded`` patched to return it): keeps
    each launch's (grid, arguments) in ``calls`` instead of launching."""

    def __init__(self):
        self.calls = []

    def launch(self, grid, args, stream):
        self.calls.append((grid, args))


def rel_frobenius(y: torch.Tensor, ref: torch.Tensor) -> float:
    """||y - ref|| / ||ref|| in float64 (Frobenius)."""
    return ((y.double() - ref).norm() / ref.norm()).item()


def assert_chain_within_torchs(err: float, ref: torch.Tensor, first_layer, w_q: torch.Tensor, w_s: torch.Tensor):
    """An fp8 chain's error ``err`` (against float64 ``ref``) at most 1.5x torch's own chain: ``first_layer()``
    (torch's first layer, bf16), ``quantize_fp8(.., (1, 128))``, then ``torch._scaled_mm`` with the second
    layer's quantized weight ``w_q`` (N, K) and its 128 x 128 scales ``w_s``. Where torch refuses the
    blockwise call (some builds do), the comparison did not run: the test is skipped with that reason (its
    callers make it their last check, so what they checked before it stands in the test's output)."""
    import pytest

    try:
        t1 = first_layer()
        tv, ts = quantize_fp8(t1, (1, 128))
        t2 = torch._scaled_mm(tv, w_q.T, ts, w_s.T, out_dtype=torch.bfloat16)
    except (RuntimeError, ValueError) as e:
        pytest.skip(f"the comparison with torch's fp8 chain not run: torch._scaled_mm refused the blockwise call "
                    f"({str(e).splitlines()[0]}); the checks before it passed")
    err_torch = rel_frobenius(t2, ref)
    assert err <= 1.5 * err_torch, (err, err_torch)

