"""The mixture-of-experts ops once each on small shapes, for compute-sanitizer (memcheck, racecheck):
grouped_mm forward, grad_x (the weight N-major) and grad_w (grouped along K), the masked layout, and
grouped_swiglu forward and backward. Groups empty, of one row and unaligned; every result checked
against float64 (a wrong one exits 1). Builds are compiled first outside the sanitizer (run the tests or
``bench/grouped.py --sanitize`` before) or here, which is slow under it.

``--tail``: instead, the stream-K tail builds (library/grouped.py ``tail``: BN 128 on one CTA, BN 256 on a
pair) on groups of one unit each and on ragged groups, as many as make one whole wave and a third, which the
device splits on this GPU (the rule's Python mirror asked first): hand-ins, the last contributor's sum and
its stores, consumers and ranks without rows, pairs that load B whole.

    compute-sanitizer --tool memcheck --report-api-errors no python3 bench/sanitize_grouped.py [--tail]
    compute-sanitizer --tool racecheck python3 bench/sanitize_grouped.py [--tail]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

from suite import ResultCheck, require_gpu

SIZES = [0, 1, 70, 129, 0, 33]  # empty at both ends, one row, groups ending mid-tile
N, K = 136, 200  # tails in N and K


def tail_cases(check) -> None:
    """The stream-K tail builds once each on cases their device rule splits (module docstring): groups of one
    unit each (every pair shares B, every piece computes), then ragged groups (empty, one-row and mid-tile
    groups: consumers with no row of the group, a pair's rank without a tile, pairs straddling two groups and
    loading B whole, N not a multiple of BN)."""
    import math

    from gemm_ladder.design.stream_k import tail_idle_min, tail_start_unit
    from gemm_ladder.library.grouped import BK, BM, TAIL_MIN_IDLE, grouped_gemm

    k = 4 * BK
    for bn, cluster in ((128, 1), (256, 2)):
        kernel = grouped_gemm(bn, "k", cluster=cluster, tail=True)
        clusters = kernel.loaded("bf16", torch.device("cuda")).max_active_clusters(torch.device("cuda"))
        target = clusters + clusters // 3  # a third of a wave left: split (each tail unit's 4 K tiles cover the clusters)
        for ragged in (False, True):
            n = bn - 8 if ragged else bn  # one N tile a unit either way
            sizes, pattern = [], (0, 1, 97, 300, 129, 256, 64) if ragged else (cluster * BM,)
            while math.ceil(sum(math.ceil(r / BM) for r in sizes) / cluster) < target:
                sizes.append(pattern[len(sizes) % len(pattern)])
            units = math.ceil(sum(math.ceil(r / BM) for r in sizes) / cluster)
            assert tail_start_unit(units, clusters, k // BK, tail_idle_min(clusters, TAIL_MIN_IDLE)) < units, (units, clusters)
            ends = [0] + torch.tensor(sizes).cumsum(0).tolist()
            x = torch.randn(ends[-1] + 3, k, dtype=torch.bfloat16, device="cuda")  # rows past offs[-1]: not written
            w = (torch.randn(len(sizes), n, k, device="cuda") / math.sqrt(k)).to(torch.bfloat16)
            offs = torch.tensor(ends[1:], dtype=torch.int32, device="cuda")
            out = torch.full((ends[-1] + 3, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            kernel.launch(x, w, offs, out)
            ref = torch.cat([x[ends[e]:ends[e + 1]].double() @ w[e].double().T for e in range(len(sizes))])
            tag = f"grouped_mm fwd, stream-K tail, BN {bn}, cluster {cluster}, {'ragged' if ragged else 'a unit a group'}"
            check(tag, out[:ends[-1]], ref)
            if not torch.isnan(out[ends[-1]:]).all():
                check.wrong += 1
                print(f"{tag}: rows past offs[-1] written WRONG", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tail", action="store_true", help="the stream-K tail builds instead")
    args = parser.parse_args(argv)
    require_gpu(__file__)
    if args.tail:
        check = ResultCheck()
        tail_cases(check)
        torch.cuda.synchronize()
        return 1 if check.wrong else 0
    import gemm_ladder
    from gemm_ladder.api_grouped import grouped_mm_direct, grouped_mm_masked_direct

    torch.manual_seed(0)
    offs = torch.tensor(SIZES).cumsum(0).to(torch.int32).cuda()
    ends = [0] + offs.tolist()
    groups = list(zip(range(len(SIZES)), ends, ends[1:]))
    x = torch.randn(sum(SIZES), K, dtype=torch.bfloat16, device="cuda")
    w = (torch.randn(len(SIZES), N, K, device="cuda") / K**0.5).to(torch.bfloat16)
    wu = (torch.randn(len(SIZES), N, K, device="cuda") / K**0.5).to(torch.bfloat16)
    gy = torch.randn(sum(SIZES), N, dtype=torch.bfloat16, device="cuda")
    check = ResultCheck()

    xd, wd, wud, gyd = (t.double() for t in (x, w, wu, gy))
    check("grouped_mm fwd", grouped_mm_direct(x, w.transpose(1, 2), offs),
          torch.cat([xd[s:t] @ wd[e].T for e, s, t in groups]))
    check("grouped_mm grad_x", grouped_mm_direct(gy, w, offs), torch.cat([gyd[s:t] @ wd[e] for e, s, t in groups]))
    check("grouped_mm grad_w", grouped_mm_direct(gy.t(), x, offs),
          torch.stack([gyd[s:t].T @ xd[s:t] for e, s, t in groups]))
    counts = torch.tensor([3, 0, 16, 1, 9, 16], dtype=torch.int32, device="cuda")
    a = torch.randn(len(SIZES), 16, K, dtype=torch.bfloat16, device="cuda")
    got = grouped_mm_masked_direct(a, w.transpose(1, 2), counts)
    cs = counts.tolist()
    check("grouped_mm masked", torch.cat([got[e, :c] for e, c in enumerate(cs)]),
          torch.cat([a[e, :c].double() @ wd[e].T for e, c in enumerate(cs)]))

    leaves = [t.clone().requires_grad_() for t in (x, w, wu)]
    out = gemm_ladder.grouped_swiglu(*leaves, offs)
    out.backward(gy)
    refs = [t.double().requires_grad_() for t in (x, w, wu)]
    ref = torch.cat([F.silu(refs[0][s:t] @ refs[1][e].T) * (refs[0][s:t] @ refs[2][e].T) for e, s, t in groups])
    ref.backward(gyd)
    check("grouped_swiglu fwd", out.detach(), ref.detach())
    for name, got_, want in zip(("grad_x", "grad_w_gate", "grad_w_up"), leaves, refs):
        check(f"grouped_swiglu {name}", got_.grad, want.grad)
    torch.cuda.synchronize()
    return 1 if check.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
