"""The fp8 kernel's TMA-store build (Fp8Kernel.store = "tma") on the GPU, forced (fp8.STORE_DEFAULT set to
"tma" for each test, as shipped since d26a939): error against float64 of the
dequantized inputs for every scale mode, bf16 and fp16, with and without bias, M and N tails and several
tiles per CTA (the staging buffer reused); the same values as the register-store build; bitwise
repeatable; an output with a padded pitch; an output TMA cannot write runs the register store, and
describe/explain say so."""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder.errors import GemmInputError
from gemm_ladder.library import fp8

from fp8_cases import BLOCKS
from fp8_cases import fp8_problem as _problem
from fp8_cases import rel_err as _rel_err
from gemm_ladder.library.fp8 import Fp8Kernel

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
TMA, REGISTERS = fp8.STORE_TMA, fp8.STORE_REGISTERS
#: (M, N, K): BN 64 with M and N tails; BN 128 with ~4 tiles per CTA on 132 SMs (the staging buffer
#: reused), a last tile whose second panel starts past N, and one row.
SHAPES = [(300, 200, 272), (2048, 4096, 512), (520, 8200, 256), (1, 7168, 2048)]


@pytest.fixture
def tma_default(monkeypatch):
    monkeypatch.setattr(fp8, "STORE_DEFAULT", TMA)






def _explain(qa, qb, sa, sb, bias, out_dtype, out=None) -> dict:
    return gemm_ladder.explain_scaled_mm(qa, qb, sa, sb, bias=bias, out_dtype=out_dtype, out=out)


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tma_store_against_float64(tma_default, monkeypatch, shape, mode, out_dtype, bias):
    m, n, k = shape
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=1)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
    ref = da @ dw.T + (b.double() if bias else 0)
    assert _explain(qa, qb, sa, sb, b, out_dtype)["store"] == TMA
    out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)  # poisoned: every element written
    y = gemm_ladder.scaled_mm(qa, qb, sa, sb, bias=b, out_dtype=out_dtype, out=out)
    assert y is out and torch.isfinite(y).all()
    floor = _rel_err(ref.to(out_dtype), ref)
    assert _rel_err(y, ref) <= 1.5 * floor + 1e-4, (_rel_err(y, ref), floor)
    monkeypatch.setattr(fp8, "STORE_DEFAULT", REGISTERS)
    y_reg = gemm_ladder.scaled_mm(qa, qb, sa, sb, bias=b, out_dtype=out_dtype)
    # The same fp32 values rounded once either way; at most a rare rounding step apart where ptxas
    # contracts the scale and bias differently in the two builds.
    differ = (y.view(torch.int16) != y_reg.view(torch.int16)).float().mean().item()
    print(f"{shape} {mode} {out_dtype} bias={bias}: TMA vs register store bitwise equal: {differ == 0}")
    assert differ <= 1e-3
    torch.testing.assert_close(y, y_reg, rtol=2**-7, atol=0)


@pytest.mark.parametrize("mode", list(BLOCKS))
def test_tma_store_bitwise_repeatable(tma_default, mode):
    qa, qb, sa, sb, *_ = _problem(2048, 4096, 1024, mode, seed=3)
    y1 = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    y2 = gemm_ladder.scaled_mm(qa, qb, sa, sb)
    torch.cuda.synchronize()
    assert torch.equal(y1, y2)


def test_tma_store_into_a_padded_pitch(tma_default):
    m, n, k = 300, 1000, 512  # pitch 1040 elements (2080 bytes, a multiple of 16): TMA writes it
    qa, qb, sa, sb, da, dw = _problem(m, n, k, "blockwise", seed=2)
    big = torch.full((m, 1040), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = big[:, :n]
    assert _explain(qa, qb, sa, sb, None, torch.bfloat16, out)["store"] == TMA
    gemm_ladder.scaled_mm(qa, qb, sa, sb, out=out)
    assert torch.isfinite(out).all() and big[:, n:].isnan().all()  # the padding untouched
    ref = da @ dw.T
    assert _rel_err(out, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4


#: Outputs the TMA store cannot write: N not a multiple of 8 (a new output), a 200-byte pitch, a base
#: one element past a 16-byte boundary; each with the reason explain gives.
UNALIGNED = {"n": (97, "N = 97 is not a multiple of 8"), "pitch": (96, "row pitch (100 elements)"),
             "base": (96, "base address")}


@pytest.mark.parametrize("case", list(UNALIGNED))
def test_an_unaligned_output_falls_back_visibly(tma_default, case):
    m, k = 130, 256
    n, reason = UNALIGNED[case]
    qa, qb, sa, sb, da, dw = _problem(m, n, k, "rowwise", seed=4)
    big = torch.full((m, 112), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = {"n": big.view(-1)[:m * n].view(m, n), "pitch": big.view(-1)[:m * 100].view(m, 100)[:, :n],
           "base": big[:, 1:n + 1]}[case]
    e = _explain(qa, qb, sa, sb, None, torch.bfloat16, out)
    assert e["store"] == REGISTERS and e["defines"]["GL_FP8_TMA_STORE"] == 0
    assert reason in e["store_reason"], e["store_reason"]
    gemm_ladder.scaled_mm(qa, qb, sa, sb, out=out)
    ref = da @ dw.T
    assert torch.isfinite(out).all()
    assert _rel_err(out, ref) <= 1.5 * _rel_err(ref.to(torch.bfloat16), ref) + 1e-4
    call = fp8.check_scaled_mm(qa, qb, sa, sb, out=out)
    with pytest.raises(GemmInputError, match="stores C by TMA"):  # asked for by name: refused, not replaced
        fp8.scaled_mm_launch(qa, qb, sa, sb, None, call, out, kernel=Fp8Kernel("rowwise", bn=64, store=TMA))
