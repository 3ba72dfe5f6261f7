"""Quick GPU smoke check of every registered level: a few shapes, error against float64, timing at 4096^3.

    python bench/smoke.py [--levels 1-9]

A developer's tool for early runs on the H200; `gemm-ladder climb` is the real gate.
"""

import argparse
import json
import os
import sys
import time

import torch

from gemm_ladder.contract import OutsideDomainError, cublas, reference
from gemm_ladder.levels import LEVELS

SHAPES = [(128, 128, 64), (128, 128, 1), (100, 120, 64), (128, 128, 1000), (1, 1, 1), (7, 8, 9),
          (333, 328, 4096), (1000, 1000, 1000), (2048, 2056, 136), (4097, 4095, 4093), (4096, 4096, 4096)]


def rel(c, ref):
    return ((c.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--levels", default=",".join(map(str, LEVELS)))
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    rows = []
    torch.manual_seed(0)
    for dt in (torch.bfloat16, torch.float16):
        for (m, n, k) in SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=dt)
            b = torch.randn(n, k, device="cuda", dtype=dt)
            ref = reference(a, b)
            e_cublas = rel(cublas(a, b), ref)
            for lv in levels:
                try:
                    c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
                    LEVELS[lv].check(a, b)
                    LEVELS[lv].launch(a, b, c)
                    torch.cuda.synchronize()
                    unwritten = int(torch.isnan(c).sum())
                    e = rel(c, ref)
                    status = "ok" if (unwritten == 0 and e <= 2 * e_cublas + 1e-3) else "BAD"
                    rows.append(dict(level=lv, dtype=str(dt), shape=[m, n, k], err=e, cublas_err=e_cublas, unwritten=unwritten, status=status))
                except OutsideDomainError as exc:
                    rows.append(dict(level=lv, dtype=str(dt), shape=[m, n, k], status="refused", msg=str(exc)[:80]))
                except Exception as exc:  # report, keep going
                    rows.append(dict(level=lv, dtype=str(dt), shape=[m, n, k], status="ERROR", msg=repr(exc)[:300]))
                    torch.cuda.synchronize()
    # timing at 4096^3 and 8192^3 bf16
    for s in (4096, 8192):
        a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        fns = {"cublas": lambda: cublas(a, b)}
        for lv in levels:
            try:
                LEVELS[lv].check(a, b)
                fns[f"L{lv}"] = (lambda lv=lv: LEVELS[lv](a, b))
            except OutsideDomainError:
                pass
        for name, fn in fns.items():
            try:
                fn(); torch.cuda.synchronize()
                st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                reps = 20
                st.record()
                for _ in range(reps):
                    fn()
                en.record(); torch.cuda.synchronize()
                ms = st.elapsed_time(en) / reps
                rows.append(dict(timing=name, size=s, ms=ms, tflops=2 * s**3 / ms / 1e9))
            except Exception as exc:
                rows.append(dict(timing=name, size=s, status="ERROR", msg=repr(exc)[:300]))
    for r in rows:
        print(json.dumps(r))
    with open(os.path.join(args.out, "smoke.json"), "w") as f:
        json.dump(dict(gpu=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), rows=rows), f, indent=1)
    bad = [r for r in rows if r.get("status") in ("BAD", "ERROR")]
    print(f"{len(bad)} bad of {len(rows)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
