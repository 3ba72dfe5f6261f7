"""The layouts library kernel (library/gemm.py, kernels/library/sm90_gemm.cu) on the CPU: the MN-major
shared-memory descriptor against an independent model of what TMA writes, the designer's tensor maps
for every layout and pitch, the stream-K split policies, the rules ``supports`` names, and the
compile-time contract. The resource gate over every build and the audit of its ring are in
test_library_gemm_build.py; the GPU runs in test_library_gemm_gpu.py.

The descriptor model. TMA with CU_TENSOR_MAP_SWIZZLE_128B writes box line r (128 bytes) at
``base + 128 r`` with the 16-byte chunks of each line permuted: byte address bits 4-6 XOR bits 7-9
(the box is 1024-byte aligned; PTX ISA, "Tensor Memory Accelerator", swizzle modes). A K-major tile is
one box whose lines are M/N rows; an MN-major tile is one box per 64 elements of M/N whose lines are K
rows. wgmma reads element (mn, k) of one k16 instruction at the canonical layout's offset from the
descriptor's start address (PTX ISA, "Shared Memory Matrix Layout", in 16-byte units:
K-major ((8, n), 2) : ((8, SBO), 1); MN-major ((8, n), (8, k)) : ((1, LBO), (8, SBO))), with the same
swizzle applied to the address. The descriptors come from the kernel's own header, compiled for the
host; the model is checked on K-major (the ladder's path, proved on the GPU) before it judges MN-major.
"""

from __future__ import annotations

import subprocess

import pytest
import torch
from conftest import needs_nvcc

from gemm_ladder.design.plan import kernel_defines_for, plan_gemm
from gemm_ladder.design.problem import PlanRefused, ceil_div
from gemm_ladder.design.stream_k import INT32_LIMIT
from gemm_ladder.library.gemm import SPLITS, library_gemm, split_schedule
from gemm_ladder.library.operand import OperandView, operand_view
from gemm_ladder.runtime.compiler import INCLUDE_DIR, nvcc_path

BK = 64
BOX_BYTES = 64 * 128  # an MN-major box: 64 elements (128 bytes) x BK lines


# --- the model --------------------------------------------------------------------------------------
def swizzle128(addr: int) -> int:
    return addr ^ (((addr >> 7) & 7) << 4)


def tma_address(tile: int, major: str, mn: int, k: int, e: int = 2) -> int:
    """Where TMA puts element (mn, k) of a (rows x BK) operand tile loaded at ``tile`` (1024-aligned):
    K-major, one box of rows lines of BK elements; MN-major, box mn // 64 (at tile + box * BK * 128),
    line k, element mn % 64 (as stage_ring.cuh's produce_stage places the boxes)."""
    if major == "k":
        line, within, box = mn, k, 0
    else:
        line, within, box = k, mn % 64, mn // 64
    return swizzle128(tile + box * BK * 128 + line * 128 + within * e)


def decode(desc: int) -> tuple[int, int, int, int]:
    """(start, LBO, SBO, layout type) in bytes from a wgmma descriptor (PTX ISA "Matrix Descriptor Format")."""
    return ((desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4, desc >> 62)


def wgmma_address(desc: int, major: str, mn: int, kk: int, e: int = 2) -> int:
    """Where wgmma reads element (mn, kk) (kk < 16) of one k16 instruction through ``desc``."""
    start, lbo, sbo, layout = decode(desc)
    assert layout == 1, "128B swizzle"
    if major == "k":  # ((8, n), 2) : ((8, SBO), 1) in 16-byte units, 8 elements per unit
        off = (mn % 8) * 128 + (mn // 8) * sbo + (kk // 8) * 16 + (kk % 8) * e
    else:  # ((8, n), (8, k)) : ((1, LBO), (8, SBO))
        off = ((mn % 64) // 8) * 16 + (mn % 8) * e + (mn // 64) * lbo + (kk % 8) * 128 + (kk // 8) * sbo
    return swizzle128(start + off)


# --- the header's descriptors, compiled for the host --------------------------------------------------
HOST_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "gemm_ladder/ptx/wgmma.cuh"
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const uint32_t tile = strtoul(argv[i], nullptr, 0);
    for (int k = 0; k < 4; ++k) {
      // As mma_k_tile makes them: the tile's descriptor, stepped k16 steps on.
      printf("%u k %d %llu\n", tile, k,
             (unsigned long long)gl::desc_step(gl::operand_desc_at<0>(tile), gl::k_step_bytes<0>(k)));
      printf("%u mn %d %llu\n", tile, k,
             (unsigned long long)gl::desc_step(gl::operand_desc_at<1>(tile), gl::k_step_bytes<1>(k)));
    }
  }
  printf("group %u\n", gl::kMnGroupBytes);
  // desc_step against a fresh descriptor at every 16-byte offset a CTA's shared window can hold (228 KiB
  // on sm_90), for every step either major takes (the fp8 kernel's k32 steps are the K-major ones).
  // A CTA of a cluster has its rank in the address's bits 24 and up (masked off by the descriptor).
  unsigned long checked = 0, differ = 0;
  for (uint32_t rank = 0; rank < 8; rank += 7) {
    for (uint32_t off = 0; off < 228u * 1024u; off += 16) {
      const uint32_t addr = (rank << 24) | off;
      for (int k = 0; k < 4; ++k) {
        const uint32_t steps[2] = {gl::k_step_bytes<0>(k), gl::k_step_bytes<1>(k)};
        for (uint32_t step : steps) {
          if (off + step >= 228u * 1024u) continue;
          ++checked;
          differ += gl::desc_step(gl::operand_desc_at<0>(addr), step) != gl::operand_desc_at<0>(addr + step);
          differ += gl::desc_step(gl::operand_desc_at<1>(addr), step) != gl::operand_desc_at<1>(addr + step);
        }
      }
    }
  }
  printf("stepped %lu %lu\n", checked, differ);
}
"""

#: Tile addresses as the kernel has them: a stage base (1024-aligned) plus consumer c's A rows
#: (c x 64 x BK elements) or CTA r's B slice, all inside the 227 KiB a CTA may have (a 256-row MN-major
#: tile at the last one ends at 0x37C00).
TILES = [0x400, 0x400 + 64 * BK * 2, 0x10400, 0x10400 + 128 * BK * 2, 0x2FC00]


@pytest.fixture(scope="module")
def header_descriptors(tmp_path_factory) -> dict:
    """{(tile, major, k): descriptor} from wgmma.cuh's operand_desc_at and k_step_bytes."""
    d = tmp_path_factory.mktemp("desc")
    (d / "desc.cu").write_text(HOST_PROGRAM)
    subprocess.run([nvcc_path(), "-std=c++17", "-DGL_DTYPE_BF16", f"-I{INCLUDE_DIR}", str(d / "desc.cu"), "-o",
                    str(d / "desc")], check=True, capture_output=True)
    out = subprocess.run([str(d / "desc"), *map(str, TILES)], check=True, capture_output=True, text=True).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "group":
            table["group"] = int(parts[1])
        elif parts[0] == "stepped":
            table["stepped"] = (int(parts[1]), int(parts[2]))
        else:
            table[int(parts[0]), parts[1], int(parts[2])] = int(parts[3])
    return table


def mismatches(table: dict, major: str, rows: int, swap: bool = False) -> list:
    """Elements (tile, k step, mn, kk) whose wgmma address differs from TMA's, over ``rows`` M/N rows."""
    bad = []
    for tile in TILES:
        for step in range(4):
            desc = table[tile, major, step]
            if swap:  # a deliberately wrong descriptor: LBO and SBO exchanged
                start, lbo, sbo, _ = decode(desc)
                desc = (desc & ~((0x3FFF << 16) | (0x3FFF << 32))) | ((sbo >> 4) << 16) | ((lbo >> 4) << 32)
            for mn in range(rows):
                for kk in range(16):
                    if wgmma_address(desc, major, mn, kk) != tma_address(tile, major, mn, 16 * step + kk):
                        bad.append((tile, step, mn, kk))
    return bad


@needs_nvcc
@pytest.mark.parametrize("rows", [64, 128, 256], ids=lambda r: f"{r}rows")
def test_k_major_descriptor_reads_what_tma_wrote(header_descriptors, rows):
    """The model agrees with the ladder's K-major path (A: 64 rows per consumer; B: BN rows)."""
    assert mismatches(header_descriptors, "k", rows) == []


@needs_nvcc
@pytest.mark.parametrize("rows", [64, 128, 256], ids=lambda r: f"{r}rows")
def test_mn_major_descriptor_reads_what_tma_wrote(header_descriptors, rows):
    """Every element of every k16 step of an MN-major tile (64 rows of A, or B's 128/256 in 64-wide
    boxes) is read where TMA wrote it: LBO = one box, SBO = one atom down K, k step 2048 bytes."""
    assert header_descriptors["group"] == BOX_BYTES
    assert mismatches(header_descriptors, "mn", rows) == []


@needs_nvcc
def test_stepped_descriptor_is_a_fresh_one_across_the_shared_window(header_descriptors):
    """desc_step (mma_k_tile's and the fp8 kernel's k steps) gives operand_desc_at of the moved address
    at every 16-byte offset of a CTA's shared window, alone or with a cluster rank in bits 24 and up, for
    either major's steps."""
    checked, differ = header_descriptors["stepped"]
    assert checked > 100_000 and differ == 0


@needs_nvcc
def test_the_model_rejects_a_wrong_descriptor(header_descriptors):
    """LBO and SBO exchanged: every MN-major tile wider than one box is read from the wrong places."""
    assert mismatches(header_descriptors, "mn", 128, swap=True)


@needs_nvcc
def test_designer_descriptor_matches_the_header(header_descriptors):
    """design/smem.py's MN-major descriptor (what `gemm-ladder design` reports) has the header's fields."""
    for major in ("k", "mn"):
        p = plan_gemm(1024, 1024, 1024, tile=(128, 256, 64), stages=4, cluster=2, consumers=2, persistent=True,
                      c_ring=2, a_major=major, b_major=major)
        for name in ("a", "b"):
            d = p.wgmma_descriptors[name]
            assert d.major == major.upper()
            tile = TILES[0]
            assert d.template | ((tile & 0x3FFFF) >> 4) == header_descriptors[tile, major, 0]
            step = decode(header_descriptors[tile, major, 1])[0] - decode(header_descriptors[tile, major, 0])[0]
            assert d.k_step_bytes == step == (2048 if major == "mn" else 32)


# --- the designer's tensor maps ---------------------------------------------------------------------
@pytest.mark.parametrize("a_major", ["k", "mn"])
@pytest.mark.parametrize("b_major", ["k", "mn"])
@pytest.mark.parametrize("bn", [64, 128, 256])
def test_plan_tensor_maps_take_the_layout_and_pitch(a_major, b_major, bn):
    g = library_gemm(a_major, b_major, bn)
    m, n, k, lda, ldb, ldc = 1000, 520, 200, 1032, 544, 528
    p = g.plan(m, n, k, "bf16", lda=lda, ldb=ldb, ldc=ldc)
    a, b, c = p.tensor_maps["a"], p.tensor_maps["b"], p.tensor_maps["c"]
    assert a.global_strides == (2 * lda,) and b.global_strides == (2 * ldb,) and c.global_strides == (2 * ldc,)
    assert (a.global_dim, a.box_dim) == (((k, m), (64, 128)) if a_major == "k" else ((m, k), (64, 64)))
    # B: each CTA of the cluster loads half the tile: BN / 2 N rows (K-major), or whole 64-element boxes
    # (MN-major), or at BN = 64 (one box) half its 64 K lines
    mn_box = (64, 64) if bn >= 128 else (64, 32)
    assert (b.global_dim, b.box_dim) == (((k, n), (64, bn // 2)) if b_major == "k" else ((n, k), mn_box))
    assert c.global_dim == (n, m) and c.box_dim == (64, 64)
    for spec in (a, b, c):
        spec.validate()
    d = p.kernel_defines()
    assert (d["GL_A_MN_MAJOR"], d["GL_B_MN_MAJOR"]) == (a_major == "mn", b_major == "mn")
    assert d == g.defines("bf16")
    # the stage's bytes are the whole A and B tiles, however many boxes they take
    assert p.load_protocol.expect_tx_bytes == d["GL_EXPECT_TX_BYTES"] == (128 + bn) * 64 * 2


def test_plan_refuses_a_pitch_tma_cannot_take():
    g = library_gemm("mn", "k")
    with pytest.raises(PlanRefused, match="globalStrides"):
        g.plan(1000, 512, 512, "bf16", lda=1001)


def test_level_defines_stay_k_major():
    from gemm_ladder.levels import LEVELS

    for number in range(4, 10):
        d = LEVELS[number].defines("bf16")
        assert (d["GL_A_MN_MAJOR"], d["GL_B_MN_MAJOR"]) == (0, 0), number


def test_an_mn_major_slice_must_be_whole_boxes():
    """Per CTA, an MN-major B slice is whole 64-element boxes (BN 128, 256), or the tile is one box whose
    BK lines split into whole 8-line atoms per CTA (BN 64: 32 lines each); anything else is refused."""
    with pytest.raises(PlanRefused, match="boxes"):  # 96 N rows per CTA: neither
        kernel_defines_for("bf16", (128, 192, 64), 4, 2, 2, producer_warpgroup=True, c_ring=1, b_major="mn")
    with pytest.raises(PlanRefused, match="8-line"):  # one box, but BK 8 gives 4 lines per CTA
        kernel_defines_for("bf16", (128, 64, 8), 4, 2, 2, producer_warpgroup=True, c_ring=1, b_major="mn")
    d = kernel_defines_for("bf16", (128, 64, 64), 8, 2, 2, producer_warpgroup=True, c_ring=1, b_major="mn")
    assert (d["GL_B_BOX_ROWS"], d["GL_B_MN_MAJOR"], d["GL_C_RING"], d["GL_C_PANELS"]) == (32, 1, 1, 1)
    assert d["GL_EXPECT_TX_BYTES"] == (128 + 64) * 64 * 2


def test_k_split_mn_major_slices_land_where_one_box_would():
    """At BN 64 an MN-major B stage is one 64-element box of BK lines, loaded as two boxes of 32 lines
    (the plan's box), rank r's at line 32 r (stage_ring.cuh): 32 x 128 bytes = 4096, a multiple of the
    1024-byte swizzle atom, so every element sits where the whole box's TMA write (the descriptor
    model above) puts it."""
    p = library_gemm("k", "mn", 64).plan(1024, 1024, 1024, "bf16")
    lines = p.tensor_maps["b"].box_dim[1]
    assert lines == 32 and (lines * 128) % 1024 == 0
    tile = 0x10400
    for r in range(2):
        for j in range(lines):
            for mn in range(64):
                whole = tma_address(tile, "mn", mn, r * lines + j)
                assert swizzle128(tile + r * lines * 128 + j * 128 + mn * 2) == whole


# --- the stream-K split policies ---------------------------------------------------------------------
def covers_every_iteration_once(t) -> bool:
    seen = {}
    for c in range(t.clusters):
        for seg in t.segments(c):
            for kt in range(seg.kb, seg.ke):
                seen[seg.unit, kt] = seen.get((seg.unit, kt), 0) + 1
    want = {(u, kt) for u in range(t.first_unit, t.units) for kt in range(t.k_tiles)}
    return set(seen) == want and all(v == 1 for v in seen.values())


@pytest.mark.parametrize("units,resident,k_tiles", [(16, 66, 16), (32, 66, 16), (1, 66, 1), (3, 66, 5),
                                                    (256, 66, 64), (1024, 66, 128), (67, 66, 3)])
def test_split_policies(units, resident, k_tiles):
    none = split_schedule(units, resident, k_tiles, "none")
    assert none.clusters == min(units, resident) and none.tail_units == 0
    tail = split_schedule(units, resident, k_tiles, "tail")
    assert tail.clusters == none.clusters and covers_every_iteration_once(tail)
    every = split_schedule(units, resident, k_tiles, "all")
    assert every.first_unit == 0 and every.clusters == min(resident, units * k_tiles)
    assert every.total >= every.clusters  # each cluster has at least one K iteration
    assert covers_every_iteration_once(every)


def test_split_all_fills_the_gpu_where_tiles_are_few():
    """1024^3 at 128 x 128: 32 units on 66 resident clusters; 'all' puts every cluster to work."""
    assert split_schedule(32, 66, 16, "none").clusters == 32
    assert split_schedule(32, 66, 16, "all").clusters == 66


def test_split_refusals():
    with pytest.raises(ValueError, match="split"):
        split_schedule(4, 66, 4, "some")
    with pytest.raises(ValueError, match="32-bit"):
        split_schedule(2**16, 66, 2**10, "all")
    assert (66 + 1) * 2**16 * 2**10 >= INT32_LIMIT
    assert SPLITS == ("tail", "all", "none", "wave")


def test_wave_split_schedule():
    """"wave": the last partial wave and one whole wave split over the grid, two contributors at most;
    "all" below two waves; nothing with whole waves (design.stream_k.plan_wave)."""
    s = split_schedule(200, 66, 64, "wave")  # ViT-L fc2 at BN 256: 3.03 waves
    assert (s.clusters, s.first_unit, s.tail_units, s.max_contributors) == (66, 132, 68, 2)
    assert split_schedule(72, 66, 56, "wave") == split_schedule(72, 66, 56, "all")
    assert split_schedule(40, 66, 16, "wave") == split_schedule(40, 66, 16, "all")
    assert split_schedule(264, 66, 64, "wave").tail_units == 0
    for units in range(132, 700, 13):  # every iteration of the tail once, in the cluster ranges the kernel walks
        s = split_schedule(units, 66, 16, "wave")
        seen = [(seg.unit, kt) for c in range(s.clusters) for seg in s.segments(c) for kt in range(seg.kb, seg.ke)]
        assert sorted(seen) == [(u, kt) for u in range(s.first_unit, units) for kt in range(16)]
        assert s.max_contributors <= 2 and s.first_unit % 66 == 0


# --- the rules supports() names (CPU tensors: every rule but the device is checked first) --------------
def views(m=256, n=384, k=128, a_major="k", b_major="mn", dtype=torch.bfloat16, lda=None, ldb=None, offset=0):
    """(A, B) views in the given majors over fresh storage, with optional pitch and element offset."""
    def make(rows, major, ld):
        ld = ld or (k if major == "k" else rows)
        outer, inner = (rows, k) if major == "k" else (k, rows)
        store = torch.randn(outer * ld + offset, dtype=torch.float32).to(dtype)[offset:].view(outer, ld)[:, :inner]
        return operand_view(store if major == "k" else store.t(), k_dim=1)
    return make(m, a_major, lda), make(n, b_major, ldb)


def test_supports_names_each_rule():
    g = library_gemm("k", "mn")
    a, b = views()
    c = torch.empty(256, 384, dtype=torch.bfloat16)
    assert "CUDA device" in g.supports(a, b, c)  # everything else holds
    assert "dtype" in g.supports(*views(dtype=torch.float32), c)
    assert "one dtype" in g.supports(a, b, c.float())
    assert "mn-major" in g.supports(*views(a_major="mn"), c) and "library_gemm(a_major='mn'" in g.supports(*views(a_major="mn"), c)
    assert "K = " in g.supports(a, views(k=64)[1], c)
    assert "shape" in g.supports(a, b, torch.empty(256, 383, dtype=torch.bfloat16))
    assert "row-major" in g.supports(a, b, torch.empty(384, 256, dtype=torch.bfloat16).t())
    assert "multiples of 16" in g.supports(*views(lda=130), c)  # 260-byte pitch
    assert "multiples of 16" in g.supports(*views(offset=3), c)  # base 6 bytes past an aligned one
    assert "multiples of 16" in g.supports(a, b, torch.empty(256, 389, dtype=torch.bfloat16)[:, :384])
    assert "empty" in g.supports(*views(k=0), torch.empty(256, 384, dtype=torch.bfloat16))
    assert "OperandView" in g.supports(a.tensor, b, c)
    # padded pitch and a 16-byte offset are fine
    assert "CUDA device" in g.supports(*views(lda=136, ldb=392, offset=8), c)
    # N = 300 (600 bytes): the TMA store's last chunk would reach c's padding, unless c is a workspace
    a3, b3 = views(n=300, ldb=304)
    c3 = torch.empty(256, 320, dtype=torch.bfloat16)[:, :300]
    assert "padding" in g.supports(a3, b3, c3)
    assert "CUDA device" in g.supports(a3, b3, c3, c_padding_writable=True)


def test_the_register_store_build_takes_any_output_pitch_and_base():
    """c_from_registers: the output needs no TMA (any pitch >= N, N = 300, a base 2 bytes past 16, a
    single row), still row-major and in the inputs' dtype (float32 in its out_fp32 build); the operands'
    TMA rules stay."""
    g = library_gemm("k", "mn", c_from_registers=True)
    f32 = library_gemm("k", "mn", c_from_registers=True, out_fp32=True)
    a, b = views()
    bf = torch.bfloat16
    for c in (torch.empty(256, 389, dtype=bf)[:, :384], torch.empty(256, 385, dtype=bf)[:, 1:],
              torch.empty(256, 384, dtype=bf)):
        assert "CUDA device" in g.supports(a, b, c)  # every other rule holds
        assert "one dtype" in g.supports(a, b, c.float()) and "float32" in f32.supports(a, b, c)
        assert "CUDA device" in f32.supports(a, b, torch.empty(256, 385, dtype=torch.float32)[:, 1:])
    a3, b3 = views(n=300, ldb=304)
    assert "CUDA device" in g.supports(a3, b3, torch.empty(256, 300, dtype=bf))  # no padding rule
    assert "row-major" in g.supports(a, b, torch.empty(384, 256, dtype=bf).t())
    assert "pitch" in g.supports(a, b, torch.empty(256, 400, dtype=bf).as_strided((256, 384), (383, 1)))
    assert "multiples of 16" in g.supports(*views(lda=130), torch.empty(256, 384, dtype=bf))
    # A's pitch in A's own 2-byte elements: 132 x 2 = 264 bytes (132 x 4 = 528, the float32 c's size, would pass).
    assert "pitch 264 bytes" in f32.supports(*views(lda=132), torch.empty(256, 384, dtype=torch.float32))
    assert g.name == "sm90_gemm_kmn_bn256_creg" and f32.name.endswith("_creg_f32")


def test_launch_refuses_before_any_launch():
    from gemm_ladder.contract import GemmInputError

    g = library_gemm("k", "k")
    a, b = views(b_major="k")
    with pytest.raises(GemmInputError, match="CUDA"):
        g.launch(a, b, torch.empty(256, 384, dtype=torch.bfloat16))
    with pytest.raises(GemmInputError, match="row- nor column-major"):
        g(torch.randn(8, 16, 4).to(torch.bfloat16)[:, :, 0], torch.randn(8, 16).to(torch.bfloat16))


def test_library_gemm_instances_are_cached_and_checked():
    assert library_gemm("mn", "k", 128) is library_gemm("mn", "k", 128)
    assert library_gemm("k", "k").stages == 4 and library_gemm("k", "k", 128).stages == 6
    assert library_gemm("k", "k", 64).stages == 8 and library_gemm("k", "k", 64).c_ring == 1
    assert library_gemm("k", "k", 128).c_ring == library_gemm("k", "k").c_ring == 2
    # The register-store builds stage no C: the ring takes the panel rings' space (the docstring's numbers).
    assert [library_gemm("k", "k", bn, c_from_registers=True).stages for bn in (256, 128, 64)] == [4, 7, 9]
    assert all(library_gemm("k", "k", bn, c_from_registers=True).c_ring == 0 for bn in (256, 128, 64))
    assert library_gemm("k", "k").tile == (128, 256, 64) and library_gemm("k", "k", 128).tile == (128, 128, 64)
    with pytest.raises(ValueError, match="a_major"):
        library_gemm("row", "k")
    with pytest.raises(ValueError, match="bn"):
        library_gemm("k", "k", 96)
    # BN 192: three panels, a ring of one buffer (the ring divides the panels), five stages; a K-major B only
    wide = library_gemm("mn", "k", 192)
    assert (wide.stages, wide.c_ring, wide.tile) == (5, 1, (128, 192, 64))
    assert wide.build_defines("bf16")["GL_B_BOX_ROWS"] == 96
    with pytest.raises(ValueError, match="K-major B"):
        library_gemm("k", "mn", 192)
    assert isinstance(views()[0], OperandView)
    assert ceil_div(1, 1) == 1
