"""The dispatcher's decisions on meta tensors (no GPU): orientation, in-place and repacked operands
and why, output paths, the small-M rule, the cost model's choice of tile and split, its table and
fit, and explain's data and text.

Most tests stand in kernels with simple, stated rules (TMA-describable operands; a row-major output
with a 16-byte pitch; the small-M kernel's K-major operands and any output) so that they test the
dispatcher, not a kernel's current limits; the last ones use the real kernels' ``supports``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest
import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.contract import OutsideDomainError
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.dispatch.heuristic import CostModel, fit, load_table, rank, work
from gemm_ladder.dispatch.route import ASSUMED_DEVICE, DeviceFacts
from gemm_ladder.dispatch.validate import NotSupportedError
from gemm_ladder.library.kernel import KernelConfig

BF16 = torch.bfloat16


def meta(*shape, dtype=BF16):
    return torch.empty(shape, dtype=dtype, device="meta")


def _row_major_16(c: torch.Tensor) -> str | None:
    if c.shape[1] > 1 and c.stride(1) != 1:
        return "c must be row-major"
    if c.data_ptr() % 16 or (c.shape[0] > 1 and (c.stride(0) * c.element_size()) % 16):
        return "c: a TMA store needs a 16-byte aligned base and pitch"
    return None


@dataclass(frozen=True)
class FakeGeneral:
    """Stands for library_gemm(a_major, b_major, bn): TMA operands of any major, a TMA-stored output."""

    a_major: str
    b_major: str
    bn: int
    fp32: bool = True
    splits: tuple[str, ...] = ("none", "tail", "all")
    stages: int = 4
    cluster: int = 2
    source: str = "library/sm90_gemm.cu"
    registers: bool = False  # the build that stores C from registers: any row-major output, any pitch

    @property
    def name(self):
        return f"fake general {self.a_major}{self.b_major} BN {self.bn}" + (" from registers" if self.registers else "")

    @property
    def tile(self):
        return (128, self.bn, 64)

    def supports(self, a, b, c, *, c_padding_writable=False):
        for n, v, major in (("a", a, self.a_major), ("b", b, self.b_major)):
            assert v.major == major, "the dispatcher asked the kernel built for another order"
            if not v.tma_ok:
                return f"{n}: not TMA-describable"
        if c.dtype == torch.float32 and not self.fp32:
            return "c: this kernel writes the inputs' dtype only"
        if self.registers:
            return None if c.shape[1] == 1 or c.stride(1) == 1 else "c must be row-major"
        if (c.shape[1] * c.element_size()) % 16 and not c_padding_writable:
            return "c: the TMA store's last 16-byte chunk would reach into c's padding"
        return _row_major_16(c)

    def plan(self, m, n, k, dtype):
        from gemm_ladder.design.plan import plan_gemm

        return plan_gemm(m, n, k, dtype, tile=self.tile, stages=self.stages, cluster=2, consumers=2, persistent=True)

    def launch(self, *args, **kwargs):
        raise AssertionError("CPU tests never launch")


@dataclass(frozen=True)
class FakeSmallM:
    """Stands for small_m_gemm(m): K-major TMA operands, any row- or column-major output."""

    m: int
    name: str = "fake small M"
    bn: int | None = None  # the bucket the M-tile rule picked (None: one tile)

    def supports(self, a, b, c):
        for n, v in (("a", a), ("b", b)):
            if v.major != "k" or not v.tma_ok:
                return f"{n}: the small-M kernel reads K-major TMA operands"
        return None

    def plan(self, m, n, k, dtype):
        raise ValueError("no plan in this test")

    def ctas(self, m, n, k, resident, splits=None):
        return min(resident, -(-n // 128) * -(-k // 64))

    def split_text(self):
        return "K split by the small-M rule (fake)"


class FakeFamily:
    """Stands for a kernel family (library/kernel.py's Kernel protocol): each config it is asked about
    names the fake kernel object made for it."""

    splits = ("none", "tail", "all")

    def __init__(self):
        self.objects = {}

    def config(self, fake, **fields):
        config = KernelConfig(f"fake_{type(fake).__name__}", extra=(("fake", len(self.objects)),), **fields)
        config = next((c for c, f in self.objects.items() if f == fake), config)
        self.objects[config] = fake
        return config

    def supports(self, config, problem, **rules):
        return self.objects[config].supports(problem.a, problem.b, problem.c, **rules)

    def describe(self, config):
        k = self.objects[config]
        out = {"name": k.name, "source": getattr(k, "source", "fake")}
        for attr in ("tile", "stages", "cluster", "bn"):
            value = getattr(k, attr, None)
            if value is not None:
                out[attr] = list(value) if isinstance(value, tuple) else value
        return out

    def bind(self, config, problem, **options):
        raise AssertionError("CPU tests never launch")

    launch = build = bind


@pytest.fixture
def fakes(monkeypatch):
    state = {"fp32": True, "registers": True}
    fam = FakeFamily()
    real_family, real_object = K.family, K.kernel_object
    monkeypatch.setattr(K, "family", lambda c: fam if c.family.startswith("fake_") else real_family(c))
    monkeypatch.setattr(K, "kernel_object", lambda c: fam.objects[c] if c.family.startswith("fake_") else real_object(c))
    # The fake general kernel is built for level 9's 2-CTA clusters only (as the route ranks a config by its cluster).
    monkeypatch.setattr(K, "general", lambda am, bm, bn, dtype="bf16", cluster=2, tile_m=128: fam.config(
        FakeGeneral(am, bm, bn, fp32=state["fp32"]), cluster=cluster))
    monkeypatch.setattr(K, "general_from_registers", lambda am, bm, bn, dtype="bf16", out_fp32=False, cluster=2, out_e4m3=False: fam.config(
        FakeGeneral(am, bm, bn, fp32=state["fp32"], registers=True), cluster=cluster) if state["registers"] else None)
    monkeypatch.setattr(K, "general_bns", lambda: (256, 128))
    monkeypatch.setattr(K, "general_clusters", lambda: (2,))
    monkeypatch.setattr(K, "general_tile_ms", lambda: (128,))  # the fake is built with 128-row tiles only
    monkeypatch.setattr(K, "small_m", lambda m, bn=None, dtype="bf16", **kw: fam.config(FakeSmallM(m, bn=bn))
                        if 1 <= m <= 256 else None)
    dispatch.clear_cache()
    yield state
    dispatch.clear_cache()


def ops(e):
    return {op["argument"]: op for op in e.operands}


def test_aligned_operands_are_read_in_place_in_all_four_orders(fakes):
    m = n = k = 4096
    row_a, col_a = meta(m, k), meta(k, m).T
    row_b, col_b = meta(k, n), meta(n, k).T  # col_b = w.T of a row-major weight: F.linear's layout
    for a, b, majors in ((row_a, col_b, ("k", "k")), (row_a, row_b, ("k", "mn")), (col_a, col_b, ("mn", "k")),
                         (col_a, row_b, ("mn", "mn"))):
        e = gemm_ladder.explain(a, b)
        assert e.kind == "general"
        o = ops(e)
        assert o["a"]["path"] == o["b"]["path"] == "in place", e
        assert (o["a"]["major"], o["b"]["major"]) == majors
        assert e.output["path"] == "in place" and len(e.launches) == 1


def test_unaligned_shapes_repack_both_operands_and_store_c_from_registers(fakes):
    """An odd N (4095: a pitch of 8190 bytes) is written in place by the build that stores C from
    registers: no output workspace, no copy back; the operands are still repacked (odd K)."""
    e = gemm_ladder.explain(meta(4097, 4093), meta(4093, 4095))
    o = ops(e)
    assert o["a"]["workspace"] == [4097, 4096] and o["b"]["workspace"] == [4096, 4096]
    assert e.output["path"] == "in place" and e.output["output_path"] == "C from registers"
    assert e.output["workspace"] is None and e.kernel["name"].endswith("from registers")
    assert len(e.launches) == 2 and not any("copied back" in x or "back into c" in x for x in e.launches)
    assert "C from registers: written in place" in str(e)


def test_unaligned_shapes_repack_both_operands_in_one_launch_and_copy_back(fakes):
    fakes["registers"] = False  # without the register-store build: the workspace and the copy back
    e = gemm_ladder.explain(meta(4097, 4093), meta(4093, 4095))
    o = ops(e)
    assert o["a"]["why"].startswith("leading dimension 4093 elements = 8186 bytes is not a multiple of 16")
    assert o["a"]["workspace"] == [4097, 4096] and o["a"]["major"] == "k" and o["a"]["ld"] == 4096
    # b (K, N) row-major is MN-major; its copy keeps the major: K rows (padded to 4096) of 4096.
    assert o["b"]["major"] == "mn" and o["b"]["workspace"] == [4096, 4096]
    assert not o["a"]["transposing_copy"] and not o["b"]["transposing_copy"]
    assert e.output["path"] == "workspace, copied back" and e.output["workspace"] == [4097, 4096]
    assert "row pitch 4095 elements = 8190 bytes" in e.output["why"]
    assert len(e.launches) == 3 and e.launches[0].startswith("repack a (A) and b (B) (one launch")
    assert "copied back" in str(e) and "repacked into a 4097 x 4096 workspace" in str(e)
    assert e.output["output_path"] == "workspace + copy back" and "workspace + copy back" in str(e)


def test_padded_pitch_offset_base_and_strided_views(fakes):
    buf = meta(300, 4104)
    b = meta(512, 256).T  # (256, 512) column-major: K-major B, in place
    assert ops(gemm_ladder.explain(buf[:, :256], b))["a"]["path"] == "in place"  # pitch 8208 bytes
    odd = meta(300, 4100)[:, :256]
    assert "8200 bytes is not a multiple of 16" in ops(gemm_ladder.explain(odd, b))["a"]["why"]
    shifted = buf[:, 1:257]
    assert ops(gemm_ladder.explain(shifted, b))["a"]["why"].startswith("base address is 2 bytes past")
    strided = meta(600, 600)[::2, ::2][:, :256]
    o = ops(gemm_ladder.explain(strided, b))["a"]
    assert o["why"].startswith("neither K- nor MN-major") and o["workspace"] == [300, 256]


def test_output_orientation_and_pitch(fakes):
    a, b = meta(512, 256), meta(256, 384)
    e = gemm_ladder.explain(a, b, out=meta(384, 512).T)
    assert e.output["orientation"].startswith("D^T = B A^T") and e.output["path"] == "in place"
    assert e.output["output_path"] == "TMA store"
    assert ops(e)["b"]["operand"] == "A" and ops(e)["a"]["operand"] == "B"
    e = gemm_ladder.explain(a, b, out=meta(512, 390)[:, :384])  # pitch 780 bytes: from registers, in place
    assert e.output["path"] == "in place" and e.output["output_path"] == "C from registers"
    assert e.output["orientation"].startswith("D = A B^T")
    # A transposed out with an odd pitch: D^T into c.T (row-major, pitch 513), from registers.
    e = gemm_ladder.explain(a, b, out=meta(384, 513)[:, :512].T)
    assert e.output["orientation"].startswith("D^T = B A^T") and e.output["output_path"] == "C from registers"
    e = gemm_ladder.explain(a, b, out=meta(512, 392)[:, :384])  # pitch 784 bytes
    assert e.output["path"] == "in place" and e.output["out"] == "given" and e.output["output_path"] == "TMA store"
    fakes["registers"] = False
    dispatch.clear_cache()
    e = gemm_ladder.explain(a, b, out=meta(512, 390)[:, :384])
    assert e.output["path"] == "workspace, copied back" and "780 bytes" in e.output["why"]


def test_small_m_goes_to_the_small_m_kernel_when_it_reads_b_in_place(fakes):
    w = meta(4096, 4096)
    e = gemm_ladder.explain(meta(16, 4096), w.T)
    assert e.kind == "small_m" and e.kernel["name"] == "fake small M" and "small M" in e.heuristic["rule"]
    assert e.split.startswith("K split by the small-M rule")
    # B row-major (MN-major): the small-M kernel would copy the whole weight; the general kernel reads it.
    e = gemm_ladder.explain(meta(16, 4096), w)
    assert e.kind == "general" and ops(e)["b"]["path"] == "in place"
    # A column-major x: a copy of the small A, then the small-M kernel.
    e = gemm_ladder.explain(meta(4096, 16).T, w.T)
    assert e.kind == "small_m" and ops(e)["a"]["transposing_copy"]
    # An odd K: both kernels need a copy of the weight, so the small-M kernel still wins.
    e = gemm_ladder.explain(meta(16, 4093), meta(4096, 4093).T)
    assert e.kind == "small_m" and ops(e)["b"]["path"] == "repacked" and not ops(e)["b"]["transposing_copy"]
    # Small N: D^T = B A^T puts N on the kernel's M, written into a column-major view of c.
    e = gemm_ladder.explain(w, meta(4096, 8))
    assert e.kind == "small_m" and e.output["orientation"].startswith("D^T")
    assert gemm_ladder.explain(meta(257, 4096), w.T).kind == "general"


def test_float32_output(fakes):
    a, b = meta(512, 256), meta(256, 384)
    assert gemm_ladder.explain(a, b, out_dtype=torch.float32).out_dtype == "float32"
    fakes["fp32"] = False
    dispatch.clear_cache()
    with pytest.raises(NotSupportedError, match="out_dtype=torch.float32: no library kernel writes a float32"):
        gemm_ladder.explain(a, b, out_dtype=torch.float32)


def test_no_kernel_names_the_refusals(monkeypatch, fakes):
    monkeypatch.setattr(K, "general", lambda *a, **kw: None)
    monkeypatch.setattr(K, "general_from_registers", lambda *a, **kw: None)
    dispatch.clear_cache()
    with pytest.raises(OutsideDomainError, match="no general kernel reads A k-major"):
        gemm_ladder.explain(meta(512, 256), meta(384, 256).T)


def test_routes_are_cached_by_layout(fakes):
    a, b = meta(512, 256), meta(384, 256).T
    c = meta(512, 384)
    r1 = dispatch.decide(a, b, c, given=False)
    assert dispatch.decide(meta(512, 256), meta(384, 256).T, meta(512, 384), given=False) is r1
    shifted = meta(600, 256)[1:513]  # same shape and strides, base 512 bytes on: still aligned
    assert dispatch.decide(shifted, b, c, given=False) is r1
    odd = meta(600, 257)[:512, 1:]
    assert dispatch.decide(odd, b, c, given=False) is not r1


def test_mid_sizes_take_the_cost_models_fastest_candidate(fakes):
    model = load_table()
    for m, n, k in ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 1024, 4096), (4096, 4096, 4096)):
        e = gemm_ladder.explain(meta(m, k), meta(n, k).T)
        cands = e.heuristic["candidates"]
        assert {(c["bn"], c["split"]) for c in cands} == {(bn, s) for bn in (256, 128) for s in ("none", "tail", "all")}
        assert cands[0]["predicted_us"] == min(c["predicted_us"] for c in cands)
        assert (e.kernel["bn"], e.split) == (cands[0]["bn"], cands[0]["split"])
        assert e.heuristic["provenance"] == model.provenance


def test_a_tuned_table_changes_the_choice_and_is_named(fakes, monkeypatch):
    tuned = CostModel({256: 0.6, 128: 0.25}, {256: 5.0, 128: 5.0}, 3.0, 5.0, "tuned on NVIDIA H200 2026-12-02 abc1234")
    monkeypatch.setattr(dispatch, "cost_model", lambda device=None: tuned)
    import gemm_ladder.api as api

    monkeypatch.setattr(api, "decide", lambda *a, **kw: dispatch.decide(*a, model=tuned, **kw))
    e = gemm_ladder.explain(meta(1024, 1024), meta(1024, 1024).T)
    assert (e.kernel["bn"], e.split) == (128, "none")  # splits made expensive, narrow tiles cheap
    assert e.heuristic["provenance"] == "tuned on NVIDIA H200 2026-12-02 abc1234"
    assert "tuned on NVIDIA H200" in str(e)


def test_explain_is_data_and_text(fakes):
    e = gemm_ladder.explain(meta(4097, 4093), meta(4093, 4095))
    d = e.to_dict()
    json.dumps(d)
    for key in ("kernel", "tile", "stages", "cluster", "grid", "split", "operands", "output", "launches", "heuristic",
                "plan", "device"):
        assert d[key] is not None, key
    assert d["device"].endswith("(assumed: no GPU to ask)")
    text = str(e)
    for piece in ("kernel:", "tile [128,", "grid", "split", load_table().provenance, "plan:"):
        assert piece in text, piece


def test_an_odd_k_is_read_from_copies_with_an_aligned_pitch(monkeypatch):
    """A pitch of K = 4093 elements (8186 bytes) is no multiple of 16: both operands are read from
    copies with a 4096-element pitch; the kernel keeps K = 4093 (the TMA box's K tail reads zeros)."""
    monkeypatch.setattr(K, "small_m", lambda m, *a, **kw: None)
    dispatch.clear_cache()
    route = dispatch.decide(meta(512, 4093), meta(1024, 4093).T, meta(512, 1024), given=False, device=ASSUMED_DEVICE)
    assert route.kind == "general" and route.k == 4093
    for path, rows in ((route.a_path, 512), (route.b_path, 1024)):
        assert "not a multiple of 16" in path.repack and path.workspace == (rows, 4096) and path.ld == 4096
    dispatch.clear_cache()


def test_a_workspace_output_may_take_the_tma_stores_padding(monkeypatch):
    """N = 300 bf16 is 600 bytes, no whole number of 16-byte chunks: without the register-store build
    the general kernel writes into a workspace (whose padding its TMA store may overwrite) and the
    repack copies it back."""
    monkeypatch.setattr(K, "general_from_registers", lambda *a, **kw: None)  # no register-store build
    dispatch.clear_cache()
    route = dispatch.decide(meta(4096, 4096), meta(4096, 300), meta(4096, 300), given=True, device=ASSUMED_DEVICE)
    assert route.kind == "general" and route.c_path.copy_back and dict(route.options)["c_padding_writable"]
    dispatch.clear_cache()


def unaligned_out(m, n, out):
    """(c, given) for an (m, n) output on the meta device: allocated (``out`` None), or given as a view
    with an odd pitch (("pitch", ld)), a base ``off`` elements past 16 bytes (("offset", off)) or
    column-major with an odd pitch (("transposed", ld))."""
    if out is None:
        return meta(m, n), False
    if out[0] == "pitch":
        return meta(m, out[1])[:, :n], True
    if out[0] == "offset":
        return meta(m, n + 8)[:, out[1]:out[1] + n], True
    return meta(n, out[1])[:, :m].T, True


@pytest.mark.parametrize("shape,out", [
    ((4096, 4096, 300), None),                      # N = 300: 600-byte rows
    ((4097, 4093, 4095), None),                     # the odd benchmark shape
    ((1000, 512, 257), None),                       # N = 257 (N = 1..256 goes to the small-M kernel as D^T)
    ((1000, 512, 384), ("pitch", 390)),             # an aligned N with a 780-byte pitch
    ((1000, 512, 384), ("offset", 1)),              # a base 2 bytes past a 16-byte boundary
    ((1000, 512, 384), ("transposed", 1001)),       # a column-major out with an odd pitch: D^T into c.T
])
def test_unaligned_outputs_are_stored_from_registers_by_the_real_kernels(shape, out):
    """The real general kernels on meta tensors: every output a TMA store cannot write goes to the
    build that stores C from registers, in place, in the orientation that makes it row-major; nothing
    is copied back and the workspace rule (c_padding_writable) is not used."""
    m, k, n = shape
    c, given = unaligned_out(m, n, out)
    dispatch.clear_cache()
    route = dispatch.decide(meta(m, k), meta(k, n), c, given=given, device=ASSUMED_DEVICE)
    assert route.kind == "general" and route.kernel.c_from_registers and not route.kernel.out_fp32
    assert route.c_path.workspace is None and route.c_path.store == "C from registers"
    assert route.c_path.transposed == (out is not None and out[0] == "transposed")
    assert "c_padding_writable" not in dict(route.options)
    assert route.kernel.name.endswith("_creg")
    dispatch.clear_cache()


def test_aligned_outputs_keep_the_tma_store():
    dispatch.clear_cache()
    for c in (meta(4096, 4096), meta(4096, 4104)[:, :4096], meta(4096, 4096 + 8)[:, 8:]):
        route = dispatch.decide(meta(4096, 4096), meta(4096, 4096), c, given=True, device=ASSUMED_DEVICE)
        assert not route.kernel.c_from_registers and route.c_path.store == "TMA store" and route.c_path.workspace is None
    dispatch.clear_cache()


def test_float32_output_from_the_general_kernel_is_stored_from_registers():
    """out_dtype=torch.float32 past the small-M range: the register-store build's float32 variant,
    in place (no NotSupportedError, no copy) where b's pitch suits a tensor map (N = 304: 608 bytes);
    with N = 300 (600 bytes, in b's own 2-byte elements) b is repacked, the output still in place."""
    dispatch.clear_cache()
    e = gemm_ladder.explain(meta(1000, 512), meta(512, 304), out_dtype=torch.float32)
    assert e.kind == "general" and e.out_dtype == "float32" and e.output["output_path"] == "C from registers"
    assert e.kernel["name"].endswith("_creg_f32") and len(e.launches) == 1
    e = gemm_ladder.explain(meta(1000, 512), meta(512, 300), out_dtype=torch.float32)
    assert e.kernel["name"].endswith("_creg_f32") and e.output["output_path"] == "C from registers"
    assert len(e.launches) == 2 and e.launches[0].startswith("repack b")
    dispatch.clear_cache()


def test_real_kernels_on_meta_tensors():
    """The library's kernels decide on meta tensors too (their device rule, checked last, set aside)."""
    dispatch.clear_cache()
    e = gemm_ladder.explain(meta(4097, 4093), meta(4093, 4095))
    assert e.kind == "general" and {op["path"] for op in e.operands} == {"repacked"}
    assert all(op["k"] == 4093 for op in e.operands)  # read with the true K: TMA zero-fills the tail
    assert e.output["output_path"] == "C from registers" and e.kernel["name"] == "sm90_gemm_kmn_bn256_creg"
    e = gemm_ladder.explain(meta(4096, 4096), meta(4096, 4096))  # b row-major: MN-major, in place
    assert {op["path"] for op in e.operands} == {"in place"}
    e = gemm_ladder.explain(meta(16, 4096), meta(4096, 4096).T)
    assert e.kind == "small_m"
    dispatch.clear_cache()


# --- the cost model ---------------------------------------------------------------------------


def test_work_counts_the_busiest_cluster():
    w = work(4096, 4096, 4096, 256, "none", 66)
    assert (w.units, w.k_tiles, w.whole_iters, w.split_iters) == (256, 64, 4 * 64, 0)
    w = work(4096, 4096, 4096, 256, "tail", 66)  # 58 of 66 clusters busy in the last wave: not split
    assert (w.whole_iters, w.split_iters) == (4 * 64, 0)
    w = work(8192, 8192, 8192, 256, "tail", 66)  # 1024 units: 34 in the last wave, more than 40% idle
    assert (w.units, w.whole_iters, w.split_iters, w.grid_clusters) == (1024, 15 * 128, -(-34 * 128 // 66), 66)
    w = work(4096, 4096, 4096, 256, "all", 66)
    assert (w.whole_iters, w.split_iters) == (0, -(-256 * 64 // 66))
    w = work(256, 256, 64 * 40, 256, "all", 66)  # one unit of 40 iterations: 40 clusters, one each
    assert (w.grid_clusters, w.whole_iters, w.split_iters) == (40, 0, 1)
    w = work(1024, 1024, 1024, 256, "tail", 66)  # one partial wave is not a tail
    assert (w.units, w.whole_iters, w.split_iters) == (16, 16, 0)
    w = work(256, 256, 64, 256, "all", 66)  # one unit, one K iteration: nothing to split
    assert (w.whole_iters, w.split_iters) == (1, 0)
    with pytest.raises(ValueError, match="split must be one of"):
        work(1, 1, 1, 256, "some", 66)


def test_work_counts_the_split_units_operand_bytes():
    """split_bytes: A's rows and B's columns that the split units read, over all of K, 2 bytes an element."""
    w = work(511, 3072, 24576, 192, "all", 66)  # every unit split: all of A (511 rows) and all of B
    assert w.split_bytes == (511 + 3072) * 24576 * 2
    w = work(8192, 8192, 8192, 256, "tail", 66)  # units 990..1023: the last group's 8 unit rows, its N tiles 27..31
    assert w.split_bytes == (8 * 256 + 5 * 256) * 8192 * 2
    # partial last tiles count as they are, against a walk of the split units: Llama-3's down_proj at 1745 rows,
    # one CTA, BN 192, "tail" (counted as 66.06 MB for 61.04, across the H200's 62.9 MB L2, before this was exact),
    # and a 2-CTA unit whose second tile is empty (M = 333: three 128-row tiles)
    from gemm_ladder.design.plan import unit_coords
    from gemm_ladder.design.stream_k import plan_tail

    for m, n, k, bn, cluster, split in ((1745, 4096, 14336, 192, 1, "tail"), (333, 3072, 8192, 128, 2, "all")):
        w = work(m, n, k, bn, split, 132 // cluster, cluster=cluster)
        units_m, tiles_n = -(-(-(-m // 128)) // cluster), -(-n // bn)
        first = plan_tail(w.units, w.grid_clusters, w.k_tiles).first_unit if split == "tail" else 0
        coords = [unit_coords(u, units_m, tiles_n) for u in range(first, w.units)]
        a_rows = sum(min(m, 128 * (r * cluster + t + 1)) - min(m, 128 * (r * cluster + t))
                     for r in {r for r, _ in coords} for t in range(cluster))
        b_cols = sum(min(n, bn * (c + 1)) - bn * c for c in {c for _, c in coords})
        assert w.split_bytes == (a_rows + b_cols) * k * 2
    assert work(1745, 4096, 14336, 192, "tail", 132, cluster=1).split_bytes == 61042688
    assert work(8192, 8192, 8192, 256, "none", 66).split_bytes == 0
    assert work(256, 256, 64, 256, "all", 66).split_bytes == 0  # one iteration: nothing shared


def test_split_iterations_beyond_l2_cost_the_tables_factor():
    """Where the split units' panels exceed L2, the split K iterations cost split_beyond_l2_scale times the
    table's time (CostModel.split_iter_scale); below L2, or with no L2 in the table, the fitted time; the fit
    (the tune's) applies the same factor to the samples it covers."""
    model = load_table()
    assert (model.l2_bytes, model.split_beyond_l2_scale) == (62914560, 1.19)
    w = work(511, 3072, 24576, 192, "all", 66)  # 176 MB of panels
    plain = replace(model, l2_bytes=0, split_beyond_l2_scale=1.0)
    assert model.split_iter_scale(w) == 1.19 and plain.split_iter_scale(w) == 1.0
    extra = w.split_iters * model.split_k_iter_us[192] * 0.19
    assert model.predict_us(w) - plain.predict_us(w) == pytest.approx(extra)
    short = work(511, 3072, 4096, 192, "all", 66)  # 29 MB: fits in L2
    assert short.split_bytes < model.l2_bytes and model.predict_us(short) == plain.predict_us(short)
    assert model.split_iter_scale(work(511, 3072, 24576, 192, "none", 66)) == 1.0
    with pytest.raises(ValueError, match="needs l2_bytes"):
        CostModel.from_json({**model.to_json(), "l2_bytes": 0})
    for bad in (float("inf"), 62914560.5, "62914560", True):  # a count, nothing else
        with pytest.raises(ValueError, match="dispatch table"):
            CostModel.from_json({**model.to_json(), "l2_bytes": bad})
    with pytest.raises(ValueError, match="split_beyond_l2_scale"):
        CostModel.from_json({**model.to_json(), "split_beyond_l2_scale": -1.0})
    assert CostModel.from_json(model.to_json()) == model
    assert "l2_bytes" not in plain.to_json() and CostModel.from_json(plain.to_json()) == plain
    # fit: a model of this form, sampled beyond and within L2, comes back with its split terms
    truth = CostModel({256: 0.7, 128: 0.4}, {256: 0.8, 128: 0.5}, 9.0, 7.0, "truth", fixup_contributor_us=1.0,
                      l2_bytes=model.l2_bytes, split_beyond_l2_scale=1.19)
    shapes = [(m, n, k) for m in (511, 2048, 4096) for n in (3072, 8192) for k in (2048, 8192, 24576)]
    samples = [(wk, truth.predict_us(wk)) for m, n, k in shapes for bn in (256, 128) for split in ("none", "all", "tail")
               for wk in [work(m, n, k, bn, split, 66)]]
    assert any(truth.split_iter_scale(wk) > 1 for wk, _ in samples) and any(
        wk.split_iters and truth.split_iter_scale(wk) == 1 for wk, _ in samples)
    got = fit(samples, "x", l2_bytes=model.l2_bytes, split_beyond_l2_scale=1.19)
    assert got.split_k_iter_us == pytest.approx(truth.split_k_iter_us) and got.split_beyond_l2_scale == 1.19


def test_long_k_layers_take_whole_tiles_where_a_split_would_stream():
    """gemma-7b's down_proj (K 24576): at 511 rows the route took the 2-CTA "all" split (148 us on the H200)
    and at 2048 rows the BN 256 "tail" split (458 us); with the factor on split iterations beyond L2 it takes the builds timed
    fastest in the same run, 64 x 192 one CTA whole (120 us) and 128 x 192 whole (404 us)
    (bench/results/2026-12-05_shapes_real_bf16_autotune_52f0b90.json)."""
    dispatch.clear_cache()
    e = gemm_ladder.explain(meta(511, 24576), meta(3072, 24576).T).to_dict()
    assert (e["kernel"]["name"], e["split"]) == ("sm90_gemm_kk_bn192_c1_bm64", "none")
    e = gemm_ladder.explain(meta(2048, 24576), meta(3072, 24576).T).to_dict()
    assert (e["kernel"]["name"], e["split"]) == ("sm90_gemm_kk_bn192", "none")
    dispatch.clear_cache()


def test_the_shipped_table_is_valid_and_says_where_it_comes_from():
    model = load_table()
    assert model.provenance.startswith(("untuned default", "tuned on ")) and model.tuned == model.provenance.startswith("tuned on ")
    # the widths the last tune timed (every width the general kernel is built for since 2026-12-04's tune)
    assert model.bns == K.general_bns() == (256, 192, 128, 64)
    assert {"fixup_us", "fixed_us"} <= set(model.rules) and any(r.startswith("k_iter_us") for r in model.rules)
    assert all("bench/results/" in rule for rule in model.rules.values())  # each figure names its measurement
    with pytest.raises(ValueError, match="dispatch table"):
        CostModel.from_json({"provenance": "x"})
    bad = model.to_json() | {"fixed_us": -1}
    with pytest.raises(ValueError, match="finite number >= 0"):
        CostModel.from_json(bad)
    assert CostModel.from_json(model.to_json()) == model


def test_fit_recovers_a_known_model():
    truth = CostModel({256: 0.6, 128: 0.33}, {256: 0.9, 128: 0.5}, 2.0, 6.0, "truth")
    shapes = [(m, n, k) for m in (512, 1024, 4096) for n in (1024, 2048, 4096) for k in (1024, 4096)]
    samples = [(w, truth.predict_us(w)) for s in shapes for bn in (256, 128) for sp in ("none", "tail", "all")
               for w in [work(*s, bn, sp, 66)]]
    got = fit(samples, "tuned on test")
    for bn in (256, 128):
        assert got.k_iter_us[bn] == pytest.approx(truth.k_iter_us[bn], rel=1e-6)
        assert got.split_k_iter_us[bn] == pytest.approx(truth.split_k_iter_us[bn], rel=1e-6)
    assert got.fixed_us == pytest.approx(6.0, rel=1e-6) and got.fixup_us == pytest.approx(2.0, rel=1e-6)
    assert got.tuned and "least squares" in got.rules["fixed_us"]
    with pytest.raises(ValueError, match="at least 6"):
        fit(samples[:3], "x")


def test_fit_recovers_a_per_contributor_fixup():
    """The fixup's two terms (per split launch and per contributor of the most shared unit, both scaled by
    BN / 256) are told apart when the timed splits share units among few and many clusters ("wave" and
    "all" against "tail")."""
    truth = CostModel({256: 0.6, 128: 0.33}, {256: 0.8, 128: 0.45}, 8.0, 6.0, "truth", fixup_contributor_us=0.5)
    shapes = [(m, n, k) for m in (1024, 4096, 12608) for n in (1024, 3072, 4096) for k in (1024, 4096)]
    samples = [(w, truth.predict_us(w)) for s in shapes for bn in (256, 128) for sp in ("none", "tail", "all", "wave")
               for w in [work(*s, bn, sp, 66)]]
    got = fit(samples, "tuned on test")
    assert got.fixup_us == pytest.approx(8.0, rel=1e-6) and got.fixup_contributor_us == pytest.approx(0.5, rel=1e-6)
    assert CostModel.from_json(json.loads(json.dumps(got.to_json()))) == got
    old = got.to_json()
    del old["fixup_contributor_us"]  # a table fitted before the term: none
    assert CostModel.from_json(old).fixup_contributor_us == 0.0


def test_work_of_the_wave_split():
    """"wave" splits the last partial wave and one whole wave (two contributors per unit at most); below
    two waves it is "all"; with whole waves it splits nothing."""
    w = work(12608, 1024, 4096, 256, "wave", 66)  # 200 units: 2 whole waves, 68 units split
    assert (w.units, w.whole_iters, w.split_iters, w.contributors) == (200, 2 * 64, -(-68 * 64 // 66), 2)
    tail = work(12608, 1024, 4096, 256, "tail", 66)  # "tail" splits the 2 units of the last wave over 66
    assert tail.contributors == 33 and tail.split_iters == 2
    assert work(1000, 4608, 3584, 256, "wave", 66) == replace(work(1000, 4608, 3584, 256, "all", 66), split="wave")
    w = work(8448, 2048, 4096, 256, "wave", 66)  # 33 x 8 = 264 units: 4 whole waves
    assert (w.whole_iters, w.split_iters, w.contributors) == (4 * 64, 0, 1)


def test_the_shipped_table_splits_by_contributors():
    """The shipped table's choices on real layer shapes measured forced on the H200
    (bench/results/2026-12-03_tiles_forced_wave_35977db.json: the fastest general policy at each): "wave"
    where the last wave is nearly empty and K long, "all" below two waves, no split at K = 1024."""
    model = load_table()
    for (m, n, k), want in (((12608, 1024, 4096), "wave"), ((4097, 4096, 3072), "wave"), ((1000, 4608, 3584), "all"),
                            ((12608, 3072, 1024), "none"), ((12608, 4096, 1024), "none")):
        best = rank(model, m, n, k, 66, [(256, s) for s in ("none", "tail", "all", "wave")])[0]
        assert best.work.split == want, (m, n, k, [c.to_json() for c in rank(model, m, n, k, 66, [(256, s) for s in ("none", "tail", "all", "wave")])])


def test_rank_breaks_ties_toward_the_earlier_config():
    model = load_table()
    ranked = rank(model, 2048, 2048, 2048, 66, [(256, "none"), (256, "tail")])  # 64 units: no tail to split
    assert [c.work.split for c in ranked] == ["none", "tail"]
    assert DeviceFacts("x", 132).clusters == 66


# --- BN 64: the third tile width, chosen only from a table that times it ----------------------------------


def _table_with_bn64(bn64_iter_us: float = 0.25) -> CostModel:
    """The shipped table's figures, plus a BN 64 width at ``bn64_iter_us`` per K iteration: a stand-in for
    a re-tuned table (its numbers are this test's, not measurements)."""
    base = load_table()
    return CostModel({**base.k_iter_us, 64: bn64_iter_us}, {**base.split_k_iter_us, 64: bn64_iter_us * 1.1},
                     base.fixup_us, base.fixed_us, "tuned on test (BN 64 stand-in)")


@pytest.fixture
def fakes3(fakes, monkeypatch):
    monkeypatch.setattr(K, "general_bns", lambda: (256, 128, 64))
    dispatch.clear_cache()
    yield fakes
    dispatch.clear_cache()


def test_work_counts_bn64_tiles():
    """1024^3 at BN 64: 8 x 16 = 128 tiles, 64 units of 2 stacked tiles, one wave over 64 of 66 clusters."""
    w = work(1024, 1024, 1024, 64, "none", 66)
    assert (w.units, w.grid_clusters, w.whole_iters, w.split_iters) == (64, 64, 16, 0)
    assert work(1024, 1024, 1024, 128, "none", 66).units == 32  # half the SMs at BN 128
    w = work(4096, 1024, 4096, 64, "none", 66)  # 16 x 16 = 256 units: 4 waves on 66 clusters (last 58)
    assert (w.units, w.whole_iters) == (256, 4 * 64)


def test_fit_recovers_a_model_with_three_widths():
    truth = CostModel({256: 0.6, 128: 0.33, 64: 0.2}, {256: 0.9, 128: 0.5, 64: 0.3}, 2.0, 6.0, "truth")
    shapes = [(m, n, k) for m in (512, 1024, 4096) for n in (1024, 2048, 4096) for k in (1024, 4096)]
    samples = [(w, truth.predict_us(w)) for s in shapes for bn in (256, 128, 64) for sp in ("none", "tail", "all")
               for w in [work(*s, bn, sp, 66)]]
    got = fit(samples, "tuned on test")
    assert got.bns == (256, 128, 64)
    for bn in (256, 128, 64):
        assert got.k_iter_us[bn] == pytest.approx(truth.k_iter_us[bn], rel=1e-6)
        assert got.split_k_iter_us[bn] == pytest.approx(truth.split_k_iter_us[bn], rel=1e-6)
    assert got.fixed_us == pytest.approx(6.0, rel=1e-6) and got.fixup_us == pytest.approx(2.0, rel=1e-6)
    assert set(got.rules) == {"k_iter_us[64]", "split_k_iter_us[64]", "k_iter_us[128]", "split_k_iter_us[128]",
                              "k_iter_us[256]", "split_k_iter_us[256]", "fixup_us", "fixup_contributor_us", "fixed_us"}
    # the table round-trips with the third width, and only widths with samples get a time
    assert CostModel.from_json(json.loads(json.dumps(got.to_json()))) == got
    two = fit([(w, us) for w, us in samples if w.bn != 64], "tuned on test")
    assert two.bns == (256, 128)
    with pytest.raises(ValueError, match="at least 9"):
        fit(samples[:7], "x")


def test_the_table_chooses_among_bn_64_128_256(fakes3):
    """With a table that times BN 64 cheaply enough, the route takes it where BN 128 would leave half
    the clusters idle (1024^3), and keeps BN 256 for a large square; the candidates list all three."""
    table = _table_with_bn64()
    for (m, n, k), want in (((1024, 1024, 1024), 64), ((8192, 8192, 8192), 256)):
        route = dispatch.decide(meta(m, k), meta(n, k).T, meta(m, n), given=False, model=table)
        assert route.bn == want, [c.to_json() for c in route.candidates]
        assert {c.work.bn for c in route.candidates} == {256, 128, 64}
        assert route.untimed_bns == ()
        assert route.candidates[0].predicted_us == min(c.predicted_us for c in route.candidates)
    # a table whose BN 64 is slow never takes it
    slow = _table_with_bn64(bn64_iter_us=10.0)
    route = dispatch.decide(meta(1024, 1024), meta(1024, 1024).T, meta(1024, 1024), given=False, model=slow)
    assert route.bn != 64


def test_a_width_the_table_does_not_time_is_not_chosen_and_explain_says_so(fakes3, monkeypatch):
    table = load_table()  # the shipped one: 256 and 128 only until a re-tune times BN 64
    if 64 in table.k_iter_us:
        table = CostModel({b: v for b, v in table.k_iter_us.items() if b != 64},
                          {b: v for b, v in table.split_k_iter_us.items() if b != 64},
                          table.fixup_us, table.fixed_us, table.provenance)
    route = dispatch.decide(meta(1024, 1024), meta(1024, 1024).T, meta(1024, 1024), given=False, model=table)
    assert route.bn in (256, 128) and route.untimed_bns == (64,)
    assert {c.work.bn for c in route.candidates} == {256, 128}
    from gemm_ladder import api

    monkeypatch.setattr(api, "decide", lambda *a, **kw: dispatch.decide(*a, model=table, **kw))
    e = gemm_ladder.explain(meta(1024, 1024), meta(1024, 1024).T)
    assert e.heuristic["untimed_bns"] == [64]
    assert "BN 64: built, not in the table" in str(e)
    monkeypatch.setattr(api, "decide", lambda *a, **kw: dispatch.decide(*a, model=_table_with_bn64(), **kw))
    dispatch.clear_cache()
    e = gemm_ladder.explain(meta(1024, 1024), meta(1024, 1024).T)
    assert e.tile == [128, 64, 64] and e.heuristic["untimed_bns"] == []
    assert "BN  64 split none" in str(e) and "BN 128" in str(e) and "BN 256" in str(e)


def test_a_table_timing_no_built_width_is_a_clear_error(fakes3):
    none_timed = CostModel({512: 1.0}, {512: 1.0}, 1.0, 1.0, "tuned on test")
    with pytest.raises(ValueError, match="re-tune with bench/library.py --tune"):
        dispatch.decide(meta(1024, 1024), meta(1024, 1024).T, meta(1024, 1024), given=False, model=none_timed)


def test_real_kernels_offer_bn64_to_the_cost_model():
    """On the real kernels (meta tensors), BN 64 has a route in all four orders, and a table timing it
    can choose it."""
    dispatch.clear_cache()
    table = _table_with_bn64()
    for a, b in ((meta(1024, 1024), meta(1024, 1024).T), (meta(1024, 1024).T, meta(1024, 1024)),
                 (meta(1024, 1024), meta(1024, 1024)), (meta(1024, 1024).T, meta(1024, 1024).T)):
        route = dispatch.decide(a, b, meta(1024, 1024), given=False, model=table)
        assert route.kind == "general" and route.bn == 64, route
        assert route.kernel.tile == (128, 64, 64) and route.kernel.stages == 8
    dispatch.clear_cache()


def test_bn192_is_offered_for_a_k_major_weight_only():
    """BN 192 is among the general kernel's widths, built for a K-major B only: a table timing it (a stand-in
    that makes it the cheapest width: its numbers are this test's, not measurements) routes F.linear's
    layout (w.T, K-major) to it, and a row-major b (MN-major B) to another width in place (BN 192 would
    need B copied K-major); a table without it (the shipped one before the 5f6554d tune) lists it as
    built and untimed."""
    assert 192 in K.general_bns() and K.general_bns() == tuple(sorted(K.general_bns(), reverse=True))
    assert K.general_built("k", 192) and not K.general_built("mn", 192)
    assert all(K.general_built(major, bn) for major in ("k", "mn") for bn in (64, 128, 256))
    dispatch.clear_cache()
    base = load_table()
    table = CostModel({**base.k_iter_us, 192: 0.05}, {**base.split_k_iter_us, 192: 0.06}, base.fixup_us, base.fixed_us,
                      "tuned on test (BN 192 stand-in)")
    x, w = meta(8192, 3072), meta(768, 3072)
    route = dispatch.decide(x, w.T, meta(8192, 768), given=False, model=table)
    assert route.kind == "general" and route.bn == 192 and route.kernel.tile == (128, 192, 64), route
    assert route.b_path.major == "k"
    route = dispatch.decide(x, meta(3072, 768), meta(8192, 768), given=False, model=table)  # b row-major: B MN-major
    assert route.kind == "general" and route.bn != 192 and route.b_path.major == "mn", route
    e = gemm_ladder.explain(x, meta(3072, 768))
    assert e.kind == "general" and e.tile[1] != 192
    untimed = CostModel({bn: t for bn, t in base.k_iter_us.items() if bn != 192},
                        {bn: t for bn, t in base.split_k_iter_us.items() if bn != 192}, base.fixup_us, base.fixed_us,
                        "tuned on test (no BN 192)")
    route = dispatch.decide(x, w.T, meta(8192, 768), given=False, model=untimed)
    assert route.bn != 192 and 192 in route.untimed_bns
    dispatch.clear_cache()


@pytest.mark.parametrize("m, n, k", [(1536, 1536, 2**24), (4096, 4096, 2**24), (1024, 1024, 2**27)])
def test_the_route_ranks_only_splits_the_kernel_can_launch(m, n, k):
    """At very long K an "all" or "wave" split passes the kernel's 32-bit stream-K arithmetic
    (split_schedule refuses it): the cost model leaves it out instead of raising (mm and explain
    raised a bare ValueError from plan_wave at 4096 x 4096 x 2^24) or ranking a launch that would
    raise ("all" at 1024 x 1024 x 2^27)."""
    from gemm_ladder.design.stream_k import SplitOverflowError
    from gemm_ladder.library.gemm import split_schedule

    for split in ("wave", "all"):
        with pytest.raises(SplitOverflowError):
            work(4096, 4096, 2**24, 256, split, 66)
    model = load_table()
    configs = [(bn, s) for bn in sorted(model.k_iter_us, reverse=True) for s in ("none", "tail", "all", "wave")]
    ranked = rank(model, m, n, k, 66, configs)
    assert {c.work.split for c in ranked} >= {"none", "tail"}
    for c in ranked:  # every candidate is a launch split_schedule makes
        split_schedule(c.work.units, 66, c.work.k_tiles, c.work.split)
    a = torch.empty(m, k, dtype=torch.bfloat16, device="meta")
    b = torch.empty(n, k, dtype=torch.bfloat16, device="meta")
    d = gemm_ladder.explain(a, b.T).to_dict()
    assert gemm_ladder.mm(a, b.T).shape == (m, n) and d["split"] in ("none", "tail", "all", "wave")
    # explain's plan carries the timeline's ends and one marker for the K iterations between (it took
    # minutes to build and copy the whole timeline at K = 2^27: two million rows)
    timeline = d["plan"]["plan"]["timeline"]
    marker, = [r for r in timeline if "elided_iterations" in r]
    assert len(timeline) < 40 and marker["elided_iterations"][1] == k // 64 - 1 - 6


# --- one CTA per cluster (the general kernel's cluster-1 builds) ------------------------------------


def test_work_of_one_cta_per_cluster_counts_no_idle_twin():
    """M = 333 is three 128-row tiles: level 9's pairs make two units a column of tiles (the second with
    an idle twin), one CTA per cluster three; both one wave here at BN 256 (72 of 66 pairs is not)."""
    pair = work(333, 9216, 3072, 256, "none", 66)
    one = work(333, 9216, 3072, 256, "none", 132, cluster=1)
    assert (pair.units, pair.cluster) == (2 * 36, 2) and (one.units, one.cluster) == (3 * 36, 1)
    assert one.whole_iters == 48 < pair.whole_iters == 96  # 108 tiles in one wave of 132; 72 units in two of 66
    # one M tile split by K: shared by 132 single CTAs, or by 66 pairs (each with an idle twin)
    assert work(128, 256, 16384, 256, "all", 132, cluster=1).contributors == 132
    assert work(128, 256, 16384, 256, "all", 66).contributors == 66


def test_route_takes_one_cta_per_cluster_only_where_the_model_predicts_it_faster():
    """The committed table: M = 333 (three M tiles) and ViT-L's 12608 rows (99) run one CTA per cluster
    (measured 38.6 against 64.0 us and 142.0 against 163.9 us: bench/results/2026-12-04_tiles_forced_clusters_08fda8b.json);
    4096^3 (32 M tiles, a tie in the model) keeps level 9's pair; the explanation says which."""
    dispatch.clear_cache()
    for (m, n, k), cluster in (((333, 9216, 3072), 1), ((12608, 1024, 4096), 1), ((4096, 4096, 4096), 2)):
        e = gemm_ladder.explain(meta(m, k), meta(n, k).T)
        assert e.kind == "general" and e.cluster == cluster, (m, n, k, e)
        d = e.to_dict()
        assert d["heuristic"]["candidates"][0]["cluster"] == cluster
        assert ("_c1" in d["kernel"]["name"]) == (cluster == 1)
        assert ("1 CTA" in str(e)) == (cluster == 1 or any(c["cluster"] == 1 for c in d["heuristic"]["candidates"][:9]))


def test_one_cta_per_cluster_is_never_the_register_store():
    """The cluster-1 builds are the TMA store's only: an output the TMA store cannot write (N = 50257)
    takes level 9's pair from registers, whatever M."""
    dispatch.clear_cache()
    e = gemm_ladder.explain(meta(333, 768), meta(50257, 768).T)
    assert e.cluster == 2 and "creg" in e.to_dict()["kernel"]["name"]


def test_cluster_sizes_of_the_general_kernel():
    from gemm_ladder.library.gemm import kernel_for, library_gemm

    assert K.general_clusters() == (2, 1)
    c1 = K.general("k", "k", 256, "bf16", 1)
    assert c1.cluster == 1 and c1 != K.general("k", "k", 256, "bf16") and kernel_for(c1).name == "sm90_gemm_kk_bn256_c1"
    assert kernel_for(c1).plan(333, 9216, 3072, "bf16").cluster == 1
    with pytest.raises(ValueError, match="clusters of 2 or 1"):
        library_gemm("k", "k", 256, cluster=4)


def test_cluster1_scale_from_the_table(monkeypatch):
    """The table's measured cluster-1 scale (BN 64: 0.853) makes one CTA per cluster cheaper at BN 64 only:
    GPT-2's c_proj at 1023 x 768 x 3072 (measured 16.4 against the pair's 19.4 us) runs it among the
    128-row builds (the 64-row ones left out of the table here), 4096^3 keeps the pair at BN 256; a table
    without the key reads 1.0 (tests/test_dispatch_bench.py: a refit keeps it)."""
    model = load_table()
    assert model.cluster1_k_iter_scale == {64: 0.853}
    monkeypatch.setattr(dispatch, "cost_model", lambda device=None: replace(model, bm64_k_iter_scale={}))
    dispatch.clear_cache()
    e = gemm_ladder.explain(meta(1023, 3072), meta(768, 3072).T)
    assert e.cluster == 1 and e.to_dict()["kernel"]["name"] == "sm90_gemm_kk_bn64_c1"
    assert gemm_ladder.explain(meta(4096, 4096), meta(4096, 4096).T).cluster == 2
    w1, w2 = work(1023, 768, 3072, 64, "none", 132, cluster=1), work(1023, 768, 3072, 64, "none", 66)
    assert model.predict_us(w1) < model.predict_us(w2)
    bare = CostModel.from_json({k: v for k, v in model.to_json().items() if k != "cluster1_k_iter_scale"})
    assert bare.cluster1_k_iter_scale == {} and bare.predict_us(w1) == bare.predict_us(w2)
    with pytest.raises(ValueError, match="cluster1_k_iter_scale"):
        CostModel.from_json({**model.to_json(), "cluster1_k_iter_scale": {"64": 0.0}})
    dispatch.clear_cache()


def test_the_64_row_tile_from_the_table():
    """The table's measured 64-row scale (bm64_k_iter_scale: BN 64 0.72, 128 0.59, 192 0.63, 256 0.62) ranks
    the 64-row build where 128-row tiles leave SMs idle: BERT-large's output dense at 512 x 1024 x 4096
    (measured 16.9 us against the route's 22.2 before it; bench/results/2026-12-04_tiles_forced_bm64_dd7709e.json)
    runs 64 x 64 tiles; 4096^3 keeps 128 x 256; an operand order other than F.linear's (K-major A and B) never
    gets it; a width absent from the scale is not ranked at 64 rows."""
    from gemm_ladder.library.gemm import kernel_for, library_gemm

    dispatch.clear_cache()
    model = load_table()
    assert model.bm64_k_iter_scale == {256: 0.62, 192: 0.63, 128: 0.59, 64: 0.72}
    e = gemm_ladder.explain(meta(512, 4096), meta(1024, 4096).T)
    assert e.to_dict()["kernel"]["name"].endswith("_bm64") and e.to_dict()["tile"][0] == 64
    assert "BM 64 BN" in str(e)
    assert gemm_ladder.explain(meta(4096, 4096), meta(4096, 4096).T).to_dict()["tile"][:2] == [128, 256]
    for a, b in ((meta(4096, 512).T, meta(1024, 4096).T), (meta(512, 4096), meta(4096, 1024))):  # MN-major A, B
        assert gemm_ladder.explain(a, b).to_dict()["tile"][0] == 128
    # 64 x 64 tiles: 8 x 16 M x N tiles of 512 x 1024, in 2-CTA units: 64 units; each iteration scaled
    w64, w128 = work(512, 1024, 4096, 64, "none", 66, bm=64), work(512, 1024, 4096, 64, "none", 66)
    assert (w64.units, w128.units) == (64, 32)
    assert model.predict_us(w64) == pytest.approx(model.fixed_us + 64 * model.k_iter_us[64] * 0.72)
    without = replace(model, bm64_k_iter_scale={128: 0.59})
    with pytest.raises(KeyError):  # the route ranks no 64-row width the scale lacks (route._choose_general)
        rank(without, 512, 1024, 4096, 66, [(64, "none")], bm=64)
    with pytest.raises(ValueError, match="bm64_k_iter_scale"):
        CostModel.from_json({**model.to_json(), "bm64_k_iter_scale": {"64": -1.0}})
    assert CostModel.from_json(model.to_json()).bm64_k_iter_scale == model.bm64_k_iter_scale
    with pytest.raises(ValueError, match="bm = 96"):
        library_gemm("k", "k", 128, bm=96)
    k64 = library_gemm("k", "k", 128, bm=64, cluster=1)
    assert (k64.name, k64.tile, k64.consumers, k64.stages) == ("sm90_gemm_kk_bn128_c1_bm64", (64, 128, 64), 1, 8)
    assert k64.geometry("bf16").threads == 256 and kernel_for(k64.config("bf16")) is k64
    dispatch.clear_cache()


def test_the_64_row_scale_is_derived_from_its_committed_timings():
    """table.json's bm64_k_iter_scale, recomputed from the forced timings it cites
    (bench/results/2026-12-04_tiles_forced_bm64_dd7709e.json): for each (tile rows, cluster size, BN), the
    median over the launches without a split (``work``'s critical path has no shared iteration) of
    (us - fixed_us) / (whole iterations x k_iter_us[BN] x the cluster-1 scale); the 64-row median over the
    128-row one at each cluster size; the scale the mean of the two, to 0.01. BN 64's is not that median (0.80)
    but the value the route's picks over every committed forced timing favour: the next test."""
    import statistics
    from collections import defaultdict
    from pathlib import Path

    model = load_table()
    doc = json.loads((Path(__file__).resolve().parent.parent / "bench" / "results"
                      / "2026-12-04_tiles_forced_bm64_dd7709e.json").read_text())
    per = defaultdict(list)
    for row in doc["rows"]:
        for v in row["configs"].values():
            if v.get("kernel") != "general" or "us" not in v:
                continue
            bn, cluster, bm = v["bn"], v["cluster"], v.get("bm", 128)
            w = work(row["m"], row["n"], row["k"], bn, v["split"], 132 // cluster, cluster=cluster, bm=bm)
            if w.splits:
                continue
            c1 = model.cluster1_k_iter_scale.get(bn, 1.0) if cluster == 1 else 1.0
            per[(bm, cluster, bn)].append((v["us"] - model.fixed_us) / (w.whole_iters * model.k_iter_us[bn] * c1))
    for bn, scale in {**model.bm64_k_iter_scale, 64: 0.80}.items():
        ratios = [statistics.median(per[(64, c, bn)]) / statistics.median(per[(128, c, bn)]) for c in (2, 1)]
        assert sum(ratios) / 2 == pytest.approx(scale, abs=0.01), (bn, ratios)


def test_the_64_row_scale_at_bn_64_ranks_better_than_its_median():
    """table.json's bm64_k_iter_scale[64] (0.72) against the median of its committed timings (0.80, above): it puts
    the one-CTA 64 x 64 iteration at the timeline build's measured 0.18 us (docs/where-time-goes.md), and scored by
    bench/route_regret.py over every committed tiles_forced timing (the measured time of the table's pick over each
    row's fastest) it ranks better than 0.80 (mean regret 1.0213 against 1.0281, the figures its rule quotes), as
    every value from 0.57 to 0.74 does; 0.50-0.56 rank one row better still (1.0204) with an iteration faster than
    measured. 0.80 took 64 x 128 tiles on 6-64 CTAs where 64 x 64 tiles on twice the CTAs measured 7-14% faster."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import route_regret as rr

    model = load_table()
    rows = rr.rows_of(rr.load_samples(rr.DEFAULT_GLOB))

    def mean_regret(s64: float) -> float:
        m = replace(model, bm64_k_iter_scale={**model.bm64_k_iter_scale, 64: s64})
        return rr.score(rr.regret(rows, rr.table_predict(m)))["mean"]

    scores = {s: round(mean_regret(s), 4) for s in (0.50, 0.56, 0.57, 0.66, 0.72, 0.74, 0.76, 0.80)}
    assert model.bm64_k_iter_scale[64] == 0.72
    assert scores == {0.50: 1.0204, 0.56: 1.0204, 0.57: 1.0213, 0.66: 1.0213, 0.72: 1.0213, 0.74: 1.0213,
                      0.76: 1.0281, 0.80: 1.0281}, scores
    c1 = model.cluster1_bm64_k_iter_scale[64]
    assert model.k_iter_us[64] * c1 * 0.72 == pytest.approx(0.18, abs=0.005)


def test_the_route_ranks_64_row_builds_only_at_the_scales_widths(monkeypatch):
    """A table whose bm64_k_iter_scale names BN 128 only: the route ranks 64-row builds at BN 128 and no other
    width (it would raise KeyError were another ranked), and still chooses among them."""
    model = load_table()
    monkeypatch.setattr(dispatch, "cost_model", lambda device=None: replace(model, bm64_k_iter_scale={128: 0.59}))
    dispatch.clear_cache()
    try:
        cands = gemm_ladder.explain(meta(512, 4096), meta(1024, 4096).T).to_dict()["heuristic"]["candidates"]
        rows64 = {c["bn"] for c in cands if c.get("bm") == 64}
        assert rows64 == {128} and any(c.get("bm", 128) == 128 for c in cands)
    finally:
        dispatch.clear_cache()


def test_one_cta_per_cluster_is_ranked_ahead_of_the_pair_in_one_wave():
    """cluster1_one_wave_scale (0.95 at BN 128-256): a 128-row build with one CTA per cluster whose whole tiles fit
    in one wave, nothing split, predicts 0.95 of its K iterations; over more than a wave, split, at 64 rows or as
    the pair it does not. So ViT-L's fc2 at 1576 rows (104 tiles of 128 x 128: one wave) takes one CTA, measured
    26.2 against the pair's 30.2 us (bench/results/2026-12-05_shapes_real_bf16_autotune_52f0b90.json), and 4096^3
    (512 tiles) keeps the pair."""
    model = load_table()
    assert model.cluster1_one_wave_scale == {128: 0.95, 192: 0.95, 256: 0.95}
    one = work(1576, 1024, 4096, 128, "none", 132, cluster=1)
    pair = work(1576, 1024, 4096, 128, "none", 66)
    assert (one.units, one.grid_clusters, one.whole_iters) == (104, 104, 64) and model.one_wave_scale(one) == 0.95
    assert model.predict_us(one) == pytest.approx(model.fixed_us + 64 * model.k_iter_us[128] * 0.95)
    assert model.predict_us(pair) == pytest.approx(model.fixed_us + 64 * model.k_iter_us[128])
    w64 = work(512, 1024, 4096, 64, "none", 132, cluster=1, bm=64)  # 64 rows, one wave: their own scales
    assert w64.units <= w64.grid_clusters
    for w in (work(4096, 4096, 4096, 256, "none", 132, cluster=1),  # 512 tiles: four waves
              work(1576, 1024, 4096, 128, "all", 132, cluster=1),  # split
              w64, pair):
        assert model.one_wave_scale(w) == 1.0
    # the edge: 132 tiles of 128 x 128 are one wave on 132 SMs, 133 are not
    at = work(128 * 132, 128, 4096, 128, "none", 132, cluster=1)
    past = work(128 * 133, 128, 4096, 128, "none", 132, cluster=1)
    assert (at.units, past.units) == (132, 133)
    assert (model.one_wave_scale(at), model.one_wave_scale(past)) == (0.95, 1.0)
    e = gemm_ladder.explain(meta(1576, 4096), meta(1024, 4096).T).to_dict()
    assert (e["tile"][:2], e["cluster"]) == ([128, 128], 1)
    e = gemm_ladder.explain(meta(4096, 4096), meta(4096, 4096).T).to_dict()
    assert (e["tile"][:2], e["cluster"]) == ([128, 256], 2)
    with pytest.raises(ValueError, match="cluster1_one_wave_scale"):
        CostModel.from_json({**model.to_json(), "cluster1_one_wave_scale": {"128": 0.0}})
    assert CostModel.from_json(model.to_json()).cluster1_one_wave_scale == model.cluster1_one_wave_scale


def test_a_64_row_build_past_five_waves_is_not_ranked():
    """bm64_max_waves (5): a 64-row build whose tiles take more than 5 waves is not ranked where M spans more than one
    64-row tile (it loads B twice as often as the 128-row build; heuristic.CostModel.ranks). Qwen2.5's o_proj at 2048
    rows (896 tiles of 64 x 128: 6.8 waves) takes 128 x 256 tiles now; a 64-row product past 5 waves, or a 64-row
    build in fewer waves, is still ranked; unless nothing else is (the small-M table's 64-row answer)."""
    from gemm_ladder.dispatch.route import ASSUMED_DEVICE, choose_general_build, find_routes

    model = load_table()
    assert model.bm64_max_waves == 5
    many = work(2048, 3584, 3584, 128, "none", 132, cluster=1, bm=64)
    assert many.waves > 6 and not model.ranks(many, 2048) and model.ranks(many, 64)
    assert model.ranks(work(2048, 3584, 3584, 256, "none", 132, cluster=1), 2048)  # 128 rows: always
    assert model.ranks(work(512, 1024, 4096, 64, "none", 132, cluster=1, bm=64), 512)  # one wave
    e = gemm_ladder.explain(meta(2048, 3584), meta(3584, 3584).T).to_dict()
    assert e["tile"][:2] == [128, 256] and all(c.get("bm", 128) == 128 or c["waves"] <= 5
                                                for c in e["heuristic"]["candidates"])
    x, w, c = meta(2048, 3584), meta(3584, 3584).T, meta(2048, 3584)
    routes, _ = find_routes(x, w, c, given=False, device=ASSUMED_DEVICE)
    only = choose_general_build(routes, model, bm=64, cluster=1)  # the 64-row routes alone: still chosen among
    assert only is not None and only.config.tile[0] == 64
    with pytest.raises(ValueError, match="bm64_max_waves"):
        CostModel.from_json({**model.to_json(), "bm64_max_waves": -1})
    assert CostModel.from_json(model.to_json()).bm64_max_waves == 5
