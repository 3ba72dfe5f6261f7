"""One small call of each library kernel family through the public API, for compute-sanitizer.

    compute-sanitizer --tool memcheck --report-api-errors no python3 bench/sanitize_families.py
    compute-sanitizer --tool racecheck python3 bench/sanitize_families.py

The general kernel (tails; a stream-K split; its 64-row builds forced, and through linear), small-M, linear with fused epilogues, the
quantized (e4m3) output (through linear, split along K, and swiglu's), swiglu (small-M and general), scaled_mm (tensorwise, rowwise, blockwise; and the 64-row build forced, whole and split), grouped_mm (along M with empty and one-row
groups, along K), grouped_linear and grouped_mm_masked: each once, so the sanitizer sees every family,
and each result checked against float64 of its inputs (relative Frobenius error <= 2e-2; fp8 against
the dequantized inputs). Builds are compiled here first if not cached, which is slow under the
sanitizer: run the tests or this script once without it before. Exit status: 0 every result right,
1 a result wrong, 2 no GPU.
"""

from __future__ import annotations

import argparse
import sys

import torch

from suite import ResultCheck, require_gpu

from gemm_ladder.library.quantized import SCHEME_BLOCKS  # each scaling's (a's block, w's block), as quantize_fp8 takes them


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    require_gpu(__file__)
    import torch.nn.functional as F

    import gemm_ladder as g
    from gemm_ladder.library.quantized import dequantize, quantize_fp8

    torch.manual_seed(0)
    check = ResultCheck(width=28)

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    # 768 x 768 x 8192 takes a stream-K split ("all") on 132 SMs; 2048 x 2048 x 1024 took none (gemm_ladder.explain).
    for tag, (m, n, k) in (("mm general, tails", (300, 264, 520)), ("mm general, stream-K", (768, 768, 8192)),
                           ("mm small-M", (7, 1024, 4096))):
        a, b = r(m, k), r(k, n)
        check(tag, g.mm(a, b), a.double() @ b.double())
    # The 64-row builds (one consumer warpgroup), forced: whole tiles and a split tail, then split throughout,
    # in 2-CTA clusters and one CTA, K-major A and B (the route's; it takes 64 x 64 tiles at 512 x 1024 x 4096).
    from gemm_ladder.library.gemm import library_gemm
    from gemm_ladder.library.operand import operand_view

    # 320 x 1728 at BN 64, 2 CTAs: 81 units on 66 clusters, "tail" splits the last 15 after whole units (one
    # CTA: 135 on 132, a tail the rule leaves whole); the 333 x 264 of the f8feda9 sanitizer run split nothing
    for cluster in (2, 1):
        for split, bn, (m, n, k) in (("tail", 64, (320, 1728, 520)), ("all", 128, (200, 384, 2048))):
            a, w = r(m, k), r(n, k)
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            library_gemm("k", "k", bn, cluster=cluster, bm=64).launch(operand_view(a, k_dim=1), operand_view(w, k_dim=1),
                                                                     c, split=split)
            check(f"mm 64-row c{cluster} {split}", c, a.double() @ w.double().T)
    x, w, res = r(512, 4096), r(1024, 4096), r(512, 1024)
    check("linear 64-row + residual", g.linear(x, w, residual=res), x.double() @ w.double().T + res.double())
    x, w, bias, res = r(333, 768), r(512, 768), r(512), r(333, 512)
    check("linear gelu + residual", g.linear(x, w, bias, activation="gelu", residual=res),
          F.gelu(x.double() @ w.double().T + bias.double()) + res.double())
    x = r(5, 768)
    check("linear small-M silu", g.linear(x, w, bias, activation="silu"), F.silu(x.double() @ w.double().T + bias.double()))
    for m in (64, 300):
        x, wg, wu = r(m, 1024), r(1536, 1024), r(1536, 1024)
        check(f"swiglu M={m}", g.swiglu(x, wg, wu), F.silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T))
    # K = 1024 (8 blocks: blockwise loads scale_b ahead) and 2176 (17: blockwise reads a shared copy of it,
    # library/fp8.py scale_b_source), both stores (640 columns: the TMA store; 644: the register store).
    for mode, (ba, bw) in SCHEME_BLOCKS.items():
        for k, n in ((1024, 640), (2176, 640), (2176, 644)):
            qa, sa = quantize_fp8(torch.randn(384, k, device="cuda"), ba)
            qw, sw = quantize_fp8(torch.randn(n, k, device="cuda") / 32, bw)
            check(f"scaled_mm {mode} K={k} N={n}", g.scaled_mm(qa, qw.T, sa, sw.T if sw.dim() == 2 else sw),
                  dequantize(qa, sa, ba).double() @ dequantize(qw, sw, bw).double().T)
    # The 64-row fp8 build, forced: 100 rows (two 64-row tiles, a tail), whole and split along K.
    from gemm_ladder.library import fp8 as fp8_lib

    for mode, (ba, bw) in SCHEME_BLOCKS.items():
        for split, k in ((False, 1040), (False, 2064), (True, 7232)):
            qa, sa = quantize_fp8(torch.randn(100, k, device="cuda"), ba)
            qw, sw = quantize_fp8(torch.randn(1536, k, device="cuda") / 32, bw)
            sb = sw.T if sw.dim() == 2 else sw
            out = torch.full((100, 1536), float("nan"), device="cuda", dtype=torch.bfloat16)
            fp8_lib.scaled_mm_launch(qa, qw.T, sa, sb, None, fp8_lib.check_scaled_mm(qa, qw.T, sa, sb), out,
                                     kernel=fp8_lib.Fp8Kernel(mode, bn=64, store="tma", split=split, bm=64,
                                                              **fp8_lib.scale_b_source(mode, k, split)))
            check(f"scaled_mm {mode} 64 rows{' split' if split else ''}", out,
                  dequantize(qa, sa, ba).double() @ dequantize(qw, sw, bw).double().T)
    # The quantized output of a 16-bit layer (e4m3 values, 1 x 128 scales): tails (N = 264: a partial scale
    # block), a fused epilogue with a residual (BN 128), and a stream-K split forced at BN 256.
    # Compared with the float64 result quantized the same way (e4m3's own rounding is up to 2^-4 of a value).
    def requantized(ref):
        return dequantize(*quantize_fp8(ref.float(), (1, 128)), (1, 128))

    x, w, bias, res = r(300, 520), r(264, 520), r(264), r(300, 264)
    v, s = g.linear(x, w, bias, activation="gelu", residual=res, out_dtype=torch.float8_e4m3fn)
    check("linear e4m3 out gelu + residual", dequantize(v, s, (1, 128)),
          requantized(F.gelu(x.double() @ w.double().T + bias.double()) + res.double()))
    from gemm_ladder.library.quantized import kernel_views, quantized_buffers

    # N = 384 at BN 256: the last tile's second scale block lies wholly past N (no scale may be written there).
    for n, split in ((512, "all"), (384, "none")):
        x, w = r(200, 4096), r(n, 4096)
        v, s = quantized_buffers(200, n, x.device)
        c, rows = kernel_views(v, s)
        library_gemm("k", "k", 256, c_from_registers=True, out_e4m3=True).launch(
            operand_view(x, k_dim=1), operand_view(w, k_dim=1), c, split=split, scales=rows)
        check(f"mm e4m3 out N={n} {split}", dequantize(v, s, (1, 128)), requantized(x.double() @ w.double().T))
    x, wg, wu = r(300, 1024), r(296, 1024), r(296, 1024)  # the gated MLP's quantized output, a partial scale block
    v, s = g.swiglu(x, wg, wu, out_dtype=torch.float8_e4m3fn)
    check("swiglu e4m3 out", dequantize(v, s, (1, 128)),
          requantized(F.silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T)))

    E, K, N = 8, 512, 384
    ends = [0, 1, 130, 130, 400, 777, 900, 1000]  # an empty first group, a one-row group, an empty one
    offs = torch.tensor(ends, device="cuda", dtype=torch.int32)
    groups = list(zip([0, *ends[:-1]], ends))
    x, w = r(1000, K), r(E, K, N)
    check("grouped_mm along M", g.grouped_mm(x, w, offs), torch.cat([x[s:t].double() @ w[e].double()
                                                                        for e, (s, t) in enumerate(groups)]))
    gy = r(1000, N)
    check("grouped_mm along K", g.grouped_mm(gy.T, x, offs),
          torch.stack([gy[s:t].double().T @ x[s:t].double() for s, t in groups]))
    wl, bl = r(E, N, K), r(E, N)
    check("grouped_linear silu", g.grouped_linear(x, wl, offs, bl, activation="silu"),
          torch.cat([F.silu(x[s:t].double() @ wl[e].double().T + bl[e].double()) for e, (s, t) in enumerate(groups)]))
    counts = [0, 3, 64, 1, 17, 0, 5, 40]
    a = r(E, 64, K)
    got = g.grouped_mm_masked(a, w, torch.tensor(counts, device="cuda", dtype=torch.int32))
    check("grouped_mm_masked", torch.cat([got[e, :c] for e, c in enumerate(counts)]),
          torch.cat([a[e, :c].double() @ w[e].double() for e, c in enumerate(counts)]))
    torch.cuda.synchronize()
    print(f"sanitize_families: {'all results right' if not check.wrong else f'{check.wrong} WRONG'}")
    return 1 if check.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
