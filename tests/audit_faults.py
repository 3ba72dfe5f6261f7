"""The seeded-fault corpus of the auditor: designer plans with one fault each, made from the designer's
own plans (so the corpus follows the designer), one per failure mode the seeds name.

Each entry of :data:`FAULTS` is (base plan, edit, the violation kinds the audit must report). The
edits are what a kernel author gets wrong (tma-pipeline-designer and gemm-optimization-ladder seeds:
consuming right after the load is issued, reusing shared memory before the store drained, a deeper
ring than shared memory allows; the ladder's phase ledger and arrival counts); the ordering faults
are written into ``ring.order``, the plan's list of each role's steps.

    python3 tests/audit_faults.py DIR     # write the corpus as DIR/<fault>.json, to try `gemm-ladder audit`

tests/test_audit_faults.py audits every entry (in process and through the command line).
"""

from __future__ import annotations

import copy
import json
import sys
from functools import cache
from pathlib import Path


def _as_json(plan) -> dict:
    return json.loads(json.dumps(plan.to_json()))


@cache
def base(name: str) -> dict:
    """The designer's plans the faults are written into (JSON, as ``gemm-ladder design --format json``):

    * ``issue``: ``gemm-ladder design --shape 4096x4096x4096`` (4 stages, one warpgroup that issues
      and consumes, K = 64 tiles), the plan of issue 26;
    * ``ws``: a warp-specialized persistent plan (a producer thread apart from the consumer
      warpgroup, 2 stages, K = 4 tiles, the whole output tile staged and drained per tile), where a
      load can overwrite a stage another role still reads;
    * ``two_consumers``: as ``ws`` with two consumer warpgroups, both releasing every stage.
    """
    from gemm_ladder.design import plan_gemm

    if name == "issue":
        return _as_json(plan_gemm(4096, 4096, 4096, "bf16"))
    if name == "ws":
        return _as_json(plan_gemm(1024, 1024, 256, "bf16", stages=2, persistent=True, producer_warpgroup=True))
    if name == "two_consumers":
        return _as_json(plan_gemm(1024, 1024, 256, "bf16", stages=2, consumers=2, persistent=True))
    raise KeyError(name)


def _set(doc: dict, path: str, value) -> None:
    *parents, key = path.split(".")
    cur = doc
    for p in parents:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    cur[key] = value


def _edit(**paths):
    """An edit setting dotted paths (``ring__empty_init_count=2`` sets ring.empty_init_count)."""
    def apply(doc: dict) -> None:
        for path, value in paths.items():
            v = value(doc) if callable(value) else value
            _set(doc, path.replace("__", "."), v)
    return apply


def _deeper_ring(stages: int):
    """Every stage count of the plan set to ``stages`` (and its ledger extended), consistently."""
    def apply(doc: dict) -> None:
        for path in ("ring.pipe_depth", "ring.full_barriers", "ring.empty_barriers", "problem.stages",
                     "smem.stages", "kernel_defines.GL_STAGES"):
            _set(doc, path, stages)
        doc["ring"]["ledger"] = [{"iteration": i, "stage": i % stages, "round": i // stages,
                                  "full_wait_parity": (i // stages) % 2, "empty_wait_parity": (i // stages + 1) % 2,
                                  "empty_passes_immediately": i < stages} for i in range(3 * stages)]
    return apply


#: name -> (base plan, edit, violation kinds the audit must report, what the fault is).
FAULTS = {
    "consume_before_load_wait": (
        "ws", _edit(ring__order__consumer=["mma", "consumer_wait", "consumer_release"]),
        {"read_before_landed"}, "the consumer's wgmma reads the stage before it waits on full[s]"),
    "consume_without_load_wait": (
        "ws", _edit(ring__order__consumer=["mma", "consumer_release"]),
        {"read_before_landed"}, "no full-barrier wait: the wgmma reads right after the load is issued"),
    "overwrite_before_release": (
        "ws", _edit(ring__order__producer=["producer_commit", "producer_acquire"]),
        {"early_overwrite"}, "the producer loads into a stage before waiting on its empty barrier"),
    "release_before_read": (
        "two_consumers", _edit(ring__order__consumer=["consumer_wait", "consumer_release", "mma"],
                               ring__release_mode="current"),
        {"early_overwrite"}, "a consumer releases the stage (current-release ring) before its wgmma read it"),
    "store_buffer_reuse_before_drain": (
        "ws", _edit(ring__order__store=["write_staging", "store_drain", "store_commit"]),
        {"staging_overwrite"}, "the next tile's epilogue writes the staging buffer before wait_group.read"),
    "store_buffer_reuse_without_drain": (
        "ws", _edit(ring__order__store=["write_staging", "store_commit"]),
        {"staging_overwrite"}, "no wait_group.read at all before staging is written again"),
    "wrong_phase_full": (
        "issue", _edit(ring__first_full_wait_parity=1),
        {"phase_ledger", "phase_error"}, "the consumer's first full wait uses parity 1 (passes at once)"),
    "wrong_phase_empty": (
        "issue", _edit(ring__first_empty_wait_parity=0),
        {"phase_ledger", "deadlock"}, "the producer's first empty wait uses parity 0 (waits on a fresh barrier)"),
    "wrong_phase_ledger_row": (
        "issue", _edit(ring__ledger__5__full_wait_parity=0),
        {"phase_ledger"}, "the ledger's row for iteration 5 (round 1) gives parity 0"),
    "wrong_arrival_count_empty_high": (
        "issue", _edit(ring__empty_init_count=2),
        {"arrival_count", "deadlock"}, "empty barriers count 2 arrivals, one arrives: the first reuse waits forever"),
    "wrong_arrival_count_empty_low": (
        "two_consumers", _edit(ring__empty_init_count=1),
        {"arrival_count", "early_overwrite"}, "empty barriers count 1 of the 2 consumers' releases"),
    "wrong_arrival_count_full": (
        "issue", _edit(ring__full_init_count=2),
        {"arrival_count", "deadlock"}, "full barriers count 2 arrivals, the issuer's arrive.expect_tx is one"),
    "wrong_byte_count_half": (
        "issue", _edit(load_protocol__expect_tx_bytes=lambda d: d["load_protocol"]["expect_tx_bytes"] // 2),
        {"byte_count", "read_before_landed"}, "expect_tx half the stage: the phase completes before B lands"),
    "wrong_byte_count_double": (
        "issue", _edit(load_protocol__expect_tx_bytes=lambda d: d["load_protocol"]["expect_tx_bytes"] * 2),
        {"byte_count", "deadlock"}, "expect_tx twice the stage: the phase never completes"),
    "wrong_box": (
        "issue", _edit(tensor_maps__b__box_dim=[64, 64]),
        {"byte_count"}, "B's box covers half the tile's rows"),
    "ring_deeper_than_smem": (
        "issue", _deeper_ring(8),
        {"smem_capacity"}, "8 stages of 32 KB: 262 KB of shared memory, more than 227 KB per block"),
}


def faulty(name: str) -> dict:
    """The plan JSON of fault ``name`` (a fresh copy)."""
    base_name, edit, _, _ = FAULTS[name]
    doc = copy.deepcopy(base(base_name))
    edit(doc)
    return doc


def write(folder: Path) -> list[Path]:
    """Write every fault's plan to ``folder``/<name>.json; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name in FAULTS:
        path = folder / f"{name}.json"
        path.write_text(json.dumps(faulty(name), indent=1))
        out.append(path)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 tests/audit_faults.py DIR", file=sys.stderr)
        sys.exit(2)
    for p in write(Path(sys.argv[1])):
        print(p)
