"""From a result JSON (docs/results-schema.md) to the verdict and plain tables that both the HTML
page and its Markdown twin print.

Only the JSON is read here: no GPU, no torch, no kernel code. Every absent or null value becomes
``MISSING`` ("—") instead of a guess, because the schema promises that every number in the file was
measured in that run, and the report must not make up the ones that were not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gemm_ladder import results
from gemm_ladder.results import ResultError, load_result  # noqa: F401 - the report's readers, re-exported

MISSING = "—"

#: Statuses that are failures (docs/results-schema.md): ``refused`` and ``skipped`` are not.
FAILED_STATUSES = frozenset({"fail", "error"})

#: Bytes per element of the contract's dtypes, to derive arithmetic intensity when a row lacks it.
DTYPE_BYTES = {"bf16": 2, "fp16": 2}


#: Fields the report groups, sorts and looks rows up by, per member: each must be a JSON value (a
#: string, number, boolean or null), never an array or object (a hand-edited file's ``"dtype": []``).
KEY_FIELDS = {"rows": ("kind", "level", "name", "dtype", "shape_set", "m", "n", "k", "status"),
              "resources": ("level", "dtype"), "levels": ("number", "name")}


#: Fields every row must have (docs/results-schema.md; every writer has always written them): what the row is
#: (its kind, dtype and shape) and what its gates found. A null value is kept (shown as missing); an absent one
#: means the entry is not a row of a result (``{"bogus": 1}`` would render as "user ?x?x?").
REQUIRED_FIELDS = {"rows": ("kind", "dtype", "m", "n", "k", "status")}


def check_key_fields(result: dict[str, Any], path: Any) -> None:
    """Raise ResultError naming the first entry of ``result`` (from ``path``) that lacks one of its
    :data:`REQUIRED_FIELDS`, or whose :data:`KEY_FIELDS` value is an array or object: no report can be made of
    it, and load_result checks only the members' own types.
    Other values may be mistyped (a string for a number): the report shows them as they are."""
    for member, keys in REQUIRED_FIELDS.items():
        for i, entry in enumerate(result.get(member) or []):
            if missing := [key for key in keys if key not in entry]:
                raise ResultError(f"{path} is not a result JSON: {member}[{i}] has no {', '.join(map(repr, missing))} "
                                  f"(every entry of {member!r} records {', '.join(keys)}: docs/results-schema.md)")
    for member, keys in KEY_FIELDS.items():
        for i, entry in enumerate(result.get(member) or []):
            for key in keys:
                if isinstance(entry.get(key), (list, dict)):
                    kind = "array" if isinstance(entry[key], list) else "object"
                    raise ResultError(f"{path} is not a result JSON: {member}[{i}].{key} is a JSON {kind}, "
                                      "not a string, number or null")


# --- small accessors ------------------------------------------------------------------------------


def get(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…`` or None as soon as a level is missing, null or not a dict."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _number(value: Any) -> float | None:
    # bool is an int in Python; a stray true/false must not print as 1/0.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def fmt_float(value: Any, digits: int = 1) -> str:
    """A fixed-point number, or "—" when absent; NaN and infinities are spelled out."""
    x = _number(value)
    if x is None:
        return MISSING
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:,.{digits}f}"


def fmt_sci(value: Any) -> str:
    """A small error in scientific notation (2.1e-03), or "—"."""
    x = _number(value)
    if x is None:
        return MISSING
    if not math.isfinite(x):
        return fmt_float(x)
    return "0" if x == 0 else f"{x:.2e}"


def fmt_ratio(value: Any) -> str:
    """A speed or error ratio as ``0.93×``, or "—"."""
    text = fmt_float(value, 2)
    return text if text == MISSING else text + "×"


def fmt_pct(fraction: Any) -> str:
    """A fraction in [0, 1] as a percentage (``66.0 %``), or "—"."""
    x = _number(fraction)
    return MISSING if x is None else fmt_float(100.0 * x, 1) + " %"


def fmt_int(value: Any) -> str:
    """An integer count, or "—"."""
    x = _number(value)
    if x is None or not math.isfinite(x):
        return MISSING
    return f"{int(x):,}"


def fmt_bool(value: Any) -> str:
    """A gate verdict: "yes" / "no" / "—"."""
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return MISSING


def shape_label(row: dict[str, Any]) -> str:
    """``4096×4096×4096`` (M×N×K) of a row, with "?" for a missing dimension."""
    return "×".join(str(row.get(d)) if row.get(d) is not None else "?" for d in ("m", "n", "k"))


def shape_key(row: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(M, N, K) of a row: one shape is one group even when two shape sets both list it."""
    return (row.get("m"), row.get("n"), row.get("k"))


def error_ratio(row: dict[str, Any]) -> float | None:
    """The row's relative error over cuBLAS's on the same operands, or None if either is absent.

    Both zero (an exact product, e.g. K = 0) is a ratio of 1: the level is as exact as cuBLAS.
    """
    err = _number(get(row, "correctness", "rel_err"))
    ref = _number(get(row, "correctness", "cublas_rel_err"))
    if err is None or ref is None:
        return None
    if ref == 0:
        return 1.0 if err == 0 else math.inf
    return err / ref


def intensity(row: dict[str, Any]) -> float | None:
    """Arithmetic intensity (FLOP per byte of A, B and C moved once) of a row.

    The JSON's own ``intensity_flop_per_byte`` wins; without it the value follows from the shape
    alone (2·M·N·K / (bytes·(M·K + N·K + M·N))), which is arithmetic, not a measurement.
    """
    given = _number(get(row, "performance", "intensity_flop_per_byte"))
    if given is not None:
        return given
    m, n, k = (_number(row.get(d)) for d in ("m", "n", "k"))
    size = DTYPE_BYTES.get(row.get("dtype"))
    if None in (m, n, k) or size is None:
        return None
    moved = size * (m * k + n * k + m * n)
    return 2.0 * m * n * k / moved if moved > 0 and m * n * k > 0 else None


def is_failed(row: dict[str, Any]) -> bool:
    """True for a row whose status is a failure (``fail`` or ``error``)."""
    return row.get("status") in FAILED_STATUSES


def row_title(row: dict[str, Any]) -> str:
    """``L3 spatial_tiling`` for a level row, ``cuBLAS`` for the baseline."""
    if row.get("kind") == "cublas":
        return str(row.get("name") or "cuBLAS")
    number = row.get("level")
    name = row.get("name") or ""
    prefix = f"L{number}" if number is not None else "user"
    return f"{prefix} {name}".strip()


def level_sort_key(row: dict[str, Any]) -> tuple[int, float, str]:
    """Levels in ascending number, the user's callable (number null) after them, cuBLAS last."""
    if row.get("kind") == "cublas":
        return (2, 0.0, "")
    number = _number(row.get("level"))
    return (0, number, "") if number is not None else (1, 0.0, str(row.get("name") or ""))


# --- tables ---------------------------------------------------------------------------------------


@dataclass
class Row:
    """One table row: its printed cells, and how it is marked (``failed``, ``cublas``, …)."""

    cells: list[str]
    marks: set[str] = field(default_factory=set)


@dataclass
class Table:
    """A titled table; ``numeric`` names the columns that are right-aligned."""

    headers: list[str]
    rows: list[Row]
    numeric: set[int] = field(default_factory=set)


STATUS_TEXT = {
    "pass": "✓ pass",
    "fail": "✗ FAIL",
    "error": "✗ ERROR",
    "refused": "○ refused",
    "skipped": "– skipped",
}


def status_text(status: Any) -> str:
    """The printed status: a symbol beside the word, so that a failure reads without colour too."""
    if status is None:
        return MISSING
    return STATUS_TEXT.get(status, str(status))


def ordered_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The result's rows grouped by dtype and shape (in first-seen order), levels up, cuBLAS last."""
    rows = [r for r in result.get("rows") or [] if isinstance(r, dict)]
    group_order: dict[tuple[Any, ...], int] = {}
    for r in rows:
        group_order.setdefault((r.get("dtype"), shape_key(r)), len(group_order))
    return sorted(rows, key=lambda r: (group_order[(r.get("dtype"), shape_key(r))], level_sort_key(r)))


def rows_table(result: dict[str, Any]) -> Table:
    """Every row of the result: one per (level or cuBLAS, dtype, shape) with gates and speed."""
    headers = [
        "kernel", "dtype", "set", "M×N×K", "status", "rel. error", "error ÷ cuBLAS",
        "TFLOP/s", "vs cuBLAS", "vs previous", "roofline", "note",
    ]
    table = Table(headers=headers, rows=[], numeric={5, 6, 7, 8, 9, 10})
    for r in ordered_rows(result):
        cublas = r.get("kind") == "cublas"
        cells = [
            row_title(r),
            str(r.get("dtype") or MISSING),
            str(r.get("shape_set") or MISSING),
            shape_label(r),
            status_text(r.get("status")),
            fmt_sci(get(r, "correctness", "rel_err")),
            # cuBLAS against itself is 1 by definition; printing it would only add noise.
            MISSING if cublas else fmt_ratio(error_ratio(r)),
            fmt_float(get(r, "performance", "tflops"), 1),
            MISSING if cublas else fmt_ratio(get(r, "performance", "vs_cublas")),
            MISSING if cublas else fmt_ratio(get(r, "performance", "vs_previous")),
            fmt_pct(get(r, "performance", "roofline_fraction")),
            one_line(r.get("message")),
        ]
        marks = {"cublas"} if cublas else set()
        if is_failed(r):
            marks.add("failed")
        elif r.get("status") in ("refused", "skipped"):
            marks.add("muted")
        table.rows.append(Row(cells, marks))
    return table


#: SASS census columns of the resource table, when some entry counts any: tensor-core MMA (HGMMA, the
#: pre-Hopper HMMA), TMA loads and stores, mbarrier operations. Local memory (LDL/STL) and the total
#: always have a column.
SASS_COLUMNS = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "SYNCS")


def sass_columns(result: dict[str, Any]) -> list[str]:
    """The :data:`SASS_COLUMNS` that some resource entry counts (nonzero)."""
    entries = [e for e in result.get("resources") or [] if isinstance(e, dict)]
    return [k for k in SASS_COLUMNS if any(_number(get(e, "sass", k)) for e in entries)]


def _pair(a: Any, b: Any) -> str:
    """``a / b`` of two counts, "—" when both are absent."""
    x, y = fmt_int(a), fmt_int(b)
    return MISSING if x == y == MISSING else f"{x} / {y}"


def resource_table(result: dict[str, Any]) -> Table:
    """The resource gate: registers, shared memory, stack and spills, occupancy, the SASS census."""
    sass = sass_columns(result)
    headers = ["level", "dtype", "threads", "cluster", "regs", "smem static / dyn. B", "stack / spill B",
               "CTAs/SM", *sass, "LDL / STL", "SASS", "passed", "messages"]
    table = Table(headers=headers, rows=[], numeric=set(range(2, 11 + len(sass))))
    entries = [e for e in result.get("resources") or [] if isinstance(e, dict)]
    entries.sort(key=lambda e: (_number(e.get("level")) is None, _number(e.get("level")) or 0, str(e.get("dtype"))))
    names = level_names(result)
    for e in entries:
        number = e.get("level")
        label = f"L{number}" if number is not None else "user"
        if number in names:
            label += f" {names[number]}"
        spills = [_number(e.get(k)) for k in ("spill_stores", "spill_loads")]
        cells = [
            label,
            str(e.get("dtype") or MISSING),
            fmt_int(e.get("threads")),
            fmt_int(e.get("cluster")),
            fmt_int(e.get("registers")),
            _pair(e.get("smem_static"), e.get("smem_dynamic")),
            _pair(e.get("stack_bytes"), sum(spills) if None not in spills else None),
            fmt_int(e.get("ctas_per_sm")),
            *(fmt_int(get(e, "sass", k)) for k in sass),
            _pair(get(e, "sass", "LDL"), get(e, "sass", "STL")),
            fmt_int(get(e, "sass", "total")),
            fmt_bool(e.get("passed")),
            one_line("; ".join(str(m) for m in e.get("messages") or [])),
        ]
        table.rows.append(Row(cells, {"failed"} if e.get("passed") is False else set()))
    return table


def level_names(result: dict[str, Any]) -> dict[Any, str]:
    """Level number -> name, from ``levels`` (the rows also carry names, but levels is canonical)."""
    return {lv.get("number"): str(lv.get("name") or "") for lv in result.get("levels") or [] if isinstance(lv, dict)}


def one_line(text: Any) -> str:
    """A message squeezed to one line (the schema says one line; a traceback must not break tables)."""
    if text is None or text == "":
        return ""
    return " ".join(str(text).split())


# --- header facts ---------------------------------------------------------------------------------


def gpu_name(result: dict[str, Any]) -> str:
    """The GPU's name, or a phrase saying the run had none."""
    gpu = get(result, "meta", "gpu")
    if not isinstance(gpu, dict):
        return "no GPU"
    return str(gpu.get("name") or "unnamed GPU")


def run_date(result: dict[str, Any]) -> str:
    """The run's UTC date as ``2026-11-29 23:10 UTC`` (falls back to the raw string)."""
    raw = get(result, "meta", "date")
    if not raw:
        return MISSING
    text = str(raw)
    if len(text) >= 16 and text[10] == "T":
        return f"{text[:10]} {text[11:16]} UTC"
    return text


def commit_label(result: dict[str, Any]) -> str:
    """The source commit, shortened, with "(dirty)" when the tree had uncommitted changes."""
    commit = get(result, "meta", "git_commit")
    if not commit:
        return "unknown commit"
    label = str(commit)[:12]
    if get(result, "meta", "git_dirty"):
        label += " (dirty)"
    return label


def is_synthetic(result: dict[str, Any]) -> bool:
    """True when the file says it is not a measurement (a test fixture), so the page can say so."""
    return bool(get(result, "meta", "synthetic"))


def _text(value: Any) -> str:
    return MISSING if value is None else str(value)


def facts(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs describing the run: host, command, GPU, clocks, versions, ceilings."""
    meta = result.get("meta") or {}
    gpu = meta.get("gpu") if isinstance(meta.get("gpu"), dict) else {}
    clocks = gpu.get("clocks_mhz") or {}
    versions = meta.get("versions") or {}
    peaks = get(result, "ceilings", "peak_tflops") or {}
    out = [
        ("GPU", gpu_name(result)),
        ("SMs", fmt_int(gpu.get("sm_count"))),
        ("L2", fmt_int(gpu.get("l2_bytes")) + (" bytes" if gpu.get("l2_bytes") is not None else "")),
        ("clocks (MHz)", ", ".join(f"{k} {_text(v)}" for k, v in clocks.items()) or MISSING),
        ("date", run_date(result)),
        ("commit", commit_label(result)),
        ("host", str(meta.get("host") or MISSING)),
        ("command", str(meta.get("command") or MISSING)),
        ("versions", ", ".join(f"{k} {_text(v)}" for k, v in versions.items()) or MISSING),
        ("peak TFLOP/s", ", ".join(f"{k} {fmt_float(v, 1)}" for k, v in peaks.items()) or MISSING),
        ("DRAM GB/s", fmt_float(get(result, "ceilings", "dram_gbs"), 0)),
    ]
    return out


# --- the verdict ----------------------------------------------------------------------------------

#: Symbols of a gate's state, so that the verdict reads without colour too.
GATE_SYMBOL = {results.PASSED: "✓", results.FAILED: "✗", results.NOT_RUN: "○", results.UNKNOWN: "?"}

#: The verdict's headline per ``summary.verdict`` (results.verdict's words).
HEADLINES = {
    results.VERDICT_PASSED: "Passed: every gate that applies ran and passed",
    results.VERDICT_FAILED: "Gates failed",
    results.VERDICT_INCOMPLETE: "Incomplete: nothing failed, but a gate did not run",
    results.UNKNOWN: "Verdict unknown: this result does not record which gates ran",
}


@dataclass
class GateLine:
    """One gate in the verdict: its name, state (passed, failed, not run, unknown) and what it did."""

    gate: str
    state: str
    detail: str

    @property
    def text(self) -> str:
        return f"{GATE_SYMBOL.get(self.state, '?')} {self.gate} {self.state}" + (f": {self.detail}" if self.detail else "")


@dataclass
class Verdict:
    """The run's verdict (``results.verdict``), its headline, one line per gate and the failures."""

    verdict: str
    headline: str
    gates: list[GateLine]
    failures: list[str]
    note: str = ""  # how the verdict was read, when not from the file's own gates


UNITS = {"correctness": "check", "performance": "timing", "resources": "build"}


def verdict(result: dict[str, Any]) -> Verdict:
    """What the page says first. A schema-1 result's gates are derived from its rows (results.
    derived_gate_states) and the note says so; a result that records neither gates nor rows
    gets "unknown" unless its summary records a failure: never "passed"."""
    word = results.verdict(result)
    gates = []
    states = results.gate_states(result)
    for name, g in states.items():
        state = g["state"]
        ran, failed = _number(g.get("ran")), _number(g.get("failed"))
        if state in (results.NOT_RUN, results.UNKNOWN):
            detail = one_line(g.get("reason"))
        elif failed:
            detail = f"{int(failed)} of {int(ran or 0)} {UNITS[name]}s failed"
        else:
            detail = f"{int(ran or 0)} {UNITS[name]}{'s' * (ran != 1)}" if ran is not None else ""
        gates.append(GateLine(name, state, detail))
    headline = HEADLINES[word]
    if word == results.VERDICT_PASSED and all(g.state == results.PASSED for g in gates):
        headline = "All gates ran and passed"
    note = ("Read from the rows and resources: this schema-1 result records no per-gate states."
            if any(g.get("derived") for g in states.values()) else "")
    if all(g.state == results.UNKNOWN for g in gates):  # an old file: say it once
        gates = [GateLine(", ".join(results.GATES), results.UNKNOWN, gates[0].detail
                          + ("; it records no failure" if word == results.UNKNOWN else ""))]
    s = result.get("summary") if isinstance(result.get("summary"), dict) else {}
    return Verdict(word, headline, gates, [one_line(f) for f in s.get("failures") or []], note)


# --- the ladder: timed shapes as a level x shape table -------------------------------------------


def timed_rows(result: dict[str, Any], dtype: str) -> list[dict[str, Any]]:
    """Rows of ``dtype`` on the shapes where anything was timed (a TFLOP/s in some row)."""
    rows = [r for r in ordered_rows(result) if r.get("dtype") == dtype]
    shapes = {shape_key(r) for r in rows if _number(get(r, "performance", "tflops")) is not None}
    return [r for r in rows if shape_key(r) in shapes]


def dtypes(result: dict[str, Any]) -> list[str]:
    """The dtypes of the rows, in first-seen order."""
    return list(dict.fromkeys(str(r.get("dtype")) for r in ordered_rows(result) if r.get("dtype") is not None))


def ladder_table(result: dict[str, Any], dtype: str) -> tuple[Table, str]:
    """(table, note): a row per level and cuBLAS, a column per timed shape of ``dtype``.

    A cell is ``TFLOP/s · ratio to cuBLAS``, or the status when the row was not timed (refused,
    failed). Levels that refused every timed shape are left out of the table and named in ``note``.
    The last column is the geometric mean of the ratios to cuBLAS over the shapes the level was timed on.
    """
    rows = timed_rows(result, dtype)
    shapes: dict[Any, str] = {}
    for r in rows:
        shapes.setdefault(shape_key(r), shape_label(r))
    headers = ["kernel", *shapes.values(), "geomean vs cuBLAS"]
    table = Table(headers=headers, rows=[], numeric=set(range(1, len(headers))))
    series: dict[str, dict[Any, dict[str, Any]]] = {}
    for r in sorted(rows, key=level_sort_key):
        series.setdefault(row_title(r), {}).setdefault(shape_key(r), r)
    refused_all = []
    for title, cells_by_shape in series.items():
        cublas = title == "cuBLAS" or any(r.get("kind") == "cublas" for r in cells_by_shape.values())
        if not cublas and all(r.get("status") == "refused" for r in cells_by_shape.values()):
            refused_all.append(title)
            continue
        cells, ratios, marks = [title], [], {"cublas"} if cublas else set()
        for key in shapes:
            r = cells_by_shape.get(key)
            tflops = _number(get(r, "performance", "tflops")) if r else None
            ratio = _number(get(r, "performance", "vs_cublas")) if r else None
            if r is None:
                cells.append(MISSING)
            elif tflops is None:
                cells.append(status_text(r.get("status")))
            else:
                cells.append(fmt_float(tflops, 0) + ("" if cublas or ratio is None else f" · {fmt_ratio(ratio)}"))
            if r is not None and is_failed(r):
                marks.add("failed")
            if ratio is not None and ratio > 0 and not cublas:
                ratios.append(ratio)
        geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
        cells.append(MISSING if cublas else fmt_ratio(geomean))
        table.rows.append(Row(cells, marks))
    note = (f"{', '.join(refused_all)}: refused every timed shape (outside the declared domain)" if refused_all else "")
    return table, note


# --- correctness on every checked shape, refusals counted ---------------------------------------


def checked_table(result: dict[str, Any]) -> Table:
    """One row per (level or cuBLAS, dtype): shapes checked, passed, failed, refused and the largest
    error ratio to cuBLAS; refused rows collapse into their count (they are correct behaviour)."""
    headers = ["kernel", "dtype", "shapes", "passed", "failed", "refused", "other", "max error ÷ cuBLAS", "failures"]
    table = Table(headers=headers, rows=[], numeric={2, 3, 4, 5, 6, 7})
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sorted(ordered_rows(result), key=lambda r: (level_sort_key(r), str(r.get("dtype")))):
        groups.setdefault((row_title(r), str(r.get("dtype") or MISSING)), []).append(r)
    for (title, dtype), rows in groups.items():
        count = {k: sum(r.get("status") == k for r in rows) for k in ("pass", "refused")}
        failed = [r for r in rows if is_failed(r)]
        other = len(rows) - count["pass"] - count["refused"] - len(failed)
        ratios = [x for x in (error_ratio(r) for r in rows) if x is not None]
        cublas = any(r.get("kind") == "cublas" for r in rows)
        failures = "; ".join(f"{shape_label(r)}: {one_line(r.get('message'))}" for r in failed[:3])
        if len(failed) > 3:
            failures += f"; … {len(failed) - 3} more"
        cells = [title, dtype, str(len(rows)), str(count["pass"]), str(len(failed)), str(count["refused"]),
                 str(other), MISSING if cublas else fmt_ratio(max(ratios) if ratios else None), failures]
        table.rows.append(Row(cells, ({"cublas"} if cublas else set()) | ({"failed"} if failed else set())))
    return table
