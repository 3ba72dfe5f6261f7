"""The small-M kernel's timeline build (GL_TIMELINE) and bench/small_m_timeline.py's reading of it, on CPU.

The build: the same plan and ring as the shipped one, compiles clean (no spill, no local memory), reads
%globaltimer and clock64 where the shipped build reads neither (its stamps preprocess to nothing).
The script: its slot table is the kernel's enum, its readings of a made-up launch are the ones worked
out by hand, and its variants are the plan options the docstring names.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_nvcc

from gemm_ladder.library.small_m import SOURCE, SmallMGemm
from gemm_ladder.runtime.compiler import KERNEL_ROOT, disassemble, nvcc_path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import small_m_timeline as tl  # noqa: E402


def test_the_slot_table_is_the_kernels_enum():
    slots = tl.timeline_slots()
    assert slots["Entry"] == 0 and len(slots) == tl.TIMELINE_SLOTS == 16
    assert sorted(slots.values()) == list(range(16))
    src = (KERNEL_ROOT / SOURCE).read_text()
    for name in slots:  # every slot is stamped, set or counted somewhere in the kernel
        assert re.search(rf"GL_TIMELINE_(STAMP|VALUE|COUNT)\([^;]*\bk{name}\b", src), f"k{name} is never written"


def _launch(entries, first_full, loop_end, exits, hand_in=None, reduce_end=None):
    """ns rows for CTAs with these stamps (the others at fixed offsets from entry), clk at 2 cycles/ns."""
    s = tl.timeline_slots()
    ns, clk = [], []
    for i, e in enumerate(entries):
        r = [0] * 16
        r[s["Entry"]], r[s["Setup"]], r[s["FirstLoad"]], r[s["Ready"]] = e, e + 500, e + 600, e + 550
        r[s["FirstFull"]], r[s["LoopEnd"]], r[s["LastLoad"]] = first_full[i], loop_end[i], loop_end[i] - 100
        r[s["Exit0"]], r[s["Exit1"]] = exits[i], exits[i] - 32
        r[s["SmId"]], r[s["Segments"]] = i // 2, 1
        if hand_in and hand_in[i]:
            r[s["HandIn"]], r[s["HandIns"]] = hand_in[i], 1
        if reduce_end and reduce_end[i]:
            r[s["ReduceEnd"]], r[s["Reductions"]] = reduce_end[i], 1
        ns.append(r)
        clk.append([2 * v if j not in (s["SmId"], s["Segments"], s["HandIns"], s["Reductions"]) else v
                    for j, v in enumerate(r)])
    return ns, clk


def test_the_readings_of_a_made_up_launch():
    # CTA 0: enters at 1000 ns, first stage at 3000, K done at 13000, hands in at 14000, exits at 14500.
    # CTA 1: enters at 1200, first stage at 3500, K done at 15000, reduces until 16000, exits at 17000.
    ns, clk = _launch(entries=[1000, 1200], first_full=[3000, 3500], loop_end=[13000, 15000], exits=[14500, 17000],
                      hand_in=[14000, 15400], reduce_end=[0, 16000])
    r = tl.analyse(ns, clk, slots=tl.timeline_slots(), iters=[10, 12], stage_bytes=1000, weight_bytes=22_000,
                   event_us=20.0)
    assert r["ctas"] == 2 and r["sms"] == 1 and r["ctas_per_sm_max"] == 2
    assert r["span_us"] == pytest.approx(16.0) and r["outside_us"] == pytest.approx(4.0)
    assert r["entry_skew_us"] == pytest.approx(0.2)
    assert r["setup_us"]["median"] == pytest.approx(0.5) and r["first_load_latency_us"]["max"] == pytest.approx(1.7)
    assert r["stream_us"]["min"] == pytest.approx(10.0) and r["stream_us"]["max"] == pytest.approx(11.5)
    assert r["stream_window_us"] == pytest.approx(12.0)  # 3000 .. 15000
    assert r["weight_gbs_window"] == pytest.approx(22_000 / 12e-6 / 1e9)
    assert r["stage_gbs_window"] == pytest.approx(22 * 1000 / 12e-6 / 1e9)
    assert r["ctas_handing_in"] == 2 and r["ctas_reducing"] == 1
    assert r["hand_in_us"]["min"] == pytest.approx(0.4) and r["reduce_us"]["max"] == pytest.approx(0.6)
    assert r["exit_gap_us"]["max"] == pytest.approx(2.5) and r["exit_gap_us"]["min"] == 0
    cp = r["critical"]
    assert cp["cta"] == 1 and cp["iters"] == 12
    assert cp["entry_offset_us"] + cp["to_first_full_us"] + cp["stream_us"] + cp["after_loop_us"] == \
        pytest.approx(r["span_us"])
    assert r["clock_ghz"]["median"] == pytest.approx(2.0)


def test_the_variants_are_the_plan_options_the_docstring_names():
    v = tl.variants(1, 4096, 4096, "bf16")
    assert set(v) == {"shipped", "half ring S=6", "2 CTAs/SM S=6", "splits=2", "splits=8"}
    shipped, half, two = v["shipped"][0], v["half ring S=6"][0], v["2 CTAs/SM S=6"][0]
    assert (shipped.bn, shipped.stages, half.bn, half.stages) == (8, None, 8, 6)
    assert (half.ctas_per_sm, two.ctas_per_sm, two.bn, two.stages) == (1, 2, 8, None)
    assert shipped.ring_stages("bf16") == 13 and v["shipped"][2] and v["half ring S=6"][2] and v["2 CTAs/SM S=6"][2]
    assert tl._timeline_of(two).ctas_per_sm == 2 and tl._timeline_of(two).timeline
    v = tl.variants(256, 4096, 4096, "bf16")
    assert not any(name.startswith("2 CTAs") for name in v)  # BN = 256 needs the whole register file
    assert v["BN=128"][0].bn == 128 and v["BN=128"][2]  # two M tiles of 128, traced
    assert {v[f"general BN={b}"][1] for b in (128, 256)} == {"all"}
    assert v["half ring S=2"][0].ring_stages("bf16") == 2
    v = tl.variants(16, 28672, 8192, "bf16")
    assert "splits=8" not in v and v["BN=8"][0].bn == 8 and not v["BN=8"][2]
    assert not any(name.startswith("general") for name in v)


@needs_nvcc
@pytest.mark.parametrize("bn,stages,b_major", [(8, None, "k"), (256, None, "k"), (16, 6, "k"), (64, None, "mn")])
def test_the_timeline_build_compiles_clean_with_the_shipped_plan(bn, stages, b_major, use_cache):
    from gemm_ladder.gates.resources import check_cubin_resources

    shipped, traced = SmallMGemm(bn, stages=stages), SmallMGemm(bn, stages=stages, timeline=True)
    assert traced.defines("bf16", b_major=b_major) == shipped.defines("bf16", b_major=b_major)
    kernel = traced.build("bf16", b_major=b_major)
    geo = traced.geometry("bf16")
    report = check_cubin_resources(kernel.cubin, kernel.ptxas_log, kernel.kernel_name, level=None, dtype="bf16",
                                   threads=geo.threads, dynamic_smem=geo.dynamic_smem, cluster=1)
    assert report.passed, report.messages
    assert report.stack_bytes == report.spill_stores == report.spill_loads == 0
    assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["HGMMA"] > 0
    assert "SR_GLOBALTIMER" in disassemble(kernel.cubin) and "SR_CLOCK" in disassemble(kernel.cubin)
    assert "SR_GLOBALTIMER" not in disassemble(shipped.build("bf16", b_major=b_major).cubin)


@needs_nvcc
def test_the_stamps_preprocess_to_nothing_without_the_switch(tmp_path):
    unit = tmp_path / "unit.cu"
    unit.write_text(f'#include "{SOURCE}"\n')
    defines = SmallMGemm(16).defines("bf16")

    def preprocessed(*extra: str) -> str:
        args = [nvcc_path(), "-E", "-std=c++17", "-arch=sm_90a", f"-I{KERNEL_ROOT}", f"-I{KERNEL_ROOT / 'include'}",
                "-DGL_DTYPE_BF16=1", *(f"-D{k}={v}" for k, v in defines.items()), *extra, str(unit)]
        return subprocess.run(args, check=True, capture_output=True, text=True, timeout=300).stdout

    plain, traced = preprocessed(), preprocessed("-DGL_TIMELINE=1")
    assert "timeline_stamp" not in plain and "gl_timeline_ns" not in plain and "globaltimer" not in plain
    assert traced.count("::gl::timeline_stamp(") >= 10 and "gl_timeline_ns" in traced


def test_the_tables_render_a_run():
    from rich.console import Console

    ns, clk = _launch(entries=[1000, 1200], first_full=[3000, 3500], loop_end=[13000, 15000], exits=[14500, 17000],
                      hand_in=[14000, 15400], reduce_end=[0, 16000])
    reading = tl.analyse(ns, clk, slots=tl.timeline_slots(), iters=[10, 12], stage_bytes=1000, weight_bytes=22_000,
                         event_us=20.0)
    result = {"m": 1, "n": 4096, "k": 4096, "bn": 8, "stages": 13, "ctas": 2, "failures": {"general BN=128": "x"},
              "min_bytes": 4096 * 4096 * 2, "us": {"cuBLAS": 17.5, "shipped": 14.0},
              "us_per_pass": {"cuBLAS": [17.4, 17.6], "shipped": [13.9, 14.1]},
              "vs_cublas": {"cuBLAS": 1.0, "shipped": 1.25},
              "traces": {"shipped": [dict(reading, flush="write"), dict(reading, flush="write")]}}
    console = Console(width=250, record=True)
    for table in tl.tables([result], ["write", "read"], empty_us=4.5, copy_gbs=4250.0, passes=2):
        console.print(table)
    text = console.export_text()
    assert "16.0" in text and "4.0" in text  # span and event - span
    assert "0.2+2.3+11.5+2.0" in text  # the last CTA's span, split
    assert "13.9-14.1" in text and "1.25" in text and "fail" in text and "4.5 us" in text
    assert "56%" in text  # 33.5 MB in 14.0 us against 4250 GB/s
    assert text.count("1x4096x4096") == 3  # a row per table (the read mode has no launch; one case cell per case)


@pytest.mark.parametrize("bn", [8, 16, 32, 64])
def test_two_ctas_per_sm_fit_in_half_the_sm(bn):
    """The ring of a two-CTA build fits twice in the SM's shared memory (each with the system's
    reservation); 96 consumer registers take at most BN = 64; one CTA per SM is every other build."""
    from gemm_ladder.design.problem import arch_info

    arch = arch_info("sm_90a")
    two = SmallMGemm(bn, ctas_per_sm=2)
    smem = two.defines("bf16")["GL_SMEM_BYTES"]
    assert 2 * (smem + arch.smem_reserved_per_block) <= arch.smem_per_sm
    deeper = SmallMGemm(bn, stages=two.ring_stages("bf16") + 1, ctas_per_sm=2).defines("bf16")["GL_SMEM_BYTES"]
    assert 2 * (deeper + arch.smem_reserved_per_block) > arch.smem_per_sm  # the deepest that fits
    assert SmallMGemm(bn).ctas_per_sm == 1 and "GL_CTAS_PER_SM" not in SmallMGemm(bn).defines("bf16")


def test_two_ctas_per_sm_are_refused_where_the_fragment_does_not_fit():
    for bn in (128, 192, 256):
        with pytest.raises(ValueError, match="ctas_per_sm = 2 with BN = .*BN <= 64"):
            SmallMGemm(bn, ctas_per_sm=2)
    with pytest.raises(ValueError, match="ctas_per_sm = 3"):
        SmallMGemm(8, ctas_per_sm=3)


@needs_nvcc
@pytest.mark.parametrize("bn,timeline", [(8, False), (64, False), (16, True)])
def test_two_ctas_per_sm_compile_to_80_registers_without_spills(bn, timeline, use_cache):
    from gemm_ladder.gates.resources import check_cubin_resources, parse_ptxas_log

    g = SmallMGemm(bn, ctas_per_sm=2, timeline=timeline)
    kernel = g.build("bf16")
    geo = g.geometry("bf16")
    usage = parse_ptxas_log(kernel.ptxas_log)["sm90_gemm_small_m"]
    assert usage.registers * geo.threads * 2 <= 65536  # two CTAs' registers fit the SM's file
    report = check_cubin_resources(kernel.cubin, kernel.ptxas_log, kernel.kernel_name, level=None, dtype="bf16",
                                   threads=geo.threads, dynamic_smem=geo.dynamic_smem, cluster=1)
    assert report.passed, report.messages
    assert report.stack_bytes == report.spill_stores == report.spill_loads == 0
    assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["HGMMA"] > 0
    shipped = parse_ptxas_log(SmallMGemm(bn).build("bf16").ptxas_log)["sm90_gemm_small_m"]
    assert shipped.registers * geo.threads * 2 > 65536  # the shipped build: one CTA per SM
