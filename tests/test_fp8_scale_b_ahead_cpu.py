"""The fp8 kernel's scale_b_ahead build option (blockwise scale_b loaded one K block ahead) without a GPU:
its config round trip, the refusal outside blockwise, the unchanged inputs of the builds without it, and
(nvcc) the blockwise K loop's SASS with each scale_b source (in the block, ahead, the shared copy): no
spill, no serialised wgmma, and no promotion scale read that is used before a wgmma wait follows it (the
read's latency then runs under the wait; used before it, the read held up the previous block's promotion
and the next block's wgmmas)."""

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


_LOAD = re.compile(r"\b(?:LDS|LD|LDG)(?:\.\S+)? (R\d+),")


def uses_before_wait(body: list[str]) -> list[str]:
    """The loads of a K loop body (LDS, LD, LDG) whose register is read, in the same body, before a
    WARPGROUP.DEPBAR comes between: each as "load -> use"."""
    found = []
    for j, op in enumerate(body):
        if not (m := _LOAD.search(op)):
            continue
        reg = m.group(1)
        for later in body[j + 1:]:
            if "WARPGROUP.DEPBAR" in later:
                break
            regs = re.findall(r"\bR\d+\b", later.split(";")[0])
            if reg in regs[1:]:
                found.append(f"{op.strip()} -> {later.strip()}")
                break
            if regs and regs[0] == reg:
                break  # written again before any use
    return found


SOURCES = {"in-block": BLOCKWISE, "ahead": AHEAD, "shared": dataclasses.replace(BLOCKWISE, scale_b_shared=True)}


@needs_nvcc
@pytest.mark.parametrize("source", list(SOURCES))
def test_builds_clean_and_scale_reads_used_after_a_wait(use_cache, source):
    sass = assert_build_clean(SOURCES[source])  # no stack or spill, no C7514/C7517, only 64 x BN x 32 wgmma
    loops = k_loops(sass)
    # found, and reading scales (scale_a from the stage, scale_b from its source)
    assert loops and all(any(_LOAD.search(op) for op in body) for body in loops)
    assert not [u for body in loops for u in uses_before_wait(body)]
