"""The layouts library kernel built and audited without a GPU.

Resource gate: every build (4 operand layouts x BN 64/128/256 x bf16/fp16) compiles with nvcc, passes
gemm_ladder.gates.resources (no spills, no stack or local memory, HGMMA and TMA loads present), keeps
level 9's register split (setmaxnreg: USETMAXREG in SASS), and its HGMMA carry exactly the transpose
forms of its layout (``.tnspA`` for an MN-major A, ``.tnspB`` for an MN-major B). The builds run in
parallel threads (nvcc processes); on the 2-core CI machine they take about a minute in all.

Audit: the kernel's ring is level 9's (the same source), so the auditor's level-9 protocol, given this
kernel's stage count, panels per tile and panel buffers (read from its plan's defines), proves it free
of deadlock, early reuse and phase errors over a bound that wraps the ring at least once.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import needs_nvcc

from gemm_ladder.audit import audit, protocol_for_level
from gemm_ladder.gates.resources import check_level_resources
from gemm_ladder.library.gemm import MAJORS, TILE_N, library_gemm

CONFIGS = [(a, b, bn) for a in MAJORS for b in MAJORS for bn in TILE_N]
#: wgmma in SASS: HGMMA.64xNx16.F32.BF16 for bf16 inputs, HGMMA.64xNx16.F32 for fp16 (nvcc 13.0).
_HGMMA = re.compile(r"HGMMA\.(\d+x\d+x16)\.F32((?:\.BF16)?) [^;]*gdesc\[\w+\]((?:\.tnsp[AB])*)")


@pytest.fixture(scope="module")
def reports(nvcc_cache):
    """{(a_major, b_major, bn, dtype): (ResourceReport, SASS)} for every build."""
    os.environ["GEMM_LADDER_CACHE"] = str(nvcc_cache)  # the session's private cache, as use_cache sets it
    try:
        jobs = [(a, b, bn, dt) for a, b, bn in CONFIGS for dt in ("bf16", "fp16")]
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            done = pool.map(lambda j: check_level_resources(library_gemm(*j[:3]), j[3]), jobs)
            return dict(zip(jobs, done))
    finally:
        del os.environ["GEMM_LADDER_CACHE"]


@needs_nvcc
@pytest.mark.parametrize("a_major,b_major,bn", CONFIGS, ids=lambda v: str(v))
def test_every_build_passes_the_resource_gate(reports, a_major, b_major, bn):
    for dtype, mnemonic in (("bf16", ".BF16"), ("fp16", "")):
        report, sass = reports[a_major, b_major, bn, dtype]
        assert report.passed, report.messages
        assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0)
        assert report.sass["LDL"] == report.sass["STL"] == 0 and report.sass["UTMALDG"] > 0
        assert "USETMAXREG" in sass, "level 9's register split (setmaxnreg) is gone"
        forms = set(_HGMMA.findall(sass))
        want = "".join(t for t, mn in ((".tnspA", a_major), (".tnspB", b_major)) if mn == "mn")
        assert forms == {(f"64x{bn}x16", mnemonic, want)}, forms


@needs_nvcc
def test_mn_major_loads_issue_one_tma_per_64_elements(reports):
    """An MN-major operand's tile is loaded as 64-element boxes: more UTMALDG than the K-major build."""
    kk = reports["k", "k", 256, "bf16"][0].sass["UTMALDG"]
    assert reports["mn", "k", 256, "bf16"][0].sass["UTMALDG"] > kk
    assert reports["k", "mn", 256, "bf16"][0].sass["UTMALDG"] > kk


@needs_nvcc
def test_bn64_mn_major_b_is_one_k_split_box_per_rank(reports):
    """At BN 64 an MN-major B is loaded as one box of 32 K lines per CTA rank (stage_ring.cuh's K-split
    branch), as many TMA loads as a K-major B's 32-row slice: the K-split build issues no more loads
    than the K-major one, where MN-major A adds its per-64-row boxes."""
    for a in ("k", "mn"):
        assert reports[a, "mn", 64, "bf16"][0].sass["UTMALDG"] == reports[a, "k", 64, "bf16"][0].sass["UTMALDG"]
    assert reports["mn", "k", 64, "bf16"][0].sass["UTMALDG"] > reports["k", "k", 64, "bf16"][0].sass["UTMALDG"]


@needs_nvcc
def test_the_native_layout_is_level_9s_machine_code(use_cache):
    """A and B K-major at BN 256 is level 9's kernel: the same source, the same plan but for two
    constants it does not read, so the same SASS (its measurements carry over)."""
    import sys
    from pathlib import Path

    from gemm_ladder.levels import LEVELS

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    from sass_fingerprint import fingerprint

    for dtype in ("bf16", "fp16"):
        assert fingerprint(str(library_gemm("k", "k", 256).build(dtype).cubin)) == \
            fingerprint(str(LEVELS[9].build(dtype).cubin))


@pytest.mark.parametrize("bn", TILE_N)
def test_the_kernels_ring_audits_clean(bn):
    g = library_gemm("mn", "mn", bn)
    d = g.defines("bf16")
    stages, panels, ring = d["GL_STAGES"], d["GL_C_PANELS"], d["GL_C_RING"]
    k_iters = stages // 2 + 1  # two tiles of it wrap the ring: every stage is reused in the next round
    p = protocol_for_level(9, k_iters=k_iters, tiles=2, stages=stages, cluster=d["GL_CLUSTER"],
                           consumers=d["GL_CONSUMERS"], staging_buffers=ring, panels_per_tile=panels,
                           deferred_panels=panels - min(ring, panels), bn=bn)
    assert 2 * k_iters > stages
    # one buffer per consumer at BN 64 (one panel per tile) is named D0, D1 (audit/ring.py)
    assert {buf.name for buf in p.buffers if buf.kind == "staging"} == \
        {f"D{c}" if ring == 1 else f"D{c}.{r}" for c in range(2) for r in range(ring)}
    assert (ring, panels, stages) == {256: (2, 4, 4), 128: (2, 2, 6), 64: (1, 1, 8)}[bn]
    result = audit(p, max_states=5_000_000)
    assert result.ok, result.render()
