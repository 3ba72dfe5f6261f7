"""``explain`` describes what ``mm`` runs for outputs the TMA store cannot write (issue 26): a float32
output and an odd-pitch output are written from registers, in place, and the explanation says so,
without a refusal that reads as if the call were refused or as advice to repack c. Meta tensors: no GPU."""

from __future__ import annotations

import torch

import gemm_ladder

BF16 = torch.bfloat16


def meta(shape, stride=None, dtype=BF16):
    return torch.empty_strided(shape, stride or (shape[1], 1), device="meta", dtype=dtype)


def test_float32_output_is_explained_as_the_register_store_without_a_dtype_refusal():
    for m in (4096, 16):  # the general kernel's register-store build, and the small-M kernel
        e = gemm_ladder.explain(meta((m, 4096)), meta((4096, 4096)), out_dtype=torch.float32)
        text = str(e)
        assert e.out_dtype == "float32" and e.output["output_path"] == "C from registers" and e.output["path"] == "in place"
        assert "share one dtype" not in text and not e.refusals, text
        assert all("share one dtype" not in r for r in e.not_taken), e.not_taken


def test_an_output_written_from_registers_is_not_advised_to_be_repacked():
    c = meta((4096, 4096), (4101, 1))  # a pitch of 8202 bytes: no TMA store can write it
    e = gemm_ladder.explain(meta((4096, 4096)), meta((4096, 4096)), out=c)
    assert e.output["output_path"] == "C from registers" and e.output["path"] == "in place"
    assert not any("repack" in r for r in e.refusals), e.refusals
    assert any("no TMA store" in r and "in place" in r for r in e.refusals), e.refusals
    c32 = meta((4096, 4096), (4101, 1), dtype=torch.float32)
    e = gemm_ladder.explain(meta((4096, 4096)), meta((4096, 4096)), out=c32, out_dtype=torch.float32)
    assert e.output["output_path"] == "C from registers" and not any("repack" in r or "dtype" in r for r in e.refusals)
