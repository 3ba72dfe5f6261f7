"""``gemm-ladder design``: print a TMA pipeline plan (Markdown or JSON), optionally draw its timeline.

    gemm-ladder design --shape 4096x4096x4096 --dtype bf16 --tile 128x128x64 --stages 4
    gemm-ladder design --shape 1000x1032x520 --dtype fp16 --tile 128x256x64 --stages 3 --cluster 2 \\
        --consumers 2 --persistent --format json --timeline plan.png
    gemm-ladder design --shape 8192x8192x8192 --stages 3 --c-aliases-stages    # level 5

Exit status 0 with a plan, 2 when the plan is refused (the message names the rule and the numbers)
or an argument is bad (one line on stderr, before anything is printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gemm_ladder.commands.argcheck import BadArgument, choice, integer, writable_file

NAME = "design"
HELP = "Plan a TMA pipeline (tensor maps, smem layout, barriers, phases, timeline) for a GEMM; no GPU needed."

#: The choices of the options checked in run() (argparse's own check would print its usage, not one line).
_CHOICES = {"dtype": ("bf16", "fp16"), "arch": ("sm_90a", "sm_100a"), "format": ("md", "json"),
            "schedule": ("cooperative", "pingpong")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", help="MxNxK of c = a @ b.T, a (M, K), b (N, K) (required)")
    parser.add_argument("--dtype", default="bf16", metavar="{bf16,fp16}")
    parser.add_argument("--tile", default="128x128x64", help="BMxBNxBK (default 128x128x64)")
    parser.add_argument("--stages", default="4", metavar="STAGES", help="PIPE_DEPTH, >= 1 (default 4)")
    parser.add_argument("--cluster", default="1", metavar="CLUSTER",
                        help="CTAs per cluster along M sharing B by multicast (needs --persistent when > 1)")
    parser.add_argument("--consumers", default="1", metavar="CONSUMERS", help="consumer warpgroups per CTA")
    parser.add_argument("--arch", default="sm_90a", metavar="{sm_90a,sm_100a}")
    parser.add_argument("--persistent", action="store_true",
                        help="persistent grid: min(work units, resident clusters) x cluster CTAs walking units in grouped order "
                             "(required for --cluster > 1)")
    parser.add_argument("--producer-warpgroup", action=argparse.BooleanOptionalAction, default=None,
                        help="separate producer warpgroup (default: yes when consumers > 1 or cluster > 1)")
    parser.add_argument("--c-aliases-stages", action="store_true",
                        help="lay the output staging over the drained operand stages (level 5: more CTAs per SM); "
                             "one tile per CTA only, refused with --persistent")
    parser.add_argument("--c-ring", default="0", metavar="R",
                        help="give each consumer warpgroup its own ring of R one-panel output staging buffers, stored "
                             "panel by panel (level 9: R = 2), instead of staging the whole tile (0, the default)")
    parser.add_argument("--stream-k", action="store_true",
                        help="split the last partial wave's units by K iterations over every cluster where it pays "
                             "(level 9's stream-K tail; needs --persistent)")
    parser.add_argument("--schedule", default="cooperative", metavar="{cooperative,pingpong}",
                        help="how the consumer warpgroups share the work: cooperative (every one reads every stage, "
                             "BM / consumers rows each; the default) or pingpong (tiles in turn, a whole tile each, "
                             "one storing while another computes; needs --persistent, --consumers >= 2 and --c-ring)")
    parser.add_argument("--format", default="md", metavar="{md,json}")
    parser.add_argument("--timeline", metavar="FILE.png", help="also draw the timeline picture into this PNG")


def run(args: argparse.Namespace) -> int:
    from gemm_ladder.design import PlanRefused, parse_triple, plan_gemm

    try:
        if args.shape is None:
            raise BadArgument("--shape MxNxK is required")
        for dest, options in _CHOICES.items():
            choice(getattr(args, dest), f"--{dest}", options)
        counts = {dest: integer(getattr(args, dest), f"--{dest.replace('_', '-')}")
                  for dest in ("stages", "cluster", "consumers", "c_ring")}
        m, n, k = parse_triple(args.shape, "--shape")
        tile = parse_triple(args.tile, "--tile")
        plan = plan_gemm(m, n, k, dtype=args.dtype, tile=tile, arch=args.arch, persistent=args.persistent,
                         producer_warpgroup=args.producer_warpgroup, c_aliases_stages=args.c_aliases_stages,
                         stream_k=args.stream_k, schedule=args.schedule, **counts)
        if args.timeline:  # last: it creates a missing folder, so not for a refused plan
            writable_file(Path(args.timeline), "--timeline")
    except PlanRefused as exc:
        print(f"gemm-ladder design: plan refused: {exc}", file=sys.stderr)
        return 2
    except (BadArgument, ValueError) as exc:
        print(f"gemm-ladder design: {exc}", file=sys.stderr)
        return 2
    from gemm_ladder.design.describer import plan_document
    from gemm_ladder.design.render import plan_markdown, timeline_png

    if args.format == "json":
        print(json.dumps(plan_document(plan), indent=2))
    else:
        print(plan_markdown(plan), end="")
    if args.timeline:
        try:
            timeline_png(plan, args.timeline)
        except OSError as exc:
            print(f"gemm-ladder design: cannot write --timeline {args.timeline}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"timeline written to {args.timeline}", file=sys.stderr)
    return 0

