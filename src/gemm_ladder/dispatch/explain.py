"""What ``gemm_ladder.mm`` will run and why, as data: :class:`Explanation` (``to_dict()`` and a
readable ``str``), built from a route without launching anything."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gemm_ladder.contract import dtype_name
from gemm_ladder.design.describer import conclusion, plan_document
from gemm_ladder.design.problem import ceil_div
from gemm_ladder.dispatch import kernels as K
from gemm_ladder.dispatch.heuristic import CostModel
from gemm_ladder.dispatch.route import STORE_TMA, Route


@dataclass
class Explanation:
    """The dispatcher's decision for one call.

    ``m``, ``n``, ``k``: the caller's problem (a (M, K) @ b (K, N)); ``kind``: 'general', 'small_m',
    'empty' (M or N is 0) or 'zeros' (K is 0); ``kernel``: name, source, tile, stages, cluster;
    ``grid``: CTAs launched; ``split``: the split policy (general kernel) or the small-M kernel's;
    ``orientation``, ``operands``, ``output``: the layout and alignment path (``output['output_path']``:
    'TMA store', 'C from registers' or 'workspace + copy back'); ``launches``: in order;
    ``heuristic``: the cost model's provenance and the candidates it ranked (predicted microseconds);
    for the small-M kernel, ``m_tiles``: its bucket, the number of M tiles and why (the table's rule);
    for the general kernel where the small-M kernel fits, ``small_m_table``: why the table chose it (and
    ``general_bm64_bn``: the BN of the 64-row one-CTA build it chose, None for the general kernel's route);
    ``plan``: the designer's plan (conclusion and JSON), or why there is none; ``refusals``: what the
    kernel refused on the way (why an operand is repacked); ``not_taken``: the kernels that found no
    route at all, each with its first refusal.
    """

    m: int
    n: int
    k: int
    dtype: str
    out_dtype: str
    kind: str
    device: str
    kernel: dict | None = None
    tile: list[int] | None = None
    stages: int | None = None
    cluster: int | None = None
    grid: list[int] | None = None
    split: str | None = None
    orientation: str | None = None
    operands: list[dict] = field(default_factory=list)
    output: dict | None = None
    launches: list[str] = field(default_factory=list)
    heuristic: dict | None = None
    plan: dict | None = None
    refusals: list[str] = field(default_factory=list)
    not_taken: list[str] = field(default_factory=list)
    #: Who launches the call: "C++ ..." (the compiled host path, gemm_ladder/host) or "python ..." and why.
    host: str | None = None
    #: With ``explain(..., bias=...)``: where ``linear``'s bias is added: "MMA ..." (one more k16 step of each
    #: tile on the tensor cores: kernels/include/gemm_ladder/bias_stage.cuh) or "epilogue ..." and why.
    bias: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        lines = [f"gemm_ladder.mm: ({self.m} x {self.k}) @ ({self.k} x {self.n}) {self.dtype} -> {self.out_dtype} "
                 f"on {self.device}"]
        if self.kind in ("empty", "zeros"):
            lines.append("  nothing to launch: " + ("M or N is 0, the result is empty" if self.kind == "empty"
                                                     else "K is 0, the result is zeros (the empty sum)"))
            return "\n".join(lines)
        kern = self.kernel or {}
        if self.host:
            lines.append(f"  host:     {self.host}")
        if self.bias:
            lines.append(f"  bias:     {self.bias}")
        lines.append(f"  kernel:   {kern.get('name')} ({kern.get('source', '?')})")
        lines.append(f"  tile {self.tile}, {self.stages} stages, cluster {self.cluster}, grid {self.grid}, "
                     f"split: {self.split}")
        lines.append(f"  layout:   {self.orientation}")
        for op in self.operands:
            where = ("in place" if op["path"] == "in place"
                     else f"repacked into a {op['workspace'][0]} x {op['workspace'][1]} workspace"
                          + (" (copy changes the major)" if op["transposing_copy"] else "") + f": {op['why']}")
            lines.append(f"  {op['operand']} = {op['argument']}: {op['major']}-major, ld {op['ld']}, {where}")
        out = self.output or {}
        lines.append(f"  C: {out.get('out')} {out.get('dtype')}, {out.get('output_path')}: "
                     + ("written in place" if out.get("path") == "in place"
                        else f"written to a workspace and copied back: {out.get('why')}"))
        lines.append("  launches: " + "; ".join(self.launches))
        if self.heuristic:
            h = self.heuristic
            lines.append(f"  choice:   {h['rule']}")
            lines.append(f"  table:    {h['provenance']}")
            if h.get("m_tiles"):
                t = h["m_tiles"]
                lines.append(f"  M tiles:  {t['m_tiles']} of BN {t['bn']} for the kernel's M = {t['kernel_m']}: "
                             f"{t['why']}")
                lines.append(f"  M-tile table: {t['provenance']}")
            if h.get("small_m_table"):
                lines.append(f"  small M:  {h['small_m_table']['why']}")
                lines.append(f"  M-tile table: {h['small_m_table']['provenance']}")
            for c in h.get("candidates", [])[:9]:
                split = c["split"] + (", 1 CTA" if c.get("cluster") == 1 else "")  # one CTA per cluster
                rows = "BM 64 " if c.get("bm") == 64 else ""  # the 64-row build (one consumer)
                lines.append(f"    {rows}BN {c['bn']:>3} split {split:<11} {c['predicted_us']:>9.1f} us predicted, "
                             f"{c['waves']:.2f} waves")
            if h.get("autotune"):
                t = h["autotune"]
                if t["state"] == "tuned":
                    lines.append("  autotune: " + ", ".join(
                        f"{name} {'failed' if us is None else f'{us:.1f} us'}" for name, us in zip(t["candidates"], t["times_us"]))
                        + f"; kept {t['chosen']}")
                else:
                    lines.append(f"  autotune: not tuned ({t['why']}): {', '.join(t['candidates'])}")
            if h.get("untimed_bns"):
                lines.append(f"    BN {', '.join(map(str, h['untimed_bns']))}: built, not in the table (not timed by "
                             "bench/library.py --tune), so not chosen")
        if self.plan:
            lines.append(f"  plan:     {self.plan.get('conclusion')}")
        for r in self.refusals[:4]:
            lines.append(f"  refused:  {r}")
        for r in self.not_taken[:4]:
            lines.append(f"  no route: {r}")
        return "\n".join(lines)


def trivial_explanation(kind: str, m: int, n: int, k: int, dtype, out_dtype, device: str) -> Explanation:
    return Explanation(m, n, k, dtype_name(dtype), str(out_dtype).replace("torch.", ""), kind, device)


def _leading_dims(route: Route) -> dict:
    """lda, ldb, ldc for the general kernel's plan (its tensor maps take them; the small-M kernel's plan
    is of the transposed problem)."""
    if route.kind != "general":
        return {}
    ldc = route.c_path.workspace[1] if route.c_path.workspace else None
    return {"lda": route.a_path.ld, "ldb": route.b_path.ld, **({"ldc": ldc} if ldc else {})}


def _grid(route: Route, plan) -> list[int] | None:
    if route.kind == "small_m":
        # One CTA per SM: the small-M kernel's ring takes all of an SM's shared memory.
        return [route.kernel.ctas(route.m, route.n, route.k, route.device.sms), 1, 1]
    if route.candidates and not route.consumer_schedule:  # a ping-pong route's candidates are the cooperative ones
        return [route.candidates[0].work.grid_clusters * route.config.cluster, 1, 1]
    if plan is not None:
        return list(plan.schedule.grid)
    return None


def _small_m_split(route: Route, splits: int | None) -> str:
    """The small-M kernel's split in words: split-K partials reduced through a global workspace."""
    return ("" if splits is None else f"splits={splits}: ") + route.kernel.split_text()


def _refusal(reason: str, route: Route) -> str:
    """A cheaper path's refusal, as what it means for this route: the TMA store's rule on c, when c is
    then written in place another way (from registers, or a staged copy), is why that store was not
    used, not advice to repack c."""
    c = route.c_path
    if reason.startswith("c: ") and c.workspace is None and c.store != STORE_TMA:
        rule = reason[3:].removesuffix("; repack it into an aligned buffer")
        return f"c: no TMA store ({rule}), so C is written in place by the {c.label} path instead"
    return reason


def explain_route(route: Route, m: int, n: int, k: int, out_dtype, model: CostModel | None) -> Explanation:
    """The explanation of ``route`` for the caller's (M, N, K), with the designer's plan."""
    dtype = dtype_name(route.dtype)
    opts = dict(route.options)
    if route.kind == "small_m":
        split = _small_m_split(route, opts.get("splits"))
    plan_json, plan = None, None
    try:
        plan = route.kernel.plan(route.m, route.n, route.k, dtype, **_leading_dims(route))
        plan_json = {"conclusion": conclusion(plan), "plan": plan_document(plan, elide_timeline=True)}
    except Exception as exc:  # noqa: BLE001 - a refused plan is part of the explanation
        plan_json = {"conclusion": f"no plan: {type(exc).__name__}: {exc}"}
    desc = K.describe(route.config)
    paths = [route.a_path, route.b_path]
    repacked = [p for p in paths if p.repack]
    launches = []
    if repacked:
        launches.append("repack " + " and ".join(f"{p.name} ({p.role})" for p in repacked)
                        + f" (one launch, {sum(p.repack_bytes for p in repacked)} bytes moved)")
    launches.append(f"{desc['name']} ({route.m} x {route.n} x {route.k})")
    if route.c_path.copy_back:
        launches.append(f"repack the output workspace back into c ({route.c_path.copy_bytes} bytes moved)")
    if route.kind == "small_m":
        rule = "small M: the kernel's M <= 256, and the small-M kernel copies no more than the general one would"
        heuristic = {"rule": rule, "provenance": "the small-M kernel's own rule (library.small_m.SmallMGemm.ctas)",
                     "candidates": []}
        if route.tiles is not None:  # the bucket and M tiles: the table's measured rule (dispatch/small_m_tiles.py)
            heuristic["m_tiles"] = {**route.tiles.to_json(), "kernel_m": route.m}
    else:
        split = opts.get("split")
        heuristic = {"rule": "fewest repacked bytes, then the fastest (BN, split) by the cost model",
                     "provenance": model.provenance if model else "none",
                     "candidates": [c.to_json() for c in route.candidates],
                     "untimed_bns": list(route.untimed_bns)}
        if route.small_m_table:  # the small-M kernel fits, but its table measured this kernel faster
            bm64 = route.small_m_table.general_bm64_bn
            if bm64 is None:  # the general kernel's route
                heuristic["rule"] = ("the small-M kernel's table measured the general kernel faster here; then "
                                     + heuristic["rule"])
            else:  # its 64-row build with one CTA per cluster, at the table's BN: the split is the cost model's
                heuristic["rule"] = (f"the small-M kernel's table measured the general kernel's 64-row build with one "
                                     f"CTA per cluster at BN {bm64} faster here; then the fastest split of that "
                                     "build by the cost model")
            heuristic["small_m_table"] = {"why": route.small_m_table.general_why,
                                          "provenance": route.small_m_table.provenance,
                                          "general_bm64_bn": bm64}
        if route.tuning is not None:  # the autotune's timings (dispatch/autotune.py)
            heuristic["autotune"] = route.tuning.to_json()
            if route.tuning.state == "tuned":
                heuristic["rule"] += "; then the fastest of the leading candidates, timed on the first call (autotune)"
        if route.consumer_schedule:  # the ping-pong build in place of the ranked cooperative one
            heuristic["rule"] += "; then the ping-pong rule (dispatch/pingpong.py) took its build"
            heuristic["consumer_schedule"] = route.consumer_schedule
    tile = desc.get("tile") or (list(plan.tile) if plan is not None else None)
    return Explanation(
        m, n, k, dtype, str(out_dtype).replace("torch.", ""), route.kind, route.device.describe(), kernel=desc,
        tile=tile, stages=desc.get("stages") or (plan.stages if plan is not None else None),
        cluster=desc.get("cluster") or (plan.cluster if plan is not None else None),
        grid=_grid(route, plan), split=split, orientation=route.c_path.to_json()["orientation"],
        operands=[p.to_json() for p in paths], output=route.c_path.to_json(), launches=launches,
        heuristic=heuristic, plan=plan_json, refusals=[_refusal(r, route) for r in route.refusals],
        not_taken=list(route.unfit))


__all__ = ["Explanation", "ceil_div", "explain_route", "trivial_explanation"]
