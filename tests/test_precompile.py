"""Precompiling and the capture guard without a GPU: which builds each dtype and shape class plans,
the CLI's refusals (one line, exit 2) and its missing-nvcc exit, and the guard that refuses a build
or a module load while a CUDA graph is being captured (capture faked)."""

from __future__ import annotations

import pytest
import torch

from cli_runner import cli_env, run_many
from conftest import needs_nvcc
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.dispatch.precompile import CLASSES, check_classes, library_builds, normalize_dtypes
from gemm_ladder.library.small_m import BUCKETS
from gemm_ladder.runtime import capture, module
from gemm_ladder.runtime.capture import CaptureBuildError, refuse_during_capture

ORDERS = 4  # A and B each K- or MN-major


def labels(dtypes, classes):
    return [b.label for b in library_builds(dtypes, classes)]


def test_each_class_plans_its_kernels():
    large = labels(("bf16",), ("large",))
    from gemm_ladder import dispatch

    timed = [bn for bn in (256, 192, 128, 64) if bn in dispatch.cost_model().k_iter_us]  # what the route can reach
    # each (order, timed BN) the general kernel is built for: BN 192 for the two orders with a K-major B only;
    # each in 2-CTA clusters and with one CTA per cluster
    builds = sum(1 for bn in timed for b_major in ("k", "mn") for _ in range(2) if K.general_built(b_major, bn))
    # and the 64-row builds: K-major A and B only, each timed width, both cluster sizes
    rows64 = [lbl for lbl in large if " BM 64 " in lbl]
    assert len(rows64) == 2 * len(timed) and all(lbl.startswith("general A k B k BM 64 ") for lbl in rows64)
    # and the 128-row ping-pong build the 128-row rule routes any call to (dispatch/pingpong.py)
    pp = [lbl for lbl in large if "ping-pong" in lbl]
    assert pp == ["general A k B k BN 192 ping-pong 1 CTA bf16"]
    assert len(large) == 2 * builds + len(rows64) + 1 and all(lbl.startswith("general") and lbl.endswith("bf16") for lbl in large)
    assert len(set(large)) == len(large) and sum(" 1 CTA " in lbl for lbl in large) == builds + len(timed) + 1
    assert {int(lbl.split(" BN ")[1].split()[0]) for lbl in large} == set(timed)
    assert {"general A k B k BN 256 bf16", "general A mn B mn BN 128 bf16"} <= set(large)
    small = labels(("bf16",), ("small_m",))
    assert len(small) == ORDERS * len(BUCKETS) and not any("fp32" in lbl or "cluster" in lbl for lbl in small)
    assert {"small-M BN 16 A k B k bf16", "small-M BN 256 A mn B mn bf16"} <= set(small)
    fp32 = labels(("bf16",), ("fp32_out",))
    assert "small-M BN 128 A k B mn fp32 out bf16" in fp32
    # the small-M builds and the general kernel's float32 register-store build for outputs TMA cannot
    # write, each (order, timed BN)
    assert "repack fp32" in fp32 and len([x for x in fp32 if "fp32 out" in x]) == ORDERS * len(BUCKETS) + builds
    assert len([x for x in fp32 if x.startswith("general from registers") and x.endswith("fp32 out bf16")]) == builds
    unaligned = labels(("fp16",), ("unaligned",))
    assert unaligned[-2:] == ["repack fp16", "repack fp32"] and len(unaligned) == builds + 2
    assert "general from registers A mn B k BN 128 fp16" in unaligned
    every = labels(("bf16", "fp16"), tuple(CLASSES))
    assert len(every) == len(set(every))
    assert set(every) == set(labels(("bf16", "fp16"), "all"))
    assert all(b.load is not None for b in library_builds(("bf16",), "all"))


def test_bad_classes_and_dtypes():
    with pytest.raises(ValueError, match="shape class 'huge'"):
        check_classes("large,huge")
    with pytest.raises(ValueError, match="no shape class"):
        check_classes(())
    assert normalize_dtypes(torch.bfloat16) == ("bf16",)
    assert normalize_dtypes(["fp16", torch.float16, "bf16"]) == ("fp16", "bf16")
    with pytest.raises(ValueError, match="dtype torch.float32"):
        normalize_dtypes(torch.float32)
    with pytest.raises(ValueError, match="dtype 'fp8'"):
        library_builds(("fp8",), "all")


def test_cli_refuses_bad_input_in_one_line_and_needs_nvcc(tmp_path):
    (tmp_path / "a_file").write_text("a file where a folder is expected\n")
    cases = [["precompile", "--dtype", "fp8"], ["precompile", "--classes", "large,huge"],
             ["precompile", "--workers", "0"], ["precompile", "--json", str(tmp_path / "a_file" / "x.json")],
             ["precompile", "--dtype", "bf16", "--classes", "unaligned"]]
    outs = run_many([(argv, tmp_path) for argv in cases], tmp_path / "runs", cli_env())
    for argv, out in zip(cases[:4], outs[:4]):
        assert out.rc == 2, (argv, out.describe())
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gemm-ladder precompile: ") and not out.traceback, out.describe()
    # cli_env points GEMM_LADDER_NVCC nowhere: a valid request ends with exit 3 (a missing tool, the CLI's
    # rule) and the reason in one line, nothing built.
    lines = outs[4].stderr.strip().splitlines()
    assert outs[4].rc == 3 and len(lines) == 1 and "GEMM_LADDER_NVCC" in lines[0] and not outs[4].traceback, \
        outs[4].describe()


@pytest.fixture
def capturing(monkeypatch):
    monkeypatch.setattr(capture, "capturing", lambda: True)


def test_guard_passes_outside_a_capture(monkeypatch):
    monkeypatch.setattr(capture, "capturing", lambda: False)
    refuse_during_capture("building kernel x")


def test_guard_reads_the_current_stream(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert capture.capturing()
    with pytest.raises(CaptureBuildError, match="precompile"):
        refuse_during_capture("building kernel x")


@needs_nvcc
def test_a_build_during_capture_is_refused_before_nvcc_runs(capturing, tmp_path, monkeypatch):
    from gemm_ladder.runtime.compiler import compile_kernel

    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path))

    with pytest.raises(CaptureBuildError, match=r"building kernel tiny \(not in the kernel cache .*\).*precompile"):
        compile_kernel('extern "C" __global__ void tiny(int* x) { *x = 1; }', "tiny")
    assert not any(tmp_path.iterdir())  # nothing was compiled into the (empty) cache


def test_a_module_load_during_capture_is_refused_before_the_driver(capturing, monkeypatch):
    monkeypatch.setattr(module, "ensure_context", lambda device: pytest.fail("the driver was called"))
    with pytest.raises(CaptureBuildError, match="loading kernel k on cuda:0 during CUDA graph capture"):
        module._load_once(("never loaded",), lambda: b"", "k", 0, threads=128, dynamic_smem=0, cluster=1)


def test_the_closing_line_counts_only_real_builds(monkeypatch, capsys, tmp_path):
    """'94 of 94 builds ready' was printed above 12 lines saying 'not a variant': count them apart."""
    from gemm_ladder import cli
    from gemm_ladder.dispatch import precompile as P

    outcomes = {"a": "built", "b": "not a variant: no such order", "c": "built, loaded on cuda:0",
                "d": "not a variant: no such order"}

    def fake(*args, **kwargs):
        out = P.Outcomes(outcomes)
        out.compiled = {"a", "c"}
        return out

    monkeypatch.setattr(P, "precompile", fake)
    monkeypatch.setenv("GEMM_LADDER_CACHE", str(tmp_path))
    assert cli.main(["precompile", "--dtype", "bf16", "--classes", "large"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("2 builds ready, 2 compiled, 0 already cached; 2 not a variant (of 4) in "), last
    outcomes["e"] = "failed: CompileError: boom"
    assert cli.main(["precompile", "--dtype", "bf16", "--classes", "large"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("2 builds ready, 2 compiled, 0 already cached; 2 not a variant; 1 failed (of 5) in "), last


def test_help_names_every_shape_class():
    """--help lists the classes without importing the library; it must list CLASSES, all of them."""
    from gemm_ladder.commands.precompile import CLASS_NAMES

    assert CLASS_NAMES.split(", ") == list(CLASSES)


def test_the_public_precompile_documents_both_forms_its_return_and_errors():
    """``help(gemm_ladder.precompile)`` is the function's own: both forms with their arguments, what it returns and
    what it raises (it once only pointed elsewhere)."""
    import gemm_ladder

    doc = " ".join(gemm_ladder.precompile.__doc__.split())
    for words in ("precompile(model, example_inputs=(), example_kwargs=None, *, backward=None, rows=()",
                  'precompile(dtypes=("bf16", "fp16"), *, classes=', "epilogues=", "Returns:", "Outcomes",
                  "Raises:", "CompilerNotFoundError", "ValueError: an unknown dtype, shape class, epilogue level"):
        assert words in doc, words
