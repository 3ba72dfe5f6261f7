"""``gemm-ladder audit``: bounded model check of a stage-ring protocol (a ladder level or a plan).

    gemm-ladder audit --level 9                      # level 9 as shipped (the registry's configuration)
    gemm-ladder audit --level 8 --stages 2 --k-iters 3 --tiles 2
    gemm-ladder audit PLAN.json                      # a designer plan, or a protocol JSON
    gemm-ladder audit --level 7 --dump-protocol p.json   # write the protocol out, to edit and re-audit

``--level N`` audits the configuration level N's kernel is built with (``gemm_ladder.levels``:
stages, cluster, consumers, output staging, persistence, producer warpgroup); ``--stages`` and
``--cluster`` change it, and what the level's kernel would refuse is refused with the rule.

Exit status: 0 when the bounded exploration completed with no violation, 1 on a violation or an
incomplete exploration, 2 when the input cannot be read or the level refuses the configuration
(one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gemm_ladder.commands.argcheck import BadArgument, integer, writable_file

NAME = "audit"
HELP = "Prove a stage-ring protocol (a ladder level or a PLAN.json) free of deadlock, early reuse and phase errors."

#: The integer options and their defaults (None: the level's own value).
_COUNTS = (("k_iters", "--k-iters"), ("tiles", "--tiles"), ("stages", "--stages"), ("cluster", "--cluster"),
           ("max_states", "--max-states"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", nargs="?", type=Path,
                        help="a designer plan JSON (from `gemm-ladder design --format json`) or a protocol JSON")
    parser.add_argument("--level", metavar="LEVEL", help="audit the protocol of ladder level N (4..9) as it ships")
    parser.add_argument("--stages", metavar="STAGES", help="ring depth (default: the level's; levels 5..9 need >= 2)")
    parser.add_argument("--k-iters", metavar="K_ITERS", default="3", help="K iterations per tile to unroll (default 3)")
    parser.add_argument("--tiles", metavar="TILES", default="2",
                        help="tiles per CTA for persistent levels (default 2)")
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
    from gemm_ladder.audit import DEFAULT_MAX_STATES, audit

    try:
        counts = _counts(args)
        if (args.level is None) == (args.plan is None):
            raise BadArgument("give either --level N or a PLAN.json (one of them)")
        if args.dump_protocol is not None:
            writable_file(args.dump_protocol, "--dump-protocol")
        protocol = _level_protocol(args, counts) if args.level is not None else _plan_protocol(args.plan)
        if args.dump_protocol is not None:
            try:
                args.dump_protocol.write_text(protocol.dumps())
            except OSError as exc:
                raise BadArgument(f"cannot write --dump-protocol {args.dump_protocol}: {exc.strerror or exc}") from None
        result = audit(protocol, max_states=counts["max_states"] or DEFAULT_MAX_STATES,
                       split_multicast=args.split_multicast, reduce=not args.full_search)
    except (BadArgument, ValueError) as exc:  # ValueError: PlanFormatError, LevelRefused, ProtocolError, ...
        print(f"gemm-ladder audit: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(result.render())
        for note in protocol.notes:
            print(f"  note: {note}")
    return 0 if result.ok else 1


def _counts(args: argparse.Namespace) -> dict[str, int | None]:
    """The integer options, each a positive integer (None where left to the level or the default)."""
    from gemm_ladder.audit.ring import MAX_ITERATIONS

    out = {dest: None if getattr(args, dest) is None else integer(getattr(args, dest), flag, 1)
           for dest, flag in _COUNTS}
    if out["k_iters"] * out["tiles"] > MAX_ITERATIONS:
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
    return protocol_for_level(number, counts["k_iters"], counts["tiles"], stages=level.stages, cluster=level.cluster,
                              consumers=level.consumers, c_ring=level.c_ring, persistent=level.persistent,
                              producer_warpgroup=level.producer_warpgroup, tile=level.tile)


def _plan_protocol(path: Path):
    """The protocol of a designer plan or protocol JSON file."""
    from gemm_ladder.audit import protocol_from_json

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
    return protocol_from_json(data)

