"""The fp8 kernel's TMA-store build (Fp8Kernel.store = "tma") without a GPU: which store a call gets and
why (store_for, describe, explain_scaled_mm), its config and shared memory, the C tensor map the launch
passes, its ring audited with the staging buffer, and (nvcc) its SASS: no global store of the output,
one TMA store per 64-column panel, the staging writes as st.shared."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

import gemm_ladder
from gemm_ladder.errors import GemmInputError
from gemm_ladder.library import fp8
from gemm_ladder.library.fp8 import Fp8Kernel, check_scaled_mm
from gemm_ladder.library.quantized import quantize_fp8

from conftest import needs_nvcc

TMA, REGISTERS = fp8.STORE_TMA, fp8.STORE_REGISTERS
#: Every TMA-store build the launch can ask for at BN = 128: scale mode x bf16/fp16 x bias.
TMA_BUILDS = [Fp8Kernel(mode, out_dtype=out, bias=bias, store=TMA)
              for mode in fp8.SCALE_MODES for out in fp8.TMA_STORE_OUT for bias in (False, True)]
#: The builds compiled here (two nvcc builds each: the TMA store and its register-store twin): every scale
#: mode, both output dtypes, with and without a bias, and BN 64, each at least once. The other TMA builds
#: differ from these only in a combination of the same switches; the GPU tests (test_fp8_store_gpu.py)
#: compile and run all of them.
SASS_BUILDS = [Fp8Kernel("tensorwise", out_dtype="bf16", store=TMA),
               Fp8Kernel("rowwise", out_dtype="fp16", bias=True, store=TMA),
               Fp8Kernel("blockwise", out_dtype="bf16", bias=True, store=TMA),
               Fp8Kernel("blockwise", bn=64, store=TMA)]


def test_the_default_store_is_the_tma_store_where_the_output_allows_it():
    assert fp8.STORE_DEFAULT == TMA and Fp8Kernel().store == REGISTERS  # an explicit build names its store
    assert fp8.FP8_GEMM.config("tensorwise").store == TMA
    assert fp8.FP8_GEMM.config("tensorwise", out_dtype="fp32").store == REGISTERS
    assert fp8.store_for("bf16", None, 4096) == (TMA, "the output's base and row pitch are 16-byte aligned")
    assert fp8.store_for("bf16", None, 4096, REGISTERS) == (REGISTERS, "the register store was asked for (fp8.STORE_DEFAULT or the build)")


def test_store_for_names_why_the_register_store_runs():
    def out(rows, pitch, offset=0, dtype=torch.bfloat16):
        return torch.empty(rows * pitch + 8, dtype=dtype)[offset:offset + rows * pitch].view(rows, pitch)

    assert fp8.store_for("bf16", None, 4096, TMA)[0] == TMA
    assert fp8.store_for("fp16", out(4, 200)[:, :192], 192, TMA)[0] == TMA  # the pitch 400 bytes
    store, why = fp8.store_for("fp16", out(4, 200)[:, :197], 197, TMA)  # a row's last chunk partly past N
    assert store == REGISTERS and "N = 197 is not a multiple of 8" in why
    store, why = fp8.store_for("bf16", out(4, 100)[:, :96], 96, TMA)  # a pitch of 200 bytes
    assert store == REGISTERS and "row pitch (100 elements)" in why
    store, why = fp8.store_for("bf16", out(4, 136, offset=1)[:, :128], 128, TMA)
    assert store == REGISTERS and "not 16-byte aligned" in why
    for out_dtype in ("fp32", "fp8"):
        store, why = fp8.store_for(out_dtype, None, 4096, TMA)
        assert store == REGISTERS and "bf16 and fp16 only" in why
    meta = torch.empty((8, 4096), dtype=torch.bfloat16, device="meta")
    assert fp8.store_for("bf16", meta, 4096, TMA)[0] == TMA
    # meta and fake outputs: the view's storage offset, as the launch's base address would show it
    shifted = torch.empty(8 * 4104 + 8, dtype=torch.bfloat16, device="meta")[1:1 + 8 * 4104].view(8, 4104)[:, :4096]
    store, why = fp8.store_for("bf16", shifted, 4096, TMA)
    assert store == REGISTERS and "0x2 is not 16-byte aligned" in why
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecated data_ptr of a fake tensor
        fake = torch.empty(8 * 4104 + 8, dtype=torch.bfloat16)
        assert fp8.store_for("bf16", fake[8:8 + 8 * 4104].view(8, 4104)[:, :4096], 4096, TMA)[0] == TMA
        assert fp8.store_for("bf16", fake[1:1 + 8 * 4104].view(8, 4104)[:, :4096], 4096, TMA)[0] == REGISTERS


def test_config_stages_and_shared_memory():
    # BN 128: the two consumers' 64 x 128 bf16 staging buffers (32 KiB) fit beside 6 stages in the
    # tensorwise and rowwise modes; blockwise (512 bytes of scale_a per stage more) drops to 5.
    assert {mode: fp8.stages_for(mode, 128, TMA) for mode in fp8.SCALE_MODES} == \
        {"tensorwise": 6, "rowwise": 6, "blockwise": 5}
    assert {mode: fp8.stages_for(mode, 64, TMA) for mode in fp8.SCALE_MODES} == dict.fromkeys(fp8.SCALE_MODES, 8)
    for bn in fp8.TILE_N:
        for mode in fp8.SCALE_MODES:
            assert fp8.stages_for(mode, bn, REGISTERS) == fp8.STAGES[bn]
            k = Fp8Kernel(mode, bn=bn, store=TMA)
            assert k.dynamic_smem <= fp8.SMEM_LIMIT
            assert k.dynamic_smem - Fp8Kernel(mode, bn=bn, stages=k.ring_stages).dynamic_smem == 2 * 64 * bn * 2
    assert Fp8Kernel("tensorwise", store=TMA).dynamic_smem == 230496
    assert Fp8Kernel("blockwise", store=TMA).dynamic_smem == 200272
    assert fp8.smem_bytes("blockwise", 6, 128, TMA) > fp8.SMEM_LIMIT  # why blockwise has 5


def test_config_round_trips_and_refuses_what_it_cannot_build():
    for k in TMA_BUILDS + [Fp8Kernel("rowwise", bn=64, store=TMA), Fp8Kernel("blockwise", stages=3, store=TMA)]:
        c = k.config()
        assert c.store == TMA and c.c_ring == 1 and c.defines()["GL_FP8_TMA_STORE"] == 1
        assert fp8.kernel_for(c) == k
        assert c != dataclasses.replace(k, store=REGISTERS).config()
    assert Fp8Kernel().config().defines()["GL_FP8_TMA_STORE"] == 0 and Fp8Kernel().config().c_ring == 0
    for bad in (Fp8Kernel(out_dtype="fp32", store=TMA), Fp8Kernel(out_dtype="fp8", store=TMA), Fp8Kernel(store="smem")):
        with pytest.raises(ValueError, match="no such configuration"):
            bad.config()
    assert fp8.FP8_GEMM.describe(Fp8Kernel(store=TMA).config())["store"] == TMA
    with pytest.raises(ValueError, match="233568 bytes of shared memory"):  # explicit stages past the limit
        Fp8Kernel("blockwise", stages=6, store=TMA).config()


def test_an_explicit_build_of_another_output_dtype_is_refused(monkeypatch):
    _calls(monkeypatch)
    qa, qb, sa, sb = _problem(300, 200, 272)
    call = check_scaled_mm(qa, qb, sa, sb, None, torch.float16, device_type="cpu")
    with pytest.raises(GemmInputError, match="writes bf16"):
        fp8.scaled_mm_launch(qa, qb, sa, sb, None, call, kernel=Fp8Kernel("blockwise", out_dtype="bf16"))


def _calls(monkeypatch):
    rec = []

    class Recorder:
        def launch(self, grid, args, stream):
            rec.append(args)

    monkeypatch.setattr(fp8, "encode_tiled", lambda kwargs: kwargs)
    monkeypatch.setattr(fp8, "_sm_count", lambda device: 132)
    monkeypatch.setattr(fp8, "_stream", lambda device: None)
    monkeypatch.setattr(Fp8Kernel, "loaded", lambda self, device: Recorder())
    return rec


def _problem(m, n, k):
    qa, sa = quantize_fp8(torch.randn(m, k), (1, 128))
    qw, sw = quantize_fp8(torch.randn(n, k), (128, 128))
    return qa, qw.T, sa, sw.T


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_launch_passes_the_c_tensor_map(monkeypatch, out_dtype):
    m, n, k = 300, 200, 272
    rec = _calls(monkeypatch)
    monkeypatch.setattr(fp8, "STORE_DEFAULT", TMA)
    qa, qb, sa, sb = _problem(m, n, k)
    call = check_scaled_mm(qa, qb, sa, sb, None, out_dtype, device_type="cpu")
    out = fp8.scaled_mm_launch(qa, qb, sa, sb, None, call)
    (args,) = rec
    map_a, map_c = args[0], args[3]
    assert map_c is not map_a
    assert map_c["globalAddress"] == out.data_ptr() and map_c["globalDim"] == [n, m]
    assert map_c["globalStrides"] == [out.stride(0) * 2] and map_c["boxDim"] == [64, 64]
    assert map_c["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert map_c["tensorDataType"] == {torch.bfloat16: "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
                                       torch.float16: "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"}[out_dtype]
    e = fp8.describe(call, qa, qb, sa, None, sms=132)
    assert (e["store"], e["defines"]["GL_FP8_TMA_STORE"], e["tile"]["BN"], e["stages"]) == (TMA, 1, 64, 8)


def test_an_output_tma_cannot_write_runs_the_register_store_and_says_so(monkeypatch):
    m, n, k = 130, 97, 256
    rec = _calls(monkeypatch)
    monkeypatch.setattr(fp8, "STORE_DEFAULT", TMA)
    qa, qb, sa, sb = _problem(m, n, k)
    call = check_scaled_mm(qa, qb, sa, sb, device_type="cpu")
    fp8.scaled_mm_launch(qa, qb, sa, sb, None, call)
    assert rec[-1][3] is rec[-1][0]  # map_c: the register store's stand-in (map_a)
    e = fp8.describe(call, qa, qb, sa, None, sms=132)
    assert e["store"] == REGISTERS and "N = 97 is not a multiple of 8" in e["store_reason"]
    assert e["defines"]["GL_FP8_TMA_STORE"] == 0
    # A TMA-store build asked for by name is never replaced: the call is refused, saying why.
    with pytest.raises(GemmInputError, match="stores C by TMA, but N = 97"):
        fp8.scaled_mm_launch(qa, qb, sa, sb, None, call, kernel=Fp8Kernel("blockwise", store=TMA, bn=64))
    qa, qb, sa, sb = _problem(m, 96, k)
    padded = torch.empty((m, 104), dtype=torch.bfloat16)[:, :96]  # pitch 208 bytes: TMA writes it
    call = check_scaled_mm(qa, qb, sa, sb, out=padded, device_type="cpu")
    fp8.scaled_mm_launch(qa, qb, sa, sb, None, call, padded)
    assert rec[-1][3]["globalStrides"] == [208] and rec[-1][3]["globalDim"] == [96, m]


def test_explain_names_the_store(monkeypatch):
    monkeypatch.setattr(fp8, "WIDE_TILE", False)  # the 128-wide tile's ring (the 192-wide one's: test_fp8_bn192_cpu.py)
    a = torch.empty((4096, 1536), dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty((24576, 1536), dtype=torch.float8_e4m3fn, device="meta").T
    s = torch.empty((), device="meta")
    monkeypatch.setattr(fp8, "STORE_DEFAULT", REGISTERS)
    e = gemm_ladder.explain_scaled_mm(a, b, s, s)
    assert e["store"] == REGISTERS and e["store_reason"] == "the register store was asked for (fp8.STORE_DEFAULT or the build)"
    monkeypatch.setattr(fp8, "STORE_DEFAULT", TMA)
    e = gemm_ladder.explain_scaled_mm(a, b, s, s)
    assert (e["store"], e["stages"], e["dynamic_smem_bytes"]) == (TMA, 6, 230496)
    e = gemm_ladder.explain_scaled_mm(a, b, s, s, out_dtype=torch.float32)
    assert e["store"] == REGISTERS and "bf16 and fp16 only" in e["store_reason"]
    out = torch.empty((4096, 24584), dtype=torch.bfloat16, device="meta")[:, :24576]
    assert gemm_ladder.explain_scaled_mm(a, b, s, s, out=out)["store"] == TMA
    out = torch.empty((4096, 24580), dtype=torch.bfloat16, device="meta")[:, :24576]
    assert "row pitch (24580 elements)" in gemm_ladder.explain_scaled_mm(a, b, s, s, out=out)["store_reason"]


@pytest.mark.parametrize("kernel", [Fp8Kernel("tensorwise", store=TMA), Fp8Kernel("blockwise", store=TMA),
                                    Fp8Kernel("rowwise", bn=64, store=TMA),
                                    Fp8Kernel("tensorwise", overlap=False, store=TMA)],
                         ids=["tensorwise", "blockwise", "rowwise-bn64", "tensorwise-serial"])
def test_ring_with_staging_audited(kernel):
    from gemm_ladder.audit import audit, build_ring_protocol

    ring = kernel.ring_config(k_iters=3, tiles=3)
    assert (ring.staging_buffers, ring.panels_per_tile, ring.staging_wait_pending) == (1, 1, 0)
    assert ring.store_order == ("drain", "write", "store")
    assert audit(build_ring_protocol(ring, name="fp8-tma")).ok


@pytest.mark.parametrize("fault", [dict(drain_staging_before_reuse=False), dict(store_order=("write", "drain", "store")),
                                   dict(final_store_wait=False), dict(shared_staging=True)],
                         ids=["no-drain", "write-before-drain", "no-final-wait", "shared-staging"])
def test_ring_audit_catches_a_staging_fault(fault):
    from gemm_ladder.audit import audit, build_ring_protocol

    ring = dataclasses.replace(Fp8Kernel("tensorwise", store=TMA).ring_config(k_iters=2, tiles=3), **fault)
    assert not audit(build_ring_protocol(ring, name="fp8-tma-fault"), stop_at_first=True).ok


@needs_nvcc
@pytest.mark.parametrize("kernel", SASS_BUILDS,
                         ids=lambda k: f"{k.scale_mode}-{k.out_dtype}-bias{int(k.bias)}-bn{k.bn}")
def test_tma_store_build_sass(use_cache, kernel):
    """No spills, no more registers than the register-store build, and the epilogue's census: no STG (the
    output's only global stores were the epilogue's), BN / 64 UTMASTG, BN / 4 STS (one 4-byte staging
    write per packed pair), two named barriers beside the __syncthreads."""
    from gemm_ladder.gates.resources import parse_ptxas_log, sass_census
    from gemm_ladder.runtime.compiler import disassemble

    built = kernel.build()
    usage = parse_ptxas_log(built.ptxas_log)[fp8.KERNEL_NAME]
    assert (usage.stack_bytes, usage.spill_stores, usage.spill_loads) == (0, 0, 0)
    assert "C7514" not in built.ptxas_log and "C7517" not in built.ptxas_log, built.ptxas_log
    register_build = dataclasses.replace(kernel, store=REGISTERS)
    assert usage.registers <= parse_ptxas_log(register_build.build().ptxas_log)[fp8.KERNEL_NAME].registers
    counts = sass_census(disassemble(built.cubin))[fp8.KERNEL_NAME].counts
    assert counts.get("STG", 0) == 0, counts
    assert counts.get("UTMASTG") == kernel.bn // 64 and counts.get("STS") == kernel.bn // 4, counts
    assert counts.get("BAR") == 3, counts
    reg = sass_census(disassemble(register_build.build().cubin))[fp8.KERNEL_NAME].counts
    assert reg.get("STG", 0) > 0 and "UTMASTG" not in reg and "STS" not in reg, reg
