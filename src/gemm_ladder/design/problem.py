"""The inputs of a plan: dtypes, architectures, the refusal exception, and command-line parsers.

Pure Python (no torch, no GPU): the designer must run on the development and CI machines.

Sources for the numbers below:

* Shared memory: CUDA C Programming Guide, "Technical Specifications per Compute Capability":
  compute capability 9.0 has 228 KB of shared memory per SM and at most 227 KB (232448 bytes) per
  thread block (opt-in), 1 KB of each block's allocation reserved by the system; at most 32 resident
  blocks and 64 resident warps (2048 threads) per SM. Compute capability 10.0 has the same 228 KB per
  SM and 227 KB per block.
* Tensor memory (sm_100a): PTX ISA, "Tensor Memory": 128 lanes x 512 columns of 32-bit cells per CTA;
  ``tcgen05.alloc`` takes a power-of-two number of columns, at least 32.
* SM counts: H200 SXM 132 SMs (measured: ``meta.gpu.sm_count`` of the results in bench/results/;
  docs/measured-choices.md names one), B200 148 SMs (datasheet). Used
  only for the persistent grid; the plan says which value it used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class PlanRefused(ValueError):
    """The configuration cannot be planned. ``rule`` names the broken rule; the message has the numbers.

    The message always starts with the rule's name, then the numbers, then (where there is one) the
    alternative.
    """

    def __init__(self, rule: str, detail: str):
        self.rule = rule
        self.detail = detail
        super().__init__(f"{rule}: {detail}")


@dataclass(frozen=True)
class DtypeInfo:
    """An input dtype: short name, element bytes and the CUtensorMapDataType enum name."""

    name: str
    elem_bytes: int
    tensor_map_type: str
    ptx_type: str  # the .atype/.btype of wgmma / tcgen05.mma kind::f16


DTYPES: dict[str, DtypeInfo] = {
    "bf16": DtypeInfo("bf16", 2, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "bf16"),
    "fp16": DtypeInfo("fp16", 2, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "f16"),
}


@dataclass(frozen=True)
class ArchInfo:
    """What the plan needs to know about an architecture (see the module docstring for sources)."""

    name: str
    mma: str  # "wgmma" (sm_90a) or "tcgen05" (sm_100a)
    max_smem_per_block: int  # opt-in dynamic shared memory per block, bytes
    smem_per_sm: int  # bytes
    smem_reserved_per_block: int  # bytes the system reserves in each resident block's allocation
    max_blocks_per_sm: int
    max_threads_per_sm: int
    max_cluster_portable: int
    sm_count: int
    sm_count_source: str
    tmem_columns: int = 0  # 0: no tensor memory
    tmem_lanes: int = 0


ARCHS: dict[str, ArchInfo] = {
    "sm_90a": ArchInfo(
        name="sm_90a", mma="wgmma", max_smem_per_block=232448, smem_per_sm=233472,
        smem_reserved_per_block=1024, max_blocks_per_sm=32, max_threads_per_sm=2048,
        max_cluster_portable=8, sm_count=132, sm_count_source="H200 SXM, measured: meta.gpu.sm_count in bench/results/*.json",
    ),
    "sm_100a": ArchInfo(
        name="sm_100a", mma="tcgen05", max_smem_per_block=232448, smem_per_sm=233472,
        smem_reserved_per_block=1024, max_blocks_per_sm=32, max_threads_per_sm=2048,
        max_cluster_portable=8, sm_count=148, sm_count_source="B200 datasheet",
        tmem_columns=512, tmem_lanes=128,
    ),
}


def dtype_info(name: str) -> DtypeInfo:
    try:
        return DTYPES[name]
    except KeyError:
        raise PlanRefused("dtype", f"{name!r} is not a planned dtype; use one of {sorted(DTYPES)}") from None


def arch_info(name: str) -> ArchInfo:
    try:
        return ARCHS[name]
    except KeyError:
        raise PlanRefused("arch", f"{name!r} is not a planned architecture; use one of {sorted(ARCHS)}") from None


_TRIPLE = re.compile(r"^\s*(\d+)\s*[xX*,]\s*(\d+)\s*[xX*,]\s*(\d+)\s*$")


def parse_triple(text: str, what: str = "shape") -> tuple[int, int, int]:
    """'4096x4096x4096' -> (4096, 4096, 4096); raises ValueError naming ``what`` otherwise."""
    m = _TRIPLE.match(text)
    if not m:
        raise ValueError(f"{what} {text!r} is not of the form AxBxC (three non-negative integers)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def align_up(x: int, a: int) -> int:
    return ceil_div(x, a) * a
