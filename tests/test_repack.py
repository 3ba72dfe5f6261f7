"""The repack kernel (kernels/library/repack.cu): it compiles and passes the resource gate (no GPU);
the host's launch arithmetic covers every destination element exactly once with aligned 16-byte
stores, checked against a Python mirror of the kernel's thread-to-window mapping; on a GPU, copies
of every alignment and stride come out exact, zero padding included."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import needs_nvcc

from gemm_ladder.gates.resources import check_cubin_resources
from gemm_ladder.library.repack import REPACK, THREADS, Copy2D, aligned_pitch
from gemm_ladder.runtime.compiler import disassemble


@needs_nvcc
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_repack_compiles_and_passes_the_resource_gate(use_cache, dtype):
    built = REPACK.build(dtype)
    geo = REPACK.geometry(dtype)
    sass = disassemble(built.cubin)
    report = check_cubin_resources(built.cubin, built.ptxas_log, built.kernel_name, level=None, dtype=dtype,
                                   threads=geo.threads, dynamic_smem=geo.dynamic_smem, sass=sass)
    assert report.passed, report.messages
    assert report.spill_stores == report.spill_loads == report.stack_bytes == 0
    # The row-contiguous path loads and stores 16 bytes at a time.
    assert "LDG.E.128" in sass and "STG.E.128" in sass


def test_aligned_pitch():
    assert [aligned_pitch(c, 2) for c in (1, 8, 9, 4093, 4096)] == [8, 8, 16, 4096, 4096]
    assert [aligned_pitch(c, 4) for c in (1, 4, 5)] == [4, 4, 8]


def _mirror(job: Copy2D) -> dict[tuple[int, int], int]:
    """Destination (row, col) -> times written, by the kernel's mapping (repack.cu: run, copy_window);
    asserts every full-window store is 16-byte aligned."""
    e = job.elem_bytes
    v = 16 // e
    tc = 1 << job.log2_threads_per_row
    rows_per_block = THREADS // tc
    written: dict[tuple[int, int], int] = {}
    for blk in range(job.blocks):
        for t in range(THREADS):
            r = blk * rows_per_block + t // tc
            if r >= job.rows_pad:
                continue
            row_addr = job.dst + r * job.dst_strides[0] * e
            head = 0 if job.windows_start_at_col0 else (row_addr % 16) // e
            for w in range(t % tc, job.windows, tc):
                c0 = w * v - head
                if c0 >= job.cols_pad:
                    continue
                full = c0 >= 0 and c0 + v <= job.cols_pad
                if full and job.dst_strides[1] == 1:
                    assert (row_addr + c0 * e) % 16 == 0, (r, w)
                for c in range(c0, c0 + v):
                    if 0 <= c < job.cols_pad:
                        written[r, c] = written.get((r, c), 0) + 1
    return written


@pytest.mark.parametrize("e,dst_off,pitch,cols_pad,rows,cols", [
    (2, 0, 16, 16, 3, 13),        # aligned workspace, K padded 13 -> 16
    (2, 2, 13, 13, 4, 13),        # copy back into an odd-pitch output at a 2-byte offset
    (2, 14, 4095, 4095, 2, 4095),
    (2, 6, 9, 9, 5, 9),
    (4, 4, 7, 7, 3, 7),           # float32 output, odd pitch
    (2, 0, 600, 520, 2, 517),     # windows per row > 256 threads: several per thread
])
def test_launch_arithmetic_writes_every_element_once(e, dst_off, pitch, cols_pad, rows, cols):
    job = Copy2D(src=0x1000, src_strides=(cols, 1), rows=rows, cols=cols, dst=0x10000 + dst_off,
                 dst_strides=(pitch, 1), rows_pad=rows + 1, cols_pad=cols_pad, elem_bytes=e)
    job.check()
    written = _mirror(job)
    expected = {(r, c) for r in range(job.rows_pad) for c in range(job.cols_pad)}
    assert set(written) == expected
    assert set(written.values()) == {1}


def test_strided_destination_is_written_element_by_element():
    job = Copy2D(src=0, src_strides=(1, 7), rows=5, cols=6, dst=2, dst_strides=(3, 40), rows_pad=5, cols_pad=6,
                 elem_bytes=2)
    assert job.windows_start_at_col0 and job.windows == 1
    assert set(_mirror(job).values()) == {1} and len(_mirror(job)) == 30


def test_bad_jobs_are_refused_before_launch():
    good = dict(src=0, src_strides=(8, 1), rows=2, cols=8, dst=0, dst_strides=(8, 1), rows_pad=2, cols_pad=8,
                elem_bytes=2)
    for change, rule in ((dict(elem_bytes=8), "2- or 4-byte"), (dict(rows=3), "fit"), (dict(cols=9), "fit"),
                         (dict(src_strides=(-8, 1)), "negative"), (dict(dst=1), "aligned")):
        with pytest.raises(ValueError, match=rule):
            Copy2D(**{**good, **change}).check()
    with pytest.raises(ValueError, match="one or two"):
        REPACK.launch([], torch.device("cuda"))
    mixed = [Copy2D(**good), Copy2D(**{**good, "elem_bytes": 4})]
    with pytest.raises(ValueError, match="element size"):
        REPACK.launch(mixed, torch.device("cuda"))


def test_between_reads_shapes_and_strides():
    src = torch.empty(10, 20, dtype=torch.bfloat16)[1:, 3:16]
    dst = torch.empty(9, 16, dtype=torch.bfloat16)
    job = Copy2D.between(src, dst)
    assert (job.rows, job.cols, job.rows_pad, job.cols_pad) == (9, 13, 9, 16)
    assert job.src_strides == (20, 1) and job.dst_strides == (16, 1)
    assert job.src - src.untyped_storage().data_ptr() == (20 + 3) * 2
    with pytest.raises(ValueError, match="fit"):
        Copy2D.between(dst, src)


# ---------------------------------------------------------------------------------------------
gpu = pytest.mark.gpu


def _random(shape, dtype, gen):
    return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_copies_of_every_alignment_are_exact(dtype):
    """Sources at every 2-byte (4-byte) offset mod 16 and odd pitches, into aligned zero-padded
    workspaces, and back into odd-pitch, offset destinations; two jobs in one launch; poisoned outputs."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    per = 16 // torch.empty((), dtype=dtype).element_size()
    for off, (rows, cols), pitch_extra in itertools.product(range(per), [(1, 1), (3, 13), (37, 517), (130, 4095)],
                                                            (0, 3)):
        pitch = cols + pitch_extra
        big = _random((rows + 2) * pitch + off + per, dtype, gen)
        src = big[off:off + rows * pitch].view(rows, pitch)[:, :cols]
        ws = torch.full((rows + 1, aligned_pitch(cols + 5, src.element_size())), float("nan"), dtype=dtype,
                        device="cuda")
        src2 = src.T.contiguous().T  # column-major: element-wise reads
        ws2 = torch.full_like(ws, float("nan"))
        REPACK.launch([Copy2D.between(src, ws), Copy2D.between(src2, ws2)], src.device)
        back_big = torch.full(((rows + 1) * (pitch + 1) + off + per,), float("nan"), dtype=dtype, device="cuda")
        back = back_big[off:off + rows * (pitch + 1)].view(rows, pitch + 1)[:, :cols]
        REPACK.launch([Copy2D.between(ws[:rows, :cols], back)], src.device)
        torch.cuda.synchronize()
        for w in (ws, ws2):
            assert torch.equal(w[:rows, :cols], src), (off, rows, cols, pitch)
            assert torch.count_nonzero(w[rows:]) == 0 and torch.count_nonzero(w[:, cols:]) == 0
        assert torch.equal(back, src)
        untouched = back_big.view(-1)[:off]
        assert torch.isnan(untouched).all(), "wrote before the destination"


@gpu
def test_strided_views_and_large_offsets():
    """A view neither row- nor column-major, and an operand past 2^31 elements' worth of offset
    arithmetic (64-bit indexing), checked on its last rows."""
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = _random((64, 90), torch.float16, gen)[::2, ::3]  # strides (180, 3)
    ws = torch.empty(32, aligned_pitch(30, 2), dtype=torch.float16, device="cuda")
    REPACK.launch([Copy2D.between(x, ws)], x.device)
    torch.cuda.synchronize()
    assert torch.equal(ws[:, :30], x) and torch.count_nonzero(ws[:, 30:]) == 0
    free, _ = torch.cuda.mem_get_info()
    rows, cols = 2**20 + 3, 2**11 + 1  # 2^31 + ... elements: 4 GiB of bf16 each side
    if free < 3 * rows * cols * 2:
        pytest.skip(f"needs {3 * rows * cols * 2 / 2**30:.0f} GiB free for the 64-bit offset case")
    big = torch.empty(rows, cols, dtype=torch.bfloat16, device="cuda")
    big[-5:] = _random((5, cols), torch.bfloat16, gen)
    ws = torch.empty(rows, aligned_pitch(cols, 2), dtype=torch.bfloat16, device="cuda")
    REPACK.launch([Copy2D.between(big, ws)], big.device)
    torch.cuda.synchronize()
    assert torch.equal(ws[-5:, :cols], big[-5:])
