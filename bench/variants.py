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


#: stage_ring.cuh's multicast B load, and what the no-multicast variant puts in its place (the levels'
#: B slices, BSlice::kOfTile: every CTA loads each slice of the tile's rows itself).
_MULTICAST_LOAD = """const int b_row = Slice == BSlice::kOfTile ? tn * BN + rank * GL_B_BOX_ROWS : tn * GL_B_BOX_ROWS;
    tma_load_operand<B_MN_MAJOR, GL_B_BOX_ROWS>(smem.b(s) + rank * GL_B_BOX_ROWS * BK, map_b, smem.full(s), kt, b_row,
                                                (1 << GL_CLUSTER) - 1);"""
_UNICAST_LOADS = """static_assert(Slice == BSlice::kOfTile, "the no-multicast variant is the levels' (one B map)");
    for (int r = 0; r < GL_CLUSTER; ++r)
      tma_load_operand<B_MN_MAJOR, GL_B_BOX_ROWS>(smem.b(s) + r * GL_B_BOX_ROWS * BK, map_b, smem.full(s), kt,
                                                  tn * BN + r * GL_B_BOX_ROWS);"""
#: The producer functions of stage_ring.cuh the variant copies (renamed ..._unicast), callers first.
_PRODUCER_FUNCTIONS = ("produce_units", "produce_k_range", "produce_stage")


def function_source(header: str, name: str) -> str:
    """The definition of device function ``name`` in a header's text, with its template line if any."""
    start = header.index(f" {name}(")
    start = header.rindex("\n__device__", 0, start) + 1
    line_before = header.rindex("\n", 0, start - 1) + 1
    if header.startswith("template <", line_before):
        start = line_before
    return header[start:header.index("\n}\n", start) + 3]


def rename_calls(src: str, names, suffix: str) -> str:
    """``src`` with every call of the functions ``names`` (plain or with template arguments) renamed."""
    for name in names:
        src = src.replace(f"{name}(", f"{name}{suffix}(").replace(f"{name}<", f"{name}{suffix}<")
    return src


def no_multicast_edit(src: str) -> str:
    """Edit a level 8/9 source to call a copy of stage_ring.cuh's producer in which each CTA loads
    every B slice itself instead of multicasting its own (the cluster and its barriers are kept)."""
    assert "produce_units(" in src, "no multicast producer in this source (levels 8-9 only)"
    header = (KERNEL_ROOT / "include" / "gemm_ladder" / "stage_ring.cuh").read_text()
    copies = "\n".join(function_source(header, name) for name in reversed(_PRODUCER_FUNCTIONS))
    assert _MULTICAST_LOAD in copies, "stage_ring.cuh's multicast load changed; update this variant"
    copies = copies.replace(_MULTICAST_LOAD, _UNICAST_LOADS)
    src = src.replace("using namespace gl;", "using namespace gl;\n" + copies, 1)
    return rename_calls(src, _PRODUCER_FUNCTIONS, "_unicast")


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


def fp8_with_source(kernel, name: str, edited: str, define: str):
    """An ``Fp8Kernel`` (library/fp8.py) compiled from ``edited``, a changed copy of its kernel source: the
    text goes to the temporary directory as ``gl_fp8_<name>_<digest>.cu`` (so the kernel cache keys the
    build apart from the real one), and the build gets ``-D<define>=1`` (a config of its own: the
    in-process build cache is keyed by config). Its repr names the variant."""
    import hashlib

    path = Path(tempfile.gettempdir()) / f"gl_fp8_{name}_{hashlib.sha256(edited.encode()).hexdigest()[:12]}.cu"
    path.write_text(edited)

    @dataclasses.dataclass(frozen=True)
    class FromSource(type(kernel)):
        def defines(self):
            return {**super().defines(), define: 1}

        def translation_unit(self):
            return f'// gemm-ladder experiment: fp8 {self}\n#include "{path}"\n'

        def __repr__(self):
            return f"{name} of {super().__repr__()}"

    return FromSource(**{f.name: getattr(kernel, f.name) for f in dataclasses.fields(kernel)})
