"""One stage-ring protocol builder for every ladder level: :class:`RingConfig` -> :class:`Protocol`.

:func:`build_ring_protocol` unrolls the programs of one cluster for a bounded number of K iterations
and tiles per CTA. Everything a kernel author can get wrong (arrival counts, initial phases, whether
the phase is carried across tiles, whether staging is drained before reuse, whether a consumer
arrives on the peer CTA's empty barrier) is a field of :class:`RingConfig`, so a fault is seeded by
changing one field and the audit shows what goes wrong. :func:`gemm_ladder.audit.levels.protocol_for_level`
and :func:`gemm_ladder.audit.plans.protocol_from_plan` both build a :class:`RingConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from gemm_ladder.audit.protocol import Barrier, Buffer, Op, Protocol, Role

#: The steps of each role, in the right order (RingConfig's ``*_order`` fields permute or drop them).
PRODUCER_STEPS = ("acquire", "commit")
CONSUMER_STEPS = ("wait", "read", "release")
STORE_STEPS = ("drain", "write", "store")

#: The most K iterations (tiles x k_iters) one protocol unrolls: a ring repeats every 2 x stages
#: iterations, so a longer run adds states, not cases.
MAX_ITERATIONS = 1024


@dataclass(frozen=True)
class RingConfig:
    """What :func:`build_ring_protocol` unrolls; validated once, on construction (ValueError naming the field).

    The ring and its bound:
        stages: ring depth S (>= 1).
        k_iters, tiles: loads per tile and tiles per CTA (phases carried across tiles); at most
            :data:`MAX_ITERATIONS` in all.
        tile_k_iters: tiles of different lengths, one entry per tile (each >= 1), in place of ``k_iters``:
            a stream-K CTA's segments (the fp8 kernel's split walks ranges of 1..K blocks back to back,
            e.g. 9 then 2). None: every tile is ``k_iters`` long.
        release_lag: 0, a consumer releases stage k right after reading it (level 4: its
            ``__syncthreads``, ``wgmma.wait_group 0``); 1, as levels 5-9 do: ``wgmma.wait_group 1``
            after issuing the wgmma of k + 1 proves the one of k done, so stage k is released then,
            and a tile's last stage after its ``wait_group 0`` (with one stage this deadlocks). The
            issuing thread of levels 5-6 refills each stage right after releasing it. 2 (warp-specialized
            only: the library kernel's measuring build, ``library_gemm(..., release_lag=2)``):
            ``wait_group 2`` after the wgmma of k + 2 proves k done, so stage k is released then, and a
            tile's last two stages after its ``wait_group 0`` (with two stages or fewer this deadlocks).

    Roles:
        consumers: consumer warpgroups per CTA (cooperative: all read every stage).
        pingpong: the consumers take the tiles in turn instead (tile t is consumer t % consumers's, a
            whole bm x bn tile in its own accumulators, CUTLASS's "ping-pong" schedule): each stage is
            read and released by one consumer, so the empty barriers count one consumer's releases, and a
            consumer stores its tile while the other runs its main loop. The producer fills the ring in
            tile order; each consumer walks the same ring counter, stepping over the other consumers'
            tiles (``skip_others``), and the consumers run their main loops in tile order (``ordered``).
        ordered: (ping-pong) consumer i waits on ``order[i]`` before each of its tiles' main loops and,
            after its last ``full`` wait of the tile (right after that iteration's MMA is issued, before it
            releases the stage before: sm90_gemm.cu's pass_turn), arrives on ``order[(i + 1) % consumers]`` (CUTLASS's
            ordered math-warpgroup barrier). Not only a matter of speed: without it a consumer can wait
            on a stage for phase n + 1 before phase n (another consumer's load) has completed, and
            ``try_wait.parity`` passes on the older phase of that parity (False: the fault).
        skip_others: (ping-pong) whether a consumer's ring counter advances over the K iterations of the
            tiles it does not run (True: right; False, the fault: it counts its own loads only, and waits
            on the wrong stage and parity).
        cluster: CTAs per cluster; with ``multicast`` (default: cluster > 1) B is split in ``cluster``
            equal parts (``bn`` must divide), each loaded by one CTA and multicast to all.
        shared_tiles: with multicast, whether each tile (one entry per tile) shares B: True as above;
            False, each CTA loads every part of B into its own stage alone, while the releases, the
            barriers and expect_tx stay the cluster's (the grouped kernel's cluster build, whose units
            decide one by one whether their two M tiles read one weight). None: every tile shares.
        warp_specialized: separate producer thread; otherwise one warpgroup whose thread 0 also issues
            (then ``consumers`` must be 1).
        consumer_threads: threads a consumer role stands for (128: a warpgroup).

    Barriers:
        full_count, empty_count: barrier init counts (empty default, :attr:`empty_arrivals`: consumers x
            cluster x release_weight with multicast, else consumers x release_weight).
        full_initial_phase, empty_initial_phase: parity of the first wait (0 and 1 in a right design).
        release_weight: arrivals per consumer release (1: one elected thread; consumer_threads: every
            thread arrives, the ``__syncthreads`` form of level 4).

    Epilogue:
        staging_buffers: R, the output staging ring of each consumer warpgroup (its own buffers
            ``D{i}.0 .. D{i}.R-1``, or ``D`` / ``D{i}`` when R = 1), each (bm / consumers) rows x
            (bn / panels_per_tile) columns.
        panels_per_tile: P, the column panels a consumer stores a tile as, one TMA store and one bulk
            group (``commit_group``) each; panel p of tile t is the consumer's running panel
            q = t * P + p and goes through staging buffer q % R.
        deferred_panels: D, the last panels of each tile that wait in registers and are stored in the
            next tile's first D K iterations, one each right after that iteration's wgmma is issued
            (before its release); those its K iterations do not reach go after its main loop, and
            the CTA's last tile stores them at once (level 9: D = P - R). 0: all at the tile's end.
        staging_wait_pending: the ``wait_group.read`` count before a staging buffer is written again
            (default R - 1, :attr:`staging_wait`: at most R - 1 newer groups may still read, so the
            group that last read buffer q % R, panel q - R, has finished). The wait is issued before
            every panel but the role's first (there no group is in flight and the kernel's wait is a
            no-op).

    Operand tile (the bytes each load moves): bm, bn, bk and elem_bytes; a plan's own numbers override
    them: ``a_load_bytes`` (what the A loads of one stage complete on the CTA's full barrier; default
    bm x bk x elem_bytes), ``b_load_bytes`` (what each CTA's B load completes on each destination's
    full barrier; default bn x bk x elem_bytes / the multicast slices), ``expect_tx_bytes`` (the
    producer's ``arrive.expect_tx`` per stage; default A + B of the tile). A plan whose expect_tx
    differs from what its loads deliver completes a phase early (or never): the search shows it.

    The order of each role's steps (a plan's ``ring.order``; the right order by default):
    ``producer_order`` of ``acquire`` (wait empty[s]) and ``commit`` (arrive.expect_tx and the loads),
    ``consumer_order`` of ``wait`` (full[s]), ``read`` (the wgmma) and ``release`` (the arrivals on
    empty), ``store_order`` of ``drain`` (wait_group.read before a staging buffer is written again),
    ``write`` (st.shared into staging) and ``store`` (TMA store + commit_group). A step left out is
    not done; a permutation runs the steps in that order (consume before the load's wait, a load
    issued before the stage's release, staging written before the store drained).

    Each consumer stores panel q (in order of q) as: ``wait_group.read pending`` (q > 0), write
    staging q % R, TMA store + ``commit_group`` (the store issuer is thread 0 of the warpgroup; the
    named barriers that order its wait, the 128 threads' ``st.shared`` and its store are inside one
    role, see the auditor's limits); panels 0..P-D-1 of a tile after its main loop, panels P-D..P-1
    as ``deferred_panels`` says; after the last tile ``wait_group.read 0``.

    Fault switches (True/right by default): ``carry_phase`` (False: stage and phase counters restart at
    each tile), ``full_wait`` / ``empty_wait`` (False: drop those waits), ``remote_release`` (False: a
    consumer arrives only on its own CTA's empty barrier), ``drain_staging_before_reuse`` (False: no
    wait_group before writing staging again), ``final_store_wait``, ``staging_wait_pending`` (R: one
    group too many left reading), ``shared_staging`` (True: the consumers of a CTA share one staging
    ring, ``D.0 .. D.R-1``, each with its own store issuer and bulk groups and no synchronisation
    between them).
    """

    stages: int
    k_iters: int
    tiles: int = 1
    release_lag: int = 0
    consumers: int = 1
    pingpong: bool = False
    skip_others: bool = True
    ordered: bool = True
    cluster: int = 1
    warp_specialized: bool = False
    multicast: bool | None = None
    consumer_threads: int = 128
    full_count: int = 1
    empty_count: int | None = None
    full_initial_phase: int = 0
    empty_initial_phase: int = 1
    release_weight: int = 1
    staging_buffers: int = 1
    panels_per_tile: int = 1
    deferred_panels: int = 0
    staging_wait_pending: int | None = None
    bm: int = 128
    bn: int = 128
    bk: int = 64
    elem_bytes: int = 2
    carry_phase: bool = True
    full_wait: bool = True
    empty_wait: bool = True
    remote_release: bool = True
    drain_staging_before_reuse: bool = True
    final_store_wait: bool = True
    shared_staging: bool = False
    shared_tiles: tuple[bool, ...] | None = None
    tile_k_iters: tuple[int, ...] | None = None
    a_load_bytes: int | None = None
    b_load_bytes: int | None = None
    expect_tx_bytes: int | None = None
    producer_order: tuple[str, ...] = PRODUCER_STEPS
    consumer_order: tuple[str, ...] = CONSUMER_STEPS
    store_order: tuple[str, ...] = STORE_STEPS

    def __post_init__(self):
        for name, allowed in (("producer_order", PRODUCER_STEPS), ("consumer_order", CONSUMER_STEPS),
                              ("store_order", STORE_STEPS)):
            order = getattr(self, name)
            if not isinstance(order, tuple) or len(set(order)) != len(order) or not set(order) <= set(allowed):
                raise ValueError(f"RingConfig.{name} must be distinct steps of {', '.join(allowed)}, got {order!r}")
        for f in fields(self):
            if f.name.endswith("_order") or f.name in ("shared_tiles", "tile_k_iters"):
                continue
            value, want = getattr(self, f.name), bool if str(f.type).startswith("bool") else int
            if value is None and str(f.type).endswith("None"):
                continue
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise ValueError(f"RingConfig.{f.name} must be {want.__name__}, got {value!r}")
        for name in ("stages", "k_iters", "tiles", "consumers", "cluster", "staging_buffers", "panels_per_tile",
                     "consumer_threads", "release_weight", "full_count", "bm", "bn", "bk", "elem_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"RingConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("a_load_bytes", "b_load_bytes", "expect_tx_bytes"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"RingConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.shared_tiles is not None and (
                not isinstance(self.shared_tiles, tuple) or len(self.shared_tiles) != self.tiles
                or not all(isinstance(x, bool) for x in self.shared_tiles) or not self.b_multicast):
            raise ValueError(f"RingConfig.shared_tiles must be a tuple of {self.tiles} bools (one per tile) on a "
                             f"multicast ring, got {self.shared_tiles!r}")
        if self.empty_count is not None and self.empty_count < 1:
            raise ValueError(f"RingConfig.empty_count must be >= 1 (an mbarrier counts at least one arrival), "
                             f"got {self.empty_count}")
        if self.tile_k_iters is not None and (
                not isinstance(self.tile_k_iters, tuple) or len(self.tile_k_iters) != self.tiles
                or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in self.tile_k_iters)):
            raise ValueError(f"RingConfig.tile_k_iters must be a tuple of {self.tiles} ints >= 1 (one per tile), "
                             f"got {self.tile_k_iters!r}")
        if sum(self.tile_lengths) > MAX_ITERATIONS:
            raise ValueError(f"RingConfig: {sum(self.tile_lengths)} K iterations (tiles x k_iters) > {MAX_ITERATIONS} "
                             "to unroll (a ring repeats every 2 x stages iterations)")
        if not 0 <= self.deferred_panels <= self.panels_per_tile:
            raise ValueError(f"RingConfig.deferred_panels must be 0..panels_per_tile ({self.panels_per_tile}), "
                             f"not {self.deferred_panels}")
        if self.release_lag not in (0, 1, 2):
            raise ValueError(f"RingConfig.release_lag is 0 (release after the read), 1 (after the next wgmma) or 2 "
                             f"(after the one past it), not {self.release_lag}")
        if self.release_lag == 2 and not self.warp_specialized:
            raise ValueError("RingConfig.release_lag 2 is modelled for a warp-specialized ring (the library "
                             "kernel's); the single-warpgroup levels refill right after a release at lag 0 or 1")
        if self.staging_wait_pending is not None and self.staging_wait_pending < 0:
            raise ValueError(f"RingConfig.staging_wait_pending must be >= 0, got {self.staging_wait_pending}")
        if not self.warp_specialized and self.consumers != 1:
            raise ValueError("without warp specialization the issuing thread sits in the one consumer warpgroup: "
                             "consumers must be 1")
        if self.pingpong and (not self.warp_specialized or self.consumers < 2):
            raise ValueError("a ping-pong schedule takes a producer and at least two consumer warpgroups "
                             "(warp_specialized, consumers >= 2)")
        if self.b_multicast and self.bn % self.cluster:
            raise ValueError(f"B's {self.bn} rows do not split into {self.cluster} equal multicast slices, one per "
                             "CTA of the cluster")
        if (not self.pingpong and self.bm % self.consumers) or self.bn % self.panels_per_tile:
            raise ValueError(f"a {self.bm} x {self.bn} tile does not split into {self.consumers} consumer(s) x "
                             f"{self.panels_per_tile} panel(s) of equal size")

    @property
    def tile_lengths(self) -> tuple[int, ...]:
        """Each tile's K iterations: ``tile_k_iters``, or ``k_iters`` for each of ``tiles``."""
        return self.tile_k_iters if self.tile_k_iters is not None else (self.k_iters,) * self.tiles

    @property
    def b_multicast(self) -> bool:
        """Whether B is split over the cluster and multicast (``multicast``, default: cluster > 1)."""
        return self.cluster > 1 if self.multicast is None else self.multicast

    @property
    def empty_arrivals(self) -> int:
        """The empty barriers' init count: ``empty_count``, or what the consumers' releases add up to."""
        if self.empty_count is not None:
            return self.empty_count
        readers = 1 if self.pingpong else self.consumers  # ping-pong: one consumer reads each stage
        return readers * self.release_weight * (self.cluster if self.b_multicast else 1)

    @property
    def staging_wait(self) -> int:
        """The ``wait_group.read`` count before a staging buffer is written again (default R - 1)."""
        return self.staging_buffers - 1 if self.staging_wait_pending is None else self.staging_wait_pending


def build_ring_protocol(config: RingConfig, *, name: str = "ring", bounds: dict | None = None) -> Protocol:
    """Unroll ``config``'s ring for ``config.tiles`` tiles of ``config.k_iters`` K iterations per CTA (or of
    ``config.tile_k_iters``).

    ``name`` names the protocol; ``bounds`` adds entries to the bounds it records (the audit can only
    speak for those).
    """
    cfg = config
    stages, k_iters, tiles, consumers, cluster = cfg.stages, cfg.k_iters, cfg.tiles, cfg.consumers, cfg.cluster
    warp_specialized, multicast, consumer_threads = cfg.warp_specialized, cfg.b_multicast, cfg.consumer_threads
    full_count, empty_count = cfg.full_count, cfg.empty_arrivals
    full_initial_phase, empty_initial_phase, release_weight = (cfg.full_initial_phase, cfg.empty_initial_phase,
                                                               cfg.release_weight)
    staging_buffers, panels_per_tile, deferred_panels = cfg.staging_buffers, cfg.panels_per_tile, cfg.deferred_panels
    staging_wait_pending, release_lag = cfg.staging_wait, cfg.release_lag
    bm, bn, bk, elem_bytes = cfg.bm, cfg.bn, cfg.bk, cfg.elem_bytes
    carry_phase, full_wait, empty_wait = cfg.carry_phase, cfg.full_wait, cfg.empty_wait
    drain_staging_before_reuse, final_store_wait = cfg.drain_staging_before_reuse, cfg.final_store_wait
    shared_staging = cfg.shared_staging
    release_ctas = cluster if (multicast and cfg.remote_release) else 1
    b_parts = cluster if multicast else 1
    a_bytes = cfg.a_load_bytes or bm * bk * elem_bytes
    b_load = cfg.b_load_bytes or bn * bk * elem_bytes // b_parts  # each CTA's B load, per destination
    expect = cfg.expect_tx_bytes or a_bytes + b_load * b_parts
    b_names = tuple(f"B{j}" for j in range(b_parts)) if multicast else ("B",)
    lengths = cfg.tile_lengths
    total = sum(lengths)
    # K iteration g's tile, its index in the tile, and whether it is the tile's last.
    tile_of = [t for t, n in enumerate(lengths) for _ in range(n)]
    kt_of = [kt for n in lengths for kt in range(n)]
    last_of = [kt == lengths[t] - 1 for t, kt in zip(tile_of, kt_of)]

    barriers = [Barrier("full", full_count, full_initial_phase, stages),
                Barrier("empty", empty_count, empty_initial_phase, stages)]
    ordered = cfg.pingpong and cfg.ordered
    if ordered:  # order[i]: consumer i's turn to run a main loop (consumer 0's first turn is free)
        barriers.append(Barrier("order", 1, 0, consumers))
    buffers = [Buffer("A", stages, a_bytes)] + [Buffer(n, stages, b_load) for n in b_names]
    # staging[i][b]: buffer b of consumer i's ring (the same names for every consumer when shared).
    rings = 1 if (shared_staging or consumers == 1) else consumers
    prefixes = ["D"] if rings == 1 else [f"D{i}" for i in range(rings)]
    ring_names = [[n] if staging_buffers == 1 else [f"{n}.{b}" for b in range(staging_buffers)] for n in prefixes]
    staging = [ring_names[i % rings] for i in range(consumers)]
    pingpong = cfg.pingpong
    panel_bytes = (bm if pingpong else bm // consumers) * (bn // panels_per_tile) * elem_bytes
    # Ping-pong: tile t is consumer t % consumers's; its previous own tile is t - consumers.
    step = consumers if pingpong else 1

    def owner(t: int) -> int:
        return t % consumers if pingpong else -1  # -1: every consumer
    buffers += [Buffer(n, 1, panel_bytes, kind="staging") for ring in ring_names for n in ring]

    # The ring schedule: the counter a kernel keeps (maybe reset per tile: the fault) gives stage and
    # parity; the true number of earlier uses of that stage gives the phase the wait must see.
    sched = []
    uses = [0] * stages
    for g in range(total):
        i = g if carry_phase else kt_of[g]
        s, r = i % stages, i // stages
        sched.append((s, r, uses[s]))
        uses[s] += 1
    # The fault of a ping-pong consumer that counts its own loads only: its stage and parity.
    own_sched = {}
    if pingpong and not cfg.skip_others:
        for i in range(consumers):
            own = [g for g in range(total) if owner(tile_of[g]) == i]
            for j, g in enumerate(own):
                own_sched[(i, g)] = (j % stages, j // stages, sched[g][2])

    def produce(c: int, g: int) -> list[Op]:
        s, r, true_r = sched[g]
        steps = {"acquire": [], "commit": []}
        if empty_wait:
            steps["acquire"].append(Op("wait", "empty", s, parity=(r + empty_initial_phase) % 2, phase=true_r - 1,
                                       note=f"producer_acquire k#{g}"))
        commit = steps["commit"]
        commit.append(Op("expect_tx", "full", s, bytes=expect))
        commit.append(Op("issue_load", "full", s, buffers=("A",), bytes=a_bytes, tag=g))
        if multicast and (cfg.shared_tiles is None or cfg.shared_tiles[tile_of[g]]):
            commit.append(Op("issue_load", "full", s, buffers=(b_names[c],), bytes=b_load, tag=g,
                             dests=tuple(range(cluster))))
        elif multicast:  # this tile does not share B: every part into this CTA's own stage
            commit += [Op("issue_load", "full", s, buffers=(name,), bytes=b_load, tag=g) for name in b_names]
        else:
            commit.append(Op("issue_load", "full", s, buffers=("B",), bytes=b_load, tag=g))
        return [op for step in cfg.producer_order for op in steps[step]]

    def release(c: int, g: int, i: int = 0) -> list[Op]:
        s = own_sched.get((i, g), sched[g])[0]
        return [Op("arrive", "empty", s, cta=None if (c + j) % cluster == c else (c + j) % cluster,
                   count=release_weight, note=f"consumer_release k#{g}") for j in range(release_ctas)]

    def consume(c: int, g: int, i: int = 0) -> list[Op]:
        """Consumer i waits for stage k#g and reads it; with release_lag 0 also releases it, with L >= 1
        releases k#g-L (not across a tile start: a tile's last L stages are released at its end)."""
        s, r, true_r = own_sched.get((i, g), sched[g])
        steps = {"wait": [], "read": [Op("consume", stage=s, buffers=("A",) + b_names, tag=g)], "release": []}
        if full_wait:
            steps["wait"].append(Op("wait", "full", s, parity=(r + full_initial_phase) % 2, phase=true_r,
                                    note=f"consumer_wait k#{g}"))
        if release_lag == 0:
            steps["release"] = release(c, g, i)
        elif kt_of[g] >= release_lag:
            steps["release"] = release(c, g - release_lag, i)
        return [op for step in cfg.consumer_order for op in steps[step]]

    early = panels_per_tile - deferred_panels  # panels stored at the end of their own tile

    def panel(i: int, t: int, p: int) -> list[Op]:
        """Consumer i stores panel p of tile t: wait_group.read, write staging q % R, store + commit."""
        q = (t // step) * panels_per_tile + p  # the consumer's running panel (ping-pong: over its own tiles)
        buf = staging[i][q % staging_buffers]
        tag_panel = None if panels_per_tile == 1 else p
        steps = {"drain": [], "write": [Op("write_staging", buffers=(buf,), tag=t, panel=tag_panel,
                                           note="" if tag_panel is None else
                                           "st.shared; fence.proxy.async; named barrier")],
                 "store": [Op("store_commit", buffers=(buf,), tag=t, panel=tag_panel)]}
        if q > 0 and drain_staging_before_reuse:
            whole = panels_per_tile == 1 and staging_buffers == 1
            why = ("drain the previous tile's store before reuse" if whole
                   else f"issuer, before reuse of {buf}; then named barrier")
            steps["drain"].append(Op("store_wait", pending=staging_wait_pending, note=why))
        return [op for step in cfg.store_order for op in steps[step]]

    def iteration(c: int, i: int, g: int) -> list[Op]:
        """K iteration g of consumer i: its wait, wgmma and release, with a deferred panel of the
        previous tile stored right after the wgmma is issued when the schedule puts one there."""
        ops = consume(c, g, i)
        t, kt = tile_of[g], kt_of[g]
        if t >= step and kt < deferred_panels:
            at = next(j for j, op in enumerate(ops) if op.op == "consume") + 1
            ops[at:at] = panel(i, t - step, early + kt)
        return ops

    def tile_end(i: int, t: int) -> list[Op]:
        """After tile t's main loop: the previous tile's deferred panels its K iterations did not
        take, this tile's early panels; after the last tile its deferred panels and the final drain."""
        ops = []
        if t >= step:
            for p in range(early + lengths[t], panels_per_tile):
                ops += panel(i, t - step, p)
        for p in range(early):
            ops += panel(i, t, p)
        if t + step >= tiles:  # the consumer's last tile
            for p in range(early, panels_per_tile):
                ops += panel(i, t, p)
            if final_store_wait:
                ops.append(Op("store_wait", pending=0, note="drain before exit"))
        return ops

    roles: list[Role] = []
    for c in range(cluster):
        if warp_specialized:
            prog = [op for g in range(total) for op in produce(c, g)]
            roles.append(Role(f"cta{c}.producer", "producer", c, 1, prog))
            for i in range(consumers):
                prog = []
                for g in range(total):
                    if owner(tile_of[g]) not in (-1, i):
                        continue  # ping-pong: another consumer's tile (the ring counter steps over it)
                    n = tile_of[g] // step  # the consumer's own tile ordinal
                    if ordered and kt_of[g] == 0:  # my turn: the previous tile's consumer has waited on all its loads
                        phase = n - 1 if i == 0 else n
                        prog.append(Op("wait", "order", i, parity=phase % 2, phase=phase,
                                       note=f"consumer{i} turn, tile {tile_of[g]}"))
                    ops = iteration(c, i, g)
                    if ordered and last_of[g]:  # as the kernel: right after the last wgmma's issue (pingpong.cuh),
                        # before that iteration's release of the stage before it
                        at = next(j for j, op in enumerate(ops) if op.op == "consume") + 1
                        ops[at:at] = [Op("arrive", "order", (i + 1) % consumers,
                                         note=f"consumer{(i + 1) % consumers}'s turn")]
                    prog += ops
                    if last_of[g]:
                        # after wgmma.wait_group 0: the tile's last release_lag stages (all of a shorter tile), oldest first
                        for h in range(g - min(release_lag, kt_of[g] + 1) + 1, g + 1):
                            prog += release(c, h, i)
                        prog += tile_end(i, tile_of[g])
                cname = f"cta{c}.consumer" if consumers == 1 else f"cta{c}.consumer{i}"
                roles.append(Role(cname, "consumer", c, consumer_threads, prog))
        else:
            prog = []
            for g in range(min(stages, total)):
                prog += produce(c, g)
            for g in range(total):
                prog += iteration(c, 0, g)
                freed = g - release_lag if (release_lag == 0 or kt_of[g] > 0) else None
                if freed is not None and freed + stages < total:
                    prog += produce(c, freed + stages)  # refill the stage just released
                if last_of[g]:
                    if release_lag:
                        prog += release(c, g)  # after wgmma.wait_group 0
                        if g + stages < total:
                            prog += produce(c, g + stages)
                    prog += tile_end(0, tile_of[g])
            roles.append(Role(f"cta{c}.wg", "issuer_consumer", c, consumer_threads, prog))

    b = {"stages": stages, "k_iters": k_iters, "tiles_per_cta": tiles, "consumers": consumers,
         "cluster": cluster, "warp_specialized": warp_specialized, "multicast": multicast}
    if pingpong:
        b["pingpong"] = True
    if cfg.shared_tiles is not None:
        b["shared_tiles"] = "".join("S" if x else "O" for x in cfg.shared_tiles)
    if cfg.tile_k_iters is not None:
        b["tile_k_iters"] = list(cfg.tile_k_iters)
    if staging_buffers > 1 or panels_per_tile > 1:
        b.update(staging_buffers=staging_buffers, panels_per_tile=panels_per_tile, deferred_panels=deferred_panels)
    if bounds:
        b.update(bounds)
    return Protocol(name=name, ctas=cluster, roles=roles, barriers=barriers, buffers=buffers, bounds=b)
