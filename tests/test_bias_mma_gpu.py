"""linear's bias added by the tensor cores (sm90_gemm.cu's bias stage, bias_stage.cuh) on the GPU: every general
build that takes it, both orientations, every split (the stage rides on the piece that ends a unit's K), tails in
M and N, bf16 and fp16, with an activation and a residual after it, NaN and Inf in the bias; against the float64
reference of the whole epilogue under the epilogue gate's bounds (test_epilogue_gpu.assert_epilogue_close), outputs
poisoned with NaN first, fresh inputs every check; bitwise repeatable; and the public linear on a route that takes it.

    pytest -m gpu tests/test_bias_mma_gpu.py
"""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder.dispatch.validate import linear_call
from gemm_ladder.library import gemm as G
from gemm_ladder.library.gemm import library_gemm
from gemm_ladder.library.operand import operand_view
from test_epilogue_gpu import assert_epilogue_close, poisoned, rnd

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def bias_by_mma(monkeypatch):
    """The stage on (library.gemm.BIAS_BY_MMA, on by default), whatever another test or a user left it at."""
    monkeypatch.setattr(G, "BIAS_BY_MMA", True)

#: The cooperative builds: the tile widths (BN 192 K-major B only), the one-CTA cluster, the 64-row tile, the
#: register store at a width no TMA panel makes, and MN-major operands (the stage is written K-major whatever the
#: build's majors: "a_mn" / "b_mn" read x or w from a transposed copy).
BUILDS = {"bn256": dict(bn=256), "bn192": dict(bn=192), "bn128": dict(bn=128), "bn64": dict(bn=64),
          "bn128_c1": dict(bn=128, cluster=1), "bm64_bn64": dict(bn=64, bm=64, cluster=1),
          "regs_bn144": dict(bn=144, c_from_registers=True), "bn128_a_mn": dict(bn=128, a_major="mn"),
          "bn256_b_mn": dict(bn=256, b_major="mn")}


def kernel_of(build):
    kw = dict(BUILDS[build])
    return library_gemm(kw.pop("a_major", "k"), kw.pop("b_major", "k"), **kw)


def view(t, major):
    """t (rows, K) as the kernel's operand view in ``major``: t itself (K-major) or a transposed copy."""
    return operand_view(t, k_dim=1) if major == "k" else operand_view(t.T.contiguous(), k_dim=0)
#: M x N x K with tails in M and N (N a whole number of 16-byte rows: the TMA store), K short and long.
SHAPES = ((1000, 520, 264), (304, 1000, 4096), (256, 384, 64))


def launch(kernel, x, w, call, split, swap):
    """c = call(x @ w.T) by ``kernel`` (directly, or swapped: D^T = W X^T into c.T), c poisoned with NaN; each
    operand in the build's major."""
    m, n = x.shape[0], w.shape[0]
    if swap:
        c = torch.full((n, m), float("nan"), device="cuda", dtype=x.dtype).T
        kernel.launch(view(w, kernel.a_major), view(x, kernel.b_major), c.T, split=split, epilogue=call.oriented(True))
    else:
        c = torch.full((m, n), float("nan"), device="cuda", dtype=x.dtype)
        kernel.launch(view(x, kernel.a_major), view(w, kernel.b_major), c, split=split, epilogue=call)
    torch.cuda.synchronize()
    return c


def takes_mma(kernel, call, swap, dtype) -> bool:
    oriented = call.oriented(swap)
    return kernel.epilogue_call(oriented, dtype).epilogue.mma_vector == "gl_bias_"


@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("swap", [False, True], ids=["direct", "swapped"])
def test_bias_by_mma_every_split(build, swap):
    """Where the build refuses the stage (swapped at BN 256: it spilled), the bias stays in the epilogue and the
    output is still checked."""
    kernel = kernel_of(build)
    for m, n, k in SHAPES:
        x, w, b = rnd(m, k), rnd(n, k), rnd(n)
        call = linear_call(x, w, b)
        assert takes_mma(kernel, call, swap, x.dtype) == (kernel.bias_refusal(call.oriented(swap), x.dtype) is None)
        for split in kernel.splits:
            assert_epilogue_close(launch(kernel, x, w, call, split, swap), x, w, call)


@pytest.mark.parametrize("build", ["bn256", "bn128", "regs_bn144"])
def test_bias_by_mma_with_activation_and_residual(build):
    kernel = kernel_of(build)
    m, n, k = 1000, 520, 776
    for act in ("gelu", "gelu_tanh", "silu"):
        x, w, b, r = rnd(m, k), rnd(n, k), rnd(n), rnd(m, n)
        call = linear_call(x, w, b, activation=act, residual=r, beta=0.5)
        assert takes_mma(kernel, call, False, x.dtype)
        assert_epilogue_close(launch(kernel, x, w, call, "none", False), x, w, call)


@pytest.mark.parametrize("swap", [False, True], ids=["direct", "swapped"])
def test_bias_by_mma_fp16(swap):
    kernel = library_gemm("k", "k", 128)
    # M, N: whole 16-byte rows in either orientation (the TMA store)
    x, w, b = rnd(776, 1032, dtype=torch.float16), rnd(648, 1032, dtype=torch.float16), rnd(648, dtype=torch.float16)
    call = linear_call(x, w, b, activation="relu")
    assert takes_mma(kernel, call, swap, x.dtype)
    for split in ("none", "all"):
        assert_epilogue_close(launch(kernel, x, w, call, split, swap), x, w, call)


@pytest.mark.parametrize("swap", [False, True], ids=["direct", "swapped"])
def test_bias_by_mma_nonfinite(swap):
    """NaN and Inf in the bias reach their columns only (1 x NaN, 1 x Inf in the MMA; the zeros of the stage's
    other k multiply zeros): the gate places every non-finite output where float64 has it."""
    kernel = library_gemm("k", "k", 128)
    m, n, k = 304, 264, 512
    x, w, b = rnd(m, k), rnd(n, k), rnd(n)
    b[3], b[130], b[131] = float("nan"), float("inf"), float("-inf")
    call = linear_call(x, w, b)
    assert takes_mma(kernel, call, swap, x.dtype)
    c = launch(kernel, x, w, call, "none", swap)
    assert_epilogue_close(c, x, w, call)
    assert torch.isnan(c[:, 3]).all() and (c[:, 130] == float("inf")).all() and (c[:, 131] == float("-inf")).all()


@pytest.mark.parametrize("build", ["bn256", "bn64"])
def test_bias_by_mma_repeatable_and_close_to_the_epilogue(build):
    """Bitwise equal over repeated launches (each split), and within the gate's bound of the epilogue's bias."""
    kernel = kernel_of(build)
    m, n, k = 1000, 1032, 2048
    x, w, b = rnd(m, k), rnd(n, k), rnd(n)
    call = linear_call(x, w, b, activation="gelu_tanh")
    for split in kernel.splits:
        first = launch(kernel, x, w, call, split, False)
        for _ in range(3):
            assert torch.equal(launch(kernel, x, w, call, split, False), first), split
    saved = G.BIAS_BY_MMA
    try:
        G.BIAS_BY_MMA = False
        assert not takes_mma(kernel, call, False, x.dtype)
        by_epilogue = launch(kernel, x, w, call, "none", False)
    finally:
        G.BIAS_BY_MMA = saved
    assert_epilogue_close(by_epilogue, x, w, call)
    assert_epilogue_close(first, x, w, call)


def test_linear_takes_the_bias_by_mma():
    """The public linear on a shape whose route is a cooperative build (ViT-L's qkv at 1576 rows): right."""
    x, w, b = rnd(1576, 1024), rnd(3072, 1024), rnd(3072)
    assert gemm_ladder.explain(x, w.T, bias=b).bias.startswith("MMA")
    poisoned()
    y = gemm_ladder.linear(x, w, b)
    assert_epilogue_close(y, x, w, linear_call(x, w, b))
