"""scaled_mm on the compiled host path, without a GPU: the fp8 launch's argument roles (library/fp8.py
``launch_args``, the one layout both paths launch) make a template over the op's own tensors, C++ patches
exactly the pointer slots those roles name, a copy made per call is refused as a template, and
scaled_mm's signature key changes with everything the checks and the plan read (the fp8 module's
defaults too) and with nothing else.

The GPU side (the host path's output bitwise the Python path's, launches counted, the Python path kept
where the planner says so, capture, threads) is tests/test_fp8_host_gpu.py.
"""

from __future__ import annotations

import itertools
import struct

import pytest
import torch

from gemm_ladder.host import templates
from gemm_ladder.library import fp8
from host_fakes import FakeBound, FakeMap, host  # noqa: F401 - host: the module fixture

E4M3 = torch.float8_e4m3fn
SMS = 132


def _operands(m, n, k, scheme, bias_dtype=None, scale_a_strided=False):
    a = torch.zeros(m, k, dtype=E4M3)
    b = torch.zeros(n, k, dtype=E4M3).T
    if scheme == "tensorwise":
        sa, sb = torch.ones(()), torch.ones(())
    elif scheme == "rowwise":
        sa = torch.ones(m, 2)[:, :1] if scale_a_strided else torch.ones(m, 1)
        sb = torch.ones(1, n)
    else:
        kb, nb = -(-k // 128), -(-n // 128)
        sa, sb = torch.ones(kb, m).T, torch.ones(nb, kb).T
    bias = None if bias_dtype is None else torch.zeros(n, dtype=bias_dtype)
    return a, b, sa, sb, bias


def _args(monkeypatch, m, n, k, scheme, out_dtype=torch.bfloat16, bias_dtype=None, scale_a_strided=False):
    """launch_args with roles for a CPU call (the maps stood in for: encoding needs the driver)."""
    fills = itertools.count(1)
    monkeypatch.setattr(fp8, "_map", lambda *a, **kw: FakeMap(next(fills)))
    a, b, sa, sb, bias = _operands(m, n, k, scheme, bias_dtype, scale_a_strided)
    call = fp8.check_scaled_mm(a, b, sa, sb, bias, out_dtype, device_type=None)
    out = torch.empty(m, n, dtype=out_dtype)
    kernel, plan, _ = fp8.default_build(call, a, b, bias, out, SMS)
    args = fp8.launch_args(kernel, call, plan, a, b, sa, sb, bias, out, None, (0, 0), roles=True)
    workspace = fp8._workspace_sizes(plan, kernel.bn, kernel.consumers) if plan.tail_units else None
    return kernel, plan, args, workspace


def _template(args, workspace, m, n, out_dtype=torch.bfloat16):
    enums = {}
    return templates.template_from_bound(FakeBound(args.args, args.roles, workspace), out_shape=(m, n),
                                         out_dtype=out_dtype, sources=templates.FP8_SOURCES,
                                         enum=lambda key, name: enums.setdefault((key, name), len(enums) + 1))


SRC = {name: templates.SOURCES.index(name) for name in templates.SOURCES}


@pytest.mark.parametrize("scheme", ["tensorwise", "rowwise", "blockwise"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("bias", [None, torch.float32])
def test_fp8_roles_make_a_template_over_the_ops_tensors(monkeypatch, scheme, out_dtype, bias):
    m, n, k = 300, 1024, 640
    kernel, plan, args, workspace = _args(monkeypatch, m, n, k, scheme, out_dtype, bias)
    assert not args.made and len(args.roles) == len(args.args) == 20
    t = _template(args, workspace, m, n, out_dtype)
    # The maps: a, b, then scale_a's (blockwise; otherwise a's stands in, never read), then C's (the TMA
    # store; otherwise a's again).
    tma = kernel.store == fp8.STORE_TMA
    assert tma == (out_dtype == torch.bfloat16)
    assert [mp[1] for mp in t.maps] == [SRC["a"], SRC["b"], SRC["scale_a" if scheme == "blockwise" else "a"],
                                        SRC["out" if tma else "a"]]
    dims = [mp[4] for mp in t.maps]
    assert dims[0] == [k, m] and dims[1] == [k, n]
    if scheme == "blockwise":
        assert dims[2] == [m, -(-k // 128)] and t.maps[2][5] == [4 * m]  # K-block-major, pitch M fp32
    # The pointers: the two scales, the bias (when given), the output.
    off = t.arg_offsets
    want = [(off[4], SRC["scale_a"]), (off[5], SRC["scale_b"])] + ([(off[8], SRC["bias"])] if bias else []) + \
        [(off[9], SRC["out"])]
    assert t.pointers == want
    assert t.scalars == [] and t.partials is None and t.counters is None  # 300 rows: 3 x 8 tiles, unsplit
    assert not plan.tail_units
    # Each argument's bytes at its offset are those the Python launch passes.
    for arg, o in zip(args.args, off):
        data, align = templates._arg_bytes(arg)
        assert o % align == 0 and t.buffer[o:o + len(data)] == data


def test_fp8_split_template_names_the_workspace_slots(monkeypatch):
    m, n, k = 64, 4096, 7168  # 64 tiles of 64 x 64 on 132 SMs, 56 K blocks: split
    kernel, plan, args, workspace = _args(monkeypatch, m, n, k, "blockwise")
    assert plan.tail_units and workspace
    t = _template(args, workspace, m, n)
    assert t.partials == (t.arg_offsets[18], workspace[0]) and t.counters == (t.arg_offsets[19], workspace[1])
    assert t.grid == (132, 1, 1)


def test_cpp_patches_only_the_slots_the_fp8_roles_name(monkeypatch, host):
    m, n, k = 128, 512, 256
    _, _, args, workspace = _args(monkeypatch, m, n, k, "rowwise", bias_dtype=torch.float32)
    t = _template(args, workspace, m, n)
    ptrs = [0x7100_0000_0000 + 0x100 * i for i in range(len(templates.SOURCES))]
    out = host.patched_buffer(t, ptrs, 1.0, 1.0)
    assert len(out) == len(t.buffer)
    for offset, source in t.pointers:
        assert struct.unpack_from("<Q", out, offset)[0] == ptrs[source]
    slots = {o + i for o, _ in t.pointers for i in range(8)}
    assert {i for i in range(len(out)) if out[i] != t.buffer[i]} <= slots
    assert [templates.SOURCES[s] for _, s in t.pointers] == ["scale_a", "scale_b", "bias", "out"]


class _FakeLoaded:
    """Stands for a loaded fp8 build: prepare() gives what template_from_bound reads."""

    def prepare(self, grid, args, stream_handle):
        from host_fakes import FakePrepared

        return FakePrepared(args)


def _plan(monkeypatch, m, n, k, scheme, bias_dtype=None, scale_a_strided=False):
    """planner.plan_scaled_mm on CPU tensors: the GPU's parts (SM count, stream, the build's load, the maps'
    encoding) stood in for; what it answers is what C++ keeps for the signature."""
    from gemm_ladder.host import planner

    fills = itertools.count(1)
    monkeypatch.setattr(fp8, "_map", lambda *a, **kw: FakeMap(next(fills)))
    monkeypatch.setattr(fp8, "_sm_count", lambda device: SMS)
    monkeypatch.setattr(fp8, "_stream", lambda device: type("S", (), {"cuda_stream": 0})())
    monkeypatch.setattr(fp8.Fp8Kernel, "loaded", lambda self, device: _FakeLoaded())
    monkeypatch.setattr(templates, "enum_value", lambda key, name: 1)
    check = fp8.check_scaled_mm  # the address rules (a CUDA device) are the GPU's
    monkeypatch.setattr(fp8, "check_scaled_mm", lambda *args, **kw: check(*args, **{**kw, "device_type": None}))
    a, b, sa, sb, bias = _operands(m, n, k, scheme, bias_dtype, scale_a_strided)
    return planner.plan_scaled_mm(a, b, sa, sb, bias, torch.bfloat16)


@pytest.mark.parametrize("case", ["bf16 bias", "strided rowwise scale"])
def test_a_copy_made_per_call_is_left_to_python(monkeypatch, case):
    """A rowwise scale or the bias copied for the launch has a new address every call: the planner answers
    None (C++ then runs the Python launch for the signature), and a template over the copy is refused."""
    if case == "bf16 bias":
        assert _plan(monkeypatch, 128, 512, 256, "tensorwise", bias_dtype=torch.bfloat16) is None
        _, _, args, ws = _args(monkeypatch, 128, 512, 256, "tensorwise", bias_dtype=torch.bfloat16)
    else:
        assert _plan(monkeypatch, 128, 512, 256, "rowwise", scale_a_strided=True) is None
        _, _, args, ws = _args(monkeypatch, 128, 512, 256, "rowwise", scale_a_strided=True)
    assert len(args.made) == 1 and args.pad_scale_a is None
    with pytest.raises(templates.TemplateError, match="made"):
        _template(args, ws, 128, 512)
    assert _plan(monkeypatch, 128, 512, 256, "rowwise", bias_dtype=torch.float32) is not None


@pytest.mark.parametrize("m", [1, 130, 7])
def test_blockwise_scale_a_padded_per_call_is_a_template_slot(monkeypatch, host, m):
    """Blockwise scale_a that TMA cannot read in place (M = 1, or M fp32 a row not 16 bytes) is copied
    into a zeroed (K/128, ceil(M/4)*4) buffer: the template's map is over that buffer (pad_scale_a), whose
    address C++ makes per call; with M a multiple of 4 the map is over scale_a itself."""
    n, k = 512, 640
    _, _, args, ws = _args(monkeypatch, m, n, k, "blockwise")
    kb, pitch = -(-k // 128), -(-m // 4) * 4
    assert args.pad_scale_a == (kb, pitch) and len(args.made) == 1
    t = _template(args, ws, m, n)
    assert t.maps[2][1] == SRC["scale_a_padded"] and t.maps[2][4] == [m, kb] and t.maps[2][5] == [4 * pitch]
    _, _, args4, ws4 = _args(monkeypatch, 128, n, k, "blockwise")
    assert args4.pad_scale_a is None and not args4.made
    assert _template(args4, ws4, 128, n).maps[2][1] == SRC["scale_a"]
    # What the planner hands C++: the buffer's extent with the map over it.
    planned = _plan(monkeypatch, m, n, k, "blockwise")
    assert planned.pad_scale_a == (kb, pitch) and planned.maps[2][1] == SRC["scale_a_padded"]
    assert _plan(monkeypatch, 128, n, k, "blockwise").pad_scale_a is None


def _sig(host, a, b, sa, sb, bias=None, out_dtype=torch.bfloat16, settings=0, capturing=False):
    return host.scaled_mm_signature(a, b, sa, sb, bias, out_dtype, settings, capturing)


def test_scaled_mm_signature_changes_with_what_the_checks_and_the_plan_read(host):
    a, b, sa, sb, _ = _operands(128, 256, 512, "rowwise")
    base = _sig(host, a, b, sa, sb)
    assert _sig(host, a.clone(), b.T.clone().T, sa.clone(), sb.clone()) == base  # addresses alone: same
    changed = {
        "out dtype": _sig(host, a, b, sa, sb, out_dtype=torch.float32),
        "settings": _sig(host, a, b, sa, sb, settings=1),
        "capturing": _sig(host, a, b, sa, sb, capturing=True),
        "bias": _sig(host, a, b, sa, sb, torch.zeros(256)),
        "bias dtype": _sig(host, a, b, sa, sb, torch.zeros(256, dtype=torch.bfloat16)),
        "M": _sig(host, a[:64], b, sa[:64], sb),
        "a's pitch": _sig(host, torch.zeros(128, 528, dtype=E4M3)[:, :512], b, sa, sb),
        "a's residue": _sig(host, torch.zeros(128 * 512 + 8, dtype=E4M3)[8:].view(128, 512), b, sa, sb),
        "b's dtype": _sig(host, a, b.view(torch.float8_e5m2), sa, sb),
        "scale_a's strides": _sig(host, a, b, torch.ones(128, 2)[:, :1], sb),
        "scale_b's shape": _sig(host, a, b, sa, torch.ones(1, 1)),
    }
    assert all(v != base for v in changed.values()), [k for k, v in changed.items() if v == base]
    assert len(set(changed.values())) == len(changed)


def test_fp8_settings_follow_the_module_defaults(monkeypatch):
    base = fp8.settings()
    assert fp8.settings() == base
    for name, value in (("TILE_M_DEFAULT", "128"), ("STORE_DEFAULT", fp8.STORE_REGISTERS), ("SPLIT_DEFAULT", "none"),
                        ("OVERLAP_PROMOTION", False), ("SCALE_B_AHEAD", False), ("SCALE_B_SHARED", not fp8.SCALE_B_SHARED), ("MIN_SHARED_SCALE_B_BLOCKS", 3),
                        ("MAX_SHARED_SCALE_B_BLOCKS", 64), ("MIN_SPLIT_K_BLOCKS", 5), ("MIN_SPLIT_TILE_K_BLOCKS", 7)):
        with monkeypatch.context() as mp:
            mp.setattr(fp8, name, value)
            assert fp8.settings() != base, name
    assert fp8.settings() == base


def test_explain_says_who_launches(monkeypatch):
    """explain_scaled_mm's ``host``: C++ for a functional call the planner templates (the padded blockwise
    scale included), Python with the reason for out=, the quantized output, K = 0, a copied rowwise scale or
    bias, and when the host module is not in use; the copies listed are the launch's own."""
    import gemm_ladder.ops_fp8 as ops_fp8

    def explain(m, n, k, scheme, **kw):
        strided = kw.pop("strided", False)
        bias_dtype = kw.pop("bias_dtype", None)
        a, b, sa, sb, bias = _operands(m, n, k, scheme, bias_dtype, strided)
        return ops_fp8.explain_scaled_mm(a, b, sa, sb, bias=bias, **kw)

    monkeypatch.setattr(ops_fp8, "_HOST", lambda *args: None)
    assert explain(128, 512, 256, "rowwise")["host"].startswith("C++")
    padded = explain(7, 512, 256, "blockwise")
    assert padded["host"].startswith("C++") and padded["copies"] == ["scale_a into a K-block-major (2, 8) fp32 buffer"]
    assert "out=" in explain(128, 512, 256, "rowwise", out=torch.empty(128, 512, dtype=torch.bfloat16))["host"]
    assert "quantized" in explain(128, 512, 256, "blockwise", out_dtype=torch.float8_e4m3fn)["host"]
    assert "K = 0" in explain(128, 512, 0, "tensorwise")["host"]
    strided = explain(128, 512, 256, "rowwise", strided=True)
    assert strided["host"].startswith("python (scale_a made contiguous")
    assert strided["copies"] == ["scale_a made contiguous"]
    assert "bias to float32" in explain(128, 512, 256, "tensorwise", bias_dtype=torch.bfloat16)["host"]
    assert explain(128, 512, 256, "tensorwise", bias_dtype=torch.float32)["host"].startswith("C++")
    monkeypatch.setattr(ops_fp8, "_HOST", None)
    assert "not in use" in explain(128, 512, 256, "rowwise")["host"]


def test_only_plain_strided_tensors_reach_the_host_entry():
    """A wrapper subclass or a sparse tensor goes to the Python path, whose checks refuse it with the
    library's errors (C++ would read strides and addresses first); a Parameter is a plain tensor."""
    import gemm_ladder.ops_fp8 as ops_fp8

    class Wrapped(torch.Tensor):
        pass

    t = torch.zeros(4, 4)
    assert ops_fp8._plain(t) and ops_fp8._plain(torch.nn.Parameter(t, requires_grad=False))
    assert not ops_fp8._plain(t.as_subclass(Wrapped))
    assert not ops_fp8._plain(t.to_sparse())


def test_an_out_dtype_that_is_no_dtype_is_a_type_error():
    import numpy as np

    import gemm_ladder
    from gemm_ladder.errors import GemmTypeError

    a, b, sa, sb, _ = _operands(16, 32, 64, "tensorwise")
    with pytest.raises(GemmTypeError, match="out_dtype"):
        gemm_ladder.scaled_mm(a, b, sa, sb, out_dtype=np.array([1, 2]))


def test_python_launch_switches_the_host_entry_off_and_back(monkeypatch):
    import gemm_ladder.ops_fp8 as ops_fp8

    entry = object()
    monkeypatch.setattr(ops_fp8, "_HOST", entry)
    with ops_fp8.python_launch():
        assert ops_fp8._HOST is None
    assert ops_fp8._HOST is entry
    with pytest.raises(RuntimeError), ops_fp8.python_launch():
        raise RuntimeError("a failing call")
    assert ops_fp8._HOST is entry
