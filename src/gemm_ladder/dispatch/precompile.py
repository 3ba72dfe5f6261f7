"""Build, ahead of time, every kernel the dispatcher can pick: so that no call compiles (a JIT
build inside a CUDA-graph capture cannot work, and one inside a timed loop is a stall).

What to build is chosen by input dtype and **shape class** (:data:`CLASSES`): the kernel families
the dispatcher (dispatch/route.py) reaches for a kind of call. Building needs nvcc or NVRTC, not a GPU; builds
land in the kernel cache (``GEMM_LADDER_CACHE``), so a cache built on one machine serves another
with the same nvcc. On a machine with a GPU, :func:`precompile` also loads every build on the device
(and asks its occupancy once), so that a CUDA-graph capture needs neither a build nor a module load
(runtime/capture.py refuses both during a capture).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gemm_ladder.design.problem import PlanRefused

MAJORS = ("k", "mn")

#: Shape classes -> what the dispatcher runs for them (dispatch/route.py's search).
CLASSES: dict[str, str] = {
    "large": "the layouts kernel in every operand order and each tile width the dispatch table times (BN 64, "
             "128, 192, 256 today; 192 for a K-major B only): calls with M and N > 256, and any call the small-M kernel does not take "
             "(transposed operands included: backward passes read them)",
    "small_m": "the small-M kernel, every M bucket (8-256) and operand order, output in the input dtype: "
               "calls with M or N <= 256 (its cluster builds are opt-in, never routed: not built here); where "
               "the small-M table measured the general kernel faster (its route, or its 64-row one-CTA build), "
               "such calls run a build of the \"large\" class instead",
    "fp32_out": "the small-M kernel writing float32 (out_dtype=torch.float32), every bucket and order, and the "
                "layouts kernel's float32 build for outputs a TMA store cannot write (from registers), every order "
                "and timed BN",
    "unaligned": "the repack kernel for the dtype's element size and for float32: operands whose strides a "
                 "TMA tensor map cannot describe, and outputs written through a workspace; and the layouts "
                 "kernel's build for outputs a TMA store cannot write (from registers), every order and timed BN",
    "quantized_out": "the layouts kernel's quantized-output build (out_dtype=torch.float8_e4m3fn: e4m3 values "
                     "with 1 x 128 scales, from registers), every order and timed BN that is whole scale blocks "
                     "(128, 256)",
}


@dataclass(frozen=True)
class Build:
    """One kernel build: a label for reports, the call that compiles it (or fetches it from the cache),
    and the call that loads it on a CUDA device (``load(device)``)."""

    label: str
    run: Callable[[], object]
    load: Callable[[object], object] | None = None


def check_classes(classes) -> tuple[str, ...]:
    """``classes`` as a tuple of names from :data:`CLASSES` ("all" for every one); raises ValueError
    naming the unknown one."""
    if isinstance(classes, str):
        classes = tuple(CLASSES) if classes == "all" else tuple(c.strip() for c in classes.split(","))
    classes = tuple(classes)
    for c in classes:
        if c not in CLASSES:
            raise ValueError(f"shape class {c!r}: use one of {', '.join(CLASSES)} (or all)")
    if not classes:
        raise ValueError(f"no shape class given: use one or more of {', '.join(CLASSES)} (or all)")
    return classes


def normalize_dtypes(dtypes) -> tuple[str, ...]:
    """'bf16' / torch.bfloat16 / a sequence of them -> ('bf16', ...); raises ValueError for another dtype."""
    import torch

    from gemm_ladder.contract import DTYPES, GemmInputError, dtype_name

    if isinstance(dtypes, (str, torch.dtype)):
        dtypes = (dtypes,)
    out = []
    for d in dtypes:
        if isinstance(d, torch.dtype):
            try:
                d = dtype_name(d)
            except GemmInputError as exc:
                raise ValueError(str(exc)) from None
        if d not in DTYPES:
            raise ValueError(f"dtype {d!r}: the library computes {', '.join(DTYPES)}")
        out.append(d)
    if not out:
        raise ValueError("no dtype given: use bf16, fp16 or both")
    return tuple(dict.fromkeys(out))


def config_label(config) -> str:
    """A build's label in reports: the family, tile width or bucket, operand order, store and dtypes
    (with the epilogue's digest when one is built in)."""
    am, bm, bn, dtype = config.a_major, config.b_major, config.tile[1], config.dtype
    fp32 = " fp32 out" if config.out_fp32 else " e4m3 out" if config.out_dtype == "e4m3" else ""
    if config.family == "sm90_gemm_small_m":
        label = f"small-M BN {bn} A {am} B {bm}{fp32} {dtype}"
    elif config.family == "sm90_gemm":
        label = (f"general{' from registers' if config.c_from_registers else ''} A {am} B {bm}"
                 f"{' BM 64' if config.tile[0] == 64 else ''} BN {bn}{' ping-pong' if config.pingpong else ''}"
                 f"{' 1 CTA' if config.cluster == 1 else ''}{fp32} {dtype}")
    else:
        label = f"{config.family} {dtype}"
    return label + (f" epilogue #{config.epilogue_id}" if config.epilogue is not None else "")


def config_build(config, label: str | None = None) -> Build:
    """The Build of ``config``: compiled by its family (library/kernel.py's Kernel protocol) and loaded
    on a device (its occupancy asked once, so that a capture needs neither)."""
    from gemm_ladder.dispatch.kernels import family

    fam = family(config)

    def load(device):
        fam.loaded(config, device).max_active_clusters(device)

    return Build(label or config_label(config), lambda: fam.build(config), load)


def table_devices() -> list:
    """The devices a build list made without a GPU is for (dispatch.route.DeviceFacts): the H200 assumed and
    each GPU the package has a cost table for (heuristic.device_tables), at the assumed SM count. A script's
    --prebuild decides its routes for each, so the cache holds whichever builds the lent GPU's table picks."""
    from gemm_ladder.dispatch.heuristic import device_tables
    from gemm_ladder.dispatch.route import ASSUMED_DEVICE, DeviceFacts

    return [ASSUMED_DEVICE] + [DeviceFacts(name, ASSUMED_DEVICE.sms) for name in device_tables()]


def _shipped_tables() -> list:
    """The package's cost tables: table.json and those fitted on other GPUs (heuristic.device_tables)."""
    from gemm_ladder.dispatch.heuristic import TABLE_PATH, device_tables, load_table

    return [load_table(path) for path in (TABLE_PATH, *device_tables().values())]


def _timed_bns(tables: list | None = None) -> tuple[int, ...]:
    """The general kernel's widths the route can reach: those a cost table times (route.choose), table.json
    or one fitted on another GPU (``tables``: default :func:`_shipped_tables`)."""
    from gemm_ladder.dispatch.kernels import general_bns

    timed = {bn for t in (tables if tables is not None else _shipped_tables()) for bn in t.k_iter_us}
    return tuple(bn for bn in general_bns() if bn in timed)


def _one_cta_bns(tables: list | None = None) -> tuple[int, ...]:
    """The timed widths at which a cost table (``tables``: default :func:`_shipped_tables`) charges one CTA per
    cluster less than the 2-CTA pair (``cluster1_k_iter_scale`` < 1, or ``cluster1_one_wave_scale`` < 1 where
    the tiles fit in one wave): where the route may take the one-CTA build for a large product."""
    tables = tables if tables is not None else _shipped_tables()
    return tuple(bn for bn in _timed_bns(tables)
                 if any(min(t.cluster1_k_iter_scale.get(bn, 1.0), t.cluster1_one_wave_scale.get(bn, 1.0)) < 1.0
                        for t in tables))


def library_builds(dtypes: tuple[str, ...] = ("bf16", "fp16"), classes=tuple(CLASSES)) -> list[Build]:
    """Every build :func:`gemm_ladder.dispatch.route` can reach for ``dtypes`` in ``classes``
    (:data:`CLASSES`), as the route lists them (:func:`gemm_ladder.dispatch.route.class_configs`): the
    general kernel in each operand order and each tile width the cost table times (the others are never
    chosen: dispatch.route.choose), each small-M bucket in each order (and output dtype), and the repack
    kernel for each element size. Plans nothing, compiles nothing: the list is what :func:`precompile`
    runs. Raises ValueError for an unknown class or dtype."""
    from gemm_ladder.contract import DTYPES
    from gemm_ladder.dispatch.route import class_configs
    from gemm_ladder.library.repack import REPACK

    classes = check_classes(classes)
    bns = _timed_bns()
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtype {d!r}: the library computes {', '.join(DTYPES)}")
    # In the order the builds were always listed: per operand order, the general kernel's TMA-store builds,
    # its register-store builds (input dtype, then float32), the small-M buckets (input dtype, then float32).
    order = ("large", "unaligned", "fp32_out", "small_m", "fp32_out", "quantized_out")
    builds = []
    for dtype in dtypes:
        for am in MAJORS:
            for bm in MAJORS:
                for i, cls in enumerate(order):
                    if cls not in classes:
                        continue
                    configs = class_configs(cls, dtype, bns, am, bm)
                    if cls == "fp32_out":  # its general builds third, its small-M ones last
                        configs = [c for c in configs if (c.family == "sm90_gemm") == (i == 2)]
                    builds += [config_build(c) for c in configs]
        if "unaligned" in classes:
            builds.append(Build(f"repack {dtype}", lambda d=dtype: REPACK.build(d),
                                lambda device: REPACK.loaded(2, device)))
    if "unaligned" in classes or "fp32_out" in classes:  # an fp32 output TMA cannot write is copied back
        builds.append(Build("repack fp32", lambda: REPACK.build("fp32"), lambda device: REPACK.loaded(4, device)))
    return builds


def precompile(dtypes: tuple[str, ...] = ("bf16", "fp16"), *, classes=tuple(CLASSES), workers: int | None = None,
               levels: bool = False, device=None, load: bool | None = None,
               epilogues: str = "common") -> "Outcomes":
    """Compile every library build for ``dtypes`` and shape ``classes`` (and, with ``levels``, the
    ladder's levels), with the built-in epilogue variants of ``epilogues`` (:data:`EPILOGUE_LEVELS`:
    "none", "common" (default) or "all"; :func:`epilogue_builds`), in parallel; then load each on
    ``device`` (default: the current CUDA device) when ``load`` (default: when torch sees a GPU).

    Returns an :class:`Outcomes` ({label: outcome}, with ``.summary()``): 'built', 'built, loaded on
    cuda:N', 'not a variant: <rule>' for an order a kernel refuses to plan (e.g. an MN-major activation
    below 64 rows), or 'failed: <error>'. Raises CompilerNotFoundError without a compiler (nvcc or
    NVRTC), ValueError for an unknown class, dtype or epilogue level.
    """
    from gemm_ladder.runtime.compiler import compiler_choice

    dtypes = normalize_dtypes(dtypes)
    builds = library_builds(dtypes, classes)  # bad input refused before looking for a compiler
    builds += epilogue_builds(dtypes, classes, epilogues)
    compiler_choice()  # no compiler (nvcc or NVRTC): one clear error, not one per build
    if levels:
        from gemm_ladder.levels import LEVELS

        builds += [Build(f"level {n} {d}", lambda lv=lv, d=d: lv.build(d)) for n, lv in LEVELS.items() for d in dtypes]
    return run_builds(builds, workers=workers, device=device, load=load)


class Outcomes(dict):
    """{label: outcome} of :func:`run_builds`, and which builds were compiled by this run
    (``compiled``), which were already in the kernel cache (``cached``) and which the package ships
    built (``shipped``, runtime/aot.py: nothing compiled, nothing in the cache): labels. A build whose
    cubin another label of the same run compiled (one source, two labels) counts as compiled."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.compiled: set[str] = set()
        self.cached: set[str] = set()
        self.shipped: set[str] = set()

    @property
    def failed(self) -> dict[str, str]:
        return {k: v for k, v in self.items() if v.startswith("failed")}

    @property
    def ready(self) -> int:
        """Builds that are in the cache now (built or already there; 'not a variant' and failures not counted)."""
        return sum(1 for v in self.values() if v.startswith("built"))

    def summary(self) -> str:
        """'N builds ready, M compiled, K already cached' (and the shipped builds, the refusals and the
        failures, when any)."""
        refused = sum(1 for v in self.values() if v.startswith("not a variant"))
        text = f"{self.ready} builds ready, {len(self.compiled)} compiled, {len(self.cached)} already cached"
        if self.shipped:
            text += f", {len(self.shipped)} shipped with the package"
        if refused:
            text += f"; {refused} not a variant"
        if self.failed:
            text += f"; {len(self.failed)} failed"
        return text


def _cache_entries() -> set[str]:
    from gemm_ladder.runtime.compiler import cache_root

    root = cache_root()
    try:
        return {p.name for p in root.iterdir() if (p / "kernel.cubin").exists()}
    except OSError:  # no cache yet
        return set()


def _is_shipped(entry) -> bool:
    """Whether ``entry`` (a CompiledKernel) is one of the builds the package ships (runtime/aot.py's
    folder), which compile_kernel serves without compiling or touching the cache."""
    from gemm_ladder.runtime.aot import AOT_DIR

    directory = getattr(entry, "directory", None)
    return directory is not None and Path(directory).is_relative_to(AOT_DIR)


def run_builds(builds: list[Build], *, workers: int | None = None, device=None, load: bool | None = None) -> Outcomes:
    """Run ``builds`` on a pool of ``workers`` threads (default: the CPU count; each nvcc build is a
    process, so threads build in parallel), then load each on ``device`` when ``load`` (default: when
    torch sees a GPU). Labels must be distinct (later duplicates are dropped). Returns
    :class:`Outcomes`; raises CompilerNotFoundError without a compiler."""
    import torch

    from gemm_ladder.runtime.compiler import CompilerNotFoundError

    first: dict[str, Build] = {}
    for b in builds:  # the first build of each label, in order
        first.setdefault(b.label, b)
    builds = list(first.values())
    before = _cache_entries()
    outcomes = Outcomes()

    def one(build: Build) -> str:
        try:
            entry = build.run()
        except PlanRefused as exc:
            return f"not a variant: {exc}"
        except CompilerNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported per build; the caller decides
            return f"failed: {type(exc).__name__}: {exc}".splitlines()[0]
        key = getattr(entry, "key", None)
        if _is_shipped(entry):
            outcomes.shipped.add(build.label)
        else:
            (outcomes.cached if key is not None and key in before else outcomes.compiled).add(build.label)
        return "built"

    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool:
        outcomes.update(zip((b.label for b in builds), pool.map(one, builds)))
    if load is None:
        load = torch.cuda.is_available()
    if load:
        dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        for build in builds:
            if outcomes[build.label] == "built" and build.load is not None:
                try:
                    build.load(dev)
                    outcomes[build.label] = f"built, loaded on {dev}"
                except Exception as exc:  # noqa: BLE001 - reported per build
                    outcomes[build.label] = f"failed: load: {type(exc).__name__}: {exc}".splitlines()[0]
    return outcomes


# --- built-in epilogue variants ---------------------------------------------------------------------------

#: Which of linear's built-in epilogues :func:`epilogue_builds` compiles into each kernel of a class.
EPILOGUE_LEVELS: dict[str, str] = {
    "none": "no epilogue builds (the plain kernels only)",
    "common": "a bias in the input dtype or none, each activation or none, a row-major residual in the input dtype "
              "or none, alpha = 1: what nn.Linear layers and fused MLP/residual blocks pass (19 epilogues)",
    "all": "also a float32 bias, a float32 residual and alpha != 1: every combination linear's built-in epilogue "
           "takes (89 epilogues)",
}


@dataclass(frozen=True)
class EpilogueVariant:
    """One built-in epilogue of ``linear`` as a build sees it: the bias's dtype ("same" as x, "fp32", or
    None), the activation, the residual's dtype (row-major, as a model passes it) and whether alpha != 1.
    The generated source also depends on N's parity (a pair of a bias's or a residual's neighbours is one
    load only when N is even) and on the route's orientation (``swap``), which the builds take in turn."""

    bias: str | None = None
    activation: str | None = None
    residual: str | None = None
    alpha: bool = False

    @property
    def has_tensors(self) -> bool:
        return self.bias is not None or self.residual is not None

    @property
    def label(self) -> str:
        parts = ["alpha" if self.alpha else "", f"bias {self.bias}" if self.bias else "", self.activation or "",
                 f"residual {self.residual}" if self.residual else ""]
        return "+".join(p for p in parts if p)


def epilogue_variants(level: str = "common") -> list[EpilogueVariant]:
    """The built-in epilogues of an :data:`EPILOGUE_LEVELS` level (none without a fused operation);
    raises ValueError for another level."""
    import itertools

    from gemm_ladder.library.epilogue import ACTIVATIONS

    if level not in EPILOGUE_LEVELS:
        raise ValueError(f"epilogues={level!r}: use one of {', '.join(EPILOGUE_LEVELS)}")
    if level == "none":
        return []
    dtypes = (None, "same") if level == "common" else (None, "same", "fp32")
    alphas = (False,) if level == "common" else (False, True)
    out = [EpilogueVariant(b, a, r, al) for b, a, r, al in itertools.product(dtypes, (None, *ACTIVATIONS), dtypes, alphas)]
    return [v for v in out if v.has_tensors or v.activation or v.alpha]


def linear_epilogue_source(variant: EpilogueVariant, dtype: str, *, swap: bool, n_even: bool = True,
                           config=None) -> str:
    """The generated epilogue source of a ``linear`` call with ``variant`` on ``dtype`` inputs, as the
    op path makes it (library.epilogue.linear_epilogue bound to a contiguous bias and a row-major
    residual of a (64, N) output, N even or odd, then oriented by ``swap``): a build's key. ``config``: the
    kernel build it goes into, which may add the bias by its MMA (library.gemm.epilogue_for); None: as the
    call is bound."""
    import torch

    from gemm_ladder.contract import DTYPES
    from gemm_ladder.library.epilogue import linear_epilogue

    x_dtype = DTYPES[dtype]
    rows, cols = 64, 64 if n_even else 63
    meta = torch.device("meta")
    ep = linear_epilogue(bias=variant.bias is not None, activation=variant.activation,
                         residual=variant.residual is not None, alpha=variant.alpha)
    of = {"same": x_dtype, "fp32": torch.float32}
    tensors = []
    if variant.bias is not None:
        tensors.append(torch.empty(cols, dtype=of[variant.bias], device=meta))
    if variant.residual is not None:
        tensors.append(torch.empty(rows, cols, dtype=of[variant.residual], device=meta))
    scalars = ([2.0] if variant.alpha else []) + ([1.0] if variant.residual is not None else [])
    values = dict(zip(ep.tensor_inputs, tensors))
    values.update(zip(ep.scalar_inputs, scalars))
    call = ep.bind(values, rows, cols, meta, check_grad=False).oriented(swap)
    if config is not None:
        from gemm_ladder.library.gemm import epilogue_for

        call = epilogue_for(config, call, x_dtype)
    return call.source()


def epilogue_builds(dtypes: tuple[str, ...] = ("bf16", "fp16"), classes=tuple(CLASSES),
                    epilogues: str = "common") -> list[Build]:
    """The builds of linear's built-in epilogues (:func:`epilogue_variants` of level ``epilogues``) in
    the kernels of ``classes`` that a forward ``linear`` reaches: x and the weight are K-major (a
    row-major activation, nn.Linear's weight), so one operand order. Per class:

    * large: the general kernel's TMA-store build, each timed tile width, N even (its rows are whole
      16-byte chunks), the direct orientation (a row-major output); its one-CTA build at the widths where a
      cost table charges one CTA less than the pair (:func:`_one_cta_bns`: every timed width in the shipped tables,
      BN 64 everywhere and BN 128-256 in one wave); and
      its 64-row ping-pong build at dispatch/pingpong.py's widths, for the variants with GELU (the 64-row rule's
      activations), and its 128-row ping-pong build at the 128-row rule's tile, for every variant;
    * unaligned: its build for outputs a TMA store cannot write, N even and odd;
    * small_m: the small-M kernel, every bucket, N even and odd, both orientations (M <= 256 direct;
      N <= 256 < M swapped: the caller's output is the kernel's transpose);
    * fp32_out: the float32-output builds of the two above.

    Not built (compiled at first use): the quantized output's epilogue builds (quantized_out: its plain
    builds only); an MN-major activation (a transposed view passed as x), a
    residual that is not row-major or whose offsets need 64 bits (2^31 elements), a bias or residual
    not aligned to two elements; the general kernel's 64-row builds and its one-CTA builds at the other widths
    (the route takes them at mid-size shapes: their epilogue builds
    compile at first use, or through
    ``gemm_ladder.precompile(model, inputs)`` for a model's own shapes). Raises ValueError for an unknown class,
    dtype or level.
    """
    from gemm_ladder.contract import DTYPES
    from gemm_ladder.dispatch import pingpong
    from gemm_ladder.dispatch.kernels import general
    from gemm_ladder.dispatch.route import class_configs

    classes = check_classes(classes)
    variants = epilogue_variants(epilogues)
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtype {d!r}: the library computes {', '.join(DTYPES)}")
    if not variants:
        return []
    tables = _shipped_tables()
    bns, one_cta_bns = _timed_bns(tables), _one_cta_bns(tables)
    builds = []
    for dtype in dtypes:
        # (label, config, swaps, parities): K-major x and weight, as a forward linear passes them.
        kernels = []
        for bn in bns:
            for cls, label, swaps, parities in (("large", f"general A k B k BN {bn}", (False,), (True,)),
                                                ("unaligned", f"general unaligned out A k B k BN {bn}", (False,),
                                                 (True, False)),
                                                ("fp32_out", f"general unaligned out A k B k BN {bn} fp32 out",
                                                 (False,), (True, False))):
                if cls in classes:
                    config = next(c for c in class_configs(cls, dtype, (bn,), "k", "k") if c.family == "sm90_gemm")
                    kernels.append((label, config, swaps, parities))
        for cls, fp32 in (("small_m", ""), ("fp32_out", " fp32 out")):
            if cls in classes:
                kernels += [(f"small-M BN {c.tile[1]} A k B k{fp32}", c, (False, True), (True, False))
                            for c in class_configs(cls, dtype, (), "k", "k") if c.family == "sm90_gemm_small_m"]
        if "large" in classes:  # the one-CTA build where a cost table ranks it faster than the pair
            kernels += [(f"general A k B k BN {bn} 1 CTA", general("k", "k", bn, dtype, 1), (False,), (True,))
                        for bn in one_cta_bns]
        if "large" in classes:  # the ping-pong build a fused GELU at short K takes (dispatch/pingpong.py)
            kernels += [(f"general A k B k BM {pingpong.TILE_M} BN {bn} ping-pong 1 CTA",
                         general("k", "k", bn, dtype, pingpong.CLUSTER, pingpong.TILE_M, pingpong=True), (False,), (True,))
                        for bn in pingpong.WIDTHS]
            bm, bn = pingpong.WIDE_TILE  # the 128-row ping-pong build, any epilogue (dispatch/pingpong.py)
            kernels.append((f"general A k B k BM {bm} BN {bn} ping-pong 1 CTA", pingpong.wide_config(dtype), (False,),
                            (True,)))
        for label, config, swaps, parities in kernels:
            for v in variants:
                if config.pingpong and config.tile[0] == pingpong.TILE_M and v.activation not in pingpong.ACTIVATIONS:
                    continue
                for swap in swaps:
                    for n_even in (parities if v.has_tensors else (True,)):
                        source = linear_epilogue_source(v, dtype, swap=swap, n_even=n_even, config=config)
                        name = (f"{label} {dtype} epilogue {v.label}" + (" swapped" if swap else "")
                                + ("" if not v.has_tensors else " N even" if n_even else " N odd"))
                        builds.append(config_build(config.with_epilogue(source), name))
    return builds


def route_builds(route, dtype: str, epilogue_source: str | None = None, epilogue_name: str | None = None,
                 epilogue_call=None) -> list[Build]:
    """The builds a decided ``route`` (dispatch.decide) runs on ``dtype`` inputs with the generated
    epilogue ``epilogue_source`` (already oriented as the route runs it; None without one; ``epilogue_name``
    labels it), or the bound ``epilogue_call`` (oriented), whose source each build makes as its launch binds
    it (library.gemm.epilogue_for: a cooperative build may add linear's bias by its MMA): its kernel
    (the small-M kernel in its operand majors and output dtype), and the repack kernel for each
    operand or output it copies through a workspace; with the autotune on (a route decided on meta
    tensors names its candidates: dispatch/autotune.py), every candidate's build too, plain and with the
    epilogue, since a first call times them and may keep any."""
    import hashlib

    import torch

    from gemm_ladder.library.repack import REPACK

    from gemm_ladder.contract import DTYPES

    def source_for(config):
        if epilogue_call is None:
            return epilogue_source
        from gemm_ladder.library.gemm import epilogue_for

        return epilogue_for(config, epilogue_call, DTYPES[dtype]).source()

    epilogue_source = source_for(route.config)
    fp32 = route.c_path.dtype == torch.float32
    small = route.kind == "small_m"
    name = f"small-M BN {route.config.tile[1]}" if small else route.kernel.name
    epi = ""
    if epilogue_source is not None:
        digest = hashlib.sha256(epilogue_source.encode()).hexdigest()[:8]  # orientation, dtypes, loads: in the source
        epi = f" epilogue {epilogue_name or 'fused'} #{digest}"
    majors = f" A {route.a_path.major} B {route.b_path.major}" if small else ""
    label = f"{name}{majors}{' fp32 out' if fp32 and small else ''} {dtype}{epi}"
    out = [config_build(route.config.with_epilogue(epilogue_source), label)]
    if route.a_path.workspace is not None or route.b_path.workspace is not None:
        out.append(Build(f"repack {dtype}", lambda: REPACK.build(dtype), lambda device: REPACK.loaded(2, device)))
    if route.c_path.workspace is not None:
        if fp32:
            out.append(Build("repack fp32", lambda: REPACK.build("fp32"), lambda device: REPACK.loaded(4, device)))
        else:
            out.append(Build(f"repack {dtype}", lambda: REPACK.build(dtype), lambda device: REPACK.loaded(2, device)))
    tuning = getattr(route, "tuning", None)
    for alt in getattr(tuning, "routes", ()):  # autotune on: a first call times each, plain, and may keep any
        if alt.config != route.config:  # labelled as a main build of it would be: run_builds builds a label once
            out.append(config_build(alt.config, f"{alt.kernel.name} {dtype}"))
            if epilogue_source is not None:
                out.append(config_build(alt.config.with_epilogue(source_for(alt.config)), f"{alt.kernel.name} {dtype}{epi}"))
    return out


__all__ = ["Build", "CLASSES", "EPILOGUE_LEVELS", "EpilogueVariant", "Outcomes", "check_classes", "epilogue_builds",
           "epilogue_variants", "library_builds", "linear_epilogue_source", "normalize_dtypes", "precompile", "route_builds",
           "run_builds", "table_devices"]
