"""``gemm-ladder audit``: bounded model check of a stage-ring protocol (a ladder level or a plan).

    gemm-ladder audit --level 5                      # level 5, default bounds
    gemm-ladder audit --level 8 --stages 2 --k-iters 3 --tiles 2
    gemm-ladder audit PLAN.json                      # a designer plan, or a protocol JSON
    gemm-ladder audit --level 7 --dump-protocol p.json   # write the protocol out, to edit and re-audit

Exit status: 0 when the bounded exploration completed with no violation, 1 on a violation or an
incomplete exploration, 2 when the input cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NAME = "audit"
HELP = "Prove a stage-ring protocol (a ladder level or a PLAN.json) free of deadlock, early reuse and phase errors."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", nargs="?", type=Path,
                        help="a designer plan JSON (from `gemm-ladder design`) or a protocol JSON")
    parser.add_argument("--level", type=int, help="audit the protocol of ladder level N (4..9)")
    parser.add_argument("--stages", type=int, help="ring depth (levels 5..9; default 2)")
    parser.add_argument("--k-iters", type=int, default=3, help="K iterations per tile to unroll (default 3)")
    parser.add_argument("--tiles", type=int, default=2, help="tiles per CTA for persistent levels (default 2)")
    parser.add_argument("--cluster", type=int, help="CTAs per cluster (level 8: 2; level 9: 1, or 2)")
    parser.add_argument("--max-states", type=int, default=None, help="bound on explored states (default 2,000,000)")
    parser.add_argument("--split-multicast", action="store_true",
                        help="deliver each multicast load to each CTA as its own event (more interleavings)")
    parser.add_argument("--full-search", action="store_true",
                        help="explore every interleaving, without the reduced searches that decide first "
                             "(slower; the same verdict)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--dump-protocol", type=Path, help="also write the audited protocol as JSON here")


def run(args: argparse.Namespace) -> int:
    from gemm_ladder.audit import (DEFAULT_MAX_STATES, PlanFormatError, ProtocolError, audit, protocol_for_level,
                                   protocol_from_json)

    if (args.level is None) == (args.plan is None):
        print("gemm-ladder audit: give either --level N or a PLAN.json", file=sys.stderr)
        return 2
    try:
        if args.level is not None:
            protocol = protocol_for_level(args.level, k_iters=args.k_iters, tiles=args.tiles, stages=args.stages,
                                          cluster=args.cluster)
        else:
            try:
                data = json.loads(args.plan.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                print(f"gemm-ladder audit: cannot read {args.plan}: {exc}", file=sys.stderr)
                return 2
            protocol = protocol_from_json(data)
    except (PlanFormatError, ProtocolError, ValueError, KeyError) as exc:
        print(f"gemm-ladder audit: {exc}", file=sys.stderr)
        return 2
    if args.dump_protocol:
        args.dump_protocol.write_text(protocol.dumps())
    try:
        result = audit(protocol, max_states=args.max_states or DEFAULT_MAX_STATES,
                       split_multicast=args.split_multicast, reduce=not args.full_search)
    except ProtocolError as exc:
        print(f"gemm-ladder audit: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(result.render())
        for note in protocol.notes:
            print(f"  note: {note}")
    return 0 if result.ok else 1
