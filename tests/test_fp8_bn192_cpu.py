"""The fp8 kernel's experimental 192-wide tile (issue 25) without a GPU: its builds (nvcc: no spill, the
64 x 192 x 32 wgmma, serial promotion), the configurations it refuses, its ring (audited; a seeded fault
found), its shared memory, and that the launch never picks it (an explicit build only)."""

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


@pytest.mark.parametrize("shape", [(4096, 7168, 16384), (8192, 8192, 8192), (64, 4096, 7168), (4096, 576, 7168)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_launch_never_picks_192(shape):
    m, n, k = shape
    for bm in fp8.TILE_M:
        assert fp8.tile_n(m, n, 132, bm=bm) in fp8.TILE_N
    assert 192 not in fp8.TILE_N and 192 in fp8.EXPERIMENTAL_TILE_N
    a = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty((n, k), dtype=torch.float8_e4m3fn, device="meta").T
    sa, sb = torch.empty((), device="meta"), torch.empty((), device="meta")
    call = fp8.check_scaled_mm(a, b, sa, sb, device_type=None)
    assert fp8.default_build(call, a, b, None, None, 132)[0].bn != 192
