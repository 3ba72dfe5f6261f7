"""Print (or compare) a SHA-256 of the SASS of every grouped-GEMM build and a cover of the fp8 builds.

The grouped builds: every configuration the host code can request (api_grouped.py: BN 128/256, the
weight K- or N-major, bf16 or float32 output, a bias, the masked layout; the K-grouped build at BN
128/256, bf16 or float32 output), for bf16 and fp16. The fp8 builds: each scale granularity with each
output, and each other template value (bias, BN 64, e5m2 A or B, the promotion not overlapped) once
beside the default. Same use and hash as tools/library_sass_fingerprint.py:

    GEMM_LADDER_CACHE=/tmp/cache_old PYTHONPATH=<old>/src python tools/grouped_fp8_sass_fingerprint.py > before.txt
    GEMM_LADDER_CACHE=/tmp/cache_new PYTHONPATH=src python tools/grouped_fp8_sass_fingerprint.py --compare before.txt

It builds through ``grouped_gemm(...).build(dtype)`` and ``Fp8Kernel(...).build()``, which both the
tree before the families (issue 22) and after take.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from library_sass_fingerprint import main  # noqa: E402 - the same command line and comparison


def grouped_jobs(dtypes=("bf16", "fp16")) -> list[tuple[str, object]]:
    from gemm_ladder.library.grouped import grouped_gemm

    kws = [dict(bn=bn, b_major=major, out_fp32=f32, bias=bias, masked=masked)
           for bn in (128, 256) for major in ("k", "mn") for f32 in (False, True)
           for bias, masked in ((False, False), (True, False), (False, True))]
    kws += [dict(bn=bn, b_major="mn", out_fp32=f32, k_grouped=True) for bn in (128, 256) for f32 in (False, True)]
    out = []
    for dtype in dtypes:
        for kw in kws:
            label = "grouped " + " ".join(f"{k}={v}" for k, v in kw.items()) + f" {dtype}"
            out.append((label, lambda kw=kw, d=dtype: grouped_gemm(**kw).build(d)))
    return out


def fp8_jobs() -> list[tuple[str, object]]:
    from gemm_ladder.library.fp8 import Fp8Kernel

    kws = [dict(scale_mode=m, out_dtype=o) for m in ("tensorwise", "rowwise", "blockwise")
           for o in ("bf16", "fp16", "fp32", "fp8")]
    kws += [dict(scale_mode=m, bias=True) for m in ("tensorwise", "rowwise", "blockwise")]
    kws += [dict(scale_mode=m, bn=64) for m in ("tensorwise", "rowwise", "blockwise")]
    kws += [dict(scale_mode=m, overlap=False) for m in ("tensorwise", "rowwise", "blockwise")]
    kws += [dict(scale_mode="blockwise", a_dtype="e5m2"), dict(scale_mode="rowwise", b_dtype="e5m2"),
            dict(scale_mode="blockwise", bias=True, out_dtype="fp32", bn=64)]
    return [("fp8 " + " ".join(f"{k}={v}" for k, v in kw.items()), lambda kw=kw: Fp8Kernel(**kw).build()) for kw in kws]


if __name__ == "__main__":
    sys.exit(main(lambda: grouped_jobs() + fp8_jobs(), __doc__))
