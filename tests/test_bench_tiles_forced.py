"""bench/tiles_forced.py's harness without a GPU: its shape sets, the labels of the forced configurations
(the 64-row builds' among them) and the command line's refusals (one line, exit status 2, before any
GPU is asked for)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import tiles_forced as tf  # noqa: E402


def test_labels_name_the_cluster_and_the_tile_rows():
    assert tf.general_label(128, "none", 2) == "general BN 128 none"
    assert tf.general_label(64, "tail", 1) == "general c1 BN 64 tail"
    assert tf.general_label(192, "all", 1, 64) == "general c1 BM 64 BN 192 all"
    assert tf.general_label(96, "none", 1, 64, creg=True) == "general c1 BM 64 BN 96 creg none"
    # explain's decision maps onto the forced label of the same build
    d = {"kind": "general", "tile": [64, 128, 64], "split": "none", "cluster": 2}
    assert tf.route_label(d) == "general BM 64 BN 128 none"


def test_configs_for_every_tile_height_asked():
    """K-major general builds at each (width, cluster, tile height), then the small-M buckets."""
    general = [c for c in tf.configs_for(512, "bf16", (2, 1), (128, 64)) if c.family == "sm90_gemm"]
    widths = tf.general_widths()
    assert len(general) == len(widths) * 2 * 2
    assert {c.tile[0] for c in general} == {128, 64} and {c.cluster for c in general} == {2, 1}
    assert all(c.a_major == c.b_major == "k" for c in general)
    assert {c.tile[0] for c in tf.configs_for(512, "bf16") if c.family == "sm90_gemm"} == {128}  # the default
    # --register-widths: the register-store builds beside them, built by the same prebuild
    creg = [c for c in tf.configs_for(512, "bf16", (2, 1), (128, 64), (96, 144)) if c.store == "registers"]
    assert {(c.tile[0], c.tile[1], c.cluster) for c in creg} == {(bm, bn, cl) for bm in (128, 64) for bn in (96, 144)
                                                                   for cl in (2, 1)}


def test_shape_sets_are_named_once():
    names = [s[0] for s in tf.SHAPES + tf.CHECK_SHAPES + tf.SHAPES_FULL_RUN + tf.SHAPES_SMALL_M]
    assert len(names) == len(set(names))
    assert all(m <= 256 for _, m, _, _, _ in tf.SHAPES_SMALL_M)
    # a name in two sets (--tall repeats some) names one problem, so main's dedupe of the pool by value runs it once
    every = tf.SHAPES + sum(tf.SHAPE_SETS.values(), ())
    assert len({s[0] for s in every}) == len(set(every))


def test_the_tall_set():
    assert ("square 4096", 4096, 4096, 4096, "bf16") in tf.SHAPES_TALL and tf.SHAPE_SETS["tall"] is tf.SHAPES_TALL


@pytest.mark.parametrize("argv,message", [
    (["--tile-m", "96"], "--tile-m '96'"),
    (["--tile-m", "192"], "--tile-m '192'"),
    (["--splits", "tail,sideways"], "--splits 'tail,sideways'"),
    (["--tile-m", "128,x"], "--tile-m '128,x'"),
    (["--clusters", "4"], "--clusters '4'"),
    (["--register-widths", "97"], "--register-widths '97'"),
    (["--register-widths", "96,x"], "--register-widths '96,x'"),
    (["--shapes", "no such shape"], "unknown shapes"),
    (["--shapes", "vit_l16 mlp.fc2 197"], "--small-m"),  # a SHAPES_SMALL_M name without --small-m
])
def test_bad_arguments_exit_2_with_one_line(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["tiles_forced.py", *argv])
    monkeypatch.setattr(tf, "require_gpu", lambda *_: pytest.fail("asked for a GPU before refusing the arguments"))
    assert tf.main() == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
