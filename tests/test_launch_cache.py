"""The library kernels keep bound launches per config, addresses and layouts (library/kernel.py's bind
cache, library/gemm.py bind_key,
library/repack.py's packed launches): every field a launch depends on is in the key, a repeated call on
the same tensors reuses it, and bad input is still refused with the kernel's rule."""

from __future__ import annotations

import pytest
import torch

import gemm_ladder
from gemm_ladder import dispatch
from gemm_ladder.contract import GemmInputError, reference
from gemm_ladder.library.gemm import LibraryGemm, library_gemm
from gemm_ladder.library.gemm import bind_key as _bind_key
from gemm_ladder.library.operand import OperandView

BF16 = torch.bfloat16


def _views(dtype=BF16):
    a = torch.zeros(64, 40, dtype=dtype)
    b = torch.zeros(48, 40, dtype=dtype)
    c = torch.zeros(64, 48, dtype=dtype)
    return OperandView(a, 64, 40, 40, "k"), OperandView(b, 48, 40, 40, "k"), c


def test_bind_key_holds_every_field_a_launch_depends_on():
    a, b, c = _views()
    cfg = library_gemm("k", "k", 128).config("bf16")

    def bind_key(*args):
        return _bind_key(cfg, *args)

    base = bind_key(a, b, c, "tail", False, 7)
    assert base == bind_key(a, b, c, "tail", False, 7)
    other = torch.zeros(64, 48, dtype=BF16)
    changed = [
        _bind_key(library_gemm("k", "k", 256).config("bf16"), a, b, c, "tail", False, 7),  # the build
        bind_key(OperandView(torch.zeros(64, 40, dtype=BF16), 64, 40, 40, "k"), b, c, "tail", False, 7),  # a's address
        bind_key(OperandView(a.tensor, 64, 40, 48, "k"), b, c, "tail", False, 7),  # a's leading dimension
        bind_key(OperandView(a.tensor, 64, 40, 40, "mn"), b, c, "tail", False, 7),  # a's major
        bind_key(a, OperandView(b.tensor, 40, 40, 40, "k"), c, "tail", False, 7),  # b's rows
        bind_key(a, b, other, "tail", False, 7),  # c's address
        bind_key(a, b, c.T.contiguous().T, "tail", False, 7),  # c's strides
        bind_key(a, b, c.to(torch.float16), "tail", False, 7),  # c's dtype
        bind_key(a, b, c, "all", False, 7),  # the split
        bind_key(a, b, c, "tail", True, 7),  # the padding rule
        bind_key(a, b, c, "tail", False, 8),  # the stream
    ]
    assert all(k != base for k in changed)
    assert len(set(changed)) == len(changed)


def test_bad_input_is_still_refused_with_the_rule():
    """A CPU output never reaches the cache: bind refuses it, naming the rule, before any launch."""
    a, b, c = _views()
    with pytest.raises(GemmInputError, match="CUDA"):
        library_gemm("k", "k", 128).launch(a, b, c)


@pytest.mark.gpu
def test_repeated_calls_reuse_one_bind_and_read_the_current_data(monkeypatch):
    """mm on an unaligned shape (both operands repacked, C from registers) three times on the same
    tensors with fresh values: one bind, each result right against float64; a second x at another
    address binds anew."""
    binds = []
    real = LibraryGemm.bind

    def counting(self, *args, **kw):
        binds.append(self.name)
        return real(self, *args, **kw)

    monkeypatch.setattr(LibraryGemm, "bind", counting)
    dispatch.clear_cache()
    x = torch.empty(1000, 1003, device="cuda", dtype=BF16)  # K and N odd: both repacked, C from registers
    w = torch.empty(777, 1003, device="cuda", dtype=BF16)
    out = torch.empty(1000, 777, device="cuda", dtype=BF16)
    # Fresh values for each call and a copy of each result, all made before the calls, and the references
    # after them: an allocation between two calls can take the block a repack workspace had (then its
    # address, so the key, differs; under pytest-xdist, after other tests, it did for every call).
    data = [(torch.randn_like(x, dtype=torch.float32).to(BF16), torch.randn_like(w, dtype=torch.float32).to(BF16))
            for _ in range(3)]
    results = [torch.empty_like(out) for _ in data]
    for (xv, wv), kept in zip(data, results):
        x.copy_(xv)
        w.copy_(wv)
        out.fill_(float("nan"))  # poisoned: what the cached launch does not write stays NaN
        gemm_ladder.mm(x, w.T, out=out)
        kept.copy_(out)
    for (xv, wv), kept in zip(data, results):
        ref = reference(xv, wv)
        assert ((kept.double() - ref).norm() / ref.norm()).item() < 1e-2
    assert gemm_ladder.explain(x, w.T).to_dict()["kind"] == "general"
    # Reused: fewer binds than calls (on the H200, with values made between the calls, 2 for 3).
    assert len(binds) < 3, binds
    x2 = torch.randn(1000, 1003, device="cuda").to(BF16)
    out = gemm_ladder.mm(x2, w.T)
    ref = reference(x2, w)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
