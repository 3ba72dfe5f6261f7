"""bench/experiments/k_sweep.py's arithmetic without a GPU: the K points, the least-squares line on
synthetic times, the split of a gap at K0 into a fixed and a mainloop part, and the cases' sweeps."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "experiments"))

import k_sweep  # noqa: E402


def test_k_points_are_multiples_of_the_block_around_k0():
    assert k_sweep.k_points(4096) == [1024, 2048, 4096, 6144, 8192]
    assert k_sweep.k_points(1536) == [384, 768, 1536, 2304, 3072]
    assert k_sweep.k_points(3584) == [896, 1792, 3584, 5376, 7168]
    assert k_sweep.k_points(100, (0.5, 1, 2)) == [128, 256]  # rounded, at least one block, distinct
    for k0, _, _ in [*k_sweep.MM_SHAPES]:
        assert all(k % 128 == 0 for k in k_sweep.k_points(k0))
    with pytest.raises(ValueError, match="two distinct"):
        k_sweep.k_points(64, (0.25, 0.5))
    with pytest.raises(ValueError, match=">= 1"):
        k_sweep.k_points(0)


def test_fit_line_recovers_a_line_exactly():
    xs = [1024, 2048, 4096, 6144, 8192]
    f = k_sweep.fit_line(xs, [12.5 + 0.02 * x for x in xs])
    assert f["a"] == pytest.approx(12.5) and f["b"] == pytest.approx(0.02) and f["r2"] == pytest.approx(1.0)


def test_fit_line_on_noisy_times():
    rng = random.Random(3)
    xs = [384, 768, 1536, 2304, 3072]
    ys = [20.0 + 0.1 * x * (1 + rng.uniform(-0.01, 0.01)) for x in xs]
    f = k_sweep.fit_line(xs, ys)
    assert f["b"] == pytest.approx(0.1, rel=0.02) and abs(f["a"] - 20.0) < 5 and 0.99 < f["r2"] < 1.0
    # A curve is not a line: R^2 says so.
    assert k_sweep.fit_line(xs, [x ** 2 / 1e3 for x in xs])["r2"] < 0.99
    assert k_sweep.fit_line([1, 2, 3], [5, 5, 5]) == {"a": 5.0, "b": 0.0, "r2": 1.0}


def test_fit_line_refuses_what_has_no_line():
    for xs, ys in (([1], [1]), ([1, 2], [1]), ([3, 3], [1, 2])):
        with pytest.raises(ValueError, match="fit_line"):
            k_sweep.fit_line(xs, ys)


def test_the_gap_splits_into_fixed_and_mainloop_parts():
    m, n = 4096, 7168
    xs = [4096, 8192, 16384, 24576, 32768]
    flop_per_k = 2.0 * m * n
    # torch: 1300 TFLOP/s in the loop, 15 us fixed; ours: 1200 TFLOP/s, 40 us fixed.
    us_per_k = {"torch": flop_per_k / 1300e12 * 1e6, "ours": flop_per_k / 1200e12 * 1e6}
    fixed = {"torch": 15.0, "ours": 40.0}
    us = {side: [fixed[side] + us_per_k[side] * x for x in xs] for side in ("ours", "torch")}
    s = k_sweep.summarize(xs, us, flop_per_k, 16384)
    assert s["fits"]["ours"]["rate_tflops"] == pytest.approx(1200) and s["fits"]["torch"]["a_us"] == pytest.approx(15)
    vs = s["vs_torch"]["ours"]
    assert set(s["vs_torch"]) == {"ours"}
    assert vs["rate"] == pytest.approx(1200 / 1300) and vs["miss_fixed_us"] == pytest.approx(25)
    assert vs["miss_mainloop_us"] == pytest.approx((us_per_k["ours"] - us_per_k["torch"]) * 16384)
    assert vs["gap_us"] == pytest.approx(vs["miss_fixed_us"] + vs["miss_mainloop_us"])
    assert vs["speed_k0"] == pytest.approx(us["torch"][2] / us["ours"][2])


def test_a_flat_or_falling_slope_has_no_rate():
    f = k_sweep.describe_fit([1, 2, 3], [5.0, 4.0, 3.0], 1e6)
    assert f["rate_tflops"] is None and f["b_us_per_k"] == pytest.approx(-1.0)


def test_grouped_grad_w_sweeps_the_rows_and_keeps_the_routing_at_one():
    case = k_sweep.GroupedCase("qwen3_gate_up", "grad_w", k_sweep.FACTORS)
    from grouped import CASES  # bench/grouped.py: k_sweep put bench/ on sys.path

    e, rows, n, k, _, _ = CASES["qwen3_gate_up"]
    assert (case.m, case.n, case.x0) == (k, n, rows) and case.x0 in case.xs and len(case.xs) == 5
    assert case.scaled[rows] == case.sizes and all(len(s) == e for s in case.scaled.values())
    fwd = k_sweep.GroupedCase("mixtral_down_skewed", "fwd", k_sweep.FACTORS)
    assert fwd.x0 == 14336 and fwd.xs == [3584, 7168, 14336, 21504, 28672] and fwd.m == 16384


def test_every_case_sweeps_through_its_k0():
    for case in k_sweep.make_cases(k_sweep.OPS, k_sweep.FACTORS):
        assert case.x0 in case.xs and len(case.xs) >= 3, case.label
        assert case.swept == ("rows" if case.label.endswith("grad_w") else "K"), case.label  # the table's label
    labels = [c.label for c in k_sweep.make_cases(("fp8",), k_sweep.QUICK_FACTORS)]
    assert len(labels) == 6 and "4096x24576x1536 blockwise" in labels


def test_rel_err_catches_a_wrong_result():
    import torch

    ref = torch.randn(64, 64)
    assert k_sweep.rel_err(ref.bfloat16(), ref) < 1e-2
    assert k_sweep.rel_err(torch.zeros_like(ref), ref) == pytest.approx(1.0)
    assert math.isinf(k_sweep.rel_err(torch.full_like(ref, float("nan")), ref))


class _CpuCase(k_sweep.Case):
    """A case whose sides are CPU matmuls (wall time): run_case's bookkeeping end to end."""

    op = "cpu"
    device = "cpu"

    def __init__(self, wrong: bool = False):
        super().__init__("cpu 64x64", 64, 64, 256, [128, 256, 512])
        self.wrong = wrong

    def make(self, k, alt):
        import torch

        a, b = torch.randn(64, k), torch.randn(k, 64)
        fns = {"ours": lambda *_: (a @ b) * (2.0 if self.wrong else 1.0), "torch": lambda *_: a @ b}
        outs = {name: fn() for name, fn in fns.items()}
        if alt:
            self._alt(fns, lambda *_: (a @ b).double(), lambda *_: torch.mm(a, b, out_dtype=torch.float16))
            outs["ours_fp32"] = fns["ours_fp32"]()
        return fns, outs


def test_run_case_fits_every_side_and_checks_each_output():
    row = k_sweep.run_case(_CpuCase(), budget=0.002, rounds=1)
    assert row["ks"] == [128, 256, 512] and set(row["us"]) == {"ours", "torch"} and len(row["us"]["ours"]) == 3
    assert set(row["fits"]) == {"ours", "torch"} and set(row["vs_torch"]) == {"ours"}
    assert row["correct"] and row["rel_err"]["ours"] < 1e-5 and "ours_fp32" in row["alt"]["us"]
    assert row["alt"]["refused"]["torch_fp32"]  # the CPU refuses mm's out_dtype: recorded, not raised
    assert set(row["alt"]["extra_us"]) == {"ours"}
    wrong = k_sweep.run_case(_CpuCase(wrong=True), budget=0.002, rounds=1)
    assert not wrong["correct"] and wrong["rel_err"]["ours"] == pytest.approx(1.0, rel=1e-3)


class _RefCase(_CpuCase):
    """With a float64 reference of the first rows: every side, torch's too, is checked against it."""

    def __init__(self, wrong: bool = False, torch_wrong_at: int | None = None):
        super().__init__(wrong)
        self.torch_wrong_at = torch_wrong_at

    def make(self, k, alt):
        import torch

        a, b = torch.randn(64, k), torch.randn(k, 64)
        bad = k == self.torch_wrong_at
        fns = {"ours": lambda *_: (a @ b) * (2.0 if self.wrong else 1.0),
               "torch": lambda *_: (a @ b) * (0.0 if bad else 1.0)}
        outs = {name: fn() for name, fn in fns.items()}
        outs["float64"] = a[:16].double() @ b.double()
        return fns, outs


def test_a_wrong_torch_output_is_recorded_and_not_taken_for_ours(capsys):
    """torch._scaled_mm blockwise at K = 768 was wrong on the H200; checked against torch, ours looked wrong."""
    row = k_sweep.run_case(_RefCase(torch_wrong_at=128), budget=0.002, rounds=1)
    assert row["correct"] and row["torch_wrong"] == {"torch": [128]}
    assert row["rel_err"]["ours"] < 1e-5 and row["rel_err"]["torch"] == pytest.approx(1.0)
    k_sweep.table([row])
    assert "WRONG at K=128" in capsys.readouterr().out
    ours_wrong = k_sweep.run_case(_RefCase(wrong=True), budget=0.002, rounds=1)
    assert not ours_wrong["correct"] and ours_wrong["torch_wrong"] is None


def test_grouped_reference_is_each_groups_product():
    import torch

    offs = torch.tensor([3, 3, 10, 300], dtype=torch.int32)  # an empty group; the last crosses CHECK_ROWS
    a, b = torch.randn(300, 8), torch.randn(4, 8, 5)
    ref = k_sweep.grouped_reference(a, b, offs, "fwd")
    assert ref.shape == (k_sweep.CHECK_ROWS, 5) and ref.dtype == torch.float64
    want = torch.cat([a[:3] @ b[0], a[3:10] @ b[2], a[10:k_sweep.CHECK_ROWS] @ b[3]])
    torch.testing.assert_close(ref, want.double(), rtol=1e-5, atol=1e-5)
    at, bw = torch.randn(6, 300), torch.randn(300, 5)  # grad_w: a (K, rows), b (rows, N)
    ref = k_sweep.grouped_reference(at, bw, offs, "grad_w")
    assert ref.shape == (2, 6, 5)
    torch.testing.assert_close(ref[0], (at[:, :3] @ bw[:3]).double(), rtol=1e-5, atol=1e-5)
    assert not ref[1].any()  # the empty group


def test_table_prints_fits_and_errors(capsys):
    row = k_sweep.run_case(_CpuCase(), budget=0.002, rounds=1)
    k_sweep.table([row, {"op": "mm", "case": "x", "error": "boom", "correct": False}])
    out = capsys.readouterr().out
    assert "cpu 64x64" in out and "ERROR" in out and "rate/torch" in out
