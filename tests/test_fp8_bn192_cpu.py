"""The fp8 kernel's experimental 192-wide tile (issue 25) without a GPU: its builds (nvcc: no spill, the
64 x 192 x 32 wgmma, serial promotion), the configurations it refuses, its ring (audited; a seeded fault
found), its shared memory, and the launch's rule for it (fp8.wide_tile_rule) against the committed measurement."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel

from conftest import needs_nvcc
from fp8_cases import assert_build_clean

WIDE = [Fp8Kernel("tensorwise", bn=192, overlap=False, store="tma"),
        Fp8Kernel("rowwise", bn=192, overlap=False, store="tma", bias=True),
        Fp8Kernel("blockwise", bn=192, overlap=False, store="tma", scale_b_shared=True),
        Fp8Kernel("blockwise", bn=192, overlap=False, store="tma"),
        Fp8Kernel("blockwise", bn=192, overlap=False, scale_b_shared=True, bias=True),
        Fp8Kernel("tensorwise", bn=192, overlap=False, out_dtype="fp32")]


def _id(k: Fp8Kernel) -> str:
    return f"{k.scale_mode}-{k.out_dtype}-{k.store}-bias{int(k.bias)}-{k.scale_b_read or 'none'}"


@needs_nvcc
@pytest.mark.parametrize("kernel", WIDE, ids=_id)
def test_192_wide_builds_for_sm90a_without_spills(use_cache, kernel):
    sass = assert_build_clean(kernel)  # also: only the 64 x 192 x 32 wgmma
    assert "USETMAXREG" in sass  # two consumers take the producer's registers
    # serial promotion: one K block's four wgmmas in flight, no second temporary
    assert sass.count("QGMMA.64x192x32") == 4


@needs_nvcc
def test_blockwise_192_promotes_two_column_blocks(use_cache):
    """The two-column promotion's split point is compile-time: both tile parities' FMAs are in the SASS
    (16 and 8 eight-column groups on the first block's scales), with no FMA through a select."""
    sass = assert_build_clean(WIDE[2])
    tensorwise = assert_build_clean(WIDE[0])
    # 96 promotion FMAs a block; the two parities share their first 8 and last 8 groups' FMAs at most
    assert sass.count("FFMA") >= 96 + 32, sass.count("FFMA")
    assert tensorwise.count("FFMA") >= 96


@pytest.mark.parametrize("change", [dict(overlap=True), dict(split=True), dict(bm=64), dict(out_dtype="fp8"),
                                    dict(scale_b_shared=False, scale_b_ahead=True)], ids=str)
def test_192_wide_refuses_what_it_cannot_hold(change):
    kernel = replace(Fp8Kernel("blockwise", bn=192, overlap=False, scale_b_shared=True), **change)
    with pytest.raises(ValueError, match="no such configuration"):
        kernel.config()


def test_192_wide_shared_memory_and_stages():
    for mode in fp8.SCALE_MODES:
        tma = Fp8Kernel(mode, bn=192, overlap=False, store="tma", scale_b_shared=mode == "blockwise")
        reg = Fp8Kernel(mode, bn=192, overlap=False, scale_b_shared=mode == "blockwise")
        # 40 KiB a stage (+ 512 B of scale_a): four beside two 24 KiB staging buffers, five with the register store
        assert (tma.ring_stages, reg.ring_stages) == (4, 5), mode
        for k in (tma, reg):
            assert k.dynamic_smem <= fp8.SMEM_LIMIT
            assert k.expect_tx_bytes == 128 * 128 + 192 * 128 + (512 if mode == "blockwise" else 0)
        assert fp8.smem_bytes(mode, 5, 192, fp8.STORE_TMA, 128, mode == "blockwise") > fp8.SMEM_LIMIT
    # the shared scale_b copy holds two columns a K block: 1 KiB a consumer
    assert (fp8.smem_bytes("blockwise", 4, 192, fp8.STORE_TMA, 128, True)
            - fp8.smem_bytes("blockwise", 4, 192, fp8.STORE_TMA, 128, False)) == 2 * 128 * 4 * 2
    k = WIDE[2]
    assert k.config().tile == (128, 192, 128) and fp8.kernel_for(k.config()) == k


def test_192_wide_ring_audited_and_a_fault_found():
    from gemm_ladder.audit import audit, build_ring_protocol

    for k in (WIDE[0], WIDE[2], WIDE[4]):
        ring = k.ring_config(k_iters=6, tiles=3)
        assert ring.release_lag == 0 and ring.bn == 192
        assert audit(build_ring_protocol(ring, name="fp8-192")).ok
    ring = WIDE[2].ring_config(k_iters=6, tiles=2)
    bad = replace(ring, expect_tx_bytes=ring.expect_tx_bytes - 192 * 128 // 2)  # half of B's box left out
    assert not audit(build_ring_protocol(bad, name="fp8-192-fault"), stop_at_first=True).ok


def _meta(m, n, k, mode="tensorwise"):
    a = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty((n, k), dtype=torch.float8_e4m3fn, device="meta").T
    if mode == "blockwise":
        sa, sb = torch.empty((-(-k // 128), m), device="meta").T, torch.empty((-(-k // 128), -(-n // 128)), device="meta")
    else:
        sa, sb = torch.empty((), device="meta"), torch.empty((), device="meta")
    return a, b, sa, sb


def _launch_build(m, n, k, mode="tensorwise", **kw):
    a, b, sa, sb = _meta(m, n, k, mode)
    call = fp8.check_scaled_mm(a, b, sa, sb, device_type=None, **kw)
    return fp8.default_build(call, a, b, None, None, 132)


#: The first measurement of the 192-wide tile against the launch's BN 128 build (H100, interleaved, bitwise equal).
MEASURED = [f"../bench/results/2026-12-07_fp8_variants_bn192_{s}_h100_5e4dda3.json" for s in ("blockwise", "tw_rw")]


def test_the_rule_picks_the_measured_winner():
    """Every committed 128-row row where the two widths differ by more than 2% (the run's noise): the rule takes the
    192-wide tile exactly where it was faster. Ties within 2% may go either way."""
    import json
    from pathlib import Path

    judged = 0
    for name in MEASURED:
        for row in json.loads((Path(__file__).parent / name).read_text())["rows"]:
            ratio = row["variants"]["bn192"]["ratio"]  # the default's time over the 192-wide build's
            if "bn=128" not in row["default"] or abs(ratio - 1) <= 0.02:
                continue
            wide, why = fp8.wide_tile_rule(row["M"], row["N"], 132, enabled=True)
            assert wide == (ratio > 1), (row["M"], row["N"], row["K"], row["scheme"], ratio, why)
            judged += 1
    assert judged >= 8


def test_the_rule_counts_waves():
    # N = 576: 160 tiles of 128 in 2 waves against 96 of 192 in one (the short last wave)
    wide, why = fp8.wide_tile_rule(4096, 576, 132, enabled=True)
    assert wide and "160 tiles of 128 columns in 2 waves, 96 of 192 in 1" in why
    # 4096^3: 8 waves against 6 (22 columns of 192 tiles, the last one past N): 8 / (6 x 1.5 x 0.97) < 1
    assert not fp8.wide_tile_rule(4096, 4096, 132, enabled=True)[0]
    assert not fp8.wide_tile_rule(4096, 576, 132, enabled=False)[0]


def test_the_launch_takes_the_rule(monkeypatch):
    monkeypatch.setattr(fp8, "WIDE_TILE", True)
    kernel, plan, why = _launch_build(4096, 576, 7168)
    assert (kernel.bn, kernel.overlap, kernel.bm, kernel.split) == (192, False, 128, False)
    assert why["tile_n"].startswith("192 columns: 160 tiles")
    assert _launch_build(4096, 4096, 4096)[0].bn == 128  # the rule says no
    assert _launch_build(64, 576, 7168)[0].bn == 64  # 64-row decode tiles, split
    assert _launch_build(4096, 576, 7168, out_dtype=torch.float8_e4m3fn)[0].bn == 128  # the quantized output
    # blockwise at 12 K blocks: the 128-wide build loads scale_b ahead; the wide one cannot, so it reads it in the block
    wide, _, why = _launch_build(4096, 24576, 1536, "blockwise")
    assert wide.bn == 192 and not wide.scale_b_ahead and not wide.scale_b_shared
    assert "reads it in the block" in why["scale_b"]
    before = fp8.settings()
    monkeypatch.setattr(fp8, "WIDE_TILE", False)  # the compiled host path plans anew when the switch moves
    assert fp8.settings() != before
    kernel, _, why = _launch_build(4096, 576, 7168)
    assert (kernel.bn, kernel.overlap) == (128, True) and "turned off" in why["tile_n"]


def test_explain_gives_the_width_and_why(monkeypatch):
    import gemm_ladder

    monkeypatch.setattr(fp8, "WIDE_TILE", True)
    e = gemm_ladder.explain_scaled_mm(*_meta(4096, 576, 7168))
    assert e["tile"]["BN"] == 192 and not e["promotion_overlapped"] and "predicted" in e["tile_n_reason"]
    assert e["tiles"] == 96 and e["stages"] == fp8.stages_for("tensorwise", 192, fp8.STORE_TMA)
