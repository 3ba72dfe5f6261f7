"""Facts about the GPU: the constants the gates hold kernels to, and what the machine reports.

Every hardware constant used by the gates lives here, with its source. Functions that read the
machine return ``None`` (never a guess) where there is no GPU or no ``nvidia-smi``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import torch

#: Dense tensor-core peak in TFLOP/s per contract dtype: NVIDIA H100/H200 SXM datasheet
#: (989.4 TFLOP/s bf16 and fp16 dense, i.e. without the 2:4 sparsity factor of 2).
PEAK_TFLOPS: dict[str, float] = {"bf16": 989.4, "fp16": 989.4}

#: Largest dynamic + static shared memory one block may opt into on sm_90 (227 KiB), from the CUDA C
#: Programming Guide's compute capability table; the H200 reports the same 232448
#: (``meta.gpu.max_smem_per_block_optin`` of a climb's result: docs/measured-choices.md).
MAX_SMEM_PER_BLOCK_OPTIN = 232448

#: L2 size of H100/H200 SXM (50 MiB on H100; 60 MiB on H200, ``meta.gpu.l2_bytes`` in the result named
#: above); used to size the L2 flush when the device cannot be asked. The flush writes twice the
#: L2, so the larger figure is the safe one.
DEFAULT_L2_BYTES = 60 * 1024 * 1024

#: Work below this many floating-point operations (2MNK) is judged launch-bound: 1e11 FLOP take
#: ~0.1 ms at peak, and on the H200 the Python-launched levels fell far behind cuBLAS below that size and
#: much less above it (docs/measured-choices.md): the signature of per-call host overhead rather than
#: kernel speed. Such shapes are still timed and
#: reported; the performance gate does not judge them.
MIN_TIMED_FLOPS = 1e11


def gpu_available() -> bool:
    """True when torch sees a CUDA device."""
    return torch.cuda.is_available()


def l2_bytes(device: torch.device | int | None = None) -> int:
    """L2 cache size in bytes of ``device`` (torch's device properties), else DEFAULT_L2_BYTES."""
    if not gpu_available():
        return DEFAULT_L2_BYTES
    props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)


def nvidia_smi_clocks() -> dict[str, int] | None:
    """Current and maximum SM clock and memory clock in MHz from ``nvidia-smi``, GPU 0, or None.

    Returns ``{"sm": ..., "sm_max": ..., "mem": ...}``. Read at the start and the end of a run:
    a throttled clock explains a slow number.
    """
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip()
        sm, sm_max, mem = (int(float(x)) for x in out.splitlines()[0].split(","))
    except (subprocess.SubprocessError, ValueError, IndexError, OSError):
        return None
    return {"sm": sm, "sm_max": sm_max, "mem": mem}


def gpu_facts() -> dict[str, Any] | None:
    """The ``meta.gpu`` object of the result JSON (docs/results-schema.md), or None without a GPU.

    Keys: name, sm_count, l2_bytes, max_smem_per_block_optin, clocks_mhz (nvidia-smi, may be None).
    """
    if not gpu_available():
        return None
    dev = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(dev)
    optin = getattr(props, "shared_memory_per_block_optin", None) or MAX_SMEM_PER_BLOCK_OPTIN
    return {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "l2_bytes": l2_bytes(dev),
        "max_smem_per_block_optin": int(optin),
        "capability": f"{props.major}.{props.minor}",
        "clocks_mhz": nvidia_smi_clocks(),
    }


def ctas_per_sm(cubin: str, kernel_name: str, threads: int, dynamic_smem: int) -> int | None:
    """How many CTAs of ``kernel_name`` fit on one SM, by the driver's occupancy calculator.

    Loads ``cubin`` through the runtime's loader (:func:`gemm_ladder.runtime.module.load_cubin`,
    which opts the function into ``dynamic_smem`` bytes of dynamic shared memory) and asks
    cuOccupancyMaxActiveBlocksPerMultiprocessor with ``threads`` threads per block. Returns None
    without a GPU or if the driver refuses (the resource gate then reports occupancy as unknown
    rather than guessing it).
    """
    if not gpu_available():
        return None
    try:
        from gemm_ladder.runtime.module import load_cubin

        kernel = load_cubin(Path(cubin), kernel_name, torch.device("cuda"), threads=int(threads),
                            dynamic_smem=int(dynamic_smem))
        return kernel.max_active_ctas_per_sm()
    except Exception:  # noqa: BLE001 - occupancy is a report, not a gate input we may invent
        return None
