"""How much register room level 9's consumer role has: ptxas's spills after one-line additions (no GPU).

    python bench/l9_register_headroom.py [-o OUT.json]

Level 9's consumers raise their registers to 232 (setmaxnreg) and its producer lowers to 40: with
168 registers per thread at launch (384 threads), 2 x 128 x 232 + 128 x 40 is the whole pool the CTA
gets. Each variant below adds one small thing to the consumer role (or moves the split) and records
what ptxas -v reports for it, bf16 and fp16, so a lever that needs consumer code can be judged
before it is timed.
"""

from __future__ import annotations

import argparse
import sys

from suite import add_output_argument, save
from variants import with_edit

from gemm_ladder.gates.resources import parse_ptxas_log
from gemm_ladder.levels import LEVELS

CONSUMER = "    const int consumer = warpgroup_index() - 1;\n"
RAISE = "    setmaxnreg_inc<232>();\n"


def _insert(anchor: str, line: str):
    def edit(src: str) -> str:
        assert src.count(anchor) == 1, "level 9 changed; update this variant"
        return src.replace(anchor, anchor + line, 1)
    return edit


def _split(producer: int, consumer: int):
    def edit(src: str) -> str:
        assert "setmaxnreg_dec<40>()" in src and "setmaxnreg_inc<232>()" in src, "level 9's split changed"
        return src.replace("setmaxnreg_dec<40>()", f"setmaxnreg_dec<{producer}>()").replace(
            "setmaxnreg_inc<232>()", f"setmaxnreg_inc<{consumer}>()")
    return edit


VARIANTS = {
    "comment only (control)": lambda s: s + "\n// control\n",
    "__nanosleep(10) before raising registers": lambda s: s.replace(RAISE, "    __nanosleep(10);\n" + RAISE, 1),
    "__nanosleep(consumer * 1000) in the consumer role": _insert(CONSUMER, "    __nanosleep(consumer * 1000u);\n"),
    "clock64 wait for consumer 1": _insert(CONSUMER, "    if (consumer) { uint64_t t0 = clock64(); while (clock64() - t0 < 1600) {} }\n"),
    "split 24 / 240 (fits the pool)": _split(24, 240),
    "split 32 / 240 (exceeds the pool by 1024)": _split(32, 240),
}


def main() -> int:
    p = argparse.ArgumentParser()
    add_output_argument(p)
    args = p.parse_args()
    rows = []
    for i, (name, edit) in enumerate(VARIANTS.items()):
        for dtype in ("bf16", "fp16"):
            kernel = with_edit(LEVELS[9], f"l9_headroom_{i}", edit).build(dtype)
            usage = parse_ptxas_log(kernel.ptxas_log)["gemm_kernel"]
            rows.append({"variant": name, "dtype": dtype, "registers": usage.registers, "stack_bytes": usage.stack_bytes,
                         "spill_stores": usage.spill_stores, "spill_loads": usage.spill_loads})
            print(rows[-1], flush=True)
    save({"rows": rows}, "l9_register_headroom", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
