"""Precompiling linear's built-in epilogues and a model's own set, without a GPU: the epilogue variants
each class builds, that their generated sources are the op path's, the calls a small model records on
meta tensors (forward and backward) and the builds they need, the honest count of what was compiled
and what was cached, and (with nvcc) a few real builds."""

from __future__ import annotations

import warnings

import pytest
import torch

import gemm_ladder
from cli_runner import cli_env, run_many
from conftest import needs_nvcc
from gemm_ladder.dispatch import decide
from gemm_ladder.dispatch.precompile import (
    CLASSES,
    EPILOGUE_LEVELS,
    Build,
    EpilogueVariant,
    epilogue_builds,
    epilogue_variants,
    library_builds,
    linear_epilogue_source,
    run_builds,
)
from gemm_ladder.design.problem import PlanRefused
from gemm_ladder.library.epilogue import ACTIVATIONS, linear_epilogue
from gemm_ladder.library.small_m import BUCKETS
from gemm_ladder.model_precompile import RecordedCall, call_builds, model_builds, record


def test_epilogue_levels_count_every_combination():
    assert epilogue_variants("none") == []
    common, every = epilogue_variants("common"), epilogue_variants("all")
    # bias {none, x's dtype} x activation {none, 4} x residual {none, x's dtype}, less the plain call
    assert len(common) == 2 * (1 + len(ACTIVATIONS)) * 2 - 1 == 19
    # bias and residual also float32, alpha on or off
    assert len(every) == 3 * (1 + len(ACTIVATIONS)) * 3 * 2 - 1 == 89
    assert len(set(every)) == len(every) and set(common) <= set(every)
    assert EpilogueVariant() not in every
    with pytest.raises(ValueError, match="epilogues='some'"):
        epilogue_variants("some")
    assert set(EPILOGUE_LEVELS) == {"none", "common", "all"}


def test_each_class_builds_its_epilogues_in_the_orientations_its_routes_take():
    from gemm_ladder import dispatch
    from gemm_ladder.dispatch import pingpong

    timed = [bn for bn in (256, 192, 128, 64) if bn in dispatch.cost_model().k_iter_us]  # K-major A and B: every width
    v = len(epilogue_variants("common"))
    vt = len([x for x in epilogue_variants("common") if x.has_tensors])  # sources differ by N's parity
    large = [b.label for b in epilogue_builds(("bf16",), ("large",))]
    gelu = len([x for x in epilogue_variants("common") if x.activation in pingpong.ACTIVATIONS])
    # N even only (whole 16-byte rows), direct; the one-CTA build where a table ranks it faster than the pair
    # (BN 64: table.json's and the H100's cluster1_k_iter_scale; BN 128-256: their cluster1_one_wave_scale, one
    # wave); the 64-row ping-pong build's GELU variants at its widths; the 128-row ping-pong build's every variant
    from gemm_ladder.dispatch.precompile import _one_cta_bns

    assert _one_cta_bns() == (256, 192, 128, 64)
    assert len(large) == len(set(large)) == 2 * len(timed) * v + len(pingpong.WIDTHS) * gelu + v
    assert len([x for x in large if "1 CTA" in x and "ping-pong" not in x]) == 4 * v
    assert not any("swapped" in x or "N odd" in x for x in large)
    pp64 = [x for x in large if "BM 64" in x and "ping-pong" in x]
    assert len(pp64) == len(pingpong.WIDTHS) * gelu and all("gelu" in x for x in pp64)
    assert len([x for x in large if "BM 128 BN 192 ping-pong" in x]) == v
    unaligned = [b.label for b in epilogue_builds(("bf16",), ("unaligned",))]
    assert len(unaligned) == len(timed) * (v + vt) and any("N odd" in x for x in unaligned)
    small = [b.label for b in epilogue_builds(("fp16",), ("small_m",))]
    assert len(small) == len(BUCKETS) * 2 * (v + vt)  # both orientations, both parities
    assert "small-M BN 8 A k B k fp16 epilogue bias same+silu swapped N odd" in small
    fp32 = [b.label for b in epilogue_builds(("bf16",), ("fp32_out",))]
    assert len(fp32) == (len(timed) + 2 * len(BUCKETS)) * (v + vt) and all("fp32 out" in x for x in fp32)
    every = [b.label for b in epilogue_builds(("bf16", "fp16"), "all", "all")]
    assert len(every) == len(set(every))
    assert epilogue_builds(("bf16",), "all", "none") == []
    # the plain builds are unchanged: the epilogue builds come on top
    assert not set(every) & {b.label for b in library_builds(("bf16", "fp16"), "all")}
    with pytest.raises(ValueError, match="shape class 'huge'"):
        epilogue_builds(("bf16",), "huge")


def _op_path_source(m, n, k, *, bias_dtype=None, residual_dtype=None, activation=None, alpha=1.0):
    """The epilogue source a linear call of these shapes gets, as api.linear binds and the route orients it."""
    x = torch.empty(m, k, dtype=torch.bfloat16, device="meta")
    w = torch.empty(n, k, dtype=torch.bfloat16, device="meta")
    c = torch.empty(m, n, dtype=torch.bfloat16, device="meta")
    route = decide(x, w.T, c, given=False)
    ep = linear_epilogue(bias=bias_dtype is not None, activation=activation, residual=residual_dtype is not None,
                         alpha=alpha != 1)
    tensors = ([torch.empty(n, dtype=bias_dtype, device="meta")] if bias_dtype else []) + (
        [torch.empty(m, n, dtype=residual_dtype, device="meta")] if residual_dtype else [])
    scalars = ([alpha] if alpha != 1 else []) + ([1.0] if residual_dtype else [])
    values = dict(zip(ep.tensor_inputs, tensors))
    values.update(zip(ep.scalar_inputs, scalars))
    call = ep.bind(values, m, n, torch.device("meta"), check_grad=False)
    return route, call.oriented(route.c_path.transposed).source()


@pytest.mark.parametrize("m, n, k, kw, variant", [
    (4096, 4096, 1024, {"bias_dtype": torch.bfloat16}, EpilogueVariant("same")),
    (16, 4096, 1024, {"bias_dtype": torch.float32, "activation": "gelu", "alpha": 0.5},
     EpilogueVariant("fp32", "gelu", None, True)),
    (4096, 64, 1024, {"residual_dtype": torch.bfloat16, "activation": "silu"}, EpilogueVariant(None, "silu", "same")),
    (4096, 4095, 1024, {"bias_dtype": torch.bfloat16, "residual_dtype": torch.float32},
     EpilogueVariant("same", None, "fp32")),
])
def test_the_enumerated_sources_are_the_op_paths(m, n, k, kw, variant):
    route, source = _op_path_source(m, n, k, **kw)
    assert source == linear_epilogue_source(variant, "bf16", swap=route.c_path.transposed, n_even=n % 2 == 0)
    # and that source is among the builds of the class this call's route belongs to, at the "all" level
    cls = "small_m" if route.kind == "small_m" else "large" if n % 8 == 0 else "unaligned"
    recorded = call_builds(RecordedCall("linear", ((m, k), (k, 1), torch.bfloat16, 0), ((n, k), (k, 1), torch.bfloat16, 0),
                                        bias=((n,), (1,), kw["bias_dtype"], 0) if kw.get("bias_dtype") else None,
                                        residual=((m, n), (n, 1), kw["residual_dtype"], 0) if kw.get("residual_dtype") else None,
                                        activation=kw.get("activation"), alpha=kw.get("alpha", 1.0)))
    assert len(recorded) == 1 and "epilogue linear:" in recorded[0].label
    names = {b.label.split(" bf16 ")[0] for b in epilogue_builds(("bf16",), (cls,), "all")}
    kernel = recorded[0].label.split(" bf16 ")[0]
    bn = getattr(route.kernel, "tile", (0, 0))[1]
    expected = (f"small-M BN {route.kernel.bn} A k B k" if route.kind == "small_m" else
                f"general A k B k BN {bn}" if cls == "large" else f"general unaligned out A k B k BN {bn}")
    assert expected in names, (kernel, expected)


class Block(torch.nn.Module):
    """An MLP block with a fused residual: what a model's own calls look like to the recorder."""

    def __init__(self, d, h):
        super().__init__()
        self.up = gemm_ladder.nn.Linear(d, h, dtype=torch.bfloat16, device="meta")
        self.down = gemm_ladder.nn.Linear(h, d, bias=False, dtype=torch.bfloat16, device="meta")

    def forward(self, x):
        h = gemm_ladder.linear(x, self.up.weight, self.up.bias, activation="gelu_tanh")
        return gemm_ladder.linear(h, self.down.weight, residual=x)


def _sequential():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.SiLU(), torch.nn.Linear(256, 96, bias=False))
    model = model.to(device="meta", dtype=torch.bfloat16)
    return gemm_ladder.nn.replace_linear(model)


def test_record_a_sequential_forward_on_meta():
    model = _sequential().eval()
    x = torch.empty(3, 100, 64, dtype=torch.bfloat16)  # a CPU input: the trace puts it on meta
    calls = record(model, (x,))
    assert [c.op for c in calls] == ["linear", "linear"]
    first, second = calls
    assert first.a == ((3, 100, 64), (6400, 64, 1), torch.bfloat16, 0)
    assert first.b == ((256, 64), (64, 1), torch.bfloat16, 0) and first.bias == ((256,), (1,), torch.bfloat16, 0)
    assert second.b[0] == (96, 256) and second.bias is None and second.activation is None
    builds = [b.label for b in model_builds(calls)]
    assert len(builds) == 2 and "epilogue linear:bias" in builds[0] and "epilogue" not in builds[1]
    assert all(p.device.type == "meta" and p.grad is None for p in model.parameters())  # the model is untouched


def test_record_forward_and_backward_of_a_training_model():
    model = _sequential().train()
    x = torch.empty(300, 64, dtype=torch.bfloat16)
    calls = record(model, (x,))  # training with parameters that require grad: backward too
    ops = [c.op for c in calls]
    # forward 2 linear; backward of the second: grad_x (mm) and grad_w (mm); of the first: grad_w only (x needs none)
    assert ops == ["linear", "linear", "mm", "mm", "mm"], ops
    grad_w2 = calls[3]
    assert grad_w2.a == ((96, 300), (1, 96), torch.bfloat16, 0)  # grad_z.T: an MN-major view, read in place
    assert len(record(model, (x,), backward=False)) == 2
    x_grad = torch.empty(300, 64, dtype=torch.bfloat16, requires_grad=True)
    assert [c.op for c in record(model, (x_grad,))].count("mm") == 4  # grad_x of the first layer too
    builds = model_builds(calls)
    assert len(builds) == len({b.label for b in builds}) >= 3


def test_record_a_fused_block_and_more_rows():
    block = Block(64, 512).eval()
    calls = record(block, (torch.empty(2, 8, 64, dtype=torch.bfloat16),))
    assert [(c.activation, c.bias is not None, c.residual is not None) for c in calls] == [
        ("gelu_tanh", True, False), (None, False, True)]
    base = {b.label for b in model_builds(calls)}
    more = {b.label for b in model_builds(calls, rows=(1, 37, 1000, 4096))}
    assert base < more  # other row counts pick other small-M buckets and the general kernel
    assert any(x.startswith("small-M BN 8 ") for x in more) and any(x.startswith("sm90_gemm_") for x in more)


def test_record_names_the_calls_it_does_not_build():
    """swiglu is recorded with the mm and linear calls; the fp8 ops are not built by precompile: one warning names
    them, with their counts."""

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.g, self.u = torch.nn.Linear(256, 512, bias=False), torch.nn.Linear(256, 512, bias=False)
            self.d = torch.nn.Linear(512, 256, bias=False)

        def forward(self, x):
            return gemm_ladder.linear(gemm_ladder.swiglu(x, self.g.weight, self.u.weight), self.d.weight)

    class Fp8(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(256, 512, dtype=torch.float8_e4m3fn), requires_grad=False)
            self.s = torch.nn.Parameter(torch.ones(1), requires_grad=False)

        def forward(self, x):
            return gemm_ladder.scaled_mm(x, self.w.T, self.s, self.s)

    model = Mlp().to(torch.bfloat16).eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error")
        calls = record(model, (torch.randn(8, 256, dtype=torch.bfloat16),))
    assert [c.op for c in calls] == ["swiglu", "linear"]
    with pytest.warns(UserWarning, match=r"mm, linear, swiglu and grouped calls only.*\(scaled_mm x1\)"):
        assert record(Fp8(), (torch.zeros(8, 512, dtype=torch.float8_e4m3fn),)) == []


class MoeLayer(torch.nn.Module):
    """A transformers-shaped experts layer run by gemm_ladder.moe (the fused SwiGLU path)."""

    def __init__(self, e=8, h=256, i=128):
        super().__init__()
        self.num_experts = e
        self.gate_up_proj = torch.nn.Parameter(torch.empty(e, 2 * i, h, dtype=torch.bfloat16))
        self.down_proj = torch.nn.Parameter(torch.empty(e, h, i, dtype=torch.bfloat16))
        self.act_fn = torch.nn.SiLU()

    def forward(self, x, index, weights):
        return gemm_ladder.moe.experts_forward(self, x, index, weights)


def _moe_inputs(tokens=40, top_k=2):
    return torch.empty(tokens, 256, dtype=torch.bfloat16), torch.zeros(tokens, top_k, dtype=torch.long), torch.ones(tokens, top_k)


def test_record_a_moe_layer_and_build_what_its_launches_decide():
    """The grouped calls are recorded (inference: the fused gated MLP and the down projection) and each one's
    build is the one its launch decides (api_grouped.planned_build, ops_grouped_swiglu.fused_kernel)."""
    from gemm_ladder.api_grouped import planned_build
    from gemm_ladder.ops_grouped_swiglu import fused_kernel

    layer = MoeLayer().eval()
    with torch.no_grad():
        calls = record(layer, _moe_inputs())
    assert [c.op for c in calls] == ["grouped_swiglu_fused", "grouped_linear"], [c.op for c in calls]
    swiglu, down = calls
    assert swiglu.a[0] == (80, 256) and swiglu.b[0] == (8, 128, 256) and swiglu.offs[0] == (8,)
    assert down.a[0] == (80, 128) and down.b[0] == (8, 256, 128)
    labels = [b.label for b in model_builds(calls)]
    rows = torch.empty(80, 128, dtype=torch.bfloat16, device="meta")
    offs = torch.empty(8, dtype=torch.int32, device="meta")
    down_build = planned_build(rows, torch.empty(8, 256, 128, dtype=torch.bfloat16, device="meta").transpose(-2, -1), offs)[0]
    assert labels == [f"{fused_kernel().name} bf16", f"{down_build.name} bf16"], labels


def test_record_a_moe_layer_training_records_the_backward_grouped_calls():
    layer = MoeLayer().train()
    x, index, weights = _moe_inputs(300, 4)
    calls = record(layer, (x.requires_grad_(True), index, weights))
    ops = [c.op for c in calls]
    # forward: gate_up_proj whole and the down projection (moe: a call with a backward does not split the weight);
    # backward: grad_x and grad_w of each
    assert ops[:2] == ["grouped_linear", "grouped_linear"] and ops.count("grouped_mm") >= 4, ops
    grouped_along_k = [c for c in calls if c.op == "grouped_mm" and len(c.b[0]) == 2]  # 2-D x 2-D: grad_w
    assert len(grouped_along_k) >= 2, ops
    builds = model_builds(calls)
    assert len(builds) == len({b.label for b in builds}) >= 3


def test_record_refusals():
    with pytest.raises(TypeError, match="nn.Module"):
        record("model", ())
    with pytest.raises(ValueError, match="mode='cuda'"):
        record(_sequential(), (torch.empty(2, 64, dtype=torch.bfloat16),), mode="cuda")


def test_record_on_fake_tensors():
    model = _sequential().eval()
    calls = record(model, (torch.empty(5, 64, dtype=torch.bfloat16, device="meta"),), mode="fake")
    assert [c.a[0] for c in calls] == [(5, 64), (5, 256)]


class _Entry:
    def __init__(self, key):
        self.key = key


def test_outcomes_count_compiled_and_cached_honestly(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path))
    (tmp_path / "k_old").mkdir()
    (tmp_path / "k_old" / "kernel.cubin").write_bytes(b"x")
    (tmp_path / "k_half").mkdir()  # an entry without a cubin is not a cached build

    def refused():
        raise PlanRefused("mn_major_rows", "A mn-major below 64 rows")

    def broken():
        raise RuntimeError("nvcc failed\nsecond line")

    builds = [Build("old", lambda: _Entry("k_old")), Build("new", lambda: _Entry("k_new")),
              Build("half", lambda: _Entry("k_half")), Build("refused", refused), Build("broken", broken),
              Build("old", lambda: pytest.fail("a duplicate label runs once"))]
    out = run_builds(builds, workers=2, load=False)
    assert list(out) == ["old", "new", "half", "refused", "broken"]
    assert out.cached == {"old"} and out.compiled == {"new", "half"}
    assert out["broken"] == "failed: RuntimeError: nvcc failed"
    assert out.summary() == "3 builds ready, 2 compiled, 1 already cached; 1 not a variant; 1 failed"


def test_cli_refuses_an_unknown_epilogue_level(tmp_path):
    argv = ["precompile", "--epilogues", "most"]
    (out,) = run_many([(argv, tmp_path)], tmp_path / "runs", cli_env())
    lines = out.stderr.strip().splitlines()
    assert out.rc == 2 and len(lines) == 1 and "epilogues='most'" in lines[0] and not out.traceback, out.describe()


@needs_nvcc
def test_a_models_builds_compile_then_come_from_the_cache(tmp_path, monkeypatch):
    from gemm_ladder.model_precompile import precompile_model

    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path))
    model = gemm_ladder.nn.replace_linear(torch.nn.Linear(64, 128).to(device="meta", dtype=torch.bfloat16)).eval()
    x = torch.empty(16, 64, dtype=torch.bfloat16)
    first = gemm_ladder.precompile(model, (x,), load=False)
    assert list(first.values()) == ["built"], first
    assert first.summary() == "1 builds ready, 1 compiled, 0 already cached"
    assert sum(1 for p in tmp_path.iterdir() if (p / "kernel.cubin").exists()) == 1
    again = precompile_model(model, (x,), load=False)
    assert again.summary() == "1 builds ready, 0 compiled, 1 already cached"


def test_a_moe_layers_builds_compile_then_come_from_the_cache(tmp_path, monkeypatch):
    from gemm_ladder.library import kernel

    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path))
    kernel.clear()  # builds this process kept (another test's, in another cache) would not reach tmp_path
    with torch.no_grad():
        first = gemm_ladder.precompile(MoeLayer().eval(), _moe_inputs(), load=False)
        assert first.summary() == "2 builds ready, 2 compiled, 0 already cached", first
        kernel.clear()
        again = gemm_ladder.precompile(MoeLayer().eval(), _moe_inputs(), load=False)
    assert again.summary() == "2 builds ready, 0 compiled, 2 already cached"


@needs_nvcc
def test_a_class_epilogue_build_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path))
    build = next(b for b in epilogue_builds(("bf16",), ("small_m",), "all")
                 if b.label == "small-M BN 16 A k B k bf16 epilogue alpha+bias fp32+gelu+residual same swapped N odd")
    out = run_builds([build], load=False)
    assert out.summary() == "1 builds ready, 1 compiled, 0 already cached", dict(out)
    assert CLASSES  # the classes the builds are named by


def test_cli_prints_the_count(monkeypatch, capsys, tmp_path):
    import argparse

    from gemm_ladder.commands import precompile as command
    from gemm_ladder.dispatch import precompile as module
    from gemm_ladder.dispatch.precompile import Outcomes

    seen = {}

    def fake(dtypes, **kwargs):
        seen.update(kwargs, dtypes=dtypes)
        out = Outcomes({"a": "built", "b": "built, loaded on cuda:0", "c": "failed: CompileError: x"})
        out.compiled, out.cached = {"a"}, {"b"}
        return out

    monkeypatch.setattr(module, "precompile", fake)
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path))
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    assert command.run(parser.parse_args(["--dtype", "bf16", "--epilogues", "all", "--no-load"])) == 1
    assert seen["epilogues"] == "all" and seen["dtypes"] == ("bf16",) and seen["load"] is False
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"2 builds ready, 1 compiled, 1 already cached; 1 failed (of 3) in {tmp_path}"
