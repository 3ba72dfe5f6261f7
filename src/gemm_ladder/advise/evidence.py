"""Evidence about a kernel, each fact labelled with how it is known and where it comes from.

Labels (the method's "evidence or assumptions": what comes from data, what is a hypothesis):

* ``measured``: read off an artefact: the SASS, ptxas's report, the cubin's ELF attributes, the build's
  ``-D`` flags, a results JSON, a timing taken now.
* ``inferred``: derived from measured facts by a stated reading (a loop around the HGMMA is a K loop;
  two mbarriers per stage).
* ``assumed``: taken without evidence (the climb's GPU is yours; your kernel runs like the ladder's level
  at the same rung).
* ``not run``: a measurement that did not happen, with the reason (no GPU, no nvcc).

This module turns the SASS structure (:mod:`gemm_ladder.advise.sass_structure`), the resource gate's
report (:mod:`gemm_ladder.gates.resources`), the ELF attributes, the build and the launch into facts.
It builds nothing and runs nothing itself: :mod:`gemm_ladder.advise.targets` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gemm_ladder.advise.sass_structure import SassStructure, elf_ints

LABELS = ("measured", "inferred", "assumed", "not run")


@dataclass(frozen=True)
class Fact:
    """One item of evidence: a machine-readable ``key`` and ``value``, a sentence, its label and source."""

    key: str
    value: Any
    statement: str
    label: str
    source: str

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"label {self.label!r}: use one of {LABELS}")

    def to_json(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"key": self.key, "value": value, "statement": self.statement, "label": self.label,
                "source": self.source}


@dataclass
class Evidence:
    """What is known about one target (a level, a user's callable, a cubin, a .cu file, a results JSON)."""

    subject: str
    kind: str  # "level", "callable", "cubin", "cu", "results"
    dtype: str = "bf16"
    arch: str = "sm_90a"
    facts: dict[str, Fact] = field(default_factory=dict)

    def add(self, key: str, value: Any, statement: str, label: str, source: str) -> Fact:
        fact = Fact(key, value, statement, label, source)
        self.facts[key] = fact
        return fact

    def get(self, key: str) -> Fact | None:
        return self.facts.get(key)

    def value(self, key: str, default: Any = None) -> Any:
        fact = self.facts.get(key)
        return default if fact is None else fact.value

    def has(self, key: str) -> bool:
        return key in self.facts

    def to_json(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in self.facts.values()]


def add_sass_facts(ev: Evidence, s: SassStructure, source: str) -> None:
    """The SASS facts of one function ``s``; ``source`` names the cubin and the tool."""
    hgmma, hmma = s.count("HGMMA"), s.count("HMMA")
    ev.add("sass.available", True, f"SASS of {s.function}: {len(s.instructions)} instructions", "measured", source)
    ev.add("sass.hgmma", hgmma, f"{hgmma} HGMMA (wgmma)" + (f", {hmma} HMMA (mma.sync)" if hmma else ""), "measured", source)
    ev.add("sass.hmma", hmma, f"{hmma} HMMA (mma.sync, the pre-Hopper tensor-core path)", "measured", source)
    loop = s.mma_in_loop
    ev.add("sass.mma_in_loop", loop,
           "the MMA sits inside a loop (a backward branch before the last EXIT): a K loop" if loop else
           "no loop around the MMA: one K tile", "inferred", source + ": control flow")
    ctaid = sorted(r for r in s.special_registers if r.startswith("SR_CTAID"))
    ev.add("sass.reads_ctaid", bool(ctaid),
           f"reads {', '.join(ctaid)}: each CTA finds its own work from its index" if ctaid else
           "reads no SR_CTAID: every CTA does the same work (one CTA)", "measured", source)
    ldg, stg = s.count("UTMALDG"), s.count("UTMASTG")
    ev.add("sass.utmaldg", ldg, f"{ldg} UTMALDG (TMA loads)", "measured", source)
    ev.add("sass.utmastg", stg, f"{stg} UTMASTG (TMA stores)", "measured", source)
    inits = s.count("SYNCS", "EXCH")
    ev.add("sass.mbarrier_inits", inits, f"{inits} mbarrier.init (SYNCS.EXCH.64), "
           f"{s.count('SYNCS', 'PHASECHK')} waits (SYNCS.PHASECHK), {s.count('SYNCS', 'ARRIVE')} arrives",
           "measured", source)
    tile_loop = s.store_in_mma_loop
    ev.add("sass.tile_loop", tile_loop,
           "one loop holds both the MMA and the output store: the CTA loops over output tiles (persistent)"
           if tile_loop else "the output store is outside every MMA loop: one output tile per CTA",
           "inferred", source + ": control flow")
    down, up = s.count("USETMAXREG", "DEALLOC"), s.count("USETMAXREG", "TRY_ALLOC")
    ev.add("sass.setmaxnreg", (down, up),
           f"setmaxnreg: {down} USETMAXREG.DEALLOC (a role gives registers back), {up} USETMAXREG.TRY_ALLOC "
           "(a role takes them)" + (": a producer/consumer role split" if down and up else ""), "measured", source)
    mc = s.count("UTMALDG", "MULTICAST")
    ev.add("sass.multicast_loads", mc, f"{mc} multicast TMA loads (UTMALDG...MULTICAST)", "measured", source)
    bar, red = s.count("UCGABAR_ARV"), s.count("SYNCS", "ARRIVE", "RED")
    ev.add("sass.cluster_sync", (bar, red),
           f"{bar} cluster barrier arrives (UCGABAR_ARV), {red} arrives on a peer CTA's mbarrier (SYNCS...RED)",
           "measured", source)


def add_elf_facts(ev: Evidence, attrs: dict[str, str], source: str) -> None:
    """Launch-relevant ELF attributes ptxas wrote for the function (absent ones are not reported)."""
    if "EIATTR_MAX_THREADS" in attrs:
        t = elf_ints(attrs["EIATTR_MAX_THREADS"])
        ev.add("elf.max_threads", t[0] if t else None, f"at most {t[0] if t else '?'} threads per CTA "
               "(__launch_bounds__, EIATTR_MAX_THREADS)", "measured", source)
    if "EIATTR_CTA_PER_CLUSTER" in attrs:
        dims = elf_ints(attrs["EIATTR_CTA_PER_CLUSTER"])
        ev.add("elf.cluster_dims", dims, f"compile-time cluster dims {dims} (__cluster_dims__, EIATTR_CTA_PER_CLUSTER)",
               "measured", source)
    if "EIATTR_NUM_MBARRIERS" in attrs:
        n = elf_ints(attrs["EIATTR_NUM_MBARRIERS"])
        ev.add("elf.mbarriers", n[0] if n else None, f"{n[0] if n else '?'} mbarriers (EIATTR_NUM_MBARRIERS)",
               "measured", source)
    if "EIATTR_REG_RECONFIG" in attrs:
        ev.add("elf.reg_reconfig", True, "the kernel reconfigures registers per warpgroup (EIATTR_REG_RECONFIG: setmaxnreg)",
               "measured", source)


def add_resource_facts(ev: Evidence, report: Any, source: str) -> None:
    """The resource gate's report (:class:`gemm_ladder.gates.resources.ResourceReport`) as facts."""
    ev.add("ptxas.registers", report.registers, f"{report.registers} registers per thread", "measured", source)
    smem = report.smem_static + report.smem_dynamic
    ev.add("ptxas.smem", smem, f"{smem} bytes of shared memory per CTA (static {report.smem_static} + dynamic "
           f"{report.smem_dynamic})", "measured", source)
    spills = report.spill_stores + report.spill_loads
    ev.add("ptxas.spills", spills, f"{report.spill_stores} bytes spilled, {report.spill_loads} reloaded, "
           f"{report.stack_bytes} bytes of stack", "measured", source)
    ev.add("gate.resources", report.passed, "resource gate " + ("passed" if report.passed else
           "failed: " + "; ".join(report.messages)), "measured", "gemm_ladder.gates.resources.judge_resources")
    if report.ctas_per_sm is not None:
        ev.add("launch.ctas_per_sm", report.ctas_per_sm, f"{report.ctas_per_sm} CTA(s) per SM (occupancy API)",
               "measured", "cuOccupancyMaxActiveBlocksPerMultiprocessor on this GPU")


def build_defines(flags: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The ``-DNAME=VALUE`` flags of a build as {NAME: VALUE}."""
    out = {}
    for f in flags:
        if f.startswith("-D"):
            name, _, value = f[2:].partition("=")
            out[name] = value
    return out


def add_build_facts(ev: Evidence, flags: tuple[str, ...] | list[str], geometry: Any, source: str) -> None:
    """The configuration a build compiled in (the designer's ``GL_*`` defines) and its launch geometry."""
    d = build_defines(flags)
    if "GL_BM" in d:
        ev.add("build.tile", (int(d["GL_BM"]), int(d["GL_BN"]), int(d["GL_BK"])),
               f"tile {d['GL_BM']}x{d['GL_BN']}x{d['GL_BK']} (GL_BM, GL_BN, GL_BK)", "measured", source)
    for key, name, what in (("build.stages", "GL_STAGES", "stage(s) in the ring"),
                            ("build.cluster", "GL_CLUSTER", "CTA(s) per cluster"),
                            ("build.consumers", "GL_CONSUMERS", "consumer warpgroup(s) per CTA")):
        if name in d:
            ev.add(key, int(d[name]), f"{d[name]} {what} ({name})", "measured", source)
    if "GL_PRODUCER_WG" in d:
        pw = bool(int(d["GL_PRODUCER_WG"]))
        ev.add("build.producer_warpgroup", pw, ("a separate producer warpgroup" if pw else
               "no producer warpgroup: a consumer thread issues the loads") + " (GL_PRODUCER_WG)", "measured", source)
    if geometry is not None:
        ev.add("build.threads", geometry.threads, f"{geometry.threads} threads per CTA, {geometry.dynamic_smem} bytes "
               f"of dynamic shared memory, cluster {geometry.cluster} (the launch geometry)", "measured", source)
