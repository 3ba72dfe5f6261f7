"""What the bench scripts share: one-knob variants of a level, and a quick check of their output.

Imported by the scripts beside it (they run as ``python bench/NAME.py``, so this directory is on
``sys.path``). Development tools: the variants are for measuring, not shipped.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Callable

import torch

from gemm_ladder.contract import reference
from gemm_ladder.levels.base import Level
from gemm_ladder.runtime.compiler import KERNEL_ROOT


def _rebuilt(base: Level, cls: type) -> Level:
    return cls(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})


def with_source(level: Level, path: Path, **changes) -> Level:
    """``level`` with ``changes``, compiled from the kernel file at ``path`` instead of its own."""
    base = level.variant(**changes)

    class FromFile(type(base)):
        def translation_unit(self, dtype):
            return f'#include "{Path(path).resolve()}"\n'

    return _rebuilt(base, FromFile)


def with_defines(level: Level, extra: dict, **changes) -> Level:
    """``level`` with ``changes`` and extra ``-D`` constants (an experiment's knob)."""
    base = level.variant(**changes)

    class Extra(type(base)):
        def defines(self, dtype):
            return {**super().defines(dtype), **extra}

    return _rebuilt(base, Extra)


def with_edit(level: Level, name: str, edit: Callable[[str], str], **changes) -> Level:
    """``level`` compiled from its own source after ``edit`` (which must change it), with ``changes``.

    The edited file goes to the temporary directory as ``gl_variant_<name>.cu``.
    Raises AssertionError when ``edit`` leaves the source as it was (the level changed under it).
    """
    src = (KERNEL_ROOT / level.source).read_text()
    new = edit(src)
    assert new != src, f"variant {name!r}: the edit no longer applies to {level.source}; update it"
    path = Path(tempfile.gettempdir()) / f"gl_variant_{name}.cu"
    path.write_text(new)
    return with_source(level, path, **changes)


#: cluster_ring.cuh's multicast B load, and what the no-multicast variant puts in its place.
_MULTICAST_LOAD = """tma_load_2d_multicast(smem.b(s) + rank * GL_B_BOX_ROWS * BK, map_b, smem.full(s), kt * BK,
                          tn * BN + rank * GL_B_BOX_ROWS, (1 << GL_CLUSTER) - 1);"""
_UNICAST_LOADS = """for (int r = 0; r < GL_CLUSTER; ++r)
      tma_load_2d(smem.b(s) + r * GL_B_BOX_ROWS * BK, map_b, smem.full(s), kt * BK, tn * BN + r * GL_B_BOX_ROWS);"""


def _function(header: str, signature_start: str) -> str:
    start = header.index(signature_start)
    return header[start:header.index("\n}\n", start) + 3]


def no_multicast_edit(src: str) -> str:
    """Edit a level 8/9 source to call a copy of cluster_ring.cuh's producer in which each CTA loads
    every B slice itself instead of multicasting its own (the cluster and its barriers are kept)."""
    assert "produce_multicast_stages(" in src, "no multicast producer in this source (levels 8-9 only)"
    header = (KERNEL_ROOT / "include" / "gemm_ladder" / "cluster_ring.cuh").read_text()
    k_range = _function(header, "__device__ __forceinline__ void produce_k_range(")
    stages = _function(header, "__device__ __forceinline__ int produce_multicast_stages(")
    assert _MULTICAST_LOAD in k_range, "cluster_ring.cuh's multicast load changed; update this variant"
    k_range = k_range.replace(_MULTICAST_LOAD, _UNICAST_LOADS).replace("produce_k_range(", "produce_k_range_unicast(")
    stages = stages.replace("produce_multicast_stages(", "produce_unicast_stages(").replace(
        "produce_k_range(", "produce_k_range_unicast(")
    src = src.replace("using namespace gl;", "using namespace gl;\n" + k_range + "\n" + stages, 1)
    return src.replace("produce_multicast_stages(", "produce_unicast_stages(").replace(
        "produce_k_range(", "produce_k_range_unicast(")


def check_targets(targets: dict, a: torch.Tensor, b: torch.Tensor, rows: int = 256) -> tuple[dict, dict, dict]:
    """Run every target once on (a, b): ``(live targets, errors, failures)``.

    ``errors[name]`` is the relative Frobenius error of the output's first ``rows`` rows against the
    float64 reference (computed once for all); ``failures[name]`` is the repr of what a target raised:
    a variant that fails is a result, not a reason to stop the run.
    """
    ref = reference(a[:rows], b)
    live, errors, failures = {}, {}, {}
    for name, fn in targets.items():
        try:
            c = fn(a, b)
            torch.cuda.synchronize()
            errors[name] = ((c[:rows].double() - ref).norm() / ref.norm()).item()
            live[name] = fn
        except Exception as exc:  # noqa: BLE001 - a variant that fails is a result
            failures[name] = repr(exc)[:300]
    return live, errors, failures
