"""The repack kernel's host side: strided 2-D copies into and out of aligned workspaces.

``kernels/library/repack.cu`` copies one or two 2-D views of 2- or 4-byte elements per launch (see its
header for the work split). Here: the job description (:class:`Copy2D`), its ``ctypes`` image (the
kernel's ``RepackArgs``, passed by value), the build (one cubin per element size, gated like any
kernel: :class:`RepackKernel` has ``build``/``geometry``/``kernel_name``), and the launch on the
current stream.

A workspace's row pitch is the extent rounded up to 16 bytes (:func:`aligned_pitch`), the rule TMA
holds every row stride to (CUDA Driver API, cuTensorMapEncodeTiled: globalStrides multiples of 16).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from gemm_ladder.library.lru import cached
from gemm_ladder.runtime.compiler import CompiledKernel, compile_kernel
from gemm_ladder.runtime.module import LaunchGeometry, LoadedKernel, device_index, load

#: TMA's alignment for bases and row pitches, in bytes (cuTensorMapEncodeTiled).
ALIGN_BYTES = 16
#: Threads per CTA (``gl_repack::THREADS`` in repack.cu).
THREADS = 256
#: Element sizes the kernel moves, by the dtype names the gates pass to ``build``.
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def aligned_pitch(cols: int, elem_bytes: int) -> int:
    """``cols`` rounded up to a 16-byte multiple, in elements (8 for 2-byte elements, 4 for 4-byte)."""
    per = ALIGN_BYTES // elem_bytes
    return max(per, -(-cols // per) * per)


class _CopyJob(ctypes.Structure):
    _fields_ = [("src", ctypes.c_void_p), ("dst", ctypes.c_void_p),
                ("rows", ctypes.c_longlong), ("cols", ctypes.c_longlong),
                ("rows_pad", ctypes.c_longlong), ("cols_pad", ctypes.c_longlong),
                ("src_rs", ctypes.c_longlong), ("src_cs", ctypes.c_longlong),
                ("dst_rs", ctypes.c_longlong), ("dst_cs", ctypes.c_longlong),
                ("windows", ctypes.c_longlong), ("first_block", ctypes.c_longlong),
                ("log2_tc", ctypes.c_int), ("no_head", ctypes.c_int)]


class _RepackArgs(ctypes.Structure):
    _fields_ = [("job", _CopyJob * 2), ("jobs", ctypes.c_int)]


@dataclass(frozen=True)
class Copy2D:
    """Copy source (rows, cols) into destination (rows_pad, cols_pad), zeros outside rows x cols.

    Addresses in bytes; strides in elements (row stride, column stride), non-negative; the two
    regions must not overlap (the kernel reads through the non-coherent cache).
    """

    src: int
    src_strides: tuple[int, int]
    rows: int
    cols: int
    dst: int
    dst_strides: tuple[int, int]
    rows_pad: int
    cols_pad: int
    elem_bytes: int

    @classmethod
    def between(cls, src: torch.Tensor, dst: torch.Tensor) -> "Copy2D":
        """The job copying 2-D ``src`` into the top-left of 2-D ``dst`` (same element size), zero-filling
        the rest of ``dst``."""
        if src.dim() != 2 or dst.dim() != 2:
            raise ValueError(f"Copy2D.between takes 2-D tensors, got {src.dim()}-D and {dst.dim()}-D")
        if src.element_size() != dst.element_size():
            raise ValueError(f"element sizes differ: {src.element_size()} and {dst.element_size()} bytes")
        if src.shape[0] > dst.shape[0] or src.shape[1] > dst.shape[1]:
            raise ValueError(f"source {tuple(src.shape)} does not fit the destination {tuple(dst.shape)}")
        return cls(src.data_ptr(), tuple(src.stride()), src.shape[0], src.shape[1], dst.data_ptr(),
                   tuple(dst.stride()), dst.shape[0], dst.shape[1], src.element_size())

    @property
    def windows_start_at_col0(self) -> bool:
        """True when every destination row starts 16-byte aligned (window w is columns [wV, wV + V)),
        or stores are element-wise anyway (column stride != 1)."""
        rs, cs = self.dst_strides
        return cs != 1 or (self.dst % ALIGN_BYTES == 0 and (rs * self.elem_bytes) % ALIGN_BYTES == 0)

    @property
    def windows(self) -> int:
        """16-byte windows per destination row (one more where rows start misaligned)."""
        per = ALIGN_BYTES // self.elem_bytes
        head = 0 if self.windows_start_at_col0 else per - 1
        return -(-(self.cols_pad + head) // per)

    @property
    def log2_threads_per_row(self) -> int:
        return min(THREADS.bit_length() - 1, max(0, (self.windows - 1).bit_length()))

    @property
    def blocks(self) -> int:
        rows_per_block = THREADS >> self.log2_threads_per_row
        return -(-self.rows_pad // rows_per_block)

    @property
    def bytes_moved(self) -> int:
        """Bytes read plus bytes written."""
        return (self.rows * self.cols + self.rows_pad * self.cols_pad) * self.elem_bytes

    def check(self) -> None:
        """Raise ValueError for a job the kernel cannot run (bad sizes, element size, strides, alignment)."""
        if self.elem_bytes not in (2, 4):
            raise ValueError(f"the repack kernel moves 2- or 4-byte elements, not {self.elem_bytes}")
        if min(self.rows, self.cols) < 0 or self.rows > self.rows_pad or self.cols > self.cols_pad:
            raise ValueError(f"source ({self.rows}, {self.cols}) must fit the destination "
                             f"({self.rows_pad}, {self.cols_pad})")
        if min(*self.src_strides, *self.dst_strides) < 0:
            raise ValueError("negative strides are not supported")
        if self.src % self.elem_bytes or self.dst % self.elem_bytes:
            raise ValueError(f"addresses must be {self.elem_bytes}-byte aligned")

    def _struct(self, first_block: int) -> _CopyJob:
        return _CopyJob(self.src, self.dst, self.rows, self.cols, self.rows_pad, self.cols_pad,
                        self.src_strides[0], self.src_strides[1], self.dst_strides[0], self.dst_strides[1],
                        self.windows, first_block, self.log2_threads_per_row, int(self.windows_start_at_col0))


@dataclass(frozen=True, eq=False)
class RepackKernel:
    """The repack kernel, built per element size; ``build``/``geometry`` follow the gates' builder protocol."""

    source: str = "library/repack.cu"
    kernel_name: str = "repack_kernel"

    def translation_unit(self) -> str:
        return f'// gemm-ladder library: strided 2-D repack\n#include "{self.source}"\n'

    def build(self, dtype: str = "bf16", arch: str = "sm_90a") -> CompiledKernel:
        """Compile (or fetch from cache) the build for ``dtype``'s element size ('bf16', 'fp16': 2
        bytes; 'fp32': 4). Needs nvcc, not a GPU. Raises KeyError for another dtype name."""
        return compile_kernel(self.translation_unit(), self.kernel_name, arch=arch,
                              defines={"GL_REPACK_BYTES": ELEMENT_BYTES[dtype]})

    def geometry(self, dtype: str = "bf16") -> LaunchGeometry:
        return LaunchGeometry(threads=THREADS, dynamic_smem=0)

    def loaded(self, elem_bytes: int, device: torch.device) -> LoadedKernel:
        dtype = "fp32" if elem_bytes == 4 else "bf16"
        key = (elem_bytes, device_index(device))
        kernel = _LOADED.get(key)
        if kernel is None:
            kernel = _LOADED[key] = load(self.build(dtype), device, threads=THREADS, dynamic_smem=0)
        return kernel

    def launch(self, jobs: list[Copy2D], device: torch.device) -> None:
        """Run one or two jobs of one element size in one launch on the current stream of ``device``.

        Raises ValueError for a bad job list (the kernel never sees one).
        """
        if not 1 <= len(jobs) <= 2:
            raise ValueError(f"one launch runs one or two copy jobs, got {len(jobs)}")
        if len({j.elem_bytes for j in jobs}) != 1:
            raise ValueError("the jobs of one launch must share an element size")
        for j in jobs:
            j.check()
        jobs = [j for j in jobs if j.rows_pad and j.cols_pad]
        if not jobs:
            return
        stream = torch.cuda.current_stream(device).cuda_stream
        # The packed launch is kept per jobs and stream (a job is its addresses, extents and strides):
        # the dispatcher's workspaces come back at the same addresses, so a repeated call packs nothing.
        cached(_PREPARED, (tuple(jobs), device_index(device), stream), lambda: self._prepare(jobs, device, stream))()

    def _prepare(self, jobs: list[Copy2D], device: torch.device, stream: int):
        args = _RepackArgs()
        first = 0
        for i, job in enumerate(jobs):
            args.job[i] = job._struct(first)
            first += job.blocks
        args.jobs = len(jobs)
        return self.loaded(jobs[0].elem_bytes, device).prepare((first, 1, 1), [args], stream)


_LOADED: dict[tuple[int, int], LoadedKernel] = {}
#: Packed launches per (jobs, device, stream), least recently used dropped (library/lru.py).
_PREPARED: dict = {}

#: The process's repack kernel.
REPACK = RepackKernel()
