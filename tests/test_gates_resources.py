"""Resource gate: ptxas-log and SASS parsing on real compiler output, the gate's rules, the cache."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from conftest import PLAIN, SPILL, SPILL_FLAGS, WGMMA, needs_nvcc

from gemm_ladder.contract import Domain
from gemm_ladder.gates.resources import (
    PtxasResources,
    SassCensus,
    check_cubin_resources,
    check_level_resources,
    judge_resources,
    parse_ptxas_log,
    sass_census,
)
from gemm_ladder.gpu import MAX_SMEM_PER_BLOCK_OPTIN
from gemm_ladder.levels.base import LaunchGeometry, Level
from gemm_ladder.runtime import compiler


def test_parse_ptxas_log_literal():
    log = (
        "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
        "ptxas info    : Function properties for k\n"
        "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 1 barriers, 2048 bytes smem, 16 bytes cmem[0]\n"
        "ptxas info    : Compiling entry function 'j' for 'sm_90a'\n"
        "ptxas info    : Function properties for j\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 0 barriers\n"
    )
    got = parse_ptxas_log(log)
    assert got["k"] == PtxasResources("k", 168, 1, 2048, 16, 8, 4, 12)
    assert got["j"] == PtxasResources("j", 40, 0, 0, 0, 0, 0, 0)


def test_sass_census_literal():
    sass = (
        "\t\tFunction : k\n"
        "        /*0000*/                   LDC R1, c[0x0][0x28] ;\n"
        "        /*0010*/              @!P0 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR4], RZ ;\n"
        "        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;\n"
        "        /*0030*/               @P1 SYNCS.PHASECHK.TRANS64 P0, [UR4], R2 ;\n"
        "        /*0040*/                   EXIT ;\n"
        "        /*0050*/                   NOP;\n"
    )
    c = sass_census(sass)["k"]
    assert c.count("SYNCS") == 2 and c.count("HGMMA") == 1 and c.count("NOP") == 1
    assert c.total == 5  # padding NOPs excluded


@needs_nvcc
def test_real_ptxas_log_and_sass(use_cache):
    k = compiler.compile_kernel(PLAIN + WGMMA, "plain")
    info = parse_ptxas_log(k.ptxas_log)
    assert info["plain"].smem_static == 1024 and info["plain"].barriers == 1
    assert info["plain"].registers > 0 and info["tiny_wgmma"].registers > 0
    census = sass_census(compiler.disassemble(k.cubin))
    assert census["tiny_wgmma"].count("HGMMA") >= 1
    assert census["plain"].count("HGMMA") == 0 and census["plain"].count("BAR") >= 1
    assert census["plain"].total > 5


@needs_nvcc
def test_gate_passes_wgmma_and_fails_plain_as_a_level(use_cache):
    k = compiler.compile_kernel(PLAIN + WGMMA, "tiny_wgmma")
    ok = check_cubin_resources(k.cubin, k.ptxas_log, "tiny_wgmma", level=1, dtype="bf16", threads=128)
    assert ok.passed, ok.messages
    assert ok.sass["HGMMA"] >= 1
    assert ok.ctas_per_sm is None or ok.ctas_per_sm >= 1  # None: no GPU to ask
    plain = check_cubin_resources(k.cubin, k.ptxas_log, "plain", level=1, dtype="bf16")
    assert not plain.passed and any("HGMMA" in m for m in plain.messages)
    # A user kernel (level None) is not held to the ladder's instruction rules.
    assert check_cubin_resources(k.cubin, k.ptxas_log, "plain", level=None, dtype="bf16").passed
    # From level 4 on, TMA loads are required.
    l4 = check_cubin_resources(k.cubin, k.ptxas_log, "tiny_wgmma", level=4, dtype="bf16")
    assert not l4.passed and any("UTMALDG" in m for m in l4.messages)


@needs_nvcc
def test_gate_fails_on_spills(use_cache):
    k = compiler.compile_kernel(SPILL, "spill", extra_flags=SPILL_FLAGS)
    r = check_cubin_resources(k.cubin, k.ptxas_log, "spill", level=None, dtype="bf16")
    assert not r.passed
    assert r.spill_stores > 0 and r.sass["STL"] > 0 and r.sass["LDL"] > 0
    assert any("spill" in m for m in r.messages)


def test_gate_fails_on_too_much_shared_memory():
    ptxas = PtxasResources("k", registers=128, smem_static=1024)
    census = SassCensus("k", {"HGMMA": 4, "UTMALDG": 2}, 100)
    fits = judge_resources(ptxas, census, level=5, dtype="bf16", dynamic_smem=MAX_SMEM_PER_BLOCK_OPTIN - 1024)
    assert fits.passed, fits.messages
    over = judge_resources(ptxas, census, level=5, dtype="bf16", dynamic_smem=MAX_SMEM_PER_BLOCK_OPTIN - 1023)
    assert not over.passed and "shared memory" in over.messages[0]
    assert not judge_resources(ptxas, census, level=5, dtype="bf16", occupancy=0).passed


@dataclass(frozen=True, eq=False)
class FakeWgmmaLevel(Level):
    """A level whose 'kernel' is the tiny wgmma above: exercises Level.build -> resource gate."""

    def translation_unit(self, dtype: str) -> str:
        return WGMMA

    def defines(self, dtype):
        return {}

    def geometry(self, dtype):
        return LaunchGeometry(threads=128, dynamic_smem=0)

    def launch(self, a, b, c):  # pragma: no cover - never launched on CPU
        raise NotImplementedError


@needs_nvcc
def test_check_level_resources_through_level_build(use_cache):
    level = FakeWgmmaLevel(1, "fake", "one wgmma", "none.cu", Domain(), kernel_name="tiny_wgmma")
    report, sass = check_level_resources(level, "bf16")
    assert report.passed and report.level == 1 and report.threads == 128
    assert "HGMMA" in sass
    assert report.to_json()["sass"]["HGMMA"] >= 1


# --- the nvcc cache the gate builds through --------------------------------------------------


@needs_nvcc
def test_compile_key_changes_with_extra_flags(use_cache):
    a = compiler.compile_kernel(SPILL, "spill")
    b = compiler.compile_kernel(SPILL, "spill", extra_flags=SPILL_FLAGS)
    assert a.key != b.key
    assert parse_ptxas_log(a.ptxas_log)["spill"].registers > parse_ptxas_log(b.ptxas_log)["spill"].registers


@needs_nvcc
def test_bare_cubin_uses_cuobjdump_resource_usage(use_cache):
    k = compiler.compile_kernel(SPILL, "spill", extra_flags=SPILL_FLAGS)
    from_log = check_cubin_resources(k.cubin, k.ptxas_log, "spill", level=None, dtype="bf16")
    bare = check_cubin_resources(k.cubin, None, "spill", level=None, dtype="bf16")
    assert bare.registers == from_log.registers and bare.stack_bytes == from_log.stack_bytes > 0
    assert not bare.passed
    k2 = compiler.compile_kernel(PLAIN, "plain")
    # cuobjdump's SHARED counts the 1 KiB the system reserves per block on top of the kernel's 1024.
    assert check_cubin_resources(k2.cubin, None, "plain", level=None, dtype="bf16").smem_static in (1024, 2048)
