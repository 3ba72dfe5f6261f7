"""The cost table per GPU (dispatch/heuristic.py device_tables, dispatch.cost_model) without a GPU: which
table a device name gets, the refusals of malformed tables, and a route on meta tensors decided with each
device's table (the H100's picks one CTA where the H200's table picks the 2-CTA pair)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gemm_ladder import dispatch
from gemm_ladder.dispatch.heuristic import TABLE_PATH, device_tables, load_table, table_path_for
from gemm_ladder.dispatch.route import ASSUMED_DEVICE, DeviceFacts

H100 = DeviceFacts("NVIDIA H100 80GB HBM3", 132)


def test_each_device_name_gets_its_table():
    assert device_tables() == {"NVIDIA H100 80GB HBM3": TABLE_PATH.parent / "table_h100.json"}
    assert table_path_for("NVIDIA H100 80GB HBM3") == TABLE_PATH.parent / "table_h100.json"
    for name in (None, "NVIDIA H200", "NVIDIA H100 PCIe", ""):
        assert table_path_for(name) == TABLE_PATH


def test_cost_model_follows_the_device():
    assert dispatch.cost_model(H100).provenance.startswith("tuned on NVIDIA H100 80GB HBM3")
    h200 = load_table().provenance
    assert dispatch.cost_model().provenance == h200 and dispatch.cost_model(ASSUMED_DEVICE).provenance == h200
    assert dispatch.cost_model(DeviceFacts("NVIDIA H100 80GB HBM3", 132, assumed=True)).provenance == h200
    assert dispatch.cost_model(H100) is dispatch.cost_model(H100)  # read once


def _write(path, devices):
    t = json.loads(TABLE_PATH.read_text())
    t.pop("small_m", None)
    if devices is not None:
        t["devices"] = devices
    path.write_text(json.dumps(t))


@pytest.mark.parametrize("devices", [None, [], [""], [3]])
def test_a_table_that_names_no_device_is_refused(tmp_path, devices):
    _write(tmp_path / "table_x.json", devices)
    with pytest.raises(ValueError, match="'devices' must list"):
        device_tables(tmp_path)


def test_two_tables_claiming_one_device_are_refused(tmp_path):
    _write(tmp_path / "table_a.json", ["GPU X"])
    _write(tmp_path / "table_b.json", ["GPU Y", "GPU X"])
    with pytest.raises(ValueError, match="both claim 'GPU X'"):
        device_tables(tmp_path)
    (tmp_path / "table.json").write_text(TABLE_PATH.read_text())
    (tmp_path / "table_b.json").unlink()
    assert table_path_for("GPU X", tmp_path) == tmp_path / "table_a.json"
    assert table_path_for("GPU Y", tmp_path) == tmp_path / "table.json"


def test_a_route_is_decided_with_its_devices_table():
    """phi-3-mini's down_proj at 333 rows (bench/route_tables.py --plan): the H200's table takes the 64-row one-CTA
    BN 128 build with a "tail" split, the H100's (split iterations fitted on the H100's autotune timings) the BN 192
    one whole, timed 1.19x faster there. gemma-7b's down_proj at 511 rows, where the two tables differed before
    table.json's factor on split iterations beyond L2 (its "all" split took 180 us on the H100, the 64-row one-CTA BN 192 build 120),
    now takes that build with either table."""
    a = torch.empty((333, 8192), dtype=torch.bfloat16, device="meta")
    b = torch.empty((3072, 8192), dtype=torch.bfloat16, device="meta").T
    c = torch.empty((333, 3072), dtype=torch.bfloat16, device="meta")
    h200 = dispatch.decide(a, b, c, given=False, device=ASSUMED_DEVICE)
    h100 = dispatch.decide(a, b, c, given=False, device=H100)
    assert (h200.config.cluster, h200.config.tile[0], h200.bn, dict(h200.options).get("split")) == (1, 64, 128, "tail")
    assert (h100.config.cluster, h100.config.tile[0], h100.bn, dict(h100.options).get("split")) == (1, 64, 192, "none")
    a = torch.empty((511, 24576), dtype=torch.bfloat16, device="meta")
    b = torch.empty((3072, 24576), dtype=torch.bfloat16, device="meta").T
    c = torch.empty((511, 3072), dtype=torch.bfloat16, device="meta")
    for device in (ASSUMED_DEVICE, H100):
        r = dispatch.decide(a, b, c, given=False, device=device)
        assert (r.config.cluster, r.config.tile[0], r.bn, dict(r.options).get("split")) == (1, 64, 192, "none")


def test_route_tables_plan_lists_the_picks_that_differ(capsys):
    """bench/route_tables.py --plan (no GPU): one line per plain layer shape whose pick differs between the
    two tables, none when a table is compared with itself; --plan without --table-b refuses in one line."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import route_tables

    assert route_tables.main(["--plan", "--table-b", str(TABLE_PATH.parent / "table_h100.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines and all(" -> " in ln for ln in lines)
    assert "phi3_mini mlp.down_proj 333x3072x8192 bf16: 64x128 1 CTA split tail -> 64x192 1 CTA split none" in lines
    assert not [ln for ln in lines if ln.startswith("gemma_7b mlp.down_proj 511x")]  # both whole: the factor beyond L2
    timings = str(Path(__file__).resolve().parents[1] / "bench" / "results"
                  / "2026-12-05_shapes_real_bf16_autotune_h100_6d06324.json")
    assert route_tables.main(["--plan", "--table-b", str(TABLE_PATH.parent / "table_h100.json"), "--timings", timings]) == 0
    priced = capsys.readouterr().out.strip().splitlines()
    assert priced[-1].startswith("13 changed picks timed by the autotune") and "1.007x faster" in priced[-1]
    assert "phi3_mini mlp.down_proj 333x3072x8192 bf16: 64x128 1 CTA split tail -> 64x192 1 CTA split none  timed: x1.190" in priced
    assert route_tables.main(["--plan", "--table-b", str(TABLE_PATH)]) == 0
    assert capsys.readouterr().out == ""
    assert route_tables.main(["--plan"]) == 2
    assert route_tables.main(["--plan", "--dtypes", "fp32", "--table-b", str(TABLE_PATH)]) == 2
    assert route_tables.main(["--plan", "--budget", "0", "--table-b", str(TABLE_PATH)]) == 2
    assert route_tables.main(["--plan", "-o", "x.json", "--table-b", str(TABLE_PATH)]) == 2
    assert route_tables.main(["--plan", "--timings", "/nowhere/*.json", "--table-b", str(TABLE_PATH)]) == 2
    assert route_tables.main(["--timings", timings]) == 2  # without --plan: refused before asking for a GPU
    bad = Path(__file__).resolve().parent / "conftest.py"  # not JSON
    assert route_tables.main(["--plan", "--timings", str(bad), "--table-b", str(TABLE_PATH)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 7 and "goes with --plan" in err[5] and "JSONDecodeError" in err[6]


def test_cost_model_finds_a_devices_table_once(monkeypatch):
    """The device name's table is looked up once, not per decide (heuristic.device_tables reads the folder)."""
    from gemm_ladder.dispatch import heuristic

    dispatch.clear_cache()
    calls = []
    real = heuristic.table_path_for
    monkeypatch.setattr(dispatch, "table_path_for", lambda name: calls.append(name) or real(name))
    for _ in range(3):
        dispatch.cost_model(H100)
        dispatch.cost_model()
    assert calls == ["NVIDIA H100 80GB HBM3", None]
    dispatch.clear_cache()
