"""What a cubin's machine code says about a kernel's structure, beyond the resource gate's census.

The resource gate (:func:`gemm_ladder.gates.resources.sass_census`) counts base opcodes. Placing a
kernel on the ladder needs more: the modifiers (``UTMALDG.2D.MULTICAST`` is a multicast load,
``USETMAXREG.DEALLOC`` a register hand-back), the special registers read (``SR_CTAID.X``: a grid of
CTAs), the loops (a backward branch), and the attributes ptxas writes into the cubin's ELF
(``EIATTR_MAX_THREADS``, ``EIATTR_CTA_PER_CLUSTER``, ``EIATTR_NUM_MBARRIERS``).

How PTX lowers to SASS is read off nvcc 13.0's sm_90a output for the ladder's own nine levels
(``gemm-ladder compile --level N --sass``), not from a NVIDIA document (SASS is not specified):
``wgmma.mma_async`` -> ``HGMMA``; ``cp.async.bulk.tensor`` loads / stores -> ``UTMALDG`` / ``UTMASTG``
(``.MULTICAST`` with ``.multicast::cluster``); ``mbarrier.init`` -> ``SYNCS.EXCH.64`` (one per
barrier: the count equals ptxas's ``EIATTR_NUM_MBARRIERS`` in every ladder build); ``mbarrier.try_wait``
-> ``SYNCS.PHASECHK``; ``mbarrier.arrive`` on a peer CTA's barrier -> ``SYNCS.ARRIVE...RED``;
``setmaxnreg.dec`` / ``.inc`` -> ``USETMAXREG.DEALLOC`` / ``USETMAXREG.TRY_ALLOC``; ``barrier.cluster``
-> ``UCGABAR_ARV`` / ``UCGABAR_WAIT``.

Loops: a backward branch (``BRA`` to an address at or before its own) up to the function's last
``EXIT``. ptxas places the retry paths of mbarrier waits after the last ``EXIT`` and branches back
into the body from there; those are not loops of the kernel's own and are left out.

Scheduling control bits: each 128-bit instruction's high 64-bit word (``cuobjdump`` prints it on the
line below) carries, in bits 41-61, the stall count, the yield hint, the write and read scoreboard
barriers, the wait mask and the operand reuse flags (:class:`Control`). NVIDIA does not document them;
the layout is that of Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking"
(2018), section 2.1, which later architectures kept. The yield polarity is read off ptxas's own output:
it sets reuse flags only on instructions whose bit 45 is 1, and an operand cannot stay in the reuse
cache across a switch of warps, so a clear bit 45 is the hint to yield (tests/test_advise_sass.py
checks the reuse flags against the ``.reuse`` markers cuobjdump prints).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_FUNCTION = re.compile(r"^\s*Function : (\S+)")
# /*0070*/  [@P0 |@!UP1 ]OPCODE[.MODS] operands ;
_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);")
_SPECIAL = re.compile(r"\b(SR_[A-Za-z0-9_]+(?:\.[XYZ])?)")
_HEX = re.compile(r"0x([0-9a-f]+)")
_ENCODING = re.compile(r"/\* 0x([0-9a-f]{16}) \*/")

#: The tensor-core instructions: wgmma (Hopper: HGMMA for 16-bit inputs, QGMMA for fp8) and the mma.sync
#: path (HMMA, pre-Hopper style).
MMA_OPCODES = ("HGMMA", "QGMMA", "HMMA")
#: The warpgroup MMAs, whose last one of a committed group carries ``gsb0`` (wgmma.commit_group).
WGMMA_OPCODES = ("HGMMA", "QGMMA")
#: Stores of the output: TMA stores and plain global stores.
STORE_OPCODES = ("UTMASTG", "STG")


@dataclass(frozen=True)
class Control:
    """An instruction's scheduling control bits (the module docstring gives their source)."""

    stall: int  # cycles before the warp issues its next instruction (bits 41-44)
    yields: bool  # the hint to let another warp issue next (bit 45 clear)
    write_barrier: int  # scoreboard set when a variable-latency result lands (bits 46-48; 7: none)
    read_barrier: int  # scoreboard set when the operands have been read (bits 49-51; 7: none)
    wait_mask: int  # scoreboards waited for before issue (bits 52-57)
    reuse: int  # operand slots kept in the reuse cache for the next instruction (bits 58-61)

    @classmethod
    def decode(cls, high: int) -> "Control":
        return cls(stall=(high >> 41) & 0xF, yields=not (high >> 45) & 1, write_barrier=(high >> 46) & 7,
                   read_barrier=(high >> 49) & 7, wait_mask=(high >> 52) & 0x3F, reuse=(high >> 58) & 0xF)


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction: byte address, opcode with its modifiers, operand text, and its control bits
    (None where the text did not carry the encoding)."""

    address: int
    opcode: str
    operands: str
    control: Control | None = None

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def modifiers(self) -> tuple[str, ...]:
        return tuple(self.opcode.split(".")[1:])


@dataclass(frozen=True)
class IssuePath:
    """A consumer's path from a stage's full-barrier wait to the last wgmma of the group it commits:
    what the warpgroup issues between the data's arrival and the tensor pipe having its next group
    (docs/where-time-goes.md, "What the consumer issues per K iteration")."""

    wait: int  # byte address of the wait (SYNCS.PHASECHK)
    first_mma: int  # instructions from the wait to the group's first wgmma (1: the next one)
    last_mma: int  # ... to the group's last wgmma (the one that commits it, gsb0)
    r2ur: int  # R2UR moves on the way: descriptors made in per-thread registers and moved to uniform ones


@dataclass
class SassStructure:
    """The instructions of one function and what their order says (loops, special registers)."""

    function: str
    instructions: list[Instruction] = field(default_factory=list)

    def count(self, base: str, *modifiers: str) -> int:
        """Instructions whose base opcode is ``base`` and which carry every one of ``modifiers``."""
        return sum(1 for i in self.instructions if i.base == base and all(m in i.modifiers for m in modifiers))

    @property
    def special_registers(self) -> set[str]:
        """Special registers read (``SR_TID.X``, ``SR_CTAID.Y``, ...)."""
        return {m for i in self.instructions if i.base in ("S2R", "S2UR", "CS2R") for m in _SPECIAL.findall(i.operands)}

    @property
    def body_end(self) -> int:
        """Address of the last EXIT (the end of the kernel's own code); the last address if none."""
        exits = [i.address for i in self.instructions if i.base == "EXIT"]
        return max(exits) if exits else (self.instructions[-1].address if self.instructions else 0)

    @property
    def loops(self) -> list[tuple[int, int]]:
        """(first, last) address of every backward branch inside the body (see the module docstring)."""
        out = []
        end = self.body_end
        for i in self.instructions:
            if i.base == "BRA" and i.address <= end and (m := _HEX.search(i.operands)):
                target = int(m.group(1), 16)
                if target <= i.address:
                    out.append((target, i.address))
        return out

    def _in_a_loop_with(self, *groups: tuple[str, ...]) -> bool:
        """True if one loop holds an instruction of every opcode group."""
        for lo, hi in self.loops:
            inside = {i.base for i in self.instructions if lo <= i.address <= hi}
            if all(inside.intersection(g) for g in groups):
                return True
        return False

    @property
    def issue_paths(self) -> list[IssuePath]:
        """Every full-barrier wait (``SYNCS.PHASECHK``) followed, before the next wait, by wgmmas up to one
        that commits its group (``gsb0``): the K loops' issue paths, one per unrolled copy and per loop."""
        ins, out = self.instructions, []
        for start, w in enumerate(ins):
            if w.base != "SYNCS" or "PHASECHK" not in w.modifiers:
                continue
            first, r2ur = None, 0
            for j in range(start + 1, len(ins)):
                i = ins[j]
                if i.base == "SYNCS" and "PHASECHK" in i.modifiers:
                    break
                r2ur += i.base == "R2UR"
                if i.base in WGMMA_OPCODES:
                    first = j - start if first is None else first
                    if "gsb0" in i.operands:
                        out.append(IssuePath(w.address, first, j - start, r2ur))
                        break
        return out

    @property
    def mma_in_loop(self) -> bool:
        """A loop around the MMA: the K loop (level 2's idea)."""
        return self._in_a_loop_with(MMA_OPCODES)

    @property
    def store_in_mma_loop(self) -> bool:
        """One loop around both the MMA and the output store: a tile loop (a persistent kernel, level 6)."""
        return self._in_a_loop_with(MMA_OPCODES, STORE_OPCODES)


def parse_sass(sass: str) -> dict[str, SassStructure]:
    """``cuobjdump --dump-sass`` text -> {function name: SassStructure} (NOP padding included)."""
    out: dict[str, SassStructure] = {}
    current: SassStructure | None = None
    lines = sass.splitlines()
    for n, line in enumerate(lines):
        if m := _FUNCTION.match(line):
            current = out.setdefault(m.group(1), SassStructure(m.group(1)))
        elif current is not None and (m := _INSTR.match(line)):
            # The encoding's high word: the only hex comment on the next line.
            high = _ENCODING.fullmatch(lines[n + 1].strip()) if n + 1 < len(lines) else None
            control = Control.decode(int(high.group(1), 16)) if high else None
            current.instructions.append(Instruction(int(m.group(1), 16), m.group(2), m.group(3).strip(), control))
    return out


_ELF_SECTION = re.compile(r"^\.nv\.info\.(\S+)\s*$")
_ELF_ATTR = re.compile(r"^\s*Attribute:\s*(\S+)")
_ELF_VALUE = re.compile(r"^\s*Value:\s*(.*?)\s*$")


def parse_elf_attributes(text: str) -> dict[str, dict[str, str]]:
    """``cuobjdump --dump-elf`` text -> {function: {EIATTR name: value text ('' when it has none)}}.

    Reads the per-function ``.nv.info.<function>`` sections only.
    """
    out: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    last: str | None = None
    for line in text.splitlines():
        if m := _ELF_SECTION.match(line):
            current, last = out.setdefault(m.group(1), {}), None
        elif line.startswith(".") or line.startswith("\t.section") or line.startswith(".section"):
            current, last = None, None
        elif current is not None and (m := _ELF_ATTR.match(line)):
            last = m.group(1)
            current[last] = ""
        elif current is not None and last is not None and (m := _ELF_VALUE.match(line)):
            current[last] = m.group(1)
    return out


def elf_ints(value: str) -> tuple[int, ...]:
    """'0x180 0x1 0x1' -> (384, 1, 1)."""
    return tuple(int(h, 16) for h in _HEX.findall(value))


def dump_elf(cubin: Path | str) -> str:
    """``cuobjdump --dump-elf`` text of a cubin; raises CompilerNotFoundError without cuobjdump."""
    from gemm_ladder.runtime.compiler import CompileError, cuobjdump_path

    proc = subprocess.run([cuobjdump_path(), "--dump-elf", str(cubin)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"cuobjdump --dump-elf failed on {cubin}", proc.stderr)
    return proc.stdout
