"""The grouped GEMM's CPU-checkable parts: refusals before any launch, the fake kernels and op
registration, the plan (maps, ring, stages), the ring audit (clean, and failing on seeded faults), the
group-size routing of the bench, and the builds (sm_90a cubins with no spill, through the resource gate).

GPU results: tests/test_grouped_gpu.py."""

from __future__ import annotations

import math

import re

import pytest
import torch

import gemm_ladder
from conftest import needs_nvcc
from gemm_ladder.api_grouped import check_grouped_mm
from gemm_ladder.audit import audit
from gemm_ladder.errors import GemmInputError, GemmTypeError, NotSupportedError
from gemm_ladder.library.grouped import GROUP_TABLE_BYTES, MAX_GROUPS, grouped_gemm

BF = torch.bfloat16


def _meta(*shape, dtype=BF):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _offs(n, device="meta"):
    return torch.empty(n, dtype=torch.int32, device=device)


# --- refusals ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,exc,words", [
    (("x", _meta(3, 8, 16), None), GemmTypeError, "a must be a torch.Tensor"),
    ((_meta(10, 16, dtype=torch.float32), _meta(3, 16, 8, dtype=torch.float32), _offs(3)), GemmInputError, "dtype"),
    ((_meta(10, 16), _meta(3, 16, 8, dtype=torch.float16), _offs(3)), GemmInputError, "share one dtype"),
    ((_meta(10, 16), _meta(3, 12, 8), _offs(3)), GemmInputError, "contraction"),
    ((_meta(10, 16), _meta(3, 16, 8), None), GemmInputError, "offs is required"),
    ((_meta(10, 16), _meta(3, 16, 8), torch.empty(3, dtype=torch.int64, device="meta")), GemmInputError, "int32"),
    ((_meta(10, 16), _meta(3, 16, 8), _offs(4)), GemmInputError, "shape (3,)"),
    ((_meta(3, 10, 16), _meta(3, 16, 8), _offs(3)), GemmInputError, "offs must be None"),
    ((_meta(2, 10, 16), _meta(3, 16, 8), None), GemmInputError, "batch sizes differ"),
    ((_meta(3, 10, 16), _meta(16, 8), None), GemmInputError, "offs is required for a 3-D a and a 2-D b"),
    ((_meta(3, 10, 16), _meta(12, 8), _offs(3)), GemmInputError, "contraction"),
    ((_meta(3, 10, 16), _meta(16, 8), _offs(2)), GemmInputError, "shape (3,)"),
    ((_meta(10, 16), _meta(MAX_GROUPS + 1, 16, 8), _offs(MAX_GROUPS + 1)), NotSupportedError, "at most"),
    ((_meta(10, 16), _meta(3, 16, 8), _offs(3)), GemmInputError, "CUDA device"),
    ((_meta(16, 10), _meta(10, 8), _offs(3)), GemmInputError, "CUDA device"),
    ((_meta(1, 5, 16), _meta(1, 16, 8), None), GemmInputError, "CUDA device"),
])
def test_refusals_name_the_rule(args, exc, words):
    with pytest.raises(exc, match=None) as info:
        check_grouped_mm(*args)
    assert words in str(info.value)


@pytest.mark.parametrize("call, words", [
    (lambda: gemm_ladder.grouped_linear(_meta(10, 16), torch.empty(3, 8, 16, dtype=BF), _offs(3)),
     "x and w must be on one CUDA device"),
    (lambda: gemm_ladder.grouped_linear(_meta(10, 12), _meta(3, 8, 12), _offs(3)), "x: row pitch 12 elements"),
    (lambda: gemm_ladder.grouped_linear(_meta(10, 16), _meta(3, 8, 16, dtype=torch.float16), _offs(3)),
     "x and w must share one dtype"),
    (lambda: gemm_ladder.grouped_linear(_meta(10, 16), _meta(3, 8, 16), _offs(3, "cpu")), "offs must be on x's device"),
    (lambda: gemm_ladder.grouped_linear(_meta(10, 16), _meta(3, 8, 12), _offs(3)),
     "x (10, 16) and w.transpose(-2, -1) (3, 12, 8): contraction"),
    (lambda: gemm_ladder.grouped_linear(_meta(10, 16), _meta(3, 8, 16), None), "offs is required for a 2-D x"),
    (lambda: gemm_ladder.grouped_mm(_meta(10, 16), torch.empty(3, 16, 8, dtype=BF), _offs(3)),
     "a and b must be on one CUDA device"),  # grouped_mm's own arguments are a and b
])
def test_grouped_linear_refusals_name_its_own_arguments(call, words):
    """grouped_linear(x, w, offs) shares grouped_mm's checks (on x and w's transpose); its refusals name x and w,
    never grouped_mm's a and b."""
    with pytest.raises(GemmInputError) as info:
        call()
    assert words in str(info.value), str(info.value)


def test_explain_grouped_mm_documents_its_arguments_shapes_and_errors():
    doc = " ".join(gemm_ladder.explain_grouped_mm.__doc__.split())
    assert "Same arguments and errors" not in doc
    for words in ("a (R, K)", "b (E, K, N)", "offs (E,)", "out_dtype: None (a's dtype) or torch.float32",
                  "bias: None or (E, N)", "masked:", "activation:", "Returns:", "``host``", "Raises",
                  "GemmTypeError", "GemmInputError", "NotSupportedError", "OutsideDomainError"):
        assert words in doc, words


def test_out_dtype_refusals():
    with pytest.raises(GemmTypeError):
        check_grouped_mm(_meta(10, 16), _meta(3, 16, 8), _offs(3), out_dtype="float32")
    with pytest.raises(GemmInputError, match="out_dtype"):
        check_grouped_mm(_meta(10, 16), _meta(3, 16, 8), _offs(3), out_dtype=torch.float16)


def test_public_functions_refuse_before_launch():
    with pytest.raises(GemmInputError, match="CUDA device"):  # CPU tensors: nothing built or launched
        gemm_ladder.grouped_mm(torch.randn(10, 16, dtype=BF), torch.randn(3, 8, 16, dtype=BF).transpose(1, 2),
                               torch.tensor([3, 5, 10], dtype=torch.int32))
    with pytest.raises(GemmInputError, match=r"\(E, N, K\)"):
        gemm_ladder.grouped_linear(_meta(10, 16), _meta(8, 16), _offs(3))
    with pytest.raises(GemmInputError, match="stride"):
        gemm_ladder.grouped_linear(_meta(10, 16), _meta(3, 16, 8).transpose(1, 2), _offs(3))
    with pytest.raises(ValueError, match="activation"):
        gemm_ladder.grouped_linear(_meta(10, 16), _meta(3, 8, 16), _offs(3), activation="swish9")
    with pytest.raises(GemmTypeError):
        gemm_ladder.grouped_linear(_meta(10, 16), _meta(3, 8, 16), _offs(3), bias=1.0)


def test_kernel_supports_names_the_rule():
    k = grouped_gemm(128, "k")
    x, w, offs, out = torch.randn(10, 16, dtype=BF), torch.randn(3, 8, 16, dtype=BF), torch.zeros(3, dtype=torch.int32), \
        torch.empty(10, 8, dtype=BF)
    assert "CUDA device" in k.supports(x, w, offs, out)
    assert "int32" in k.supports(x, w, offs.long(), out)
    assert "K-major" in k.supports(x, w.transpose(1, 2).contiguous().transpose(1, 2), offs, out)
    assert "pass one" in grouped_gemm(128, "k", bias=True).supports(x, w, offs, out)
    assert "k_grouped" in k.supports_k(x.t(), x, offs, torch.empty(3, 16, 16, dtype=BF))
    with pytest.raises(ValueError):
        grouped_gemm(192)
    with pytest.raises(ValueError):
        grouped_gemm(128, "k", k_grouped=True)


# --- ops and fakes -----------------------------------------------------------------------------------
def test_ops_are_registered_with_fakes():
    assert hasattr(torch.ops.gemm_ladder, "grouped_mm") and hasattr(torch.ops.gemm_ladder, "grouped_linear")
    assert torch.ops.gemm_ladder.grouped_mm(_meta(10, 16), _meta(3, 16, 8), _offs(3)).shape == (10, 8)
    assert torch.ops.gemm_ladder.grouped_mm(_meta(3, 5, 16), _meta(3, 16, 8)).shape == (3, 5, 8)
    assert torch.ops.gemm_ladder.grouped_mm(_meta(10, 16).t(), _meta(10, 8), _offs(4)).shape == (4, 16, 8)  # x.t(): the real layout
    out = torch.ops.gemm_ladder.grouped_mm(_meta(10, 16), _meta(3, 16, 8), _offs(3), torch.float32)
    assert out.dtype == torch.float32
    assert torch.ops.gemm_ladder.grouped_linear(_meta(10, 16), _meta(3, 8, 16), _offs(3), _meta(3, 8)).shape == (10, 8)


def test_masked_layout_op_and_refusals():
    out = torch.ops.gemm_ladder.grouped_mm_masked(_meta(4, 16, 64), _meta(4, 64, 32), _offs(4))
    assert out.shape == (4, 16, 32)
    with pytest.raises(GemmInputError, match="3-D"):
        gemm_ladder.grouped_mm_masked(_meta(16, 64), _meta(4, 64, 32), _offs(4))
    assert gemm_ladder.grouped_mm_masked(_meta(4, 16, 64), _meta(4, 64, 32), _offs(4)).shape == (4, 16, 32)
    with pytest.raises(GemmInputError, match="CUDA device"):  # CPU tensors
        gemm_ladder.grouped_mm_masked(torch.empty(4, 16, 64, dtype=BF), torch.empty(4, 64, 32, dtype=BF),
                                      torch.empty(4, dtype=torch.int32))
    with pytest.raises(ValueError):
        grouped_gemm(128, "mn", k_grouped=True, masked=True)
    assert grouped_gemm(128, masked=True).defines("bf16")["GL_MASKED"] == 1


def test_fake_tensor_mode_traces_with_symbolic_rows():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        x = mode.from_tensor(_meta(10, 16))
        w = mode.from_tensor(_meta(3, 8, 16))
        offs = mode.from_tensor(_offs(3))
        y = torch.ops.gemm_ladder.grouped_linear(x, w, offs)
        assert y.shape == (10, 8) and y.dtype == BF
        # The fake runs the op's checks: CPU tensors are refused at trace time, as the launch refuses them.
        cpu = mode.from_tensor(torch.empty(10, 16, dtype=BF))
        with pytest.raises(GemmInputError, match="CUDA device"):
            torch.ops.gemm_ladder.grouped_linear(cpu, mode.from_tensor(torch.empty(3, 8, 16, dtype=BF)),
                                                 mode.from_tensor(torch.empty(3, dtype=torch.int32)))


def test_export_with_a_dynamic_row_count():
    """The fakes' checks read shapes, never offs' values, and bound no row count: torch.export takes an
    unbounded Dim on it (docs/torch.md)."""
    from torch.export import Dim, export

    class Op(torch.nn.Module):
        def forward(self, x, w, offs):
            return torch.ops.gemm_ladder.grouped_mm(x, w, offs)

    class Linear(torch.nn.Module):
        def forward(self, x, w, offs):
            return gemm_ladder.grouped_linear(x, w, offs)

    rows = {0: Dim("rows")}
    for module, w, op in ((Op(), _meta(4, 16, 24), "grouped_mm"), (Linear(), _meta(4, 24, 16), "grouped_linear")):
        program = export(module, (_meta(64, 16), w, _offs(4)), dynamic_shapes=(rows, None, None))
        assert f"torch.ops.gemm_ladder.{op}" in program.graph_module.code
        (bounds,) = program.range_constraints.values()  # the row count's: no upper bound added
        assert bounds.upper > 2**40


def test_fakes_refuse_what_the_ops_refuse():
    G = torch.ops.gemm_ladder
    with pytest.raises(GemmInputError, match="bf16|bfloat16|float32"):
        G.grouped_mm(_meta(10, 16), _meta(4, 16, 24), _offs(4), torch.float16)
    with pytest.raises(GemmInputError, match="offs is required for a 3-D a and a 2-D b"):
        G.grouped_mm(_meta(4, 3, 16), _meta(16, 24))
    with pytest.raises(GemmInputError, match="contraction"):
        G.grouped_mm(_meta(4, 3, 16), _meta(8, 24), _offs(4))
    with pytest.raises(GemmInputError, match="offs is required"):
        G.grouped_mm(_meta(10, 16), _meta(4, 16, 24))
    with pytest.raises(GemmInputError, match="contraction"):
        G.grouped_mm(_meta(10, 16), _meta(4, 8, 24), _offs(4))
    with pytest.raises(NotSupportedError, match="at most"):
        G.grouped_mm(_meta(10, 16), _meta(2000, 16, 24), _offs(2000))
    with pytest.raises(GemmInputError):
        G.grouped_linear(_meta(10, 16), _meta(4, 24, 16), torch.empty(4, dtype=torch.int64, device="meta"))
    with pytest.raises(GemmInputError):
        G.grouped_linear(_meta(10, 16), _meta(4, 24, 16), _offs(4), _meta(3, 7))
    with pytest.raises(GemmInputError, match="counts"):
        G.grouped_mm_masked(_meta(4, 3, 16), _meta(4, 16, 24), torch.empty(3, device="meta"))
    with pytest.raises(GemmInputError, match="one shape"):
        G.grouped_swiglu(_meta(10, 16), _meta(4, 24, 16), _meta(4, 24, 8), _offs(4))


def test_exported_names():
    assert gemm_ladder.grouped_mm.__module__ == "gemm_ladder.ops_grouped"
    assert "grouped_linear" in dir(gemm_ladder)


# --- plan and audit ----------------------------------------------------------------------------------
@pytest.mark.parametrize("bn,stages", [(128, 6), (256, 4)])
def test_plan_fits_beside_the_group_table(bn, stages):
    k = grouped_gemm(bn, "k")
    d = k.defines("bf16")
    assert d["GL_STAGES"] == stages and d["GL_CLUSTER"] == 1 and d["GL_CONSUMERS"] == 2
    # A 2-byte output through the panel ring (one 64 x 64 buffer per consumer: the stages the register
    # store had); a float32 output from registers, no staging.
    assert (d["GL_C_PANELS"], d["GL_C_RING"], d["GL_MAX_GROUPS"]) == (bn // 64, 1, MAX_GROUPS)
    assert d["GL_SMEM_BYTES"] + GROUP_TABLE_BYTES <= 232448
    f32 = grouped_gemm(bn, "k", out_fp32=True).defines("bf16")
    assert (f32["GL_STAGES"], f32["GL_C_PANELS"], f32["GL_C_RING"]) == (stages, 0, 0)
    assert f32["GL_SMEM_BYTES"] < d["GL_SMEM_BYTES"]
    p = k.plan(1000, 520, 200, 8, "bf16")
    w = p.tensor_maps["w"]
    assert w.rank == 3 and w.global_dim == (200, 520, 8) and w.box_dim == (64, bn, 1)
    assert w.global_strides == (200 * 2, 520 * 200 * 2)
    assert p.tensor_maps["x"].global_dim == (200, 1000) and p.max_tiles == (8 + 8) * -(-520 // bn)
    n_major = grouped_gemm(bn, "mn").plan(1000, 520, 200, 8, "bf16").tensor_maps["w"]
    assert n_major.global_dim == (520, 200, 8) and n_major.box_dim == (64, 64, 1)
    assert "globalStrides" in _refusal(lambda: k.plan(1000, 520, 200, 8, "bf16", w_strides=(520 * 200, 201)))


def _refusal(fn) -> str:
    from gemm_ladder.design.problem import PlanRefused

    with pytest.raises(PlanRefused) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize("cfg", [dict(bn=128), dict(bn=256), dict(bn=128, b_major="mn", k_grouped=True),
                                 dict(bn=256, tail=True), dict(bn=256, cluster=2, tail=True)])
def test_the_ring_audits_clean_and_fails_on_seeded_faults(cfg):
    """The stage ring at tiles of 1 .. 2 x stages + 1 K iterations (a stream-K tail build's pieces are such
    ranges of a unit's K tiles, walked by the producer and the consumers alike)."""
    k = grouped_gemm(**cfg)
    s = k.defines("bf16")["GL_STAGES"]
    for k_iters, tiles in [(1, 3), (2, 3), (s - 1, 2), (s + 1, 2), (2 * s + 1, 1)]:
        result = audit(k.ring_protocol(k_iters, tiles))
        assert result.ok, result.render()
    assert "early_overwrite" in {v.kind for v in audit(k.ring_protocol(s + 1, 1, empty_count=1)).violations}
    assert "deadlock" in {v.kind for v in audit(k.ring_protocol(s + 1, 2, empty_initial_phase=0)).violations}


@pytest.mark.parametrize("cfg,stages,deferred", [
    (dict(bn=256, b_major="mn", k_grouped=True, ring=4), 3, 0), (dict(bn=128, b_major="mn", k_grouped=True, ring=2), 5, 0),
    (dict(bn=256, ring=4), 3, 0), (dict(bn=128, b_major="mn", ring=2), 5, 0),
    (dict(bn=256, b_major="mn", k_grouped=True, ring=4, cluster=2), 3, 0),
])
def test_a_deeper_output_ring_costs_a_stage_and_audits_clean(cfg, stages, deferred):
    """library/grouped.py RINGS: the plan's ring of panel buffers, the stage count that fits beside it and
    the group table, the build's name and config round trip; the stage ring and the output ring audit
    clean and fail when a staging buffer is rewritten one store too early or without a drain."""
    from gemm_ladder.library.grouped import C_RING, kernel_for

    k = grouped_gemm(**cfg)
    d = k.defines("bf16")
    assert (d["GL_STAGES"], d["GL_C_RING"], k.deferred_panels) == (stages, cfg["ring"], deferred)
    assert d["GL_SMEM_BYTES"] + GROUP_TABLE_BYTES <= 232448
    assert k.name.endswith(f"_r{cfg['ring']}") and cfg["ring"] != C_RING
    assert kernel_for(k.config("bf16")) is k
    assert grouped_gemm(**{**cfg, "ring": C_RING}).defines("bf16")["GL_STAGES"] > stages
    for k_iters, tiles in [(1, 3), (2, 3), (stages + 1, 2), (2 * stages + 1, 1)]:
        result = audit(k.ring_protocol(k_iters, tiles))
        assert result.ok, result.render()
    for fault in (dict(staging_wait_pending=cfg["ring"]), dict(drain_staging_before_reuse=False)):
        kinds = {v.kind for v in audit(k.ring_protocol(2, 3, **fault)).violations}
        assert "staging_overwrite" in kinds, (fault, kinds)


@pytest.mark.parametrize("cfg,words", [
    (dict(bn=128, ring=4), "each of the tile's 2 panels"), (dict(bn=256, ring=3), "each of the tile's 4 panels"),
    (dict(bn=256, ring=2), "each of the tile's 4 panels"), (dict(bn=256, out_fp32=True, ring=4), "no panel ring"),
    (dict(bn=128, masked=True, ring=2), "no panel ring"), (dict(bn=256, ring=True), "ring = True"),
    (dict(bn=256, ring=4.0), "ring = 4.0"), (dict(bn=256, bias=True, ring=4), "with a bias"),
    (dict(bn=256, ring=4, cluster=2), "it hung"), (dict(bn=128, b_major="mn", ring=2, cluster=2), "it hung"),
])
def test_a_ring_the_build_cannot_have_is_refused(cfg, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        grouped_gemm(**cfg)


def test_bench_ring_option_is_parsed_and_refused():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import grouped as bench

    assert bench.parse_rings(None) == (None,) and bench.parse_rings("4") == (4,) and bench.parse_rings("1,4") == (1, 4)
    assert bench.parse_rings("3") is None and bench.parse_rings("1,2,4") is None and bench.parse_rings("x") is None
    assert bench.ring_refusal((1, 4), None, ("grad_w",)) is None and bench.ring_refusal((1, 4), 256, ("fwd",), cluster="1") is None
    assert bench.ring_refusal((1, 2), 128, ("fwd", "grad_w"), cluster="1") is None and bench.ring_refusal((None,), None, ("fwd",)) is None
    assert bench.ring_refusal((1, 4), 256, ("grad_x",)) is None  # the input gradient's rule: one CTA
    # along M a pair of CTAs with a deeper ring is refused (PAIR_RING_HANG): asked for, or the forward's rule at K >= 2048
    for kw in (dict(directions=("fwd",)), dict(directions=("grad_x",), cluster="2"), dict(directions=("fwd",), cluster="both")):
        assert "PAIR_RING_HANG" in bench.ring_refusal((1, 4), 256, **kw), kw
    assert bench.ring_refusal((1, 4), 256, ("fwd",), ("qwen3_down",)) is None  # K = 768: one CTA
    # refused before any GPU is asked for (this machine has none): the width the ring needs is not the tiles'
    for argv in (["--ring", "1,4", "--bn", "128", "--directions", "grad_w"], ["--ring", "4", "--directions", "fwd"],
                 ["--ring", "1,2", "--directions", "grad_w"], ["--ring", "2", "--bn", "256"], ["--ring", "3"]):
        assert bench.main(argv) == 2, argv


def test_bench_sanitize_and_prebuild_builds_exist():
    """bench/grouped.py's --sanitize rings and --prebuild's list are builds the library makes (a ring it
    refuses would fail mid-run on the GPU)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import grouped as bench

    rings = bench.ring_builds()
    assert {(k.bn, k.ring, k.k_grouped) for k in rings} == {(128, 2, False), (256, 4, False), (256, 1, True),
                                                             (256, 4, True), (128, 2, True)}
    kernels = bench.case_builds(bench.CASES, ("grad_w",), (None,), (1, 4))
    assert {(k.bn, k.ring) for k in kernels} == {(256, 1), (256, 4)} and all(k.k_grouped for k in kernels)
    # no --ring: the library's choice (choose_ring: a buffer per panel for the BN 256 weight gradient)
    assert {(k.bn, k.ring) for k in bench.case_builds(bench.CASES, ("grad_w",), (None,), (None,))} == {(256, 4)}
    assert all(k.config("bf16") for k in bench.case_builds(bench.CASES, ("fwd", "grad_x"), (None, 1, 2)))
    along_m = bench.case_builds(bench.CASES, ("fwd", "grad_x"), (1,), (1, 4), bn=256)  # --bn 256 --ring 1,4 --cluster 1
    assert {(k.bn, k.ring) for k in along_m} == {(256, 1), (256, 4)} and all(k.config("bf16") for k in along_m)


def test_bench_routing_matches_the_issue_ranges():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import grouped as bench

    for name, (e, rows, _, _, lo, hi) in bench.CASES.items():
        sizes = bench.group_sizes(e, rows, lo, hi)
        assert len(sizes) == e and sum(sizes) == rows and min(sizes) >= lo and max(sizes) <= hi, name


def test_bench_store_both_runs_the_register_store_for_its_call_only(monkeypatch):
    """bench/grouped.py --store both: ``grouped_registers`` runs with grouped.STORE_DEFAULT = "registers"
    during its call only (what the interleaved timing relies on); the per-group error accumulates as one."""
    import sys
    from pathlib import Path

    import gemm_ladder.library.grouped as g

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import grouped as bench

    monkeypatch.setattr(bench, "grouped_mm_direct", lambda *a, **kw: g.STORE_DEFAULT)
    fns = bench.library_fns(None, None, None, None, (None,), both_stores=True)
    assert (fns["grouped"](), fns["grouped_registers"](), g.STORE_DEFAULT) == ("tma", "registers", "tma")
    got, ref = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    assert bench.rel_err_over(zip(got, ref)) == pytest.approx(float((got - ref).norm() / ref.norm()))


# --- builds ------------------------------------------------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("cfg,dtype", [
    (dict(bn=128), "bf16"), (dict(bn=256), "bf16"), (dict(bn=256, b_major="mn"), "fp16"),
    (dict(bn=128, b_major="mn", k_grouped=True), "bf16"), (dict(bn=256, bias=True), "bf16"),
    (dict(bn=256, b_major="mn", k_grouped=True, out_fp32=True), "fp16"), (dict(bn=128, masked=True), "bf16"),
    (dict(bn=128, cluster=2), "bf16"), (dict(bn=256, cluster=2), "bf16"), (dict(bn=256, b_major="mn", cluster=2), "bf16"),
    (dict(bn=128, b_major="mn", k_grouped=True, cluster=2), "bf16"), (dict(bn=256, masked=True, cluster=2), "fp16"),
    (dict(bn=256, b_major="mn", k_grouped=True), "bf16"), (dict(bn=128, bias=True, cluster=2), "fp16"),
    (dict(bn=256, b_major="mn", k_grouped=True, ring=4), "bf16"), (dict(bn=128, b_major="mn", k_grouped=True, ring=2), "bf16"),
    (dict(bn=256, ring=4), "bf16"), (dict(bn=256, b_major="mn", ring=4), "fp16"), (dict(bn=128, b_major="mn", ring=2), "bf16"),
    (dict(bn=256, b_major="mn", k_grouped=True, ring=4, cluster=2), "bf16"),
    # the stream-K tail's builds
    (dict(bn=256, tail=True), "bf16"), (dict(bn=256, cluster=2, tail=True), "bf16"),
    (dict(bn=128, tail=True), "fp16"), (dict(bn=128, cluster=2, tail=True), "bf16"),
    (dict(bn=256, b_major="mn", tail=True), "bf16"), (dict(bn=256, b_major="mn", cluster=2, tail=True), "fp16"),
    (dict(bn=256, bias=True, cluster=2, tail=True), "bf16"), (dict(bn=128, bias=True, tail=True), "bf16"),
    (dict(bn=256, b_major="mn", ring=4, tail=True), "bf16"), (dict(bn=256, out_fp32=True, cluster=2, tail=True), "bf16"),
    (dict(bn=256, cluster=2, stages=3), "bf16"),  # a measuring build (the pair's ring at the four-buffer build's depth)
])
def test_builds_pass_the_resource_gate(cfg, dtype, use_cache):
    from gemm_ladder.gates.resources import check_level_resources

    report, sass = check_level_resources(grouped_gemm(**cfg), dtype)
    assert report.passed, report.messages
    # No wgmma serialised by ptxas (C7514, C7515) nor a wait injected (C7517): a bias added in place to the
    # accumulators before the panel ring's packing once serialised every wgmma of the bias builds.
    log = grouped_gemm(**cfg).build(dtype).ptxas_log
    assert not any(code in log for code in ("C7514", "C7515", "C7517")), log
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["LDL"] == report.sass["STL"] == 0
    # TMA loads; TMA stores (the panel ring) where the build has one, register stores alone elsewhere
    assert report.sass["UTMALDG"] > 0 and (report.sass["UTMASTG"] > 0) == (grouped_gemm(**cfg).c_ring > 0)
    assert "USETMAXREG" in sass
    assert f"HGMMA.64x{cfg['bn']}x16.F32" in sass
    # the cluster build multicasts its half of B (UTMALDG .MULTICAST) and meets its peer (UCGABAR)
    assert ("MULTICAST" in sass and "UCGABAR" in sass) == (cfg.get("cluster", 1) == 2)


# --- the schedule's arithmetic (grouped_scheduler.cuh, mirrored) ----------------------------------------
def _table(offs, total_rows, bm):
    """GroupTable::build: clamped running maximum of the ends, the prefix of M-tile counts."""
    ends, tiles, prev = [], [0], 0
    for o in offs:
        end = max(prev, min(max(o, 0), total_rows))
        tiles.append(tiles[-1] + -(-(end - prev) // bm))
        ends.append(end)
        prev = end
    return ends, tiles


def _group_of(tile_start, mt):
    lo, hi = 0, len(tile_start) - 2
    while lo < hi:
        mid = (lo + hi) // 2
        if tile_start[mid + 1] > mt:
            hi = mid
        else:
            lo = mid + 1
    return lo


@pytest.mark.parametrize("seed", range(20))
def test_the_grouped_schedule_writes_every_grouped_row_once(seed):
    import random

    from gemm_ladder.design.plan import GROUP_M, unit_coords

    rng = random.Random(seed)
    e = rng.choice([1, 3, 8, 33])
    sizes = [rng.choice([0, 0, 1, rng.randrange(1, 300)]) for _ in range(e)]
    offs = list(__import__("itertools").accumulate(sizes))
    total = offs[-1] + rng.randrange(0, 40)
    if rng.random() < 0.2 and e > 1:  # offsets past the rows or decreasing: clamped, never out of range
        offs[rng.randrange(e)] = rng.choice([-5, total + 100])
    bm, tiles_n = 128, 3
    ends, tile_start = _table(offs, total, bm)
    written = {}
    for unit in range(tile_start[-1] * tiles_n):
        mt, tn = unit_coords(unit, tile_start[-1], tiles_n, GROUP_M)
        g = _group_of(tile_start, mt)
        begin = ends[g - 1] if g else 0
        row0 = begin + (mt - tile_start[g]) * bm
        for r in range(row0, min(row0 + bm, ends[g])):
            assert r not in written.get(tn, {}), f"row {r} written twice"
            written.setdefault(tn, {})[r] = g
    for tn in range(tiles_n):
        want = {r: g for g in range(e) for r in range(ends[g - 1] if g else 0, ends[g])}
        assert written.get(tn, {}) == want


@pytest.mark.parametrize("dynamic", [False, True])
def test_dynamo_traces_the_public_functions_without_a_graph_break(dynamic):
    """torch.compile(fullgraph=True)'s front end on fake CUDA tensors (no GPU needed): one graph holding
    the ops, the validation traced as guards (no address read: fake tensors have none)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def f(x, w, bias, offs):
        h = gemm_ladder.grouped_linear(x, w, offs, bias, activation="silu")
        return gemm_ladder.grouped_mm(h, w, offs)  # w (E, N, K) as b: N-major, the grad_x layout

    with FakeTensorMode():
        x = torch.empty(400, 128, dtype=BF, device="cuda")
        w = torch.empty(4, 128, 128, dtype=BF, device="cuda")
        bias = torch.empty(4, 128, dtype=BF, device="cuda")
        offs = torch.empty(4, dtype=torch.int32, device="cuda")
    out = torch._dynamo.export(f, aten_graph=False, assume_static_by_default=not dynamic)(x, w, bias, offs)
    code = out.graph_module.code
    assert "gemm_ladder.grouped_linear" in code and "gemm_ladder.grouped_mm" in code


def test_an_empty_problem_passes_validation_before_the_stride_rules():
    """GPU round 2: x (10, 0) has a row pitch of 1 element; an empty K returns zeros, never a stride refusal."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.randn(10, 0, dtype=BF, device="cuda")
        w = torch.randn(3, 32, 0, dtype=BF, device="cuda")
        offs = torch.zeros(3, dtype=torch.int32, device="cuda")
        assert check_grouped_mm(x, w.transpose(1, 2), offs) == ("2d3d", BF)
        assert check_grouped_mm(torch.randn(0, 7, dtype=BF, device="cuda"), torch.randn(3, 7, 32, dtype=BF, device="cuda"),
                                offs)[0] == "2d3d"


def test_maps_are_encoded_with_the_device_context_current(monkeypatch):
    """GPU round 2: autograd's backward thread has no current driver context; every encode (and launch)
    makes the device's context current first."""
    import gemm_ladder.library.grouped as g

    calls = []
    monkeypatch.setattr(g, "ensure_context", lambda device: calls.append(("context", device)))
    monkeypatch.setattr(g, "encode_tiled", lambda kwargs: calls.append(("encode", kwargs["globalAddress"])) or object())
    spec = grouped_gemm(128).plan(256, 256, 256, 2, "bf16").tensor_maps["x"]
    t = torch.empty(256, 256, dtype=BF)
    g._encode(torch.device("cuda", 0), (spec, t))
    assert calls[0] == ("context", torch.device("cuda", 0)) and calls[1][0] == "encode"


def test_the_public_grouped_functions_describe_a_call_on_meta_tensors():
    """On meta tensors the public functions check the call and give the result's shape and dtype (their ops'
    fake implementations); CPU tensors are refused with the library's error, naming both devices."""
    import gemm_ladder
    from gemm_ladder.errors import GemmInputError

    meta, bf = torch.device("meta"), torch.bfloat16
    x = torch.empty(100, 64, dtype=bf, device=meta)
    offs = torch.empty(4, dtype=torch.int32, device=meta)
    w_kn = torch.empty(4, 64, 32, dtype=bf, device=meta)
    w_nk = torch.empty(4, 32, 64, dtype=bf, device=meta)
    y = gemm_ladder.grouped_mm(x, w_kn, offs, out_dtype=torch.float32)
    assert (y.shape, y.dtype, y.device) == ((100, 32), torch.float32, meta)
    assert gemm_ladder.grouped_linear(x, w_nk, offs, torch.empty(4, 32, dtype=bf, device=meta),
                                      activation="silu").shape == (100, 32)
    assert gemm_ladder.grouped_mm_masked(torch.empty(4, 16, 64, dtype=bf, device=meta), w_kn, offs).shape == (4, 16, 32)
    assert gemm_ladder.grouped_swiglu(x, w_nk, w_nk, offs).shape == (100, 32)
    grads = gemm_ladder.grouped_mm(torch.empty(100, 32, dtype=bf, device=meta).T, x, offs)  # grouped along K
    assert grads.shape == (4, 32, 64)
    with pytest.raises(GemmInputError, match="got cpu and cpu"):
        gemm_ladder.grouped_mm(torch.empty(100, 64, dtype=bf), torch.empty(4, 64, 32, dtype=bf),
                               torch.empty(4, dtype=torch.int32))
    with pytest.raises(GemmInputError, match="shape \\(4,\\)"):
        gemm_ladder.grouped_mm(x, w_kn, torch.empty(3, dtype=torch.int32, device=meta))


# --- the cluster build (cluster=2: pairs of M tiles sharing the weight tile) ----------------------------
@pytest.mark.parametrize("cfg", [dict(bn=128), dict(bn=256), dict(bn=256, b_major="mn"),
                                 dict(bn=128, b_major="mn", k_grouped=True), dict(bn=256, b_major="mn", k_grouped=True),
                                 dict(bn=128, masked=True)])
def test_the_cluster_plan_is_the_designers_at_cluster_2(cfg):
    one, two = grouped_gemm(**cfg), grouped_gemm(**cfg, cluster=2)
    d1, d2 = one.defines("bf16"), two.defines("bf16")
    bn = cfg["bn"]
    assert (d2["GL_CLUSTER"], d2["GL_B_BOX_ROWS"], d2["GL_EMPTY_ARRIVALS"]) == (2, bn // 2, 2 * d1["GL_EMPTY_ARRIVALS"])
    # every CTA's stage receives A + the whole B, shared or not: the full barriers' bytes are cluster 1's
    assert d2["GL_EXPECT_TX_BYTES"] == d1["GL_EXPECT_TX_BYTES"] == (128 + bn) * 64 * 2
    assert d2["GL_STAGES"] == d1["GL_STAGES"] and d2["GL_SMEM_BYTES"] == d1["GL_SMEM_BYTES"]
    assert two.geometry("bf16").cluster == 2 and one.geometry("bf16").cluster == 1
    assert two.name == one.name + "_c2" and two.config("bf16").cluster == 2
    from gemm_ladder.library.grouped import kernel_for

    assert kernel_for(two.config("fp16")) is two and kernel_for(one.config("fp16")) is one
    if cfg.get("k_grouped"):
        p = two.plan_k(1000, 520, 2000, 8, "bf16")
        assert p.tensor_maps["b"].box_dim == (64, 64) and p.cluster == 2
    else:
        p = two.plan(1000, 520, 200, 8, "bf16")
        w = p.tensor_maps["w"]
        # a K-major weight is loaded as halves of BN / 2 rows (one per CTA when shared, both when not)
        assert w.box_dim == ((64, bn // 2, 1) if cfg.get("b_major", "k") == "k" else (64, 64, 1))
        assert p.max_units == -(-(8 + 8) // 2) * -(-520 // bn) and p.max_tiles == 2 * p.max_units
        assert p.to_json()["problem"]["cluster"] == 2 and "multicast" in p.describe()


def test_the_cluster_size_is_checked():
    with pytest.raises(ValueError, match="cluster"):
        grouped_gemm(128, "k", cluster=4)
    with pytest.raises(ValueError, match="cluster"):
        grouped_gemm(128, "k", cluster=True)
    assert grouped_gemm(128, "k", cluster=2) is grouped_gemm(bn=128, b_major="k", cluster=2)
    from gemm_ladder.library.grouped import GROUPED_GEMM

    assert GROUPED_GEMM.config(256, "k", "bf16", cluster=2) == grouped_gemm(256, "k", cluster=2).config("bf16")
    with pytest.raises(ValueError, match="shared"):
        grouped_gemm(128, "k").ring_protocol(2, 2, shared=(True, False))


_SHARED = [(True,), (False,), (True, False, True), (False, True, False), (True, True, False)]


@pytest.mark.parametrize("cfg", [dict(bn=128), dict(bn=256), dict(bn=128, b_major="mn", k_grouped=True)])
def test_the_cluster_ring_audits_clean_in_both_cases_and_mixed(cfg):
    """The cluster ring as the auditor models it: 2 CTAs, each consumer releasing every stage to both
    CTAs, and per unit B shared (each CTA multicasts its half) or not (each loads both halves into its
    own stage), in the sequences given: all shared, none, and mixes (a pair straddling two groups or a
    rank without a tile between shared pairs). The kernel chooses per unit at run time; the audit covers
    these sequences at these bounds."""
    k = grouped_gemm(**cfg, cluster=2)
    s = k.defines("bf16")["GL_STAGES"]
    for shared in _SHARED:
        for k_iters in ((1, 2) if len(shared) > 1 else (s - 1, s + 1)):
            p = k.ring_protocol(k_iters, len(shared), shared=shared)
            assert p.ctas == 2 and p.bounds["shared_tiles"] == "".join("S" if x else "O" for x in shared)
            loads = [op for r in p.roles if r.kind == "producer" for op in r.program if op.op == "issue_load"]
            assert any(op.dests == (0, 1) for op in loads) == any(shared)
            result = audit(p)
            assert result.ok, result.render()
    # seeded faults the search finds at once: a fresh empty barrier waited with the wrong parity; a full
    # barrier armed for A + half of B (what one CTA's own load of a shared unit brings) completes early
    faults = audit(k.ring_protocol(2, 2, shared=(False, True), empty_initial_phase=0), stop_at_first=True)
    assert "deadlock" in {v.kind for v in faults.violations}
    bn = cfg["bn"]
    faults = audit(k.ring_protocol(2, 2, shared=(True, False), expect_tx_bytes=(128 + bn // 2) * 64 * 2),
                   stop_at_first=True)
    assert not faults.ok and {v.kind for v in faults.violations} & {"stale_read", "read_before_landed"}
    # (an empty barrier counting one CTA's releases, empty_count=2, is found too, as phase aliasing,
    # but its search takes tens of seconds: not run here)


def _pair_units(tile_start, tiles_n, group_of, ranks=2):
    """GroupedScheduler::unit<2> (grouped_scheduler.cuh), mirrored: unit -> per rank (M tile, mine, share)."""
    from gemm_ladder.design.plan import GROUP_M, unit_coords

    tiles = tile_start[-1]
    units_m = -(-tiles // ranks)
    out = []
    for unit in range(units_m * tiles_n):
        um, tn = unit_coords(unit, units_m, tiles_n, GROUP_M)
        first, last = um * ranks, um * ranks + ranks - 1
        both = last < tiles
        share = both and group_of(tile_start, last) == group_of(tile_start, first)
        out.append((tn, [(first + r if (r == 0 or both) else first, r == 0 or both, share) for r in range(ranks)]))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_the_cluster_schedule_writes_every_grouped_row_once(seed):
    """Pairs of M tiles over the grouped order (the scheduler's mirror): every grouped row written once
    by the rank whose tile it is; both ranks agree on `share`, which holds exactly when both tiles are
    one group's; a rank without a tile (odd M-tile count) stores nothing and mirrors rank 0's tile."""
    import itertools
    import random

    rng = random.Random(seed)
    e = rng.choice([1, 2, 3, 8, 33])
    sizes = [rng.choice([0, 0, 1, 128, 129, rng.randrange(1, 600)]) for _ in range(e)]
    offs = list(itertools.accumulate(sizes))
    total = offs[-1] + rng.randrange(0, 40)
    bm, tiles_n = 128, rng.choice([1, 3])
    ends, tile_start = _table(offs, total, bm)
    written, straddled = {}, 0
    units = _pair_units(tile_start, tiles_n, _group_of)
    assert len(units) == -(-tile_start[-1] // 2) * tiles_n
    for tn, ranks in units:
        groups = [_group_of(tile_start, mt) for mt, _, _ in ranks]
        assert ranks[0][2] == ranks[1][2] == (ranks[1][1] and groups[0] == groups[1])
        straddled += ranks[1][1] and groups[0] != groups[1]
        if not ranks[1][1]:
            assert ranks[1][0] == ranks[0][0]  # loads rank 0's rows, computes and stores nothing
        for mt, mine, _ in ranks:
            if not mine:
                continue
            g = _group_of(tile_start, mt)
            row0 = (ends[g - 1] if g else 0) + (mt - tile_start[g]) * bm
            for r in range(row0, min(row0 + bm, ends[g])):
                assert r not in written.get(tn, {}), f"row {r} written twice"
                written.setdefault(tn, {})[r] = g
    for tn in range(tiles_n):
        want = {r: g for g in range(e) for r in range(ends[g - 1] if g else 0, ends[g])}
        assert written.get(tn, {}) == want


def test_pairs_straddle_groups_of_odd_tile_counts():
    """Groups of 2, 1, 3, 0, 1, 3 M tiles (the GPU test's first sizes): pairs (0, 1), (4, 5), (8, 9)
    shared (one group each), (2, 3) and (6, 7) straddle two groups; 10 tiles, no rank without a tile;
    one group more of one tile leaves rank 1 of the last pair without one."""
    ends, tile_start = _table(list(__import__("itertools").accumulate([129, 1, 300, 0, 128, 257])), 815, 128)
    assert tile_start == [0, 2, 3, 6, 6, 7, 10]
    shares = [ranks[0][2] for _, ranks in _pair_units(tile_start, 1, _group_of)]
    assert shares == [True, False, True, False, True]
    ends, tile_start = _table(list(__import__("itertools").accumulate([129, 1, 300, 0, 128, 257, 5])), 900, 128)
    last = _pair_units(tile_start, 1, _group_of)[-1][1]
    assert last[1][1] is False and last[0][2] is False and last[1][0] == last[0][0] == 10


@pytest.mark.parametrize("m,n,groups", [(128, 256, 3), (256, 128, 2), (300, 520, 4), (1, 128, 1)])
def test_the_cluster_k_schedule_covers_every_tile_once(m, n, groups):
    """GroupedKScheduler::unit<2> mirrored: per group, pairs of M tiles x N tiles; every (group, M tile,
    N tile) computed by exactly one rank; B shared exactly when both ranks have a tile."""
    from gemm_ladder.design.plan import GROUP_M, unit_coords

    bm, bn = 128, 128
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    units_m = -(-tiles_m // 2)
    per_group = units_m * tiles_n
    seen = []
    for unit in range(groups * per_group):
        e, rest = divmod(unit, per_group)
        um, tn = unit_coords(rest, units_m, tiles_n, GROUP_M)
        share = um * 2 + 1 < tiles_m
        for rank in (0, 1):
            mine = um * 2 + rank < tiles_m
            assert share <= mine
            if mine:
                seen.append((e, um * 2 + rank, tn))
    assert sorted(seen) == [(e, t, c) for e in range(groups) for t in range(tiles_m) for c in range(tiles_n)]


# --- the route's cluster rule (library/grouped.py choose_cluster; measured at 3935e4e) -------------------
def test_the_cluster_rule_takes_cluster_2_for_the_forward_at_long_k():
    from gemm_ladder.library.grouped import CLUSTER_EVIDENCE, CLUSTER_MIN_K, choose_cluster
    from gemm_ladder.library.kernel import GROUP_K, GROUP_M, GROUP_M_MASKED

    assert CLUSTER_MIN_K == 2048
    assert choose_cluster(2048, "k")[0] == 2 and choose_cluster(14336, "k", GROUP_M)[0] == 2
    assert choose_cluster(2040, "k")[0] == 1 and choose_cluster(768, "k")[0] == 1
    assert "0.903" in choose_cluster(768, "k")[1] and CLUSTER_EVIDENCE in choose_cluster(4096, "k")[1]
    for args, words in [((4096, "k", GROUP_M_MASKED), "masked"), ((4096, "mn", GROUP_M), "N-major"),
                        ((16384, "mn", GROUP_K), "0.968")]:
        cluster, why = choose_cluster(*args)
        assert cluster == 1 and words in why, (args, why)
    with pytest.raises(ValueError, match="grouping"):
        choose_cluster(4096, "k", "n")
    import json
    from pathlib import Path

    rows = json.loads((Path(__file__).resolve().parents[1] / CLUSTER_EVIDENCE).read_text())["rows"]
    ratios = {r["K"]: r["ratio_cluster2"] for r in rows}
    assert all((ratio > 1) == (k >= CLUSTER_MIN_K) for k, ratio in ratios.items()), ratios


def _explained(*shapes, b_transposed=False, **kw):
    """explain_grouped_mm on meta tensors: a, b (and offs for a 2-D a)."""
    import gemm_ladder

    meta = torch.device("meta")
    a = torch.empty(*shapes[0], dtype=BF, device=meta)
    b = torch.empty(*shapes[1], dtype=BF, device=meta)
    if b_transposed:
        b = b.transpose(-2, -1)
    offs = torch.empty(shapes[1][0] if len(shapes[1]) == 3 else 4, dtype=torch.int32, device=meta)
    return gemm_ladder.explain_grouped_mm(a, b, offs if a.dim() == 2 or kw.get("masked") else None, **kw)


@pytest.mark.parametrize("shapes,kw,cluster,words", [
    (((4096, 2048), (8, 768, 2048)), dict(b_transposed=True), 2, "K = 2048 >= 2048"),  # forward, K-major weight
    (((4096, 2040), (8, 768, 2040)), dict(b_transposed=True), 1, "K = 2040 < 2048"),
    (((4096, 768), (8, 768, 4096)), dict(), 1, "N-major"),  # grad_x: the weight (E, K, N) row-major
    (((8, 64, 4096), (8, 768, 4096)), dict(b_transposed=True, masked=True), 1, "masked"),
    (((8, 64, 4096), (8, 768, 4096)), dict(b_transposed=True), 2, ">= 2048"),  # batched 3-D x 3-D
])
def test_explain_says_which_cluster_a_call_runs_and_why(shapes, kw, cluster, words):
    e = _explained(*shapes, **kw)
    assert e["cluster"] == cluster and words in e["cluster_reason"], e
    assert e["kernel"].endswith("_c2") == (cluster == 2) and e["grouped_along"] == "M"


def test_explain_grouped_along_k_and_swiglu_take_cluster_1_for_grad_w(monkeypatch):
    import gemm_ladder
    import gemm_ladder.ops_grouped_swiglu as gs

    monkeypatch.setattr(gs, "FUSED_DEFAULT", False)  # the two-GEMM forward, whose backward is explained too

    meta = torch.device("meta")
    x = torch.empty(16384, 4096, dtype=BF, device=meta)
    e = gemm_ladder.explain_grouped_mm(x.T, torch.empty(16384, 1024, dtype=BF, device=meta),
                                       torch.empty(8, dtype=torch.int32, device=meta))
    assert (e["case"], e["grouped_along"], e["cluster"]) == ("2d2d", "K", 1) and "0.968" in e["cluster_reason"]
    w = torch.empty(8, 1024, 4096, dtype=BF, device=meta)
    sw = gemm_ladder.explain_grouped_swiglu(x, w, w, torch.empty(8, dtype=torch.int32, device=meta))
    assert [g["cluster"] for g in sw["launches"] if g["kind"] == "grouped_gemm"] == [2, 2]  # K = 4096, K-major
    assert [g["cluster"] for g in sw["backward"] if g["kind"] == "grouped_gemm"] == [1, 1, 1, 1]  # grad_x, grad_w


def test_the_launch_takes_the_rule_unless_told(monkeypatch):
    """grouped_mm_direct builds what choose_cluster says (a spy in place of the build; fake CUDA tensors)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gemm_ladder import api_grouped

    seen = []

    class Spy:
        def launch(self, *args):
            pass

        launch_k = launch

    def spy(*args, **kw):
        seen.append(kw["cluster"] if "cluster" in kw else args[6])
        return Spy()

    monkeypatch.setattr(api_grouped, "grouped_gemm", spy)
    with FakeTensorMode():
        x = torch.empty(4096, 2048, dtype=BF, device="cuda")
        offs = torch.empty(8, dtype=torch.int32, device="cuda")
        w = torch.empty(8, 768, 2048, dtype=BF, device="cuda")
        api_grouped.grouped_mm_direct(x, w.transpose(1, 2), offs)  # forward, K 2048: 2
        x1k = torch.empty(4096, 1024, dtype=BF, device="cuda")
        w1k = torch.empty(8, 768, 1024, dtype=BF, device="cuda")
        api_grouped.grouped_mm_direct(x1k, w1k.transpose(1, 2), offs)  # K 1024: 1
        api_grouped.grouped_mm_direct(x, w.transpose(1, 2), offs, cluster=1)  # told
        gy = torch.empty(4096, 256, dtype=BF, device="cuda")
        api_grouped.grouped_mm_direct(x.T, gy, offs)  # along K: 1
        a3 = torch.empty(8, 512, 2048, dtype=BF, device="cuda")
        api_grouped.grouped_mm_masked_direct(a3, w.transpose(1, 2), offs)  # masked: 1
    assert seen == [2, 1, 1, 1, 1]


# --- the output's store: the panel ring (TMA) or registers ---------------------------------------------
def test_out_map_covers_the_output_or_is_none():
    """out_map: (N, R) over every row grouped along M, (N, M, E) along K, 64 x 64 boxes; None where TMA
    cannot write the output (a pitch or base that is not a multiple of 16 bytes)."""
    from gemm_ladder.library.grouped import out_map

    out = torch.empty(1000, 384, dtype=BF)
    spec = out_map(out, k_grouped=False)
    assert spec.global_dim == (384, 1000) and spec.box_dim == (64, 64) and spec.global_strides == (768,)
    assert out_map(torch.empty(1000, 385, dtype=BF)[:, :384], k_grouped=False) is None  # a 770-byte pitch
    assert out_map(torch.empty(384001, dtype=BF)[1:].view(1000, 384), k_grouped=False) is None  # a 2-byte offset
    # A row of 100 elements (200 bytes) in a 16-byte pitch: TMA would write the row's last chunk past N.
    assert out_map(torch.empty(1000, 104, dtype=BF)[:, :100], k_grouped=False) is None
    assert out_map(torch.empty(1, 1, 100, dtype=BF), k_grouped=True) is None
    gk = out_map(torch.empty(8, 200, 136, dtype=BF), k_grouped=True)
    assert gk.global_dim == (136, 200, 8) and gk.box_dim == (64, 64, 1) and gk.global_strides == (272, 200 * 272)
    assert out_map(torch.empty(1, 200, 136, dtype=BF), k_grouped=True).global_strides == (272, 200 * 272)


def test_store_rule_and_explain_name_the_store(monkeypatch):
    import gemm_ladder.library.grouped as g
    from gemm_ladder.api_grouped import explain_grouped_mm

    assert grouped_gemm(256).c_ring == 1 and grouped_gemm(256, out_fp32=True).c_ring == 0
    assert grouped_gemm(128, masked=True).c_ring == 0 and grouped_gemm(128, bias=True).c_ring == 1
    assert "clips M and N" in g.store_rule(grouped_gemm(256, "mn", k_grouped=True), 384, 2)[1]
    assert g.store_rule(grouped_gemm(256), 384, 2)[0] == "tma"
    assert g.store_rule(grouped_gemm(256), 385, 2) == ("registers", g.store_rule(grouped_gemm(256), 385, 2)[1])
    assert "770 bytes" in g.store_rule(grouped_gemm(256), 385, 2)[1]
    assert g.store_rule(grouped_gemm(256, out_fp32=True), 384, 4)[0] == "registers"
    meta = torch.device("meta")
    x = torch.empty(4096, 1024, dtype=BF, device=meta)
    w = torch.empty(8, 768, 1024, dtype=BF, device=meta)
    offs = torch.empty(8, dtype=torch.int32, device=meta)
    e = explain_grouped_mm(x, w.transpose(1, 2), offs)
    assert e["store"] == "tma" and "partial slice from registers" in e["store_reason"]
    assert explain_grouped_mm(x, w.transpose(1, 2), offs, out_dtype=torch.float32)["store"] == "registers"
    monkeypatch.setattr(g, "STORE_DEFAULT", "registers")
    assert explain_grouped_mm(x, w.transpose(1, 2), offs)["store"] == "registers"
    monkeypatch.setattr(g, "STORE_DEFAULT", "smem")
    with pytest.raises(ValueError, match="STORE_DEFAULT"):
        explain_grouped_mm(x, w.transpose(1, 2), offs)
    with pytest.raises(ValueError, match="STORE_DEFAULT"):  # the launch refuses it too, before encoding anything
        grouped_gemm(256).out_map(torch.empty(8, 384, dtype=BF), None)


@pytest.mark.parametrize("store,n,want", [("tma", 384, 1), ("tma", 385, 0), ("registers", 384, 0)])
def test_the_launch_passes_the_output_map_and_the_store_flag(monkeypatch, store, n, want):
    """The launch's map_c and tma_store arguments (the driver replaced; CPU tensors stand in): out's own
    map and 1 where TMA can write it and the store is "tma"; else x's map (never read) and 0."""
    import ctypes

    import gemm_ladder.library.grouped as g

    calls = []

    class Rec:
        def max_active_clusters(self, device):
            return 132

        def launch(self, grid, args, stream):
            calls.append(args)

    monkeypatch.setattr(g, "STORE_DEFAULT", store)
    monkeypatch.setattr(g, "ensure_context", lambda device: None)
    monkeypatch.setattr(g, "encode_tiled", lambda kwargs: kwargs)
    monkeypatch.setattr(g.GroupedGemm, "loaded", lambda self, dtype, device: Rec())
    monkeypatch.setattr(g.GroupedGemm, "supports", lambda self, *a: None)
    monkeypatch.setattr(g.GroupedGemm, "supports_k", lambda self, *a: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    kern = grouped_gemm(256)
    x, w = torch.empty(1000, 512, dtype=BF), torch.empty(4, n, 512, dtype=BF)
    out = torch.empty(1000, n, dtype=BF)
    kern.launch(x, w, torch.empty(4, dtype=torch.int32), out)
    args = calls[-1]
    # ... bias, tma_store, then the stream-K tail's partials, counters and idle threshold (none here)
    assert args[11].value == want and isinstance(args[11], ctypes.c_int)
    assert [args[12].value, args[13].value, args[14].value] == [None, None, 0]
    if want:
        assert args[2]["globalDim"] == [n, 1000] and args[2]["globalAddress"] == out.data_ptr()
    else:
        assert args[2] is args[0]
    kk = grouped_gemm(128, "mn", k_grouped=True)
    a, b = torch.empty(1000, 200, dtype=BF).T, torch.empty(1000, 392, dtype=BF)[:, :n]  # b's pitch 16-byte
    outk = torch.empty(4, 200, n, dtype=BF)
    kk.launch_k(a, b, torch.empty(4, dtype=torch.int32), outk)
    args = calls[-1]
    assert args[-1].value == want
    if want:
        assert args[2]["globalDim"] == [n, 200, 4] and args[2]["boxDim"] == [64, 64, 1]


def test_the_weight_gradient_takes_the_measured_tile_width():
    """grouped.GRAD_W_BN (256): its evidence files exist, each a run of one tile width, and BN 256 was the
    faster in every case there; explain and the route take it for a call grouped along K."""
    import json
    from pathlib import Path

    from gemm_ladder.api_grouped import explain_grouped_mm
    from gemm_ladder.library.grouped import GRAD_W_BN, GRAD_W_BN_EVIDENCE

    root = Path(__file__).resolve().parents[1]
    times = {}
    for path in GRAD_W_BN_EVIDENCE:
        rows = json.loads((root / path).read_text())["rows"]
        assert {r["direction"] for r in rows} == {"grad_w"} and len({r["bn"] for r in rows}) == 1
        times[rows[0]["bn"]] = {r["case"]: r["ms"]["grouped"] for r in rows if r["correct"]}
    assert set(times) == {128, 256} and times[128].keys() == times[256].keys()
    assert GRAD_W_BN == 256 and all(times[256][c] < times[128][c] for c in times[128])
    from gemm_ladder.library.grouped import grad_w_bn
    assert [grad_w_bn(n) for n in (64, 128, 129, 4096)] == [128, 128, 256, 256]
    meta = torch.device("meta")
    x = torch.empty(4096, 2048, dtype=BF, device=meta)
    gy = torch.empty(4096, 1536, dtype=BF, device=meta)
    e = explain_grouped_mm(x.T, gy, torch.empty(8, dtype=torch.int32, device=meta))
    assert e["grouped_along"] == "K" and e["tile"][1] == GRAD_W_BN and e["kernel"] == "sm90_grouped_gemm_256_kgrouped_r4"
    assert e["ring"] == 4 and "1.25x" in e["ring_reason"]


def test_the_ring_rule_takes_the_measured_deeper_ring_for_the_weight_and_input_gradients():
    """choose_ring: 4 buffers (one per panel) for the BN 256 weight gradient, and BN / 64 for a call grouped along M
    with an N-major weight (the input gradient), in bf16/fp16 without a bias, where their evidence ran faster; 1
    elsewhere (the forward's K-major weight: measured slower); the evidence files hold that."""
    import json
    from pathlib import Path

    from gemm_ladder.library.grouped import (C_RING, GRAD_X_RING_EVIDENCE, GROUP_K, GROUP_M, GROUP_M_MASKED,
                                             RING_EVIDENCE, choose_ring)

    assert choose_ring(256, GROUP_K, False, False)[0] == 4
    assert choose_ring(256, GROUP_M, False, False, "mn")[0] == 4 and choose_ring(128, GROUP_M, False, False, "mn")[0] == 2
    for args in ((128, GROUP_K, False, False), (256, GROUP_K, True, False), (256, GROUP_M, False, False),
                 (256, GROUP_M_MASKED, False, False), (128, GROUP_M, False, True), (256, GROUP_M, True, False, "mn"),
                 (256, GROUP_M, False, True, "mn"), (256, GROUP_M_MASKED, False, False, "mn")):
        ring, why = choose_ring(*args)
        assert ring == C_RING and why, args
    with pytest.raises(ValueError, match="grouping"):
        choose_ring(256, "n", False, False)
    root = Path(__file__).resolve().parents[1]
    rows = json.loads((root / RING_EVIDENCE).read_text())["rows"]
    grad_w = [r for r in rows if r["direction"] == "grad_w"]
    assert len(grad_w) >= 9 and all(r["correct"] and r["ring"] == 1 and r["ring_alt"] == 4 and r["ratio_ring"] > 1
                                    and r["bn"] == 256 for r in grad_w)
    grad_x = [r for f in GRAD_X_RING_EVIDENCE[:2] for r in json.loads((root / f).read_text())["rows"]]
    assert len(grad_x) == 9 and all(r["direction"] == "grad_x" and r["route"]["b_major"] == "mn" for r in grad_x)
    speed = [r["us"]["grouped"] / r["us"]["grouped_rall"] for r in grad_x]
    assert sum(s > 1 for s in speed) == 7 and min(speed) > 0.95 and math.prod(speed) ** (1 / len(speed)) > 1.05
    fwd = json.loads((root / GRAD_X_RING_EVIDENCE[2]).read_text())["rows"]
    assert all(r["us"]["grouped"] < r["us"]["grouped_r4"] for r in fwd)  # the forward: one buffer faster


def test_a_pair_of_ctas_along_m_keeps_the_one_buffer_ring():
    """The deeper ring is measured with one CTA along M only: a call that asks for cluster 2 on an N-major weight
    gets the one-buffer ring unless it asks for a ring too."""
    from gemm_ladder.api_grouped import grouped_build
    from gemm_ladder.library.grouped import C_RING, GROUP_M, choose_ring

    assert grouped_build(256, "mn", 4096, GROUP_M, False, False, None)[0].ring == 4
    assert grouped_build(256, "mn", 4096, GROUP_M, False, False, 2)[0].ring == C_RING
    ring, why = choose_ring(256, GROUP_M, False, False, "mn", cluster=2)
    assert ring == C_RING and "pair of CTAs" in why and "did not finish" in why


def test_the_tail_build_is_a_separate_build_grouped_along_m_only():
    """tail=True names a build of its own (GL_GROUPED_TAIL), round-trips through its config, and is refused
    where it is not built (along K, the masked layout, the fused gated MLP) and for a non-bool."""
    from gemm_ladder.library.grouped import GROUPED_GEMM, kernel_for

    t = grouped_gemm(256, "k", cluster=2, tail=True)
    assert t.name.endswith("_sk") and t is not grouped_gemm(256, "k", cluster=2)
    config = t.config("bf16")
    assert ("GL_GROUPED_TAIL", 1) in config.extra and kernel_for(config) is t
    assert config != grouped_gemm(256, "k", cluster=2).config("bf16")
    assert GROUPED_GEMM.config(256, "k", "bf16", cluster=2, tail=True) == config
    for kwargs in ({"k_grouped": True, "b_major": "mn"}, {"masked": True}, {"swiglu": True}):
        with pytest.raises(ValueError, match="tail"):
            grouped_gemm(256, **{"b_major": "k", **kwargs}, tail=True)
    with pytest.raises(ValueError, match="tail"):
        grouped_gemm(256, tail=1)
    with pytest.raises(ValueError, match="spilled"):
        grouped_gemm(256, bias=True, tail=True)


@pytest.mark.parametrize("capturing", [False, True])
def test_the_tail_launch_passes_its_workspace_and_threshold(monkeypatch, capturing):
    """A tail build's launch (the driver and the workspace replaced): the partials and counters of
    tail_workspace's sizes and plan_tail's idle threshold in clusters; no split (nulls, 0) while a CUDA
    graph is captured, and none where the plan's units cannot exceed the clusters."""
    import ctypes

    import gemm_ladder.library.grouped as g
    from gemm_ladder.design.stream_k import DEFAULT_MIN_IDLE

    calls, asked = [], []

    class Rec:
        def max_active_clusters(self, device):
            return 66

        def launch(self, grid, args, stream):
            calls.append((grid, args))

    class Buf:
        def __init__(self, ptr):
            self.ptr = ptr

        def data_ptr(self):
            return self.ptr

    class Workspaces:
        def get(self, stream, floats, counters):
            asked.append((floats, counters))
            return Buf(0x1000), Buf(0x2000)

    monkeypatch.setattr(g, "ensure_context", lambda device: None)
    monkeypatch.setattr(g, "encode_tiled", lambda kwargs: kwargs)
    monkeypatch.setattr(g, "WORKSPACES", Workspaces())
    monkeypatch.setattr(g.GroupedGemm, "loaded", lambda self, dtype, device: Rec())
    monkeypatch.setattr(g.GroupedGemm, "supports", lambda self, *a: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
    kern = grouped_gemm(256, "k", cluster=2, tail=True)
    x, w, out = torch.empty(16384, 512, dtype=BF), torch.empty(8, 4096, 512, dtype=BF), torch.empty(16384, 4096, dtype=BF)
    kern.launch(x, w, torch.empty(8, dtype=torch.int32), out)
    grid, args = calls[-1]
    assert grid == (132, 1, 1)
    if capturing:
        assert [args[12].value, args[13].value, args[14].value] == [None, None, 0] and not asked
    else:
        assert [args[12].value, args[13].value, args[14].value] == [0x1000, 0x2000, int(DEFAULT_MIN_IDLE * 66)]
        assert asked == [g.tail_workspace(66, 2, 256)]
        assert isinstance(args[14], ctypes.c_int)
    small = torch.empty(100, 512, dtype=BF)  # one M tile a group at most: 12 units x 16 N tiles on 66 clusters ...
    kern.launch(small, torch.empty(2, 256, 512, dtype=BF), torch.empty(2, dtype=torch.int32),
                torch.empty(100, 256, dtype=BF))
    grid, args = calls[-1]  # ... 2 units (groups + 1 M tiles, pairs): fewer than clusters, never split
    assert grid == (4, 1, 1) and [args[12].value, args[13].value, args[14].value] == [None, None, 0]


def test_tail_workspace_sizes_follow_the_kernels_layout():
    """2 x clusters slots of 64 x BN floats per CTA rank and consumer; a counter per tail unit (fewer than
    clusters), rank and consumer; ValueError for non-positive sizes."""
    from gemm_ladder.library.grouped import tail_workspace

    assert tail_workspace(66, 2, 256) == (2 * 2 * 2 * 66 * 64 * 256, 66 * 2 * 2)
    assert tail_workspace(132, 1, 128) == (1 * 2 * 2 * 132 * 64 * 128, 132 * 1 * 2)
    with pytest.raises(ValueError):
        tail_workspace(0, 1, 128)


def test_a_measuring_builds_stage_cap():
    """grouped_gemm(stages=): a build of its own (name, GL_STAGES, less shared memory) that round-trips through
    its config, audits clean at its depth, and is refused outside 2 .. what fits; stages = what fits is the
    plain build (bench/experiments/grouped_pair_ring_hang.py's c1s3 / c2s3)."""
    from gemm_ladder.library.grouped import kernel_for

    plain = grouped_gemm(256, "k", cluster=2)
    k = grouped_gemm(256, "k", cluster=2, stages=3)
    d = k.defines("bf16")
    assert k.name.endswith("_s3") and d["GL_STAGES"] == 3 and d["GL_C_RING"] == 1
    assert d["GL_SMEM_BYTES"] < plain.defines("bf16")["GL_SMEM_BYTES"]
    assert kernel_for(k.config("fp16")) is k and grouped_gemm(256, "k", cluster=2, stages=3) is k
    assert grouped_gemm(256, "k", cluster=2, stages=plain.ring_stages()) is plain
    for s in (1, 5, 3.0):
        with pytest.raises(ValueError, match="stages"):
            grouped_gemm(256, "k", cluster=2, stages=s)
    for k_iters, tiles in [(1, 3), (2, 3), (4, 2), (7, 1)]:
        result = audit(k.ring_protocol(k_iters, tiles))
        assert result.ok, result.render()
