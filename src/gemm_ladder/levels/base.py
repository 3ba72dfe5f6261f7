"""What every rung of the ladder declares, and how it is built and launched.

A level is a kernel source file plus the facts the gates need: the one idea it adds, its domain
(the shapes it promises to compute; anything else is refused before launch), its launch geometry,
and what it predicts about its own speed.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gemm_ladder.contract import Domain, check_operands, dtype_name, trivial_result
from gemm_ladder.runtime.compiler import KERNEL_ROOT, CompiledKernel, compile_kernel
from gemm_ladder.runtime.module import LaunchGeometry, LoadedKernel, device_index, load  # noqa: F401 (LaunchGeometry re-exported)


@dataclass(frozen=True)
class PerfExpectation:
    """What the performance gate holds a level to, on shapes large enough to judge (2MNK >= gpu.MIN_TIMED_FLOPS).

    ``min_vs_cublas``: the least acceptable ratio of cuBLAS time to this level's time.
    ``min_vs_previous``: the least acceptable ratio of the previous level's time to this level's
    (1.0 = at least as fast; the gate allows ``noise`` on top, measured spread of repeated runs).
    """

    min_vs_cublas: float = 0.0
    min_vs_previous: float | None = None
    noise: float = 0.03


@dataclass(frozen=True, eq=False)
class Level(abc.ABC):
    """One rung: a kernel file, its idea, its domain, and how to build and launch it."""

    number: int
    name: str
    idea: str
    source: str  # path under gemm_ladder/kernels/
    domain: Domain
    perf: PerfExpectation = field(default_factory=PerfExpectation)
    kernel_name: str = "gemm_kernel"
    _builds: dict = field(default_factory=dict, repr=False, compare=False)
    _kernels: dict = field(default_factory=dict, repr=False, compare=False)  # (dtype, device index) -> LoadedKernel

    def variant(self, **changes) -> "Level":
        """A copy with ``changes`` applied (e.g. ``stages=3``) and empty caches: builds, loaded kernels,
        tensor maps and defines belong to one configuration and must not leak into another."""
        fresh = {f.name: type(getattr(self, f.name))() for f in dataclasses.fields(self) if f.name.startswith("_")}
        return dataclasses.replace(self, **fresh, **changes)

    @property
    def source_path(self) -> Path:
        return KERNEL_ROOT / self.source

    @property
    def title(self) -> str:
        return f"L{self.number} {self.name}"

    # --- building (no GPU needed) -------------------------------------------------------------
    @abc.abstractmethod
    def defines(self, dtype: str) -> dict[str, int | str]:
        """Compile-time constants (``-D``) of this level for ``dtype`` ('bf16' or 'fp16')."""

    @abc.abstractmethod
    def geometry(self, dtype: str) -> LaunchGeometry:
        """Threads, dynamic shared memory and cluster size (shape-independent)."""

    def translation_unit(self, dtype: str) -> str:
        return f'// gemm-ladder level {self.number} ({self.name}), {dtype}\n#include "levels/{Path(self.source).name}"\n'

    def build_defines(self, dtype: str) -> dict[str, int | str]:
        """Every ``-D`` constant of this level's build for ``dtype``: the dtype switch, then :meth:`defines`."""
        return {"GL_DTYPE_" + dtype.upper(): 1, **self.defines(dtype)}

    def build(self, dtype: str, arch: str = "sm_90a") -> CompiledKernel:
        """Compile (or fetch from cache) this level's cubin for ``dtype``; needs nvcc, not a GPU.

        Raises CompilerNotFoundError without nvcc and CompileError with nvcc's message.
        """
        if (dtype, arch) not in self._builds:
            self._builds[dtype, arch] = compile_kernel(
                self.translation_unit(dtype), self.kernel_name, arch=arch, defines=self.build_defines(dtype)
            )
        return self._builds[dtype, arch]

    def loaded(self, dtype: str, device: torch.device) -> LoadedKernel:
        """This level's kernel for ``dtype`` loaded on ``device`` (compiled first if needed)."""
        key = (dtype, device_index(device))  # torch.device("cuda") means the current device
        kernel = self._kernels.get(key)  # on every launch's path: a dict lookup, not a build-and-load walk
        if kernel is None:
            g = self.geometry(dtype)
            kernel = load(self.build(dtype), device, threads=g.threads, dynamic_smem=g.dynamic_smem, cluster=g.cluster)
            self._kernels[key] = kernel
        return kernel

    # --- launching (GPU) ----------------------------------------------------------------------
    def check(self, a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
        """Contract and domain checks; returns (M, N, K) or raises GemmInputError / OutsideDomainError."""
        m, n, k = check_operands(a, b)
        self.domain.check(m, n, k, dtype_name(a.dtype))
        self.domain.check_pointers(a=a, b=b)
        return m, n, k

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a @ b.T`` by this level's kernel. a: (M, K), b: (N, K), bf16/fp16 CUDA tensors.

        Raises GemmInputError / OutsideDomainError before any launch.
        """
        m, n, k = self.check(a, b)
        trivial = trivial_result(a, b)
        if trivial is not None:
            return trivial
        c = torch.empty((m, n), dtype=a.dtype, device=a.device)
        self.domain.check_pointers(c=c)
        self.launch(a, b, c)
        return c

    @abc.abstractmethod
    def launch(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        """Launch on the current stream; operands already checked, none empty."""
