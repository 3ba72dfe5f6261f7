"""The layouts library kernel on the GPU: every operand order, padded pitches and offset views, BN 64,
128, 192 and 256, 128- and 64-row tiles, 2-CTA clusters and one CTA, every stream-K policy, tails in M, N and K, held to the correctness gate's bounds against the
float64 reference; outputs poisoned with NaN (and the padding of the output checked untouched);
repeated launches bitwise identical; operands TMA cannot describe refused before any launch.

Each check builds its operand views from the gate's fresh random (M, K) and (N, K) tensors: the test
copies them into storage of the requested major and pitch (that copy is the harness; the kernel reads
the views in place), so the gate's NaN/Inf planting and its cuBLAS baseline apply unchanged.

Run on the H200: ``python3 -m pytest -q -m gpu tests/test_library_gemm_gpu.py``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from gemm_ladder.contract import GemmInputError
from gemm_ladder.gates.correctness import check_correctness, random_operands
from gemm_ladder.library.gemm import K_MAJOR_B_TILE_N, MAJORS, SPLITS, TILE_N, library_gemm, tile_n_built
from gemm_ladder.library.operand import operand_view

pytestmark = pytest.mark.gpu

LAYOUTS = [(a, b) for a in MAJORS for b in MAJORS]
#: (M, N, K): whole tiles; tails in M, N and K; K = 8 (one partial K tile); smaller than one tile; one
#: row; a split stream-K tail on 132 SMs (72 units of 128 x 256 on 66 clusters); K = 65.
SHAPES = [(128, 256, 64), (1000, 520, 200), (300, 200, 8), (64, 72, 64), (1, 24, 40), (2304, 2048, 1000),
          (256, 384, 65)]


@pytest.fixture(scope="module", autouse=True)
def _built_in_parallel():
    """Compile the 24 builds at once (nvcc processes in threads) rather than one by one at first use:
    on the GPU machine's 16 cores that saves most of a minute of the GPU's lease."""
    jobs = [(a, b, bn, dt) for a, b in LAYOUTS for bn in TILE_N for dt in ("bf16", "fp16")]
    jobs += [(a, "k", bn, dt) for a in MAJORS for bn in K_MAJOR_B_TILE_N for dt in ("bf16", "fp16")]
    jobs = [(*j, cluster, 128) for j in jobs for cluster in (2, 1)]
    # The 64-row builds: K-major A and B (what the route offers them for) at every width and cluster size;
    # every other operand order at BN 128 (the kernel reads any, the route does not offer them).
    jobs += [("k", "k", bn, dt, cl, 64) for bn in (*TILE_N, *K_MAJOR_B_TILE_N) for dt in ("bf16", "fp16") for cl in (2, 1)]
    jobs += [(a, b, 128, "bf16", 2, 64) for a, b in LAYOUTS if (a, b) != ("k", "k")]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda j: library_gemm(*j[:3], cluster=j[4], bm=j[5]).build(j[3]), jobs))


def _round8(x: int) -> int:
    return (x + 7) // 8 * 8


def place(t: torch.Tensor, major: str, *, pad: int, offset: int):
    """A view of (rows, K) ``t``'s values in ``major`` storage: leading dimension = its contiguous
    extent + ``pad`` (``pad`` None: rounded up to 8 elements, plus 8), starting ``offset`` elements
    into a fresh buffer (garbage around it)."""
    rows, k = t.shape
    inner, outer = (k, rows) if major == "k" else (rows, k)
    ld = _round8(inner) + 8 if pad is None else inner + pad
    store = torch.randn(offset + outer * ld, device=t.device).to(t.dtype)[offset:].view(outer, ld)
    if major == "k":
        store[:, :inner] = t
        view = store[:, :inner]
    else:
        store[:, :inner] = t.T
        view = store[:, :inner].T
    v = operand_view(view, k_dim=1)
    assert v is not None and v.major == major and v.ld == ld
    return v


class LayoutCall:
    """``fn(a, b) -> a @ b.T`` through library_gemm(a_major, b_major, bn) on placed views, writing into
    a NaN-poisoned output of pitch ldc (padding columns checked to stay NaN)."""

    def __init__(self, a_major, b_major, bn=256, split="tail", pad=None, offset=8, c_pad=16, cluster=2, bm=128,
                 pingpong=False, c_from_registers=False):
        self.kernel = library_gemm(a_major, b_major, bn, cluster=cluster, bm=bm, pingpong=pingpong,
                                   c_from_registers=c_from_registers)
        self.a_major, self.b_major, self.split = a_major, b_major, split
        self.pad, self.offset, self.c_pad = pad, offset, c_pad

    def views(self, a, b):
        return (place(a, self.a_major, pad=self.pad, offset=self.offset),
                place(b, self.b_major, pad=self.pad, offset=self.offset))

    def __call__(self, a, b):
        va, vb = self.views(a, b)
        m, n = a.shape[0], b.shape[0]
        store = torch.full((m, _round8(n) + self.c_pad), float("nan"), dtype=a.dtype, device=a.device)
        c = store[:, :n]
        self.kernel.launch(va, vb, c, split=self.split)
        torch.cuda.synchronize()
        assert torch.isnan(store[:, n:]).all(), "the kernel wrote into the output's padding"
        return c


def gate(fn, m, n, k, dtype):
    result = check_correctness(fn, m, n, k, dtype, device="cuda")
    assert result.status == "pass", (m, n, k, dtype, result.message)
    return result


@pytest.mark.timeout(600)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
def test_every_layout_on_tail_shapes(a_major, b_major, dtype):
    """Padded pitches (extent rounded up to 8, plus 8) and views 16 bytes into their buffers."""
    fn = LayoutCall(a_major, b_major)
    for m, n, k in SHAPES:
        gate(fn, m, n, k, dtype)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
@pytest.mark.parametrize("bn", TILE_N)
@pytest.mark.parametrize("split", SPLITS)
def test_tile_widths_and_splits(a_major, b_major, bn, split):
    """BN 128 and 256 under each stream-K policy: 'all' on few tiles (each unit shared by several
    clusters), 'tail' where the last wave is split, 'none'; fp16 on one shape."""
    fn = LayoutCall(a_major, b_major, bn=bn, split=split)
    for m, n, k in [(256, 256, 4096), (1000, 520, 200), (2304, 2048, 1000)]:
        gate(fn, m, n, k, "bf16")
    gate(fn, 777, 1000, 300, "fp16")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("a_major", MAJORS)
@pytest.mark.parametrize("bn", K_MAJOR_B_TILE_N)
@pytest.mark.parametrize("split", SPLITS)
def test_k_major_b_tile_widths_and_splits(a_major, bn, split):
    """BN 192 (built for a K-major B only; the route takes it since the 2026-12-04 table) under each
    stream-K policy, M, N and K tails (N not a multiple of 192: a part-empty last column of tiles), padded
    pitches and offset bases; fp16 on one shape."""
    fn = LayoutCall(a_major, "k", bn=bn, split=split)
    for m, n, k in [(256, 384, 4096), (1000, 520, 200), (2304, 2048, 1000), (8192, 768, 320)]:
        gate(fn, m, n, k, "bf16")
    gate(fn, 777, 1000, 300, "fp16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
def test_dense_views_compute_or_are_refused(a_major, b_major):
    """Dense pitch (ld = extent) and no offset: computed where TMA can take the pitch; else refused
    before launch naming the rule (K = 65 K-major, M or N = 300 MN-major: pitches of 130 or 600 bytes).
    Such operands are the API's to repack."""
    fn = LayoutCall(a_major, b_major, pad=0, offset=0)
    refused = 0
    for m, n, k in [(1000, 520, 200), (256, 384, 65), (300, 200, 64), (512, 300, 128)]:
        a, b = random_operands(m, n, k, "bf16", "cuda", seed=m + n + k)
        va, vb = fn.views(a, b)
        c = torch.empty(m, _round8(n) + fn.c_pad, dtype=a.dtype, device="cuda")[:, :n]  # as LayoutCall's
        reason = fn.kernel.supports(va, vb, c)
        if reason is None:
            gate(fn, m, n, k, "bf16")
            continue
        refused += 1
        # an unaligned pitch, or N = 300 whose last 16-byte chunk a TMA store would write into c's padding
        rule = "multiples of 16" if not (va.tma_ok and vb.tma_ok) else "padding"
        assert rule in reason, reason
        with pytest.raises(GemmInputError, match=rule):
            fn.kernel.launch(va, vb, c)
    assert refused, "no dense view was unaligned: the refusal path went unchecked"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
@pytest.mark.parametrize("bn", [*TILE_N, *K_MAJOR_B_TILE_N])
@pytest.mark.parametrize("split", SPLITS)
def test_one_cta_per_cluster(a_major, b_major, bn, split):
    """The cluster-1 builds (one CTA, B loaded whole, stages released to itself) under each stream-K
    policy: an odd number of M tiles (333: three; 1000 x 520: eight, 2304: eighteen), M, N and K tails,
    padded pitches and offset bases; fp16 on one shape."""
    if not tile_n_built(b_major, bn):
        pytest.skip(f"BN {bn} is not built for a {b_major}-major B")
    fn = LayoutCall(a_major, b_major, bn=bn, split=split, cluster=1)
    for m, n, k in [(333, 9216, 640), (1000, 520, 200), (2304, 2048, 1000), (129, 384, 4096)]:
        gate(fn, m, n, k, "bf16")
    gate(fn, 777, 1000, 300, "fp16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("split", ["none", "tail", "all", "wave"])
def test_one_cta_per_cluster_is_bitwise_repeatable_and_equals_the_pair(split):
    """Five cluster-1 launches into fresh NaN-poisoned outputs agree bit for bit, and with the 2-CTA
    build's: each tile's K order is the same whichever cluster size computes it (for whole tiles; a split
    tile's partials are summed in the same K order too, but the two builds split at different K)."""
    m, n, k = 333, 4608, 3584
    a, b = random_operands(m, n, k, "bf16", "cuda", seed=333)
    one = LayoutCall("k", "k", bn=128, split=split, cluster=1)
    first = one(a, b).clone()
    for _ in range(4):
        assert torch.equal(one(a, b), first)
    if split == "none":
        assert torch.equal(LayoutCall("k", "k", bn=128, split="none")(a, b), first)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
@pytest.mark.parametrize("split", ["tail", "all", "wave"])
def test_repeated_launches_are_bitwise_identical(a_major, b_major, split):
    """Five launches into fresh NaN-poisoned outputs agree bit for bit (partials are added in K order,
    whichever cluster arrives last), on a shape whose tail is split and one split throughout."""
    for m, n, k in [(2304, 2048, 1000), (384, 512, 2048)]:
        fn = LayoutCall(a_major, b_major, bn=256 if split == "tail" else 128, split=split)  # "wave": 144 units
        a, b = random_operands(m, n, k, "bf16", "cuda", seed=7 * m + k)
        first = fn(a, b).clone()
        for _ in range(4):
            assert torch.equal(fn(a, b), first), (m, n, k)


@pytest.mark.timeout(120)
def test_the_ladders_call_takes_any_of_its_layouts():
    """LibraryGemm(a, b) on tensors: a (M, K) and b (N, K) row- or column-major, as F.linear takes them."""
    m, n, k = 1000, 520, 200
    a, b = random_operands(m, n, k, "bf16", "cuda", seed=11)
    ref = a.double() @ b.double().T
    for a_major, b_major in LAYOUTS:
        ta = a if a_major == "k" else a.T.contiguous().T
        tb = b if b_major == "k" else b.T.contiguous().T
        c = library_gemm(a_major, b_major)(ta, tb)
        err = ((c.double() - ref).norm() / ref.norm()).item()
        assert err < 4e-3, (a_major, b_major, err)
    with pytest.raises(GemmInputError, match="k-major"):
        library_gemm("mn", "k")(a, b)


# --- BN 64 (128 x 64 tiles, one panel per tile, 8 stages; an MN-major B split by K lines) ------------
#: Tails in M, N (N = 520, 72, 24: not a multiple of 64; N a multiple of 8, as a TMA store into c needs) and K; the mid sizes BN 64 is for (1024^3:
#: 128 tiles on 132 SMs); many waves with a split tail (2304 x 2048: 288 units on 66 clusters).
BN64_SHAPES = SHAPES + [(1024, 1024, 1024), (4096, 1024, 4096), (1024, 4096, 1000), (130, 72, 4100)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
def test_bn64_every_layout_on_tail_shapes(a_major, b_major, dtype):
    """BN 64 under the gate (poisoned output, padding untouched, fresh operands per check) on tail and
    mid shapes, with the default 'tail' split."""
    fn = LayoutCall(a_major, b_major, bn=64)
    for m, n, k in BN64_SHAPES:
        gate(fn, m, n, k, dtype)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
@pytest.mark.parametrize("split", ["tail", "all", "wave"])
def test_bn64_repeated_launches_are_bitwise_identical(a_major, b_major, split):
    for m, n, k in [(2304, 2048, 1000), (1024, 1024, 1024), (384, 512, 2048)]:
        fn = LayoutCall(a_major, b_major, bn=64, split=split)
        a, b = random_operands(m, n, k, "bf16", "cuda", seed=5 * m + k)
        first = fn(a, b).clone()
        assert not torch.isnan(first).any()
        for _ in range(4):
            assert torch.equal(fn(a, b), first), (m, n, k)


@pytest.mark.timeout(300)
def test_mm_routes_to_bn64_from_a_table_that_times_it(monkeypatch):
    """gemm_ladder.mm end to end when the cost table times BN 64 (a stand-in table: the shipped one times
    it only after bench/library.py --tune): the route takes BN 64 at 1024^3 in all four operand orders,
    a given output is poisoned first, and the result passes the gate's bound."""
    import gemm_ladder
    from gemm_ladder import api, dispatch
    from gemm_ladder.dispatch.heuristic import CostModel, load_table

    base = load_table()
    table = CostModel({**base.k_iter_us, 64: 1e-3}, {**base.split_k_iter_us, 64: 1e-3}, base.fixup_us,
                      base.fixed_us, "tuned on test (BN 64 stand-in)")
    from gemm_ladder.dispatch import calls

    monkeypatch.setattr(api, "decide", lambda *a, **kw: dispatch.decide(*a, model=table, **kw))
    dispatch.clear_cache()
    calls.CALLS.clear()  # mm keeps each signature's route: earlier tests' calls must not stand in
    try:
        for m, n, k in [(1024, 1024, 1024), (1000, 520, 200), (777, 1000, 300)]:
            a, w = random_operands(m, n, k, "bf16", "cuda", seed=m + 3 * n + k)
            for x, y in ((a, w.T), (a.T.contiguous().T, w.T), (a, w.T.contiguous()), (a.T.contiguous().T, w.T.contiguous())):
                assert gemm_ladder.explain(x, y).tile == [128, 64, 64]
                assert dispatch.decide(x, y, torch.empty(m, n, dtype=x.dtype, device="cuda"), given=True,
                                       model=table).bn == 64
                out = torch.full((m, n), float("nan"), dtype=x.dtype, device="cuda")
                gemm_ladder.mm(x, y, out=out)
                ref = a.double() @ w.double().T
                err = ((out.double() - ref).norm() / ref.norm()).item()
                assert err < 4e-3 and not torch.isnan(out).any(), (m, n, k, err)
    finally:
        dispatch.clear_cache()
        calls.CALLS.clear()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("bn", [*TILE_N, *K_MAJOR_B_TILE_N])
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("cluster", [2, 1])
def test_64_row_tiles(bn, split, cluster):
    """The 64-row builds (one consumer warpgroup on a 64 x BN tile, no register exchange) under each
    stream-K policy and cluster size, K-major A and B (the route's): an odd number of 64-row M tiles
    (333: six; 1000: sixteen; 129: three), M, N and K tails, padded pitches and offset bases; fp16 once."""
    fn = LayoutCall("k", "k", bn=bn, split=split, cluster=cluster, bm=64)
    # 1500 x 3072 x 1024 and 1100 x 3000 x 700: whole units that defer panels (BN 128-256) before a split
    # tail in one launch (reviewer's shapes; not yet run on the GPU when added)
    for m, n, k in [(333, 3072, 640), (1000, 520, 200), (129, 384, 4096), (64, 72, 64), (1, 24, 40),
                    (1500, 3072, 1024), (1100, 3000, 700)]:
        gate(fn, m, n, k, "bf16")
    gate(fn, 777, 1000, 300, "fp16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("a_major,b_major", [lay for lay in LAYOUTS if lay != ("k", "k")])
def test_64_row_tiles_read_every_operand_order(a_major, b_major):
    """The 64-row build at BN 128 reads MN-major operands as the 128-row build does (the route offers it
    for K-major A and B only): tails, pitches, offsets, a split tail and a split throughout."""
    for split in ("tail", "all"):
        fn = LayoutCall(a_major, b_major, bn=128, split=split, bm=64)
        for m, n, k in [(1000, 520, 200), (333, 384, 2048), (2304, 2048, 1000)]:
            gate(fn, m, n, k, "bf16")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("split", ["none", "tail", "all", "wave"])
def test_64_row_tiles_are_bitwise_repeatable(split):
    """Five 64-row launches into fresh NaN-poisoned outputs agree bit for bit (split partials added in K
    order, whichever CTA arrives last), at both cluster sizes."""
    m, n, k = 512, 1024, 4096
    a, b = random_operands(m, n, k, "bf16", "cuda", seed=512)
    for cluster in (2, 1):
        fn = LayoutCall("k", "k", bn=64, split=split, cluster=cluster, bm=64)
        first = fn(a, b).clone()
        for _ in range(4):
            assert torch.equal(fn(a, b), first)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("activation,dtype", [("gelu", torch.bfloat16), ("relu", torch.float16)])
def test_linear_with_a_fused_epilogue_on_one_cta_per_cluster(activation, dtype):
    """``linear`` with a bias and an activation where the route takes a cluster-1 build (M = 333: three M
    tiles; explain says so first), against float64, the output poisoned, with and without a residual; and a
    residual at 512 x 1024 x 4096, where the route takes a 64-row build, one CTA per cluster (BERT-large's
    output dense)."""
    import torch.nn.functional as F

    import gemm_ladder

    torch.manual_seed(333)
    # (M, N, K, residual, the route's tile height): the residual rides on the 128-row build at 333 rows.
    for m, n, k, residual, bm in ((333, 9216, 3072, False, 128), (333, 9216, 3072, True, 128),
                                  (512, 1024, 4096, True, 64)):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
        b = torch.randn(n, device="cuda", dtype=dtype)
        r = torch.randn(m, n, device="cuda", dtype=dtype) if residual else None
        e = gemm_ladder.explain(x, w.T)
        assert e.cluster == 1 and e.to_dict()["tile"][0] == bm, (m, n, k, str(e))
        torch.full((64 << 20,), float("nan"), device="cuda")  # the allocator's next blocks hold NaN
        out = gemm_ladder.linear(x, w, b, residual=r, activation=activation) if residual else \
            gemm_ladder.linear(x, w, b, activation=activation)
        z = x.double() @ w.double().T + b.double()
        ref = getattr(F, activation)(z) + (r.double() if residual else 0)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert torch.isfinite(out).all() and err < 1e-2, (m, n, k, activation, err)
