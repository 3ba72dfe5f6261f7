"""The fp8 kernel's 2-CTA cluster build (issue 25) without a GPU: its builds (nvcc: no spill, no
serialised wgmma, B loaded by multicast), its ring audited (and a seeded fault found), the launch's
arguments (B's box is half the tile, the grid two CTAs a unit), the cluster rule and explain."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch

from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel, check_scaled_mm, quantize_fp8

from conftest import needs_nvcc

SMS = 132
BLOCKS = {"tensorwise": ((-1, -1), (-1, -1)), "rowwise": ((1, -1), (1, -1)), "blockwise": ((1, 128), (128, 128))}

PAIRS = [Fp8Kernel("tensorwise", store="tma", cluster=2), Fp8Kernel("rowwise", cluster=2),
         Fp8Kernel("blockwise", store="tma", cluster=2), Fp8Kernel("blockwise", bn=64, bias=True, cluster=2),
         Fp8Kernel("blockwise", out_dtype="fp8", cluster=2), Fp8Kernel("rowwise", out_dtype="fp32", cluster=2),
         Fp8Kernel("tensorwise", bn=64, store="tma", overlap=False, cluster=2)]


def _id(k: Fp8Kernel) -> str:
    return f"{k.scale_mode}-{k.out_dtype}-bn{k.bn}-{k.store}-ov{int(k.overlap)}-bias{int(k.bias)}"


@needs_nvcc
@pytest.mark.parametrize("kernel", PAIRS, ids=_id)
def test_pair_builds_for_sm90a_without_spills_and_multicasts_b(use_cache, kernel):
    from gemm_ladder.gates.resources import parse_ptxas_log
    from gemm_ladder.runtime.compiler import disassemble

    built = kernel.build()
    usage = parse_ptxas_log(built.ptxas_log)[fp8.KERNEL_NAME]
    assert (usage.stack_bytes, usage.spill_stores, usage.spill_loads) == (0, 0, 0)
    assert "C7514" not in built.ptxas_log and "C7517" not in built.ptxas_log, built.ptxas_log
    sass = disassemble(built.cubin)
    assert set(re.findall(r"QGMMA\.(\d+x\d+x\d+)", sass)) == {f"64x{kernel.bn}x32"}
    # B by multicast; A (and blockwise scale_a) by the plain load; the cluster's barrier at both ends.
    assert "UTMALDG.2D.MULTICAST" in sass, "B is not multicast"
    assert re.search(r"UTMALDG\.2D(?!\.MULTICAST)", sass), "A is not loaded by the CTA alone"
    assert "UCGABAR_ARV" in sass and "UCGABAR_WAIT" in sass
    # The releases reach the peer's barrier (mapa + a shared::cluster arrive).
    assert "MAPA" in sass or "SYNCS.ARRIVE.TRANS64.RED" in sass


@needs_nvcc
def test_one_cta_builds_have_no_cluster_code(use_cache):
    from gemm_ladder.runtime.compiler import disassemble

    sass = disassemble(Fp8Kernel("tensorwise", store="tma").build().cubin)
    assert "MULTICAST" not in sass and "UCGABAR" not in sass


def test_cluster_is_named_only_when_two():
    one, two = Fp8Kernel("blockwise"), Fp8Kernel("blockwise", cluster=2)
    assert "GL_FP8_CLUSTER" not in one.defines() and "cluster" not in repr(one)  # the builds' inputs unchanged
    assert two.defines()["GL_FP8_CLUSTER"] == 2 and "cluster=2" in repr(two)
    assert two.config().cluster == 2 and fp8.kernel_for(two.config()) == two
    assert fp8.kernel_for(one.config()) == one


@pytest.mark.parametrize("bad", [Fp8Kernel("tensorwise", cluster=3), Fp8Kernel("tensorwise", cluster=2, split=True)],
                         ids=["three", "with-split"])
def test_pairs_the_kernel_does_not_build_are_refused(bad):
    with pytest.raises(ValueError, match="no such configuration"):
        bad.config()


@pytest.mark.parametrize("kernel", PAIRS, ids=_id)
def test_pair_ring_audited(kernel):
    from gemm_ladder.audit import audit, build_ring_protocol

    ring = kernel.ring_config(k_iters=4, tiles=3)
    assert ring.cluster == 2 and ring.empty_arrivals == 16  # 2 CTAs x 2 consumers x 4 warps: the kernel's count
    assert audit(build_ring_protocol(ring, name="fp8-pair")).ok


@pytest.mark.parametrize("fault", ["one CTA's releases", "B's share not in expect_tx"])
def test_pair_ring_audit_catches_a_seeded_fault(fault):
    from gemm_ladder.audit import audit, build_ring_protocol

    ring = Fp8Kernel("blockwise", cluster=2).ring_config(k_iters=4, tiles=2)
    bad = (replace(ring, empty_count=8) if fault == "one CTA's releases"
           else replace(ring, expect_tx_bytes=ring.expect_tx_bytes - 128 * 64))
    assert not audit(build_ring_protocol(bad, name="fp8-pair-fault"), stop_at_first=True).ok


class _Recorder:
    def __init__(self, resident: int):
        self.calls, self.resident = [], resident

    def max_active_clusters(self, device):
        return self.resident

    def launch(self, grid, args, stream):
        self.calls.append((grid, args))


@pytest.mark.parametrize("mode", list(BLOCKS))
@pytest.mark.parametrize("shape,resident", [((4096, 4096, 1024), 66), ((2179, 2048, 512), 64), ((256, 1040, 272), 66)],
                         ids=["units-over-clusters", "odd-m-tiles", "units-under-clusters"])
def test_pair_launch_arguments(monkeypatch, mode, shape, resident):
    m, n, k = shape
    rec = _Recorder(resident)
    monkeypatch.setattr(fp8, "encode_tiled", lambda kwargs: kwargs)
    monkeypatch.setattr(fp8, "_sm_count", lambda device: SMS)
    monkeypatch.setattr(fp8, "_stream", lambda device: None)
    monkeypatch.setattr(Fp8Kernel, "loaded", lambda self, device: rec)
    qa, sa = quantize_fp8(torch.randn(m, k), BLOCKS[mode][0])
    qw, sw = quantize_fp8(torch.randn(n, k), BLOCKS[mode][1])
    sb = sw.T if sw.dim() == 2 else sw
    call = check_scaled_mm(qa, qw.T, sa, sb, device_type="cpu")
    kernel = Fp8Kernel(mode, store="tma", cluster=2)
    out = torch.empty((m, n), dtype=torch.bfloat16)
    fp8.scaled_mm_launch(qa, qw.T, sa, sb, None, call, out, kernel=kernel)
    (grid, args), = rec.calls
    units = math.ceil(math.ceil(m / 128) / 2) * math.ceil(n / 128)
    assert grid == (2 * min(units, resident), 1, 1)
    map_a, map_b = args[:2]
    assert map_a["boxDim"] == [128, 128] and map_b["boxDim"] == [128, 64]  # each CTA loads half of B's tile
    assert [a.value for a in args[13:16]] == [m, n, k]
    assert [a.value for a in args[16:18]] == [math.ceil(m / 128) * math.ceil(n / 128), 1]  # nothing split


@pytest.mark.parametrize("shape,want", [
    ((4096, 7168, 16384), 2),   # 1792 tiles
    ((256, 16896, 4096), 2),    # two M tiles, 132 tiles: fills the SMs
    ((128, 7168, 2048), 1),     # one M tile
    ((1000, 1024, 4096), 1),    # 64 tiles at BN 64... fewer than the SMs
    ((64, 4096, 14336), 1),     # split
], ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_cluster_rule(shape, want):
    m, n, k = shape
    bn = fp8.tile_n(m, n, SMS)
    plan, _ = fp8.split_plan(m, n, k, bn, SMS)
    cluster, why = fp8.cluster_for(m, n, bn, SMS, plan.tail_units > 0, "auto")
    assert cluster == want, why
    assert fp8.cluster_for(m, n, bn, SMS, plan.tail_units > 0, "1")[0] == 1
    with pytest.raises(ValueError, match="cluster"):
        fp8.cluster_for(m, n, bn, SMS, False, "2")


def test_explain_names_the_cluster(monkeypatch):
    import gemm_ladder

    m, n, k = 4096, 7168, 1024
    meta = dict(device="meta")
    qa = torch.empty((m, k), dtype=torch.float8_e4m3fn, **meta)
    qb = torch.empty((n, k), dtype=torch.float8_e4m3fn, **meta).T
    sa, sb = torch.empty((), **meta), torch.empty((), **meta)
    monkeypatch.setattr(fp8, "CLUSTER_DEFAULT", "auto")
    e = gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)
    assert e["cluster"] == 2 and e["defines"]["GL_FP8_CLUSTER"] == 2 and "multicast" in e["cluster_reason"]
    assert e["grid"] == 132  # 2 x min(16 x 56 units, 66)
    monkeypatch.setattr(fp8, "CLUSTER_DEFAULT", "1")
    e = gemm_ladder.explain_scaled_mm(qa, qb, sa, sb)
    assert e["cluster"] == 1 and "GL_FP8_CLUSTER" not in e["defines"]


def test_bench_times_the_one_cta_launch_beside_the_pair(monkeypatch, capsys):
    """bench/fp8.py: --cluster is a documented option, and its one-CTA wrapper sets one CTA a cluster for
    the call only (what the interleaved timing relies on)."""
    import importlib.util
    import sys
    from pathlib import Path

    import gemm_ladder

    bench = Path(__file__).resolve().parent.parent / "bench"
    monkeypatch.syspath_prepend(str(bench))
    spec = importlib.util.spec_from_file_location("gl_bench_fp8_cluster", bench / "fp8.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0 and "--cluster {1,auto,both}" in capsys.readouterr().out
    meta = dict(device="meta")
    args = (torch.empty((4096, 1024), dtype=torch.float8_e4m3fn, **meta),
            torch.empty((7168, 1024), dtype=torch.float8_e4m3fn, **meta).T, torch.empty((), **meta), torch.empty((), **meta))
    monkeypatch.setattr(fp8, "CLUSTER_DEFAULT", "auto")
    seen = module.one_cta(lambda x, y: (fp8.CLUSTER_DEFAULT, gemm_ladder.explain_scaled_mm(*args)["cluster"]))
    assert seen(None, None) == ("1", 1) and fp8.CLUSTER_DEFAULT == "auto"
    assert module.split_of(*args)["cluster"] == 2
    assert "gl_bench_fp8_cluster" not in sys.modules
