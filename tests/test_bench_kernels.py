"""The bench stays runnable: every maintained script imports and prints --help without a GPU, writes
its result only through bench/suite.py (one output convention) and times only through the gates
(no triton); the math-alone kernel keeps full-size wgmma, and the one-knob source edits the bench
applies to levels still find what they edit.

The math-alone kernel (bench/tensor_pipe_sol.py) measures level 9's math only while every HGMMA in
it is the m64n256k16 that level 9 issues: an accumulator ptxas sees as dead lets it shrink the
instruction (it did once, to 64x8, in an earlier bound). The first test compiles it for the H200 and
reads its SASS; the second applies each source edit to level 9's file. No GPU needed.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from conftest import needs_nvcc

from gemm_ladder.gates.resources import parse_ptxas_log
from gemm_ladder.levels import LEVELS
from gemm_ladder.runtime.compiler import KERNEL_ROOT, disassemble

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import l9_timeline  # noqa: E402
import ladder_variants  # noqa: E402
import suite  # noqa: E402
import tensor_pipe_sol  # noqa: E402
import variants  # noqa: E402

#: Modules the scripts share, not scripts.
SHARED = {"suite", "variants", "outputs"}
MAINTAINED = sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in SHARED)
EXPERIMENTS = sorted(p.stem for p in (BENCH / "experiments").glob("*.py"))


@needs_nvcc
@pytest.mark.parametrize("pending", [1, -1], ids=["wait_group_1", "no_wait"])
def test_math_alone_kernel_keeps_full_size_wgmma(use_cache, pending):
    level = variants.with_defines(variants.with_source(LEVELS[9], tensor_pipe_sol.SOL_SOURCE),
                                  {"GL_SOL_PENDING": pending})
    kernel = level.build("bf16")
    hgmma = re.findall(r"HGMMA\.(\d+x\d+x\d+)", disassemble(kernel.cubin))
    assert hgmma, "no wgmma left in the math-alone kernel"
    assert set(hgmma) == {"64x256x16"}, f"ptxas changed the math-alone kernel's wgmma: {sorted(set(hgmma))}"
    usage = parse_ptxas_log(kernel.ptxas_log)["gemm_kernel"]
    assert (usage.stack_bytes, usage.spill_stores, usage.spill_loads) == (0, 0, 0)


@pytest.mark.parametrize("edit", [ladder_variants._no_stores, tensor_pipe_sol._all_panels_deferred,
                                  variants.no_multicast_edit, l9_timeline.traced_edit], ids=lambda f: f.__name__)
def test_level9_edits_still_apply(edit):
    src = (KERNEL_ROOT / LEVELS[9].source).read_text()
    assert edit(src) != src


def test_the_suite_is_what_the_readme_says():
    readme = (BENCH / "README.md").read_text()
    assert len(MAINTAINED) >= 10 and EXPERIMENTS
    for name in MAINTAINED:
        assert f"| `{name}.py` |" in readme, f"bench/{name}.py is not in bench/README.md's table"
    for name in EXPERIMENTS:
        assert f"| `experiments/{name}.py` |" in readme, f"bench/experiments/{name}.py is not in bench/README.md"


@pytest.mark.parametrize("name", MAINTAINED)
def test_maintained_script_imports_and_prints_help_without_a_gpu(name, monkeypatch, capsys):
    module = importlib.import_module(name)
    monkeypatch.setattr(sys, "argv", [f"bench/{name}.py", "--help"])
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("name", MAINTAINED)
def test_maintained_script_has_one_timing_and_one_output(name):
    src = (BENCH / f"{name}.py").read_text()
    assert "triton" not in src and "do_bench" not in src, f"{name}.py: time with gates.performance.time_fns"
    for writer in ("json.dump(", "write_json", "run_meta"):
        assert writer not in src, f"{name}.py writes its result itself ({writer}): use suite.save"
    if "add_output_argument(" in src:
        assert "save(" in src


def test_result_check_counts_what_is_wrong(capsys):
    """suite.ResultCheck, the sanitizer drivers' check: beyond the tolerance or not finite is wrong."""
    ref = torch.randn(8, 8, dtype=torch.float64)
    check = suite.ResultCheck(width=6)
    assert check("same", ref.float(), ref) and not check("twice", 2 * ref.float(), ref)
    assert not check("nan", torch.full((8, 8), float("nan")), ref) and check.wrong == 2
    assert capsys.readouterr().out.splitlines()[1].startswith("twice  rel err 1.00e+00 WRONG")


def test_result_name_is_date_name_commit():
    meta = {"date": "2026-12-01T10:00:00Z", "git_commit": "0123456789abcdef", "git_dirty": False}
    assert suite.result_name("l9_targets_bf16", meta) == "2026-12-01_l9_targets_bf16_0123456.json"
    assert suite.result_name("x", {**meta, "git_dirty": True}) == "2026-12-01_x_0123456-dirty.json"
    assert suite.result_name("x", {"date": None, "git_commit": None}) == "nodate_x_nocommit.json"
    assert suite.result_name("x", {**meta, "git_commit": "c7ac4d1+tests (a copied tree)"}) == "2026-12-01_x_c7ac4d1.json"
    for bad in ("", "../x", "a b", "x/y"):
        with pytest.raises(ValueError, match="result name"):
            suite.result_name(bad, meta)


def test_save_writes_meta_and_result_to_out(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setenv("GEMM_LADDER_GIT_COMMIT", "abcdef0123")
    monkeypatch.setattr(sys, "argv", ["bench/demo.py", "--flag"])
    path = suite.save({"rows": [{"tflops": float("nan")}]}, "demo")
    assert path.parent == tmp_path and re.fullmatch(r"\d{4}-\d\d-\d\d_demo_abcdef0\.json", path.name)
    data = json.loads(path.read_text())
    assert data["meta"]["command"] == "python bench/demo.py --flag" and data["meta"]["git_commit"] == "abcdef0123"
    assert data["rows"] == [{"tflops": None}]  # write_json: non-finite numbers become null
    assert f"wrote {path}" in capsys.readouterr().out
    explicit = suite.save({"rows": []}, "demo", tmp_path / "sub" / "mine.json")
    assert explicit == tmp_path / "sub" / "mine.json" and explicit.exists()


#: A result file as the repository cites it: an optional results subfolder, then DATE_..., with
#: {a,b} alternatives and * wildcards allowed ("2026-11-30_stream_k*.json").
_CITED = re.compile(r"(?:(ncu|logs|sanitizer|notes)/)?(20\d\d-\d\d-\d\d_[A-Za-z0-9_{},*.-]*?\.(?:json|txt|log|md))")


def _expand(name: str) -> list[str]:
    m = re.search(r"\{([^}]*)\}", name)
    if not m:
        return [name]
    return [x for alt in m.group(1).split(",") for x in _expand(name[:m.start()] + alt + name[m.end():])]


def test_every_cited_result_file_exists():
    root = BENCH.parent
    results = BENCH / "results"
    texts = [root / "README.md", *(root / "docs").glob("*.md"), BENCH / "README.md", *BENCH.rglob("*.py"),
             *(root / "src").rglob("*.py"), *(root / "src").rglob("*.cu"), *(root / "src").rglob("*.cuh")]  # not *.cubin
    missing, cited = [], 0
    for path in texts:
        for sub, name in _CITED.findall(path.read_text()):
            for one in _expand(name):
                cited += 1
                if not list((results / sub).glob(one)):
                    missing.append(f"{path.relative_to(root)}: {sub + '/' if sub else ''}{one}")
    assert cited > 50  # docs/ladder.md alone cites more: the pattern still finds them
    assert not missing, "cited result files not under bench/results/:\n" + "\n".join(missing)
