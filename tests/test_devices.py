"""Many GPUs, the CPU-checkable part (issue 27): tensors on two CUDA devices are refused with the
library's error before anything runs (the checks, the op path through the dispatcher and its fakes,
and the host planner), a call on a device other than the current one is detected, the guard that
runs it there puts the caller's current device and driver context back, and the per-device caches
(loaded kernels, stream-K partials, counter arenas) keep one entry per device.

FakeTensors stand for tensors on cuda:0 and cuda:1 (no GPU here); the driver and torch.cuda's
device functions are replaced by recorders where a call would reach them. The GPU side (current
device unchanged by mm/linear/backward on the H200; two GPUs) is tests/test_devices_gpu.py.
"""

from __future__ import annotations

import types

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import gemm_ladder.ops as ops
from gemm_ladder.contract import GemmInputError
from gemm_ladder.dispatch.validate import check_linear, check_mm, check_swiglu
from gemm_ladder.runtime import module as rt
from gemm_ladder.runtime import workspace as ws

BF16 = torch.bfloat16


@pytest.fixture
def fake():
    with FakeTensorMode() as mode:
        yield mode


def t(*shape, device="cuda:0"):
    return torch.empty(*shape, dtype=BF16, device=device)


def test_checks_refuse_operands_on_two_devices(fake):
    with pytest.raises(GemmInputError, match="a and b must be on one device, got a on cuda:0, b on cuda:1"):
        check_mm(t(8, 16), t(16, 8, device="cuda:1"))
    with pytest.raises(GemmInputError, match="out must be on the operands' device cuda:0"):
        check_mm(t(8, 16), t(16, 8), t(8, 8, device="cuda:1"))
    with pytest.raises(GemmInputError, match="x and w must be on one device"):
        check_linear(t(8, 16), t(8, 16, device="cuda:1"))
    with pytest.raises(GemmInputError, match="bias is on cuda:1; x is on cuda:0"):
        check_linear(t(8, 16), t(8, 16), t(8, device="cuda:1"))
    with pytest.raises(GemmInputError, match="residual is on cuda:1; x is on cuda:0"):
        check_linear(t(8, 16), t(8, 16), residual=t(8, 8, device="cuda:1"))
    with pytest.raises(GemmInputError, match="x and w_up must be on one device"):
        check_swiglu(t(8, 16), t(8, 16), t(8, 16, device="cuda:1"))


def test_the_op_path_refuses_operands_on_two_devices(fake):
    """Through torch.ops.gemm_ladder (the dispatcher reaches the fakes): the library's error, not a
    device-mismatch RuntimeError from somewhere below."""
    with pytest.raises(GemmInputError, match="a and b must be on one device"):
        ops.mm(t(8, 16), t(16, 8, device="cuda:1"))
    with pytest.raises(GemmInputError, match="x and w must be on one device"):
        ops.linear(t(8, 16), t(8, 16, device="cuda:1"))
    with pytest.raises(GemmInputError, match="bias is on cuda:1"):
        ops.linear(t(8, 16), t(8, 16), t(8, device="cuda:1"))
    with pytest.raises(GemmInputError, match="out must be on the operands' device"):
        ops.mm(t(8, 16), t(16, 8), out=t(8, 8, device="cuda:1"))
    with pytest.raises(GemmInputError, match="must be on one device"):
        ops.swiglu(t(8, 16), t(8, 16, device="cuda:1"), t(8, 16, device="cuda:1"))


def test_elsewhere_names_a_device_other_than_the_current_one(fake, monkeypatch):
    # FakeTensors stand in for real CUDA tensors here (no GPU): as FakeTensors, elsewhere leaves them to
    # the op's fake (test_api_errors.py); as real tensors (is_fake False), it names their device.
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert rt.elsewhere(t(4, 4, device="cuda:1")) is None  # a FakeTensor: traced, no device switch
    monkeypatch.setattr(rt, "is_fake", lambda _t: False)
    assert rt.elsewhere(t(4, 4)) is None
    assert rt.elsewhere(t(4, 4, device="cuda:1")) == 1
    assert rt.elsewhere(torch.empty(4, device="meta")) is None
    assert rt.elsewhere(None) is None and rt.elsewhere(3) is None


class _Recorder:
    """torch.cuda's current device and the driver's current context, recorded (no GPU)."""

    def __init__(self, device=0, context=0xC0):
        self.device, self.context = device, context
        self.primary = {0: 0xA0, 1: 0xA1}

    def install(self, monkeypatch):
        rec = self

        class device:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                self.prev, rec.device = rec.device, self.index

            def __exit__(self, *exc):
                rec.device = self.prev
                rec.context = rec.primary[self.prev]  # torch's exchange binds the previous primary context

        def ensure_context(dev):
            rec.device = dev.index
            rec.context = rec.primary[dev.index]

        monkeypatch.setattr(torch.cuda, "device", device)
        monkeypatch.setattr(rt, "ensure_context", ensure_context)
        monkeypatch.setattr(rt, "_current_context", lambda: rec.context)
        drv = types.SimpleNamespace(cuCtxSetCurrent=lambda ctx: setattr(rec, "context", ctx) or (0,))
        monkeypatch.setattr(rt, "_driver", lambda: drv)
        monkeypatch.setattr(rt, "check", lambda result, what: None)


def test_on_device_restores_the_callers_device_and_context(monkeypatch):
    rec = _Recorder(device=0, context=0xC0)  # a context of the caller's own, not device 0's primary
    rec.install(monkeypatch)
    with rt.on_device(1):
        assert (rec.device, rec.context) == (1, 0xA1)
        with rt.on_device(0):
            assert (rec.device, rec.context) == (0, 0xA0)
        assert (rec.device, rec.context) == (1, 0xA1)
    assert (rec.device, rec.context) == (0, 0xC0)
    with pytest.raises(KeyError):  # also on the way out of an exception
        with rt.on_device(1):
            raise KeyError("x")
    assert (rec.device, rec.context) == (0, 0xC0)


def test_kernels_load_once_per_device_under_the_guard(monkeypatch, tmp_path):
    rec = _Recorder(device=0, context=0xA0)
    rec.install(monkeypatch)
    loads = []

    def load_data(data):
        loads.append(rec.device)  # the device current while the module is loaded
        return (0, f"module{len(loads)}")

    drv = types.SimpleNamespace(cuModuleLoadData=load_data, cuModuleGetFunction=lambda m, n: (0, f"{m}:{n}"),
                                cuCtxSetCurrent=lambda ctx: (0,))
    monkeypatch.setattr(rt, "_driver", lambda: drv)
    monkeypatch.setattr(rt, "check", lambda result, what: result[1] if isinstance(result, tuple) and
                        len(result) > 1 else None)
    monkeypatch.setattr(rt, "refuse_during_capture", lambda what: None)
    monkeypatch.setattr(rt, "_loaded", {})
    compiled = types.SimpleNamespace(key="k", cubin=types.SimpleNamespace(read_bytes=lambda: b"cubin"),
                                     kernel_name="gl_kernel")
    k0 = rt.load(compiled, torch.device("cuda", 0), threads=128, dynamic_smem=0)
    k1 = rt.load(compiled, torch.device("cuda", 1), threads=128, dynamic_smem=0)
    assert rt.load(compiled, torch.device("cuda", 1), threads=128, dynamic_smem=0) is k1
    assert k0 is not k1 and loads == [0, 1]
    assert sorted(rt._loaded) == [("k", 0), ("k", 1)]
    assert rec.device == 0  # the caller's device, after loading on cuda:1


def test_workspaces_and_counter_arenas_are_per_device(monkeypatch):
    made = []

    def driver_empty(count, dtype, stream):
        made.append(stream.device_index)
        return torch.zeros(count, dtype=dtype)

    monkeypatch.setattr(ws, "driver_empty", driver_empty)
    monkeypatch.setattr(ws, "_driver", lambda: types.SimpleNamespace(CUstream=lambda h: h))
    # The legacy default stream has handle 0 on every device: the device keeps them apart.
    s0 = types.SimpleNamespace(device_index=0, cuda_stream=0)
    s1 = types.SimpleNamespace(device_index=1, cuda_stream=0)
    spaces = ws.StreamWorkspaces()
    h0, h1 = spaces.partials(s0, 64), spaces.partials(s1, 64)
    assert h0 is not h1 and spaces.partials(s0, 32) is h0 and sorted(spaces._buffers) == [(0, 0), (1, 0)]
    arena = ws.CounterArena(size=16)
    a0, a1 = arena.held(s0, 4), arena.held(s1, 4)
    assert a0 is not a1 and arena.held(s1, 4) is a1 and sorted(arena._arenas) == [(0, 0), (1, 0)]
    assert made == [0, 0, 1, 1, 0, 1]  # partials and counters per device, then one arena per device
