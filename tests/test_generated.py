"""Generated files stay what their generator writes: a hand edit of wgmma_ops.cuh, or a generator
change committed without rerunning it, fails here (no GPU, no nvcc needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"gl_tool_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen_wgmma():
    return _load_tool("gen_wgmma")


def test_committed_wgmma_header_is_the_generator_output(gen_wgmma):
    committed = gen_wgmma.OUT.read_text()
    generated = gen_wgmma.render()
    assert committed == generated, (
        f"{gen_wgmma.OUT.relative_to(ROOT)} differs from tools/gen_wgmma.py's output: "
        "edit the generator and run `python tools/gen_wgmma.py`, never the header")


def test_generator_writes_nothing_when_rendering_and_check_reports_a_difference(gen_wgmma, tmp_path, monkeypatch):
    stale = tmp_path / "wgmma_ops.cuh"
    stale.write_text(gen_wgmma.render().replace("m64n128k16", "m64n120k16", 1))
    monkeypatch.setattr(gen_wgmma, "OUT", stale)
    before = stale.read_text()
    assert gen_wgmma.main(["--check"]) == 1
    assert stale.read_text() == before  # --check never writes
    assert gen_wgmma.main([]) == 0
    assert stale.read_text() == gen_wgmma.render()
    assert gen_wgmma.main(["--check"]) == 0


def test_every_shape_and_dtype_has_one_wrapper(gen_wgmma):
    text = gen_wgmma.render()
    for ctype in gen_wgmma.DTYPES:
        for n in gen_wgmma.SHAPES:
            assert text.count(f"struct Wgmma<{n}, {ctype}> {{") == 1
