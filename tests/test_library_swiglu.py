"""gemm_ladder.swiglu and its kernel without a GPU: every input rule, the plan, the build, the audit.

- Validation: each argument rule of ``check_swiglu`` / ``check_swiglu_layout`` on CPU and meta tensors
  (the public function refuses CPU tensors by the device rule), and the kernel's own ``supports``.
- Plan: the designer's plan of the GEMM on the virtual interleaved weight, the kernel's four tensor
  maps (dimensions, boxes, pitches), its ``-D`` constants, and the virtual weight's argument checked
  numerically on CPU (the tile halves of x B'^T are the gate and up products).
- Fragment: the register arithmetic of gated_epilogue.cuh (gate column n and up column n + 128 in
  one thread, BN / 4 registers apart) replayed from the PTX fragment formula.
- Build: both dtypes compile for sm_90a and pass the resource gate (no spill, no stack, no local
  memory), with 64x256x16 HGMMA, TMA loads and stores, the setmaxnreg split and the SiLU's MUFU.EX2.
- Audit: the kernel's ring (level 9's at its configuration) is clean over bounds that wrap the ring,
  at K = 1, and a seeded fault in it is found.
"""

from __future__ import annotations

import pytest
import torch
from conftest import needs_nvcc

import gemm_ladder
from gemm_ladder.audit import audit
from gemm_ladder.contract import GemmInputError, OutsideDomainError
from gemm_ladder.design.problem import PlanRefused
from gemm_ladder.dispatch.validate import (
    GemmTypeError, NotSupportedError, check_swiglu, check_swiglu_layout,
)
from gemm_ladder.library.operand import operand_view
from gemm_ladder.library.swiglu import MAP_NAMES, OUT_BN, SwigluKernel, swiglu_kernel, virtual_n

BF16, FP16 = torch.bfloat16, torch.float16
CPU = ("cpu",)


def t(*shape, dtype=BF16, device="cpu"):
    return torch.empty(shape, dtype=dtype, device=device)


# --- validation ---------------------------------------------------------------------------------
def test_public_name_and_docstring():
    assert "swiglu" in gemm_ladder.__all__
    doc = gemm_ladder.swiglu.__doc__
    for word in ("(*, K)", "(N, K)", "bfloat16", "NotSupportedError", "GemmInputError", "OutsideDomainError"):
        assert word in doc


def test_valid_calls_return_k_and_n():
    assert check_swiglu(t(5, 64), t(96, 64), t(96, 64), device_types=CPU) == (64, 96)
    assert check_swiglu(t(2, 3, 5, 64, dtype=FP16), t(96, 64, dtype=FP16), t(96, 64, dtype=FP16),
                        device_types=CPU) == (64, 96)
    assert check_swiglu(t(64), t(8, 64), t(8, 64), device_types=CPU) == (64, 8)  # 1-D x


@pytest.mark.parametrize("pos", [0, 1, 2])
def test_non_tensors_are_named(pos):
    args = [t(4, 8), t(8, 8), t(8, 8)]
    args[pos] = [[1.0]]
    name = ("x", "w_gate", "w_up")[pos]
    with pytest.raises(GemmTypeError, match=f"{name} must be a torch.Tensor, got list"):
        check_swiglu(*args, device_types=CPU)


def test_cpu_tensors_are_refused_by_the_public_function():
    with pytest.raises(GemmInputError, match="x must be on a cuda device"):
        gemm_ladder.swiglu(t(4, 8), t(8, 8), t(8, 8))


@pytest.mark.parametrize("pos", [0, 1, 2])
def test_dtypes(pos):
    args = [t(4, 8), t(8, 8), t(8, 8)]
    args[pos] = args[pos].float()
    with pytest.raises(GemmInputError, match="dtype torch.float32; gemm_ladder computes torch.bfloat16 or torch.float16"):
        check_swiglu(*args, device_types=CPU)
    args = [t(4, 8), t(8, 8), t(8, 8)]
    args[pos] = args[pos].half()
    with pytest.raises(GemmInputError, match="must share a dtype"):
        check_swiglu(*args, device_types=CPU)


def test_ranks_shapes_and_k():
    with pytest.raises(GemmInputError, match="x must have at least 1 dimension"):
        check_swiglu(t(), t(8, 8), t(8, 8), device_types=CPU)
    with pytest.raises(GemmInputError, match="w_gate must be 2-D"):
        check_swiglu(t(4, 8), t(1, 8, 8), t(8, 8), device_types=CPU)
    with pytest.raises(GemmInputError, match="w_up must be 2-D"):
        check_swiglu(t(4, 8), t(8, 8), t(8), device_types=CPU)
    with pytest.raises(GemmInputError, match=r"w_gate is \(N, K\) = \(16, 8\) and w_up is \(8, 8\)"):
        check_swiglu(t(4, 8), t(16, 8), t(8, 8), device_types=CPU)
    with pytest.raises(GemmInputError, match=r"x.shape\[-1\] = 9 must equal w_gate.shape\[1\] = 8"):
        check_swiglu(t(4, 9), t(8, 8), t(8, 8), device_types=CPU)


def test_devices_must_match():
    with pytest.raises(GemmInputError, match="x and w_up must be on one device"):
        check_swiglu(t(4, 8, device="meta"), t(8, 8, device="meta"), t(8, 8), device_types=("cpu", "meta"))


@pytest.mark.parametrize("pos", [0, 1, 2])
def test_autograd_is_refused(pos):
    args = [t(4, 8), t(8, 8), t(8, 8)]
    args[pos] = torch.zeros(args[pos].shape, dtype=BF16, requires_grad=True)
    with pytest.raises(NotSupportedError, match="requires grad.*swiglu's backward is not built") as info:
        check_swiglu(*args, device_types=CPU)
    assert "out=" not in str(info.value)  # mm's reason is not swiglu's
    with torch.no_grad():
        check_swiglu(*args, device_types=CPU)


def test_layouts_read_in_place_pass():
    x = t(6, 72)
    check_swiglu_layout(x, t(40, 72), t(40, 72))
    check_swiglu_layout(t(6, 80)[:, :72], t(40, 80)[:, :72], t(40, 72))  # padded pitches of 160 bytes
    check_swiglu_layout(t(1, 72), t(1, 72), t(1, 72))  # one row has no pitch
    check_swiglu_layout(t(0, 7), t(3, 7), t(3, 7))  # nothing to read in x; the weights are not read either
    check_swiglu_layout(t(4, 7, device="meta"), t(0, 7, device="meta"), t(0, 7, device="meta"))


@pytest.mark.parametrize("pos", [0, 1, 2])
def test_column_major_operands_are_refused_with_the_fix(pos):
    args = [t(6, 64), t(40, 64), t(40, 64)]
    args[pos] = t(args[pos].shape[1], args[pos].shape[0]).T
    name = MAP_NAMES[pos]
    with pytest.raises(NotSupportedError, match=rf"{name} has strides .* row-major .* pass {name}.contiguous\(\)"):
        check_swiglu_layout(*args)


def test_k_not_a_multiple_of_8_is_refused_with_the_padding_fix():
    with pytest.raises(NotSupportedError, match=r"x: rows 100 elements apart = 200 bytes, not a multiple of 16.*pad K "
                                                r"to a multiple of 8"):
        check_swiglu_layout(t(6, 100), t(40, 100), t(40, 100))
    with pytest.raises(NotSupportedError, match=r"w_up: rows 100 elements apart.*pad K"):
        check_swiglu_layout(t(6, 104)[:, :100], t(40, 104)[:, :100], t(40, 100))


def test_a_pitch_not_of_16_bytes_is_refused():
    with pytest.raises(NotSupportedError, match=r"w_gate: rows 68 elements apart = 136 bytes.*pitch of a multiple of 8"):
        check_swiglu_layout(t(6, 64), t(40, 68)[:, :64], t(40, 64))


def test_an_unaligned_base_is_refused():
    x = t(6 * 64 + 1)[1:].view(6, 64)
    with pytest.raises(NotSupportedError, match=r"x: base address 0x[0-9a-f]+ is not 16-byte aligned.*x.clone\(\)"):
        check_swiglu_layout(x, t(40, 64), t(40, 64))


def test_an_extent_past_int32_is_outside_the_domain():
    from gemm_ladder.dispatch.validate import MmShape, check_domain

    with pytest.raises(OutsideDomainError, match="N = 2147483648 > 2\\^31 - 1"):
        check_domain(MmShape(1, 2**31, 8, BF16))


def _views(x, wg, wu):
    return [operand_view(v, k_dim=1) for v in (x, wg, wu)]


def test_the_kernel_states_its_own_rules():
    k = SwigluKernel()
    ok = k.supports(*_views(t(5, 64), t(40, 64), t(40, 64)), t(5, 40))
    assert "one CUDA device" in ok  # every other rule holds: CPU tensors fail last, on the device
    assert "share one dtype" in k.supports(*_views(t(5, 64), t(40, 64), t(40, 64, dtype=FP16)), t(5, 40))
    assert "MN-major" in k.supports(*_views(t(64, 5).T, t(40, 64), t(40, 64)), t(5, 40))
    assert "must match" in k.supports(*_views(t(5, 64), t(40, 64), t(48, 64)), t(5, 48))
    assert "empty problem" in k.supports(*_views(t(0, 64), t(40, 64), t(40, 64)), t(0, 40))
    assert "out has shape (5, 41)" in k.supports(*_views(t(5, 64), t(40, 64), t(40, 64)), t(5, 41))
    assert "row-major" in k.supports(*_views(t(5, 64), t(40, 64), t(40, 64)), t(40, 5).T)
    # N = 36 bf16 = 72 bytes: the store would write the row's last chunk whole, into the caller's memory
    assert "pitch 72 bytes" in k.supports(*_views(t(5, 64), t(36, 64), t(36, 64)), t(5, 36))
    assert "the TMA store writes" in k.supports(*_views(t(1, 64), t(36, 64), t(36, 64)), t(1, 36))
    padded = t(5, 40)[:, :36]
    assert "the TMA store writes" in k.supports(*_views(t(5, 64), t(36, 64), t(36, 64)), padded)
    assert "one CUDA device" in k.supports(*_views(t(5, 64), t(36, 64), t(36, 64)), padded, out_padding_writable=True)


# --- plan -----------------------------------------------------------------------------------------
def test_the_virtual_weight_has_128_gate_and_128_up_rows_per_output_tile():
    assert [virtual_n(n) for n in (1, 128, 129, 14336)] == [256, 256, 512, 28672]


def test_the_plan_at_llamas_mlp_shape():
    plan = swiglu_kernel().plan(4096, 14336, 4096, "bf16")
    g = plan.gemm
    assert (g.m, g.n, g.k, g.tile, g.stages, g.cluster) == (4096, 28672, 4096, (128, 256, 64), 4, 2)
    assert g.consumers.warpgroups == 2 and g.consumers.producer_warpgroup and g.persistent
    assert plan.out_tile == (128, OUT_BN) == (128, 128) and plan.c_panels == 2
    assert plan.tiles == 32 * 112
    s = g.schedule
    assert s.m_tiles == 32 and s.n_tiles == 112  # 16 x 112 work units of two stacked 128 x 128 output tiles
    assert g.load_protocol.expect_tx_bytes == (128 + 256) * 64 * 2
    assert g.load_protocol.multicast_mask == 0b11 and g.load_protocol.empty_arrival_count == 4
    assert g.smem.total_bytes <= 232448 and g.smem.c_ring == 2
    maps = plan.tensor_maps
    assert list(maps) == list(MAP_NAMES)
    assert (maps["x"].global_dim, maps["x"].box_dim, maps["x"].global_strides) == ((4096, 4096), (64, 128), (8192,))
    for name in ("w_gate", "w_up"):  # the real weights, N rows each; a CTA rank loads 128 rows of one
        assert (maps[name].global_dim, maps[name].box_dim, maps[name].global_strides) == ((4096, 14336), (64, 128), (8192,))
    assert (maps["out"].global_dim, maps["out"].box_dim, maps["out"].global_strides) == ((14336, 4096), (64, 64), (28672,))
    d = plan.kernel_defines()
    assert d == {**g.kernel_defines(), "GL_C_PANELS": 2} and d == swiglu_kernel().defines("bf16")
    assert "w_gate" in plan.describe() and plan.to_json()["problem"]["virtual_n"] == 28672


def test_the_plan_with_tails_and_pitches():
    plan = SwigluKernel().plan(300, 1000, 520, "fp16", ldx=528, ldw_gate=520, ldw_up=576, ldo=1008)
    m = plan.tensor_maps
    assert m["x"].global_strides == (1056,) and m["w_up"].global_strides == (1152,) and m["out"].global_strides == (2016,)
    assert m["w_gate"].global_dim == (520, 1000) and m["out"].global_dim == (1000, 300)
    assert plan.gemm.schedule.n_tiles == 8 and plan.gemm.schedule.k_tail == 520 - 8 * 64


def test_the_plan_refuses_a_pitch_tma_cannot_take():
    with pytest.raises(PlanRefused, match="globalStrides"):
        SwigluKernel().plan(64, 64, 100, "bf16")


def test_geometry():
    geo = SwigluKernel().geometry("bf16")
    assert (geo.threads, geo.cluster) == (384, 2) and geo.dynamic_smem <= 232448


def test_the_virtual_weight_argument_numerically():
    """x @ B'^T with B' stacking 128 rows of w_gate then the same 128 of w_up per output tile: its tile
    halves are the gate and up products, so the epilogue's silu(left) * right is the swiglu."""
    gen = torch.Generator().manual_seed(1)
    m, n, k = 5, 300, 24
    x, wg, wu = (torch.randn(s, generator=gen, dtype=torch.float64) for s in ((m, k), (n, k), (n, k)))
    pad = virtual_n(n) // 2
    wgp, wup = torch.zeros(pad, k, dtype=torch.float64), torch.zeros(pad, k, dtype=torch.float64)
    wgp[:n], wup[:n] = wg, wu  # TMA's zero fill past N
    b = torch.stack([wgp.view(-1, 128, k), wup.view(-1, 128, k)], dim=1).reshape(-1, k)  # (tiles x 2 x 128, K)
    c = x @ b.T
    tiles = c.view(m, -1, 2, 128)
    out = (torch.nn.functional.silu(tiles[:, :, 0]) * tiles[:, :, 1]).reshape(m, pad)[:, :n]
    torch.testing.assert_close(out, torch.nn.functional.silu(x @ wg.T) * (x @ wu.T))


def test_gate_and_up_of_one_output_are_in_one_thread():
    """PTX ISA, wgmma D fragment: d[4j + 2i + c] is column 8j + 2(l % 4) + c. pack_gated_fragment<256>
    pairs register r < 64 with r + 64 (BN / 4): columns n and n + 128, for every lane and r."""
    for lane in range(32):
        for r in range(64):
            j, i, c = r // 4, (r % 4) // 2, r % 2
            col = 8 * j + 2 * (lane % 4) + c
            r_up = r + 256 // 4
            col_up = 8 * (r_up // 4) + 2 * (lane % 4) + r_up % 2
            assert col < 128 and col_up == col + 128 and (r_up % 4) // 2 == i  # same row (i) too


# --- build and resource gate ----------------------------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("dtype,mnemonic", [("bf16", ".BF16"), ("fp16", "")])
def test_resource_gate(dtype, mnemonic, use_cache):
    import re

    from gemm_ladder.gates.resources import check_level_resources

    report, sass = check_level_resources(SwigluKernel(), dtype)
    assert report.passed, report.messages
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
    assert report.sass["LDL"] == report.sass["STL"] == 0
    assert report.sass["UTMALDG"] > 0 and report.sass["UTMASTG"] > 0
    assert "USETMAXREG" in sass, "level 9's register split (setmaxnreg)"
    assert set(re.findall(r"HGMMA\.(\d+x\d+x16)\.F32((?:\.BF16)?) ", sass)) == {("64x256x16", mnemonic)}
    assert "MUFU.EX2" in sass and "MUFU.RCP" in sass  # the SiLU: __expf and __fdividef


# --- audit ----------------------------------------------------------------------------------------
def test_the_ring_audits_clean_over_a_wrap():
    k = SwigluKernel()
    p = k.ring_protocol()  # stages / 2 + 1 K iterations, two tiles: every stage reused in a later round
    assert p.name.startswith("sm90_swiglu")
    assert {b.name for b in p.buffers if b.kind == "staging"} == {f"D{c}.{r}" for c in range(2) for r in range(2)}
    assert 2 * (k.defines("bf16")["GL_STAGES"] // 2 + 1) > k.defines("bf16")["GL_STAGES"]
    result = audit(p, max_states=5_000_000)
    assert result.ok, result.render()


@pytest.mark.parametrize("k_iters,tiles", [(1, 3), (2, 2), (5, 1)])
def test_the_ring_audits_clean_on_short_and_long_k(k_iters, tiles):
    """K = 1 (a stream-K piece of one iteration, stores back to back), two, and a single long tile."""
    result = audit(SwigluKernel().ring_protocol(k_iters=k_iters, tiles=tiles), max_states=5_000_000)
    assert result.ok, result.render()


def test_the_ring_audit_finds_a_seeded_fault():
    """The same model with one fault each is refused: the audits above can fail. (Faults in the stage
    ring's counts, found by the full search, take minutes at these stages: level 9's own tests seed them.)"""
    k = SwigluKernel()
    assert "handoff_roles" in {v.kind for v in audit(k.ring_protocol(empty_wait=False, k_iters=3, tiles=1)).violations}
    for fault in (dict(drain_staging_before_reuse=False), dict(staging_wait_pending=2)):  # a buffer rewritten too soon
        kinds = {v.kind for v in audit(k.ring_protocol(k_iters=1, tiles=2, **fault)).violations}
        assert "staging_overwrite" in kinds, fault


@pytest.mark.parametrize("quantized", (False, True))
def test_the_cached_maps_cannot_be_extended_by_a_launch(monkeypatch, quantized):
    """launch appends its arguments to the maps: the cached entry must be a tuple, so that the next call's
    arguments are not the first call's with more after them (a regression: the first call's output and
    workspace pointers were launched again)."""
    from gemm_ladder.library import swiglu as S

    encoded = []
    monkeypatch.setattr(S, "encode_tiled", lambda kwargs: encoded.append(kwargs) or object())
    kernel = SwigluKernel(quantized=quantized)
    x, wg, wu = (torch.empty(r, 256, dtype=torch.bfloat16) for r in (300, 384, 384))
    out = torch.empty(300, 384, dtype=torch.float8_e4m3fn if quantized else torch.bfloat16)
    views = [operand_view(t, k_dim=1) for t in (x, wg, wu)]
    first = kernel.maps(*views, out)
    assert isinstance(first, tuple) and len(first) == (3 if quantized else 4) == len(encoded)
    args = [*kernel.maps(*views, out), "launch arguments"]
    assert kernel.maps(*views, out) is first and len(first) == len(args) - 1 and len(encoded) == len(first)
