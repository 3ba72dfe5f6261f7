"""The package modules a first ``mm`` and a first ``linear`` call pass through, on a machine without a
GPU: the call runs on meta tensors with the device layer replaced (no compile, no load, no tensor map,
no launch; the kernels' device rule set aside for meta), so every Python step above the driver runs as
it would on CUDA tensors. Prints, per call, the modules entered (``sys.setprofile``) and the calls of
the cache-key makers it counts.

    PYTHONPATH=src python3 tools/first_call_trace.py

For docs/architecture.md's before/after figures; not a test (the fakes are coarse).
"""

from __future__ import annotations

import sys
from collections import Counter

import torch


class _FakeLoaded:
    threads, dynamic_smem, cluster, function = 384, 0, 1, 0

    def max_active_clusters(self, device):
        return 66

    def prefer_shared_memory_carveout(self, percent):
        pass

    def prepare(self, grid, args, stream):
        return lambda: None


class _Stream:
    cuda_stream = 0


def _patch_everywhere(name: str, value) -> None:
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("gemm_ladder") and getattr(mod, name, None) is not None and mod_name != __name__:
            setattr(mod, name, value)


def _fakes() -> None:
    import gemm_ladder.api  # noqa: F401 - everything the call imports, imported before the trace
    import gemm_ladder.dispatch.validate as V
    import gemm_ladder.library.gemm  # noqa: F401
    import gemm_ladder.library.small_m  # noqa: F401

    for f in (V.check_mm, V.check_linear):
        f.__kwdefaults__["device_types"] = ("cuda", "meta")
    _patch_everywhere("compile_kernel", lambda *a, **k: object())
    _patch_everywhere("load", lambda *a, **k: _FakeLoaded())
    _patch_everywhere("encode_tiled", lambda kwargs: object())
    _patch_everywhere("raw_stream", lambda index: 0)
    torch.cuda.current_stream = lambda device=None: _Stream()
    torch.cuda.current_device = lambda: 0
    torch.cuda.is_current_stream_capturing = lambda: False
    for cls in _kernel_classes():
        orig = cls.supports

        def supports(self, *args, _orig=orig, **kw):
            reason = _orig(self, *args, **kw)
            return None if reason is not None and "meta" in reason else reason

        cls.supports = supports


def _kernel_classes() -> list:
    out = []
    for mod, names in (("gemm_ladder.library.gemm", ("LibraryGemm", "GeneralGemm")),
                       ("gemm_ladder.library.small_m", ("SmallMGemm",))):
        m = sys.modules.get(mod)
        out += [getattr(m, n) for n in names if m is not None and hasattr(m, n)]
    return out


#: (module, function) of the cache-key makers counted: the call cache's keys, the route cache's, the
#: kernels' bind and launch keys and every least-recently-used cache lookup (library/lru.py).
KEY_MAKERS = {("gemm_ladder.dispatch.calls", f) for f in ("fast_mm_key", "fast_linear_key", "mm_key", "linear_key")} | {
    ("gemm_ladder.dispatch", "decide"), ("gemm_ladder.library.gemm", "bind_key"), ("gemm_ladder.library.lru", "cached"),
    ("gemm_ladder.library.kernel", "cached"), ("gemm_ladder.library.kernel", "bind_key")}


def trace(fn) -> tuple[list[str], Counter]:
    modules: dict[str, None] = {}
    keys: Counter = Counter()

    def prof(frame, event, arg):
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if name.startswith("gemm_ladder"):
            modules.setdefault(name)
            if (name, frame.f_code.co_name) in KEY_MAKERS:
                keys[f"{name}.{frame.f_code.co_name}"] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return list(modules), keys


def output_allocations(fn, shapes: set[tuple[int, ...]]) -> tuple[object, int]:
    """``fn()``'s result and how many tensors of the output's shapes (``shapes``: the result's, and its
    (M, N) view's; not a route's workspace for the transposed orientation, (N, M)) it allocated."""
    from torch.utils._python_dispatch import TorchDispatchMode

    made = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default) and \
                    tuple(out.shape) in shapes:
                made.append(out)
            return out

    with Count():
        result = fn()
    return result, len(made)


def main(which: str) -> None:
    _fakes()
    from gemm_ladder import api

    meta = torch.device("meta")
    a = torch.empty(512, 1024, dtype=torch.bfloat16, device=meta)
    b = torch.empty(1024, 768, dtype=torch.bfloat16, device=meta)
    x = torch.empty(4, 128, 1024, dtype=torch.bfloat16, device=meta)
    w = torch.empty(768, 1024, dtype=torch.bfloat16, device=meta)
    bias = torch.empty(768, dtype=torch.bfloat16, device=meta)
    calls = {"mm": ("mm (512 x 1024) @ (1024 x 768)", lambda: api.mm_direct(a, b), {(512, 768)}),
             "linear": ("linear x (4, 128, 1024), w (768, 1024), bias, gelu",
                        lambda: api.linear_direct(x, w, bias, activation="gelu"), {(512, 768), (4, 128, 768)})}
    label, fn, shapes = calls[which]
    (modules, keys), allocations = output_allocations(lambda: trace(fn), shapes)
    print(f"## first {label}: {len(modules)} modules, {allocations} output allocation(s)")
    print("modules: " + ", ".join(m.removeprefix("gemm_ladder.") for m in modules))
    print("key makers called: " + ", ".join(f"{k.removeprefix('gemm_ladder.')} x{n}" for k, n in sorted(keys.items())))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:  # each first call in a process of its own: nothing warmed by the other
        import subprocess

        for which in ("mm", "linear"):
            subprocess.run([sys.executable, __file__, which], check=True)
