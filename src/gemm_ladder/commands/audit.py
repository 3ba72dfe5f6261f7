"""``gemm-ladder audit``: bounded model check of a stage-ring protocol (a ladder level or a plan).

    gemm-ladder audit --level 9                      # level 9 as shipped (the registry's configuration)
    gemm-ladder audit --level 8 --stages 2 --k-iters 3 --tiles 2
    gemm-ladder audit PLAN.json                      # a designer plan, or a protocol JSON
    gemm-ladder audit --level 7 --dump-protocol p.json   # write the protocol out, to edit and re-audit

``--level N`` audits the configuration level N's kernel is built with (``gemm_ladder.levels``:
stages, cluster, consumers, output staging, persistence, producer warpgroup); ``--stages`` and
``--cluster`` change it, and what the level's kernel would refuse is refused with the rule.

Depth: a level or a plan is unrolled for at least 3 x stages K iterations per CTA (tiles x K
iterations per tile), so that every stage of the ring is used three times (reused twice) and its
barriers' parity wraps around (:func:`gemm_ladder.audit.min_iterations`). ``--k-iters`` (K iterations
per tile) and ``--tiles`` (tiles per CTA, persistent kernels only) are honoured for levels and plans
alike; left out, they default to the least that reaches that depth (a plan: its own K, capped there,
:func:`gemm_ladder.audit.plan_bounds`); given too small, they are refused with one line naming the
least ``--k-iters`` that is enough (exit 2), never silently raised.

A plan is also checked for its arithmetic (:func:`gemm_ladder.audit.check_plan`): expect_tx bytes
against what its tensor maps deliver per stage, arrival counts against the arrivers it names, the
phase ledger against the ring's initial phases, the ring's stages against shared memory. Each
violation prints its counterexample: the interleaving that breaks the protocol, or the sum that fails.

Exit status: 0 when the bounded exploration completed with no violation, 1 on a violation or an
incomplete exploration, 2 when the input cannot be read, the bounds are too small or the level
refuses the configuration (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gemm_ladder.commands.argcheck import BadArgument, integer, writable_file

NAME = "audit"
HELP = ("Prove a stage-ring protocol (a ladder level or a PLAN.json) free of deadlock, early reuse and phase errors, "
        "every stage reused twice; check a plan's bytes, arrival counts, phases and shared memory.")

#: The integer options and their defaults (None: the level's own value).
_COUNTS = (("k_iters", "--k-iters"), ("tiles", "--tiles"), ("stages", "--stages"), ("cluster", "--cluster"),
           ("max_states", "--max-states"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", nargs="?", type=Path,
                        help="a designer plan JSON (from `gemm-ladder design --format json`) or a protocol JSON")
    parser.add_argument("--level", metavar="LEVEL", help="audit the protocol of ladder level N (4..9) as it ships")
    parser.add_argument("--stages", metavar="STAGES", help="ring depth (default: the level's; levels 5..9 need >= 2)")
    parser.add_argument("--k-iters", metavar="K_ITERS",
                        help="K iterations per tile to unroll (default: the least that uses every stage 3 times "
                             "per CTA, 3 x stages in all; fewer is refused)")
    parser.add_argument("--tiles", metavar="TILES",
                        help="tiles per CTA for persistent levels and plans (default 2, or as many as the depth "
                             "needs for a plan with a short K)")
    parser.add_argument("--cluster", metavar="CLUSTER",
                        help="CTAs per cluster (default: the level's; level 8: 2; level 9: 2, or 1)")
    parser.add_argument("--max-states", metavar="MAX_STATES", help="bound on explored states (default 2,000,000)")
    parser.add_argument("--split-multicast", action="store_true",
                        help="deliver each multicast load to each CTA as its own event (more interleavings)")
    parser.add_argument("--full-search", action="store_true",
                        help="explore every interleaving, without the reduced searches that decide first "
                             "(slower; the same verdict)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--dump-protocol", type=Path, help="also write the audited protocol as JSON here")


def run(args: argparse.Namespace) -> int:
    from gemm_ladder.audit import DEFAULT_MAX_STATES, audit, check_plan

    try:
        counts = _counts(args)
        if (args.level is None) == (args.plan is None):
            raise BadArgument("give either --level N or a PLAN.json (one of them)")
        plan = None
        if args.level is not None:
            protocol = _level_protocol(args, counts)
        else:
            protocol, plan = _plan_protocol(args.plan, counts)
        findings = check_plan(plan) if plan is not None else []
        if args.dump_protocol is not None:  # checked once the protocol is: it creates a missing folder
            writable_file(args.dump_protocol, "--dump-protocol")
            try:
                args.dump_protocol.write_text(protocol.dumps())
            except OSError as exc:
                raise BadArgument(f"cannot write --dump-protocol {args.dump_protocol}: {exc.strerror or exc}") from None
        result = audit(protocol, max_states=counts["max_states"] or DEFAULT_MAX_STATES,
                       split_multicast=args.split_multicast, reduce=not args.full_search)
    except (BadArgument, ValueError) as exc:  # ValueError: PlanFormatError, PlanBoundsError, LevelRefused, ...
        print(f"gemm-ladder audit: {exc}", file=sys.stderr)
        return 2
    result.violations[:0] = findings  # the plan's arithmetic first, then the interleavings
    result.ok = result.ok and not findings
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(result.render())
        for note in result.notes:
            print(f"  note: {note}")
    return 0 if result.ok else 1


def _counts(args: argparse.Namespace) -> dict[str, int | None]:
    """The integer options, each a positive integer (None where left to the level or the default)."""
    from gemm_ladder.audit.ring import MAX_ITERATIONS

    out = {dest: None if getattr(args, dest) is None else integer(getattr(args, dest), flag, 1)
           for dest, flag in _COUNTS}
    if (out["k_iters"] or 1) * (out["tiles"] or 1) > MAX_ITERATIONS:
        raise BadArgument(f"--k-iters {out['k_iters']} x --tiles {out['tiles']} is more than the {MAX_ITERATIONS} K "
                          "iterations the auditor unrolls (a ring repeats every 2 x stages iterations)")
    return out


def _level_protocol(args: argparse.Namespace, counts: dict):
    """Level N's protocol for the configuration its kernel is built with (changed by --stages, --cluster)."""
    from gemm_ladder.audit import LEVELS as AUDITED
    from gemm_ladder.audit import protocol_for_level
    from gemm_ladder.design import PlanRefused

    number = integer(args.level, "--level")
    if number not in AUDITED:
        raise BadArgument(f"--level {number}: levels {AUDITED[0]}..{AUDITED[-1]} have a stage ring to audit"
                          + (" (levels 1-3 copy with threads and have none)" if 1 <= number <= 3 else ""))
    from gemm_ladder.levels import get_level  # the registry (it imports torch: only for --level)

    shipped = get_level(number)
    changes = {k: counts[k] for k in ("stages", "cluster") if counts[k] is not None}
    level = shipped.variant(**changes) if changes else shipped
    try:
        level.defines("bf16")  # the designer's rules for what the kernel would be built with
    except PlanRefused as exc:
        given = ", ".join(f"--{k} {v}" for k, v in changes.items())
        raise BadArgument(f"level {number} cannot be built with {given}: {exc}") from None
    k_iters, tiles = _level_bounds(level.stages, level.persistent, counts["k_iters"], counts["tiles"])
    return protocol_for_level(number, k_iters, counts["tiles"] or tiles, stages=level.stages, cluster=level.cluster,
                              consumers=level.consumers, c_ring=level.c_ring, persistent=level.persistent,
                              producer_warpgroup=level.producer_warpgroup, tile=level.tile)


def _level_bounds(stages: int, persistent: bool, k_iters: int | None, tiles: int | None) -> tuple[int, int]:
    """(K iterations per tile, tiles per CTA) for a level: as given, else 2 tiles when persistent and
    at least 3 K iterations per tile, enough for every stage to be used 3 times per CTA; too few is
    refused (BadArgument naming the least --k-iters that is enough)."""
    from gemm_ladder.audit import PlanBoundsError, min_iterations, plan_bounds

    t = (2 if tiles is None else tiles) if persistent else 1
    need = min_iterations(stages)
    k = max(3, -(-need // t)) if k_iters is None else k_iters
    try:
        plan_bounds(stages, k, persistent, k, t)
    except PlanBoundsError as exc:
        raise BadArgument(str(exc)) from None
    return k, t


def _plan_protocol(path: Path, counts: dict):
    """The protocol of a designer plan or protocol JSON file, and the plan (None for a protocol JSON)."""
    from gemm_ladder.audit import protocol_from_json
    from gemm_ladder.audit.plans import is_plan

    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise BadArgument(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BadArgument(f"cannot read {path}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadArgument(f"cannot read {path}: not JSON ({exc.msg}, line {exc.lineno} column {exc.colno})") from None
    protocol = protocol_from_json(data, k_iters=counts["k_iters"], tiles=counts["tiles"])
    return protocol, (data if is_plan(data) else None)

