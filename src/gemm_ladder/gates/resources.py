"""The resource gate: what a kernel costs in registers, shared memory and local memory, and which
instructions it really contains. Needs nvcc and cuobjdump, not a GPU (occupancy aside).

Sources read:
- ptxas's ``-v`` report (nvcc ``-Xptxas -v``, kept by :mod:`gemm_ladder.runtime.compiler`), per
  entry function, lines such as::

      ptxas info    : Function properties for gemm_kernel
          0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
      ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 16 bytes cmem[0]

- ``cuobjdump --dump-sass``: the machine code, whose opcodes prove what the source only intends
  (a kernel that meant to use wgmma but compiled to HMMA, or a local array that became LDL/STL).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gemm_ladder.gpu import MAX_SMEM_PER_BLOCK_OPTIN, ctas_per_sm

#: Opcode families reported in the census (the base opcode, before the first '.').
#: HGMMA: wgmma on the tensor cores; UTMALDG / UTMASTG / UTMACCTL: TMA load, store, descriptor
#: cache control; SYNCS: mbarrier operations (SYNCS.ARRIVE..., SYNCS.PHASECHK...); LDL / STL: local
#: memory (spills or stack arrays); HMMA: the pre-Hopper mma.sync path; BAR: CTA barriers.
CENSUS_OPCODES = ("HGMMA", "UTMALDG", "UTMASTG", "UTMACCTL", "SYNCS", "LDL", "STL", "HMMA", "BAR")

#: First level that must load through TMA (level 4 introduces it: README.md's ladder table, kernels/levels/level4_tma.cu).
FIRST_TMA_LEVEL = 4


@dataclass
class PtxasResources:
    """One entry function's line of ptxas -v: registers per thread and bytes of each memory."""

    function: str
    registers: int = 0
    barriers: int = 0
    smem_static: int = 0  # bytes of statically declared __shared__
    cmem0: int = 0  # bytes of constant bank 0 (kernel parameters)
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0


_COMPILING = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_FIELDS = {
    "barriers": re.compile(r"used (\d+) barriers"),
    "smem_static": re.compile(r"(\d+) bytes smem"),
    "cmem0": re.compile(r"(\d+) bytes cmem\[0\]"),
}


def parse_ptxas_log(log: str) -> dict[str, PtxasResources]:
    """Parse ptxas -v output into {entry function name: PtxasResources}.

    A function is named by the latest "Compiling entry function" or "Function properties for"
    line; the stack/spill line and the "Used N registers" line that follow belong to it. Device
    functions that are not entry points also get a "Function properties" block; they appear in
    the result under their (mangled) names and are harmless.
    """
    out: dict[str, PtxasResources] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _COMPILING.search(line) or _PROPS.search(line):
            current = m.group(1)
            out.setdefault(current, PtxasResources(current))
            continue
        if current is None:
            continue
        entry = out[current]
        if m := _FRAME.search(line):
            entry.stack_bytes, entry.spill_stores, entry.spill_loads = (int(g) for g in m.groups())
        if m := _USED.search(line):
            entry.registers = int(m.group(1))
            for name, pattern in _FIELDS.items():
                if f := pattern.search(line):
                    setattr(entry, name, int(f.group(1)))
    return out


_RES_FUNCTION = re.compile(r"^\s*Function (\S+):\s*$")
_RES_FIELD = re.compile(r"(REG|STACK|SHARED|LOCAL|CONSTANT\[0\]):(\d+)")


def parse_resource_usage(text: str) -> dict[str, PtxasResources]:
    """Parse ``cuobjdump --dump-resource-usage`` (for a cubin without its ptxas log).

    Lines: ``Function k:`` then ``REG:30 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:552 ...``. Spill byte
    counts are not in this report; STACK and the SASS's LDL/STL still reveal local memory. SHARED
    may exceed ptxas's ``smem`` by 1 KiB (seen with nvcc 13.0 on sm_90a: 2048 for a kernel ptxas
    reports at 1024 bytes), apparently the shared memory the system reserves per block; it is
    reported as is, which errs on the strict side for the shared-memory limit.
    """
    out: dict[str, PtxasResources] = {}
    current: PtxasResources | None = None
    for line in text.splitlines():
        if m := _RES_FUNCTION.match(line):
            current = out.setdefault(m.group(1), PtxasResources(m.group(1)))
            continue
        if current is not None and (fields := dict(_RES_FIELD.findall(line))):
            current.registers = int(fields.get("REG", 0))
            current.stack_bytes = int(fields.get("STACK", 0))
            current.smem_static = int(fields.get("SHARED", 0))
            current.cmem0 = int(fields.get("CONSTANT[0]", 0))
    return out


def resource_usage(cubin: Path | str) -> str:
    """``cuobjdump --dump-resource-usage`` text of a cubin."""
    import subprocess

    from gemm_ladder.runtime.compiler import CompileError, cuobjdump_path

    proc = subprocess.run([cuobjdump_path(), "--dump-resource-usage", str(cubin)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"cuobjdump failed on {cubin}", proc.stderr)
    return proc.stdout


_FUNCTION = re.compile(r"^\s*Function : (\S+)")
# An instruction line: /*0070*/  [@P0 |@!PT ]OPCODE[.MODS] operands ;
_INSTR = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)")


@dataclass
class SassCensus:
    """Counts of opcode families in one function's SASS; ``total`` excludes the padding NOPs."""

    function: str
    counts: dict[str, int] = field(default_factory=dict)  # base opcode -> count, every opcode seen
    total: int = 0

    def count(self, opcode: str) -> int:
        return self.counts.get(opcode, 0)

    def summary(self) -> dict[str, int]:
        """The schema's ``sass`` object: the CENSUS_OPCODES counts and ``total``."""
        return {op: self.count(op) for op in CENSUS_OPCODES} | {"total": self.total}


def sass_census(sass: str) -> dict[str, SassCensus]:
    """Count opcodes per function in ``cuobjdump --dump-sass`` text: {function name: SassCensus}.

    The base opcode is the mnemonic before its first '.', so ``SYNCS.ARRIVE.TRANS64.A1T0`` counts as
    SYNCS and ``HGMMA.64x8x16.F32.BF16`` as HGMMA; a predicate guard (``@P0``) is ignored. NOPs
    (alignment padding after the final branch) are not counted in ``total``.
    """
    out: dict[str, SassCensus] = {}
    current: SassCensus | None = None
    counts: Counter[str] = Counter()
    for line in sass.splitlines():
        if m := _FUNCTION.match(line):
            current = out.setdefault(m.group(1), SassCensus(m.group(1)))
            counts = Counter()
            current.counts = counts  # type: ignore[assignment]
            continue
        if current is None:
            continue
        if m := _INSTR.match(line):
            op = m.group(1)
            counts[op] += 1
            if op != "NOP":
                current.total += 1
    for census in out.values():
        census.counts = dict(census.counts)
    return out


@dataclass
class ResourceReport:
    """The resource gate's verdict on one (kernel, dtype): a ``resources`` entry of the result JSON."""

    level: int | None
    dtype: str
    kernel_name: str
    registers: int
    smem_static: int
    smem_dynamic: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    threads: int | None
    cluster: int | None
    ctas_per_sm: int | None
    sass: dict[str, int]
    passed: bool
    messages: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("kernel_name")
        return d


def judge_resources(
    ptxas: PtxasResources,
    census: SassCensus,
    *,
    level: int | None,
    dtype: str,
    threads: int | None = None,
    dynamic_smem: int = 0,
    cluster: int | None = None,
    occupancy: int | None = None,
) -> ResourceReport:
    """Apply the resource rules to parsed ptxas and SASS facts; pure, no files or GPU.

    Fails on: any spill store or load; a stack frame (local memory is ~DRAM latency in the inner
    loop); LDL/STL in the SASS (local memory however it got there); no HGMMA in a ladder level
    (number >= 1: every rung computes with wgmma); no UTMALDG from level 4 on (TMA is level 4's idea
    and every later level keeps it); static + dynamic shared memory over MAX_SMEM_PER_BLOCK_OPTIN;
    occupancy 0 (the kernel cannot launch). ``level`` None is a user kernel: only the
    architecture-independent rules (spills, local memory, shared memory) apply.
    """
    msgs: list[str] = []
    if ptxas.spill_stores or ptxas.spill_loads:
        msgs.append(f"spills: {ptxas.spill_stores} bytes stored, {ptxas.spill_loads} bytes loaded")
    if ptxas.stack_bytes:
        msgs.append(f"stack frame of {ptxas.stack_bytes} bytes (local memory)")
    ldl, stl = census.count("LDL"), census.count("STL")
    if ldl or stl:
        msgs.append(f"local memory in SASS: {ldl} LDL, {stl} STL")
    if level is not None and level >= 1 and not census.count("HGMMA"):
        msgs.append("no HGMMA in SASS: every level must compute with wgmma")
    if level is not None and level >= FIRST_TMA_LEVEL and not census.count("UTMALDG"):
        msgs.append(f"no UTMALDG in SASS: levels >= {FIRST_TMA_LEVEL} must load through TMA")
    smem = ptxas.smem_static + dynamic_smem
    if smem > MAX_SMEM_PER_BLOCK_OPTIN:
        msgs.append(
            f"shared memory {smem} bytes (static {ptxas.smem_static} + dynamic {dynamic_smem}) "
            f"> {MAX_SMEM_PER_BLOCK_OPTIN} per block"
        )
    if occupancy == 0:
        msgs.append("occupancy calculator says 0 CTAs per SM: the kernel cannot launch")
    return ResourceReport(
        level=level, dtype=dtype, kernel_name=ptxas.function, registers=ptxas.registers,
        smem_static=ptxas.smem_static, smem_dynamic=dynamic_smem, stack_bytes=ptxas.stack_bytes,
        spill_stores=ptxas.spill_stores, spill_loads=ptxas.spill_loads, threads=threads,
        cluster=cluster, ctas_per_sm=occupancy, sass=census.summary(), passed=not msgs, messages=msgs,
    )


def _pick(table: dict, kernel_name: str, what: str) -> Any:
    if kernel_name in table:
        return table[kernel_name]
    # C++ (mangled) names: accept a unique entry that contains the requested name.
    hits = [v for k, v in table.items() if kernel_name in k]
    if len(hits) == 1:
        return hits[0]
    raise KeyError(f"{what} has no function {kernel_name!r} (found: {', '.join(table) or 'none'})")


def check_cubin_resources(
    cubin: Path | str,
    ptxas_log: str | None,
    kernel_name: str,
    *,
    level: int | None,
    dtype: str,
    threads: int | None = None,
    dynamic_smem: int = 0,
    cluster: int | None = None,
    sass: str | None = None,
) -> ResourceReport:
    """Resource gate of one compiled kernel: parse ``ptxas_log``, disassemble ``cubin``, judge.

    Args:
        cubin: path of the compiled module.
        ptxas_log: ptxas -v output of that build (CompiledKernel.ptxas_log); None for a bare cubin,
            whose registers, stack and static shared memory then come from cuobjdump's
            resource-usage report (spill counts are then 0: LDL/STL in the SASS still fail it).
        kernel_name: the entry function to judge.
        level: ladder level number, or None for a user kernel.
        threads, dynamic_smem, cluster: launch geometry (LaunchGeometry); ``threads`` is needed for
            the occupancy query, which runs only with a GPU.
        sass: SASS text if already disassembled; else cuobjdump runs here.

    Raises:
        CompilerNotFoundError: no cuobjdump. KeyError: ``kernel_name`` not in the log or the SASS.
    """
    from gemm_ladder.runtime.compiler import disassemble

    sass_text = sass if sass is not None else disassemble(Path(cubin))
    if ptxas_log is None:
        ptxas = _pick(parse_resource_usage(resource_usage(cubin)), kernel_name, "resource usage")
    else:
        ptxas = _pick(parse_ptxas_log(ptxas_log), kernel_name, "ptxas log")
    census = _pick(sass_census(sass_text), kernel_name, "SASS")
    occ = ctas_per_sm(str(cubin), ptxas.function, threads, dynamic_smem) if threads else None
    return judge_resources(
        ptxas, census, level=level, dtype=dtype, threads=threads, dynamic_smem=dynamic_smem,
        cluster=cluster, occupancy=occ,
    )


def check_level_resources(level: Any, dtype: str, arch: str = "sm_90a") -> tuple[ResourceReport, str]:
    """Build ``level`` for ``dtype`` and run the resource gate; returns (report, SASS text).

    ``level`` follows :class:`gemm_ladder.levels.base.Level` (``build(dtype, arch)``, ``geometry(dtype)``
    and ``number``); a library kernel without a ladder ``number`` is judged by the level-free rules
    (``level=None``). Raises CompileError if the compiler rejects the kernel.
    """
    from gemm_ladder.runtime.compiler import disassemble

    kernel = level.build(dtype, arch)
    geo = level.geometry(dtype)
    sass = disassemble(kernel.cubin)
    report = check_cubin_resources(
        kernel.cubin, kernel.ptxas_log, kernel.kernel_name, level=getattr(level, "number", None), dtype=dtype,
        threads=geo.threads, dynamic_smem=geo.dynamic_smem, cluster=geo.cluster, sass=sass,
    )
    return report, sass
