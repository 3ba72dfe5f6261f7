"""bench/library.py without a GPU: its classes and targets, its markdown table, its refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import library  # noqa: E402


def test_classes_and_targets():
    for quick in (False, True):
        for cls in library.CLASSES:
            shapes = library.shapes_for(cls, quick)
            assert shapes, cls
            for layout, (m, n, k), target in shapes:
                assert layout in library.ORDERS and min(m, n, k) >= 1
    full = {cls: library.shapes_for(cls, False) for cls in library.CLASSES}
    assert {s for _, s, _ in full["unaligned"]} == {(4097, 4095, 4093), (4096, 4096, 4093), (8192, 8192, 8191)}
    assert all(t == 4.0 for *_, t in full["unaligned"])
    assert {s for _, s, _ in full["mid"]} == {(1024, 1024, 1024), (2048, 2048, 2048), (4096, 1024, 4096)}
    assert all(t == 0.95 for *_, t in full["mid"])
    small = {s: t for _, s, t in full["small_m"]}
    assert small[(16, 4096, 4096)] == 1.3 and small[(128, 4096, 4096)] == 1.0 and small[(1, 28672, 8192)] == 1.0
    assert {layout for layout, *_ in full["layouts"]} == set(library.ORDERS)
    with pytest.raises(ValueError, match="unknown class"):
        library.shapes_for("huge", False)


def test_markdown_table():
    row = {"class": "unaligned", "layout": "row,w.T", "m": 4097, "n": 4095, "k": 4093, "ours_tflops": 560.0,
           "cublas_tflops": 136.0, "vs_cublas": 4.12, "target_vs_cublas": 4.0, "met": True,
           "vs_aligned_neighbour": 0.8,
           "decision": {"kind": "general", "kernel": {"name": "sm90_gemm"}, "split": "tail",
                        "operands": [{"argument": "a", "path": "repacked"}, {"argument": "b", "path": "repacked"}],
                        "output": {"path": "workspace, copied back"}}}
    table = library.markdown([row])
    assert "| unaligned | row,w.T | 4097x4095x4093 | 560.0 | 136.0 | 4.120 | >= 4.0x; 0.80x of aligned | yes |" in table
    assert "repacks a+b, c copied back" in table


def test_command_line_refusals():
    run = lambda *a: subprocess.run([sys.executable, str(BENCH / "library.py"), *a], capture_output=True, text=True)
    r = run("--classes", "huge")
    assert r.returncode == 2 and "unknown class" in r.stderr
    import torch

    if not torch.cuda.is_available():
        r = run("--quick")
        assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr


def test_forced_shapes_and_table():
    assert library.parse_shapes("1024x1024x1024, 4096X1024x4096") == [(1024, 1024, 1024), (4096, 1024, 4096)]
    assert (1024, 1024, 1024) in library.FORCED_SHAPES and (1024, 4096, 4096) in library.FORCED_SHAPES
    for bad in ("1024x1024", "ax1x1", "0x1x1"):
        with pytest.raises(ValueError, match="--forced-shapes"):
            library.parse_shapes(bad)
    row = {"m": 1024, "n": 1024, "k": 1024, "cublas_us": 8.6,
           "us": {"cuBLAS": 8.6, "gemm_ladder.mm": 13.1, "BN 64 none": 9.0},
           "vs_cublas": {"cuBLAS": 1.0, "gemm_ladder.mm": 8.6 / 13.1, "BN 64 none": 8.6 / 9.0}}
    table = library.forced_markdown([row])
    assert "| M x N x K | cuBLAS us | gemm_ladder.mm | BN 64 none |" in table
    assert "| 1024x1024x1024 | 8.6 | 13.1 (0.66x) | 9.0 (0.96x) |" in table


def test_forced_refuses_a_bad_shape_before_the_gpu():
    r = subprocess.run([sys.executable, str(BENCH / "library.py"), "--forced", "--forced-shapes", "12x3"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--forced-shapes" in r.stderr and "needs a CUDA GPU" not in r.stderr


def test_a_tuned_table_cites_its_results_file():
    """What --tune writes: every width it timed (BN 64 included) in the table, each rule naming the JSON
    the timings are saved in, so the shipped table passes test_dispatch's provenance checks."""
    from gemm_ladder.dispatch.heuristic import CostModel, fit, work

    truth = CostModel({256: 0.6, 128: 0.33, 64: 0.2}, {256: 0.9, 128: 0.5, 64: 0.3}, 2.0, 6.0, "truth")
    samples = [(w, truth.predict_us(w)) for s in [(1024, 1024, 1024), (2048, 4096, 4096), (4096, 1024, 4096)]
               for bn in (256, 128, 64) for sp in ("none", "tail", "all") for w in [work(*s, bn, sp, 66)]]
    model = library.cite_results(fit(samples, "tuned on test"), "2026-12-01_library_mid_quick_abc1234.json")
    assert model.bns == (256, 128, 64)
    assert all(rule.endswith(": bench/results/2026-12-01_library_mid_quick_abc1234.json ('tune')")
               for rule in model.rules.values())
    assert CostModel.from_json(model.to_json()) == model
    assert library.cite_results(model, "") is model


def test_a_refit_keeps_the_tables_measured_cluster1_scale():
    """A model fitted from the tune (which times the 2-CTA builds only) has no cluster-1 scale, so
    merged_model_json keeps the table's measured ones and their rules (the factor beyond L2's too) when the
    refit writes the table."""
    from gemm_ladder.dispatch.heuristic import CostModel, load_table

    model = load_table()
    table = model.to_json()
    fitted = CostModel.from_json({k: v for k, v in table.items() if k != "cluster1_k_iter_scale"})
    fitted = CostModel(fitted.k_iter_us, fitted.split_k_iter_us, fitted.fixup_us, fitted.fixed_us, "refit",
                       {"fixed_us": "least squares"}, fitted.fixup_contributor_us)
    table.update(library.merged_model_json(table, fitted))
    assert table["cluster1_k_iter_scale"] == {"64": 0.853} and table["provenance"] == "refit"
    assert set(table["rules"]) == {"fixed_us", "cluster1_k_iter_scale[64]", "bm64_k_iter_scale",
                                   "cluster1_bm64_k_iter_scale", "cluster1_one_wave_scale", "bm64_max_waves",
                                   "l2_bytes", "split_beyond_l2_scale"}
    assert table["cluster1_one_wave_scale"] == {"128": 0.95, "192": 0.95, "256": 0.95}  # measured, kept
    assert table["bm64_max_waves"] == 5  # kept
    # the factor on split iterations beyond L2 is fitted on other timings than the tune's: the refit keeps it
    # (library.beyond_l2 hands it to the fit, which carries it)
    fitted = CostModel(fitted.k_iter_us, fitted.split_k_iter_us, fitted.fixup_us, fitted.fixed_us, "refit",
                       {"fixed_us": "least squares"}, fitted.fixup_contributor_us, **library.beyond_l2(model.to_json()))
    table = model.to_json()
    table.update(library.merged_model_json(table, fitted))
    assert (table["l2_bytes"], table["split_beyond_l2_scale"]) == (62914560, 1.19)
    assert CostModel.from_json(table).split_beyond_l2_scale == 1.19
    assert library.beyond_l2({}) == {"l2_bytes": 0, "split_beyond_l2_scale": 1.0}
    assert table["cluster1_bm64_k_iter_scale"] == {"256": 0.966, "192": 0.939, "128": 0.9, "64": 0.893}
    assert table["bm64_k_iter_scale"] == {"256": 0.62, "192": 0.63, "128": 0.59, "64": 0.72}
