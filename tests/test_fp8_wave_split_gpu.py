"""The fp8 kernel's split of a short last wave (library/fp8.py ``MAX_WAVE_EFFICIENCY``, design/stream_k.py
``plan_wave``) on the GPU: tiles that fill the SMs, some run whole and the rest split by K over the grid,
against float64 of the dequantized inputs and against the unsplit launch of the same call, per scale mode,
with M and N tails, K not a multiple of 128, a bias, bf16 (TMA store), fp32 (register store) and the
quantized output; bitwise repeatable over fresh, poisoned outputs.

The grid is made small (the launch reads the SM count through fp8._sm_count: 8 here) so that small
shapes have several waves: 1152 x 384 tiles are 27 on 8 CTAs (4 waves, the first 16 tiles whole, the 11
after split: "wave"), 637 x 333 are 15 (2 waves, all split: "all").
"""

from __future__ import annotations

import math

import pytest
import torch

import gemm_ladder
from gemm_ladder.library import fp8

from fp8_cases import BLOCKS, assert_bitwise_repeatable, assert_quantized_near_float64
from fp8_cases import fp8_problem as _problem
from fp8_cases import rel_err as _rel_err

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
GRID = 8
#: (shape, the split explain must report, the first split tile)
CASES = [((1152, 384, 2064), "wave", 16), ((637, 333, 4000), "all", 0)]


@pytest.fixture(autouse=True)
def _eight_sms(monkeypatch):
    monkeypatch.setattr(fp8, "_sm_count", lambda device: GRID)
    monkeypatch.setattr(fp8, "MAX_WAVE_EFFICIENCY", 1.0)


def _run(monkeypatch, split: str, expect: str, *args, **kwargs):
    monkeypatch.setattr(fp8, "SPLIT_DEFAULT", split)
    e = gemm_ladder.explain_scaled_mm(*args, **kwargs)
    assert (e["split"], e["grid"]) == ((expect, GRID) if split == "auto" else ("none", GRID)), e["split_reason"]
    assert (e["tile"]["BM"], e["tile"]["BN"]) == (128, 128)  # what _tiles and the plans here assume
    return gemm_ladder.scaled_mm(*args, **kwargs)


def _tiles(count: int, m: int, n: int, group_m: int = 8) -> list[tuple[int, int]]:
    """(tile row, tile column) of tiles [0, count) in the kernel's order (sm90_fp8_gemm.cu tile_coords:
    groups of kGroupM = 8 tile rows, column by column within a group)."""
    tiles_m, tiles_n = math.ceil(m / 128), math.ceil(n / 128)
    out = []
    for t in range(count):
        first_m = t // (group_m * tiles_n) * group_m
        rows = min(tiles_m - first_m, group_m)
        r = t % (group_m * tiles_n)
        out.append((first_m + r % rows, r // rows))
    return out


@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_wave_split_matches_float64_and_unsplit(monkeypatch, mode, case):
    (m, n, k), expect, first = case
    qa, qb, sa, sb, da, dw = _problem(m, n, k, mode, seed=m + n)
    plan, _ = fp8.split_plan(m, n, k, 128, GRID)
    assert plan.first_unit == first and plan.max_contributors == 2
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref = da @ dw.T + bias.double()
    reassociation = math.ceil(k / 128) * 2.0**-22 * (da.abs() @ dw.abs().T)  # as test_fp8_split_gpu.py
    for out_dtype in (torch.bfloat16, torch.float32):
        ys = _run(monkeypatch, "auto", expect, qa, qb, sa, sb, bias=bias, out_dtype=out_dtype)
        yu = _run(monkeypatch, "none", expect, qa, qb, sa, sb, bias=bias, out_dtype=out_dtype)
        floor = _rel_err(ref.to(out_dtype), ref)
        extra = 2**-10 if out_dtype == torch.float32 else 1e-4
        assert _rel_err(ys, ref) <= 1.5 * floor + extra, (_rel_err(ys, ref), floor)
        assert _rel_err(yu, ref) <= 1.5 * floor + extra, (_rel_err(yu, ref), floor)
        step = 2.0**-7 if out_dtype == torch.bfloat16 else 2.0**-22
        diff = (ys.double() - yu.double()).abs()
        assert (diff <= reassociation + step * yu.double().abs() + 1e-30).all(), diff.max().item()
        # The whole tiles of a "wave" launch are the unsplit launch's, bit for bit.
        for tm, tn in _tiles(first, m, n):
            rows, cols = slice(tm * 128, (tm + 1) * 128), slice(tn * 128, (tn + 1) * 128)
            assert torch.equal(ys[rows, cols], yu[rows, cols]), (tm, tn)


@pytest.mark.parametrize("mode", list(BLOCKS))
def test_wave_split_bitwise_repeatable_on_poisoned_outputs(monkeypatch, mode):
    (m, n, k), expect, _ = CASES[0]
    qa, qb, sa, sb, *_ = _problem(m, n, k, mode, seed=5)
    monkeypatch.setattr(fp8, "SPLIT_DEFAULT", "auto")
    assert gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)["split"] == expect
    assert_bitwise_repeatable(qa, qb, sa, sb)


def test_wave_split_quantized_output(monkeypatch):
    (m, n, k), expect, _ = CASES[0]
    qa, qb, sa, sb, da, dw = _problem(m, n, k, "blockwise", seed=6)
    bias = torch.randn(n, device="cuda")
    values, scales = _run(monkeypatch, "auto", expect, qa, qb, sa, sb, bias=bias, out_dtype=E4M3)
    assert_quantized_near_float64(values, scales, da @ dw.T + bias.double())
