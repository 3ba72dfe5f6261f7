"""The TMA pipeline designer: a complete, checked plan for a Hopper (sm_90a) or Blackwell (sm_100a) GEMM.

    >>> from gemm_ladder.design import plan_gemm
    >>> p = plan_gemm(4096, 4096, 4096, "bf16", tile=(128, 128, 64), stages=4)
    >>> p.tensor_maps["a"].encode_kwargs(base_ptr)   # arguments of cuTensorMapEncodeTiled
    >>> p.kernel_defines()                           # -D constants for the kernel
    >>> describe(p).load_steps                       # the prose, written from the numbers on demand

Pure Python, no GPU. Sources are named in each module's docstring (CUDA Driver API
cuTensorMapEncodeTiled; PTX ISA: Tensor Memory Accelerator / cp.async.bulk.tensor, mbarrier expect-tx,
wgmma Matrix Descriptor Format, Shared Memory Matrix Layout; CUDA C Programming Guide compute capability
table). Command line: ``gemm-ladder design``.
"""

from gemm_ladder.design.describer import PlanText, describe, plan_document
from gemm_ladder.design.plan import (
    KernelConfig, Plan, Schedule, Suitability, assess_suitability, kernel_defines_for, plan_gemm,
)
from gemm_ladder.design.problem import ARCHS, DTYPES, PlanRefused, parse_triple
from gemm_ladder.design.ring import Consumers, Issuer, LedgerRow, LoadProtocol, Ring, StoreProtocol, phase_ledger
from gemm_ladder.design.smem import MmaDescriptor, SmemLayout, TmemPlan
from gemm_ladder.design.tensor_maps import ENCODE_ORDER, TensorMapSpec
from gemm_ladder.design.timeline import TimelineRow, build_timeline, simulate

__all__ = [
    "ARCHS", "DTYPES", "ENCODE_ORDER", "Consumers", "Issuer", "KernelConfig", "LedgerRow", "LoadProtocol",
    "MmaDescriptor", "Plan", "PlanRefused", "PlanText", "Ring", "Schedule", "SmemLayout", "StoreProtocol", "Suitability",
    "TensorMapSpec", "TimelineRow", "TmemPlan", "assess_suitability", "build_timeline", "kernel_defines_for",
    "describe", "parse_triple", "phase_ledger", "plan_document", "plan_gemm", "simulate",
]
