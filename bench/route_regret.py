"""How well the dispatcher's cost model picks among the general kernel's builds, from committed timings
(no GPU): every configuration bench/tiles_forced.py forced on real layer shapes (bench/results/
*_tiles_forced*.json, the H200), or the candidates the autotune timed at each plain row's first call in a
``bench/shapes_real.py --autotune`` run (``--results`` naming those; the model's leading candidates only,
timed in the same rounds with L2 not flushed), ranked by a model; the regret of a row is the measured time
of the model's pick over the fastest measured configuration of that row.

    python bench/route_regret.py [--results GLOB] [--table TABLE.json] [--json OUT.json]
                                 [--write-table dispatch/table_<name>.json --devices NAME[,NAME]]

``--table``: score that cost table as ``table`` instead of the package's (say, the table before a change:
``git show REV:src/gemm_ladder/dispatch/table.json > before.json``). Also printed, per tile (BM x BN):
the median over rows of one CTA per cluster's time over the 2-CTA pair's at the same split
(``cluster1_over_pair``), what the table's ``cluster1_k_iter_scale`` and ``cluster1_bm64_k_iter_scale`` hold (its
``cluster1_one_wave_scale``, one CTA at 128 rows in one wave, is scored in tests/test_route_regret.py).

Models compared:

* ``table``: the package's cost table (dispatch/table.json) as the route uses it (heuristic.CostModel);
* ``per_build``: the table's form with its own per-iteration times for each build (BN x tile rows x CTAs
  per cluster) instead of one per BN times measured scales, fitted here (least squares on relative error);
* ``per_build_tiles``: ``per_build`` plus a cost per whole tile of the busiest cluster per build (the
  epilogue and the next tile's first loads, which the K iterations do not count) and per split
  iteration's share of the SMs;

* ``per_build_table``: the scored table with this GPU's speed and the ``per_build`` fit's split, fixup and
  fixed terms (:func:`table_fit`), which the route can use as it is; ``--write-table`` writes it (a device's
  table: dispatch/heuristic.py device_tables);

each fitted model scored leave-one-shape-out (fitted without the shape it ranks) and in-sample. The
candidates of a row are its measured general configurations the route may rank (one CTA per cluster:
splits "none" and "tail", as route.CLUSTER1_SPLITS). Output: per model the mean, geometric mean and
largest regret, the rows within 3% of their best, and the rows it ranks worst; ``--json`` writes them
with each row's pick, under the ``meta`` every bench result carries (date, commit, host: bench/suite.py).

Exit status: 0 when the scores are printed (and written); 2 for bad input, in one line: ``--results``
matching nothing or not tiles_forced / shapes_real results, a bad ``--table``, ``--write-table`` without
``--devices`` (or one it cannot write), an unwritable ``--json`` (checked before the fit).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from gemm_ladder.dispatch.heuristic import CLUSTER1_SPLITS, SplitOverflowError, load_table, work
from outputs import check_output

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_GLOB = str(RESULTS / "2026-12-0[34]_tiles_forced*.json")
SMS = 132  # the H200's SMs (the route's DeviceFacts)
_LABEL = re.compile(r"general (c1 )?(BM 64 )?BN (\d+) (none|tail|all|wave)$")
#: dispatch/autotune.py's label of a candidate: rows x BN, CTAs per cluster, split.
_TUNED = re.compile(r"(64|128)x(\d+) (1 CTA|2 CTAs) split (none|tail|all|wave)$")


@dataclass(frozen=True)
class Sample:
    shape: tuple[int, int, int]
    row: str  # the file and row it came from
    bn: int
    split: str
    cluster: int
    bm: int
    us: float

    @property
    def build(self) -> tuple[int, int, int]:
        return (self.bn, self.bm, self.cluster)

    def work(self):
        return work(*self.shape, self.bn, self.split, max(1, SMS // self.cluster), cluster=self.cluster, bm=self.bm)


def load_samples(pattern: str) -> list[Sample]:
    """Every measured, correct general configuration of the rows in the files matching ``pattern`` that
    the route may rank: a tiles_forced result's forced configurations, or a shapes_real --autotune
    result's timed candidates (:func:`tuned_samples`)."""
    out = []
    for f in sorted(glob.glob(pattern)):
        for r in json.loads(Path(f).read_text())["rows"]:
            if "configs" not in r:
                out += tuned_samples(r, Path(f).name)
                continue
            for label, c in r["configs"].items():
                m = _LABEL.match(label)
                if not m or not isinstance(c, dict) or "us" not in c or c.get("ok") is False:
                    continue
                cluster, bm, bn, split = (1 if m.group(1) else 2), (64 if m.group(2) else 128), int(m.group(3)), m.group(4)
                if cluster == 1 and split not in CLUSTER1_SPLITS:
                    continue
                out.append(Sample((r["m"], r["n"], r["k"]), f"{Path(f).name}:{r['name']}", bn, split, cluster, bm, c["us"]))
    return out


def tuned_samples(r: dict, file: str) -> list[Sample]:
    """A shapes_real row's autotune candidates with their median times (a plain, correct row that is not
    a copy of another; a candidate that raised is left out)."""
    t = r.get("tuning") or {}
    if (r.get("epilogue") is not None or not r.get("ok") or r.get("tuned_ok") is False or "same_as" in r
            or t.get("state") != "tuned"):
        return []
    out = []
    for label, us in zip(t["candidates"], t["times_us"]):
        m = _TUNED.match(label)
        cluster = 1 if m and m.group(3) == "1 CTA" else 2
        if m and us is not None and (cluster == 2 or m.group(4) in CLUSTER1_SPLITS):
            out.append(Sample((r["M"], r["N"], r["K"]), f"{file}:{r['model']} {r['layer']} {r['M']} {r['dtype']}",
                              int(m.group(2)), m.group(4), cluster, int(m.group(1)), us))
    return out


def cluster1_over_pair(samples: list[Sample]) -> dict[str, dict]:
    """Per tile 'BMxBN': over the rows that timed both, the median of one CTA per cluster's time over the
    2-CTA pair's at the same split, the rows, and how many were below 0.97."""
    pairs = defaultdict(list)
    by_row = defaultdict(dict)
    for s in samples:
        by_row[s.row][(s.bm, s.bn, s.split, s.cluster)] = s.us
    for times in by_row.values():
        for (bm, bn, split, cluster), us in times.items():
            pair = times.get((bm, bn, split, 2))
            if cluster == 1 and pair:
                pairs[(bm, bn)].append(us / pair)
    return {f"{bm}x{bn}": {"rows": len(v), "median": statistics.median(v), "below_0.97": sum(x < 0.97 for x in v)}
            for (bm, bn), v in sorted(pairs.items())}


def features(s: Sample, builds: list[tuple], tiles: bool) -> list[float]:
    """Regressors: per build, its whole and split K iterations of the busiest cluster (and, with
    ``tiles``, its whole tiles there and its split iterations times the share of the SMs the split
    uses); the fixup (split flag and contributors, times BN / 256); 1."""
    w = s.work()
    row = []
    for b in builds:
        mine = b == s.build
        row += [float(w.whole_iters) if mine else 0.0, float(w.split_iters) if mine else 0.0]
        if tiles:
            whole_tiles = w.whole_iters / w.k_tiles if w.k_tiles else 0.0
            row += [whole_tiles if mine else 0.0, w.split_iters * w.grid_clusters * s.cluster / SMS if mine else 0.0]
    scale = s.bn / 256 if w.splits else 0.0
    return row + [scale, scale * w.contributors, 1.0]


def fit_coef(samples: list[Sample], builds: list[tuple], tiles: bool):
    """The least-squares coefficients of :func:`features` (relative error), and how many samples exercise
    each column (a column none exercises is fitted 0: no evidence)."""
    import numpy as np

    x = np.array([features(s, builds, tiles) for s in samples])
    t = np.array([s.us for s in samples])
    coef, *_ = np.linalg.lstsq(x / t[:, None], np.ones_like(t), rcond=None)
    return coef, (x != 0).sum(axis=0)


def fit(samples: list[Sample], builds: list[tuple], tiles: bool):
    import numpy as np

    coef, _ = fit_coef(samples, builds, tiles)
    return lambda s: float(np.dot(features(s, builds, tiles), coef))


#: table_fit: the samples a split iteration time needs before the fit's value replaces the base table's. The
#: autotune times each shape's leading candidates only, so a build timed on a few shapes where it won has a time
#: per iteration that does not hold where it was never a candidate.
MIN_SAMPLES = 20


def table_fit(samples: list[Sample], base, provenance: str, min_samples: int = MIN_SAMPLES):
    """A cost table (heuristic.CostModel) for the GPU the samples were timed on, from ``base`` (the table it
    replaces): the whole K iterations ``base``'s times this device's speed against it (the geometric mean over
    the samples of the measured time over ``base``'s prediction: ``rules["device_over_base"]``) and ``base``'s
    one-CTA and 64-row scales; the split iterations (``split_k_iter_us``: the 2-CTA 128-row build's, per width),
    the fixup and the launch's fixed time from the ``per_build`` fit; no factor on the split iterations beyond L2
    (``base``'s ``l2_bytes`` and ``split_beyond_l2_scale`` dropped: the fitted split terms hold it). A split time
    fewer than ``min_samples`` samples support, or any value fitted <= 0, is ``base``'s times the speed;
    ``rules`` says which are which.

    Why not the whole iterations too: fitted per build (one time per K iteration), the H100's timings made BN
    128 with one CTA per cluster as cheap per column as the BN 256 pair, and such a table took 10 large layer
    shapes (16384 rows, 32064-256000 columns) to a build the same timings show 5-18% slower than the pair at
    the large shapes where both were timed (2048 x 152064 x 3584: 0.82x); the autotune had not timed it there.
    The split terms are where the H200's table was furthest off on the H100 (gemma-7b's down_proj at 511 rows:
    its split "all" at 180 us against 120 for a whole-tile build)."""
    from dataclasses import replace

    # The split terms fitted here hold whatever DRAM cost this device's split timings had: no separate bound
    # on them (heuristic.CostModel.split_iter_scale), and the device's speed is taken against the base without it.
    base = replace(base, l2_bytes=0, split_beyond_l2_scale=1.0)
    builds = sorted({s.build for s in samples})
    coef, seen = fit_coef(samples, builds, False)
    col = {b: 2 * i for i, b in enumerate(builds)}
    predict = table_predict(base)
    ratios = [s.us / p for s in samples if math.isfinite(p := predict(s)) and p > 0]
    speed = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0
    rules = {"device_over_base": f"{speed:.4f}: the geometric mean of measured / the base table's prediction over "
                                 f"{len(ratios)} samples"}
    split_iter = {}
    for bn in sorted(base.k_iter_us, reverse=True):
        i = col.get((bn, 128, 2))
        fitted = i is not None and seen[i + 1] >= min_samples and coef[i + 1] > 0
        split_iter[bn] = float(coef[i + 1]) if fitted else base.split_k_iter_us[bn] * speed
        rules[f"k_iter_us[{bn}]"] = "the base table's x device_over_base"
        rules[f"split_k_iter_us[{bn}]"] = "fitted" if fitted else "the base table's x device_over_base"
    tail = [float(v) for v in coef[-3:]]
    fixup, per_contributor, fixed = (v if v > 0 else b * speed for v, b in
                                     zip(tail, (base.fixup_us, base.fixup_contributor_us, base.fixed_us)))
    for name, v in zip(("fixup_us", "fixup_contributor_us", "fixed_us"), tail):
        rules[name] = "fitted" if v > 0 else "the base table's x device_over_base"
    for name in ("cluster1_k_iter_scale", "bm64_k_iter_scale", "cluster1_bm64_k_iter_scale", "cluster1_one_wave_scale",
                 "bm64_max_waves"):
        rules[name] = "the base table's"
    return replace(base, k_iter_us={bn: v * speed for bn, v in base.k_iter_us.items()}, split_k_iter_us=split_iter,
                   fixup_us=fixup, fixup_contributor_us=per_contributor, fixed_us=fixed, provenance=provenance,
                   rules=rules)


def rows_of(samples: list[Sample]) -> dict[str, list[Sample]]:
    rows = defaultdict(list)
    for s in samples:
        rows[s.row].append(s)
    return rows


def regret(rows: dict[str, list[Sample]], predict) -> dict[str, tuple[float, Sample]]:
    """Per row: the measured time of the predicted fastest over the fastest measured, and the pick."""
    out = {}
    for name, cands in rows.items():
        pick = min(cands, key=predict)
        out[name] = (pick.us / min(c.us for c in cands), pick)
    return out


def score(reg: dict[str, tuple[float, Sample]]) -> dict:
    vals = [r for r, _ in reg.values()]
    worst = sorted(reg.items(), key=lambda kv: -kv[1][0])[:8]
    return {"rows": len(vals), "mean": sum(vals) / len(vals), "geomean": math.exp(sum(map(math.log, vals)) / len(vals)),
            "max": max(vals), "within_3pct": sum(v <= 1.03 for v in vals) / len(vals),
            "worst": [{"row": n, "regret": round(r, 3), "pick": f"BN {p.bn} BM {p.bm} c{p.cluster} {p.split}"}
                      for n, (r, p) in worst]}


def table_predict(model):
    """The table's prediction of a sample, infinite where the route would not rank it (a split it cannot launch,
    a width it does not time, a 64-row build past ``bm64_max_waves``: heuristic.CostModel.ranks)."""
    def predict(s: Sample) -> float:
        try:
            w = s.work()
            return model.predict_us(w) if model.ranks(w, s.shape[0]) else math.inf
        except (KeyError, SplitOverflowError):
            return math.inf
    return predict


def evaluate(samples: list[Sample], table=None) -> dict:
    """Every model's scores (module docstring); ``table``: the cost model scored as ``table`` (default the
    package's)."""
    rows = rows_of(samples)
    builds = sorted({s.build for s in samples})
    out = {"table": score(regret(rows, table_predict(table or load_table())))}
    shapes = sorted({s.shape for s in samples})
    for name, tiles in (("per_build", False), ("per_build_tiles", True)):
        out[name + "_in_sample"] = score(regret(rows, fit(samples, builds, tiles)))
        held = {}
        for shape in shapes:  # leave one shape out: fitted without any row of that shape
            predict = fit([s for s in samples if s.shape != shape], builds, tiles)
            held.update(regret({n: c for n, c in rows.items() if c[0].shape == shape}, predict))
        out[name + "_held_out"] = score(held)
    base = table or load_table()
    out["per_build_table_in_sample"] = score(regret(rows, table_predict(table_fit(samples, base, "in sample"))))
    held = {}
    for shape in shapes:
        model = table_fit([s for s in samples if s.shape != shape], base, "held out")
        held.update(regret({n: c for n, c in rows.items() if c[0].shape == shape}, table_predict(model)))
    out["per_build_table_held_out"] = score(held)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=DEFAULT_GLOB,
                   help="the tiles_forced or shapes_real --autotune JSONs to read (a glob)")
    p.add_argument("--table", type=Path, default=None, help="score this cost table as 'table' (default the package's)")
    p.add_argument("--json", type=Path, default=None, help="write the scores here")
    p.add_argument("--write-table", type=Path, default=None,
                   help="write the per-build fit in the table's form (table_fit, over every sample) here, for the "
                        "devices of --devices (dispatch/table_<name>.json)")
    p.add_argument("--devices", default=None,
                   help="with --write-table: the device names (comma-separated) the results were timed on")
    args = p.parse_args(argv)
    if (args.write_table is None) != (args.devices is None):
        print("bench/route_regret.py: --write-table and --devices go together", file=sys.stderr)
        return 2
    if args.devices is not None and not [d for d in args.devices.split(",") if d.strip()]:
        print(f"bench/route_regret.py: --devices {args.devices!r}: name the device(s), comma-separated", file=sys.stderr)
        return 2
    check_output(__file__, args.json, "--json")
    try:
        samples = load_samples(args.results)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # a file of another form
        print(f"bench/route_regret.py: --results {args.results}: not tiles_forced or shapes_real results "
              f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else e!r})", file=sys.stderr)
        return 2
    try:
        table = load_table(args.table) if args.table else None
    except (OSError, ValueError, KeyError) as e:
        print(f"bench/route_regret.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if not samples:
        print(f"bench/route_regret.py: no timed general configurations in {args.results}", file=sys.stderr)
        return 2
    out = evaluate(samples, table)
    out["cluster1_over_pair"] = cluster1_over_pair(samples)
    print(f"{len(samples)} timed configurations, {len(rows_of(samples))} rows, {len({s.shape for s in samples})} shapes")
    for name, sc in out.items():
        if name == "cluster1_over_pair":
            continue
        print(f"{name:26s} mean {sc['mean']:.3f}  geomean {sc['geomean']:.3f}  max {sc['max']:.3f}  "
              f"within 3% {sc['within_3pct']:.0%}")
    print("one CTA / pair, median: " + ", ".join(f"{k} {v['median']:.3f} ({v['rows']})"
                                               for k, v in out["cluster1_over_pair"].items()))
    if args.json:
        from suite import save  # imports torch: only when a result is written

        save(out, "route_regret", args.json)
    if args.write_table:
        try:
            write_table(samples, args, out)
        except OSError as e:
            print(f"bench/route_regret.py: --write-table {args.write_table}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 0


def write_table(samples: list[Sample], args, scores: dict) -> None:
    """--write-table: :func:`table_fit` over every sample, with the devices it is for and its provenance (the
    results it was fitted on and its leave-one-shape-out regret over them)."""
    files = sorted(Path(f).name for f in glob.glob(args.results))
    held = scores["per_build_table_held_out"]
    base = load_table(args.table) if args.table else load_table()
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    provenance = (f"tuned on {devices[0]}: bench/route_regret.py --write-table over {', '.join(files)} "
                  f"({len(samples)} timed configurations, {len(rows_of(samples))} rows); leave one shape out, "
                  f"its pick {held['geomean']:.3f}x the fastest timed (geometric mean, max {held['max']:.3f})")
    model = table_fit(samples, base, provenance)
    args.write_table.write_text(json.dumps({"devices": devices, **model.to_json()}, indent=1) + "\n")
    print(f"wrote {args.write_table} for {', '.join(devices)}")


if __name__ == "__main__":
    sys.exit(main())
