"""Checks shared by the GPU tests of the general kernel's multi-fragment builds (the 128-row ping-pong tile, the
256-row cooperative tile): a library kernel launched with ``linear``'s built-in epilogue into a NaN-poisoned output,
against the float64 reference, within twice eager torch's error plus one bf16 ulp; and a build's launches bitwise
repeatable and equal to a reference build's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gemm_ladder.gates.correctness import random_operands
from gemm_ladder.library.operand import operand_view

ACT = {None: lambda t: t, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu}


def _launch_against_float64(kernel, x, w, ref, eager, **linear_kw):
    from gemm_ladder.dispatch.validate import linear_call

    m, n = x.shape[0], w.shape[0]
    c = torch.full((m, n), float("nan"), device="cuda", dtype=x.dtype)
    kernel.launch(operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, epilogue=linear_call(x, w, **linear_kw))
    rel = ((c.double() - ref).norm() / ref.norm()).item()
    rel_eager = ((eager.double() - ref).norm() / ref.norm()).item()
    assert rel <= 2 * rel_eager + 2 ** -8, (m, n, x.shape[1], rel, rel_eager)


def check_bias_and_activation(kernel, activation, shapes, seed: int = 0) -> None:
    """bias + ``activation`` (None, "gelu", "gelu_tanh", "silu") fused by ``kernel`` at each (M, N, K) of ``shapes``."""
    act = ACT[activation]
    for m, n, k in shapes:
        x, w = random_operands(m, n, k, "bf16", "cuda", seed=m + seed)
        bias = torch.randn(n, device="cuda").to(x.dtype)
        ref = act(x.double() @ w.double().T + bias.double())
        _launch_against_float64(kernel, x, w, ref, act(F.linear(x, w, bias)), bias=bias, activation=activation)


def check_residual(kernel, shapes, seed: int = 0) -> None:
    """bias + GELU (tanh) + 0.5 x residual fused by ``kernel``: the residual is read by row, so a fragment's
    epilogue given the wrong rows fails here where a bias alone would not."""
    for m, n, k in shapes:
        x, w = random_operands(m, n, k, "bf16", "cuda", seed=m + seed)
        bias = torch.randn(n, device="cuda").to(x.dtype)
        res = torch.randn(m, n, device="cuda").to(x.dtype)
        ref = F.gelu(x.double() @ w.double().T + bias.double(), approximate="tanh") + 0.5 * res.double()
        eager = F.gelu(F.linear(x, w, bias), approximate="tanh") + 0.5 * res
        _launch_against_float64(kernel, x, w, ref, eager, bias=bias, activation="gelu_tanh", residual=res, beta=0.5)


def check_repeatable_and_equal(fn, reference, shape, seed: int) -> None:
    """``fn(a, b)`` (a LayoutCall: a NaN-poisoned output each call) gives the same bits over five launches, and
    the bits ``reference(a, b)`` gives: for builds whose rows take the same K order and wgmma steps."""
    m, n, k = shape
    a, b = random_operands(m, n, k, "bf16", "cuda", seed=seed)
    first = fn(a, b).clone()
    for _ in range(4):
        assert torch.equal(fn(a, b), first)
    assert torch.equal(reference(a, b), first)
