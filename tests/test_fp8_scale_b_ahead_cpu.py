"""The fp8 kernel's scale_b_ahead build option (blockwise scale_b loaded one K block ahead) without a GPU:
its config round trip, the refusal outside blockwise, the unchanged inputs of the builds without it, and
(nvcc) its SASS: no spill, no serialised wgmma, and no wgmma of the K loop issued after a multiply by a
scale loaded in the same iteration."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel

from conftest import needs_nvcc
from fp8_cases import assert_build_clean

BLOCKWISE = Fp8Kernel(scale_mode="blockwise", store=fp8.STORE_TMA)
AHEAD = dataclasses.replace(BLOCKWISE, scale_b_ahead=True)


def test_config_round_trips():
    assert fp8.kernel_for(AHEAD.config()) == AHEAD
    assert fp8.kernel_for(BLOCKWISE.config()) == BLOCKWISE
    assert AHEAD.config() != BLOCKWISE.config()


def test_defines_and_repr_name_it_only_when_on():
    assert AHEAD.defines()["GL_FP8_SB_AHEAD"] == 1 and "GL_FP8_SB_AHEAD" not in BLOCKWISE.defines()
    assert "scale_b_ahead=True" in repr(AHEAD) and "scale_b_ahead" not in repr(BLOCKWISE)


@pytest.mark.parametrize("mode", ["tensorwise", "rowwise"])
def test_refused_outside_blockwise(mode):
    with pytest.raises(ValueError, match="no such configuration"):
        Fp8Kernel(scale_mode=mode, scale_b_ahead=True).config()


def _backward_branch(line: str, at: int) -> int | None:
    m = re.search(r"BRA (0x[0-9a-f]+)", line)
    return int(m.group(1), 16) if m and "BRA.U.ANY" not in line and int(m.group(1), 16) < at else None


def _loop_multiplies_before_issue(sass: str) -> int:
    """In each innermost loop with wgmmas (the K loop: from a backward branch's target to the branch, with no
    other backward branch inside), the FMULs that read a register an LDG wrote earlier in the same body and
    come before a QGMMA that follows them in that body."""
    return sum(_k_loop_multiplies(body) for body in k_loops(sass))


def k_loops(sass: str) -> list[list[str]]:
    """The innermost loops with wgmmas (the K loops): each from a backward branch's target to the branch,
    with no other backward branch inside (an outer loop's, the tiles', is not one)."""
    lines = [ln for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", ln)]
    addr = [int(re.search(r"/\*([0-9a-f]{4,})\*/", ln).group(1), 16) for ln in lines]
    loops = []
    for i, ln in enumerate(lines):
        target = _backward_branch(ln, addr[i])
        if target is None or target not in addr:
            continue
        body = lines[addr.index(target):i + 1]
        if any(_backward_branch(op, a) is not None for op, a in zip(body[:-1], addr[addr.index(target):i])):
            continue  # an outer loop (the tiles'): its first K block's load is once per tile
        if any("QGMMA" in op for op in body):
            loops.append(body)
    return loops


def _k_loop_multiplies(body: list[str]) -> int:
    count, loaded = 0, set()
    for j, op in enumerate(body):
        if (g := re.search(r"LDG\.E\S* (R\d+),", op)):
            loaded.add(g.group(1))
        elif (f := re.search(r"FMUL\S* R\d+, (R\d+)(?:\.reuse)?, (R\d+)", op)) and loaded & set(f.groups()):
            count += any("QGMMA" in later for later in body[j + 1:])
    return count


@needs_nvcc
@pytest.mark.parametrize("kernel", [BLOCKWISE, AHEAD], ids=["default", "ahead"])
def test_builds_without_spills_and_the_load_off_the_issue_path(use_cache, kernel):
    sass = assert_build_clean(kernel)  # no stack or spill, no C7514/C7517, only 64 x BN x 32 wgmma
    loops = k_loops(sass)
    assert loops and all(any(re.search(r"LDG\.E", op) for op in body) for body in loops)  # found, loading scale_b
    waits = _loop_multiplies_before_issue(sass)
    # The build without the option multiplies by the fresh scale_b before the next block's wgmmas (what the
    # option removes); the option's loop has no such multiply.
    assert (waits > 0) if kernel is BLOCKWISE else (waits == 0), waits
