"""swiglu's small-M path without a GPU (dispatch/swiglu_small_m.py): which M takes it, what
explain_swiglu says (meta tensors), the gated epilogue's reference and its CUDA compiling."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gemm_ladder
from gemm_ladder.dispatch import swiglu_small_m as ssm
from gemm_ladder.errors import GemmInputError
from conftest import needs_nvcc


def meta(m, n, k, dtype=torch.bfloat16):
    return (torch.empty(m, k, dtype=dtype, device="meta"), torch.empty(n, k, dtype=dtype, device="meta"),
            torch.empty(n, k, dtype=dtype, device="meta"))


def test_which_m_takes_the_path():
    assert ssm.takes(1, 14336, 4096) and ssm.takes(ssm.SMALL_M_MAX, 8, 8)
    assert not ssm.takes(ssm.SMALL_M_MAX + 1, 14336, 4096) and not ssm.takes(0, 8, 8)
    assert 1 <= ssm.SMALL_M_MAX <= 256  # the small-M kernel's domain


def test_where_the_fused_kernel_fills_its_waves_it_runs_at_any_m():
    """The fused kernel's ceil(M / 256) x ceil(N / 128) work units over whole waves of 66 clusters: Phi-3-mini's
    MLP (N 8192: 64 units, 0.97) takes it from FUSED_FILL_MIN_M rows on (the pair below); Llama-3-8B's (112 units,
    0.85) and Qwen2.5-7B's (148, 0.75) keep the pair up to SMALL_M_MAX (the measurements: FUSED_MIN_WAVE_FILL's
    and FUSED_FILL_MIN_M's comments)."""
    assert ssm.fused_wave_fill(64, 8192, 66) == pytest.approx(64 / 66)
    assert ssm.fused_wave_fill(64, 14336, 66) == pytest.approx(112 / 132)
    assert ssm.fused_wave_fill(64, 18944, 66) == pytest.approx(148 / 198)
    assert ssm.fused_wave_fill(1, 66 * 128, 66) == 1.0 and ssm.fused_wave_fill(1, 67 * 128, 66) == pytest.approx(67 / 132)
    assert ssm.FUSED_MIN_WAVE_FILL == 0.9 and ssm.FUSED_FILL_MIN_M == 64
    for m in (1, 7, 16, 63):  # below FUSED_FILL_MIN_M the pair, whatever the fill
        assert ssm.takes(m, 8192, 3072) and "< 64" in ssm.reason(m, 8192)
    for m in (64, 100, ssm.SMALL_M_MAX):
        assert not ssm.takes(m, 8192, 3072)
    for m in (1, 16, 64, ssm.SMALL_M_MAX):
        assert ssm.takes(m, 14336, 4096) and ssm.takes(m, 18944, 3584)
    # the device's clusters decide: 64 units are one whole wave of 64 clusters, 65 a second wave nearly empty
    assert not ssm.takes(64, 8192, 3072, clusters=64) and ssm.takes(64, 8192 + 128, 3072, clusters=64)
    e = gemm_ladder.explain_swiglu(*meta(64, 8192, 3072))
    assert e["path"] == "fused" and e["fused_wave_fill"] == pytest.approx(64 / 66)
    assert "fill their waves of 66 clusters to 0.97 >= 0.9" in e["reason"] and e["launches"][0].startswith("sm90_swiglu")
    e = gemm_ladder.explain_swiglu(*meta(64, 14336, 4096))
    assert e["path"] == "small_m_gated" and "to only 0.85" in e["reason"] and "one launch" in e["reason"]


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_explain_swiglu_names_both_launches_on_the_small_m_kernel(dtype, monkeypatch):
    """With one launch off (or past ONE_LAUNCH_MAX_M rows), the pair: both GEMMs on the small-M kernel."""
    monkeypatch.setattr(ssm, "ONE_LAUNCH", False)
    e = gemm_ladder.explain_swiglu(*meta(7, 14336, 4096, dtype))
    assert e["path"] == "small_m_pair" and (e["m"], e["n"], e["k"]) == (7, 14336, 4096)
    assert e["threshold"] == ssm.SMALL_M_MAX and "M = 7 <=" in e["reason"]
    assert [step["kind"] for step in e["launches"]] == ["small_m", "small_m"]
    assert "float32" in e["launches"][0]["step"] and "silu(x @ w_gate^T) * up" in e["launches"][1]["step"]
    assert e["launches"][0]["explain"]["out_dtype"] == "float32"
    assert all("sm90_gemm_small_m" in step["kernel"]["source"] for step in e["launches"])


def test_explain_swiglu_batch_dims_and_the_fused_path():
    x, wg, wu = meta(6, 512, 256)
    assert gemm_ladder.explain_swiglu(x.view(2, 3, 256), wg, wu)["m"] == 6
    e = gemm_ladder.explain_swiglu(*meta(ssm.SMALL_M_MAX + 1, 512, 256))
    assert e["path"] == "fused" and e["launches"][0].startswith("sm90_swiglu")


def test_explain_swiglu_refuses_bad_input_like_swiglu():
    x, wg, _ = meta(7, 512, 256)
    with pytest.raises(GemmInputError):
        gemm_ladder.explain_swiglu(x, wg, torch.empty(512, 128, dtype=torch.bfloat16, device="meta"))


@pytest.mark.parametrize("m", [4, ssm.SMALL_M_MAX + 64], ids=["small_m", "fused"])
def test_explain_swiglu_refuses_the_layouts_and_extents_swiglu_refuses(m):
    """explain_swiglu raises what swiglu raises on the same tensors (a review found it planning them)."""
    from gemm_ladder.errors import NotSupportedError, OutsideDomainError

    bf = torch.bfloat16
    cases = [
        ((torch.empty(m, 64, dtype=bf, device="meta"), *(torch.empty(64, 32, dtype=bf, device="meta").T,) * 2),
         NotSupportedError),  # column-major weights: not read in place
        (meta(m, 32, 63), NotSupportedError),  # a row pitch of 126 bytes
        ((torch.empty(m, 8, dtype=bf, device="meta"), *(torch.empty(2**31, 8, dtype=bf, device="meta"),) * 2),
         OutsideDomainError),
    ]
    for args, error in cases:
        with pytest.raises(error) as theirs:
            gemm_ladder.swiglu(*args)
        with pytest.raises(error) as ours:
            gemm_ladder.explain_swiglu(*args)
        assert str(ours.value) == str(theirs.value)


def test_explain_swiglu_launches_nothing_where_swiglu_launches_nothing():
    for m, k, path in ((0, 64, "empty"), (4, 0, "zeros"), (ssm.SMALL_M_MAX + 1, 0, "zeros")):
        e = gemm_ladder.explain_swiglu(*meta(m, 32, k))
        assert e["path"] == path and e["launches"] == [], (m, k)
    assert gemm_ladder.explain_swiglu(*meta(4, 0, 64))["path"] == "empty"


def test_one_launch_up_to_its_rows_then_the_pair():
    """One launch (the default) holds M in the gated build's widest bucket; from ONE_LAUNCH_MAX_M + 1 rows to the
    threshold the pair runs (two tiles of the gated build read the weights twice: ONE_LAUNCH_MAX_M's comment)."""
    assert ssm.ONE_LAUNCH and ssm.ONE_LAUNCH_MAX_M == 128 < ssm.SMALL_M_MAX
    assert gemm_ladder.explain_swiglu(*meta(ssm.ONE_LAUNCH_MAX_M, 14336, 4096))["path"] == "small_m_gated"
    e = gemm_ladder.explain_swiglu(*meta(ssm.ONE_LAUNCH_MAX_M + 1, 14336, 4096))
    assert e["path"] == "small_m_pair" and [step["kind"] for step in e["launches"]] == ["small_m", "small_m"]


def test_the_threshold_per_device(monkeypatch):
    """SMALL_M_MAX (the H200's, and an assumed device's) unless the device's name has a measured entry: the H100
    takes the fused kernel above 128 rows with one launch, above 64 with the pair alone (SMALL_M_MAX_BY_DEVICE's
    and PAIR_SMALL_M_MAX_BY_DEVICE's measurements), and explain says which."""
    assert ssm.small_m_max(None) == ssm.small_m_max("NVIDIA H200") == ssm.SMALL_M_MAX
    assert ssm.small_m_max("NVIDIA H100 80GB HBM3") == 128
    monkeypatch.setattr(ssm, "ONE_LAUNCH", False)
    h100 = ssm.small_m_max("NVIDIA H100 80GB HBM3")
    assert h100 == 64 < ssm.SMALL_M_MAX
    assert ssm.takes(64, 14336, 4096, max_m=h100) and not ssm.takes(65, 14336, 4096, max_m=h100)
    assert ssm.takes(128, 14336, 4096) and not ssm.takes(128, 14336, 4096, max_m=h100)
    assert "SMALL_M_MAX_BY_DEVICE" in ssm.reason(128, 14336, max_m=h100) and "M = 128 > 64" in ssm.reason(128, 14336, max_m=h100)
    assert "dispatch/swiglu_small_m.SMALL_M_MAX" in ssm.reason(128, 14336)


def test_the_gated_epilogue_reference():
    acc, up = torch.randn(5, 7, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64)
    assert torch.equal(ssm.GATED.reference(acc, up), F.silu(acc) * up)
    assert ssm.GATED.inputs == {"up": "tile"}


@needs_nvcc
def test_the_gated_epilogue_compiles_with_a_float32_up():
    ssm.GATED.compile_check({"up": torch.float32})


def test_the_bench_threshold_is_the_largest_m_won_on_every_shape():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import swiglu_small_m as bench

    def row(shape, m, pair, fused, ok=True):
        return {"shape": shape, "m": m, "pair_us": pair, "fused_us": fused, "ok": ok}

    rows = [row("a", 1, 50, 100), row("b", 1, 40, 90), row("a", 64, 60, 100), row("b", 64, 70, 69),
            row("a", 128, 60, 100), row("b", 128, 60, 100)]
    assert bench.threshold(rows) == 1  # b loses at 64: nothing above 1, even though 128 wins again
    assert bench.threshold(rows[:2]) == 1 and bench.threshold([row("a", 1, 50, 10)]) is None
    assert bench.threshold([row("a", 1, 5, 10, ok=False)]) is None
    # one_launch's threshold reads its own column: here it wins at 64 where the pair lost
    for r in rows:
        r["one_launch_us"] = r["pair_us"] - 10
    assert bench.threshold(rows, "one_launch") == 128 and bench.threshold(rows) == 1
