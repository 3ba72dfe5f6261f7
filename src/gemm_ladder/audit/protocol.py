"""The stage-ring protocol model: roles, mbarriers, shared buffers and each role's program.

A :class:`Protocol` is a complete, finite description of how the threads of one cluster hand shared
memory stages to each other over a bounded number of K iterations and tiles. It is what
:func:`gemm_ladder.audit.audit` explores. Protocols serialise to and from JSON
(:meth:`Protocol.to_json`, :meth:`Protocol.from_json`), so a kernel author can write one by hand.

Vocabulary (the CuTe verbs in brackets):

* A **role** is one program counter: a single thread (the TMA issuer) or a warpgroup that executes in
  step (``wgmma`` is ``.sync.aligned``: the 128 threads meet at every MMA, so their shared-memory reads
  happen together). ``kind`` is the role's type (``producer``, ``consumer``, ``issuer_consumer``);
  several roles of one kind are its instances (consumer warpgroup 0 and 1, the producer of each CTA).
* A **barrier** is an mbarrier, one per (CTA, stage). ``arrival_count`` is its init count.
  ``initial_phase`` is the parity its waiters use first, as the design documents it (0 for full
  barriers; 1 for empty barriers, whose first producer wait must pass on a fresh barrier). The hardware
  always starts a barrier in phase 0; builders derive every wait's parity from ``initial_phase``.
* A **buffer** is a region of shared memory, one per (CTA, stage): an operand stage (``A``, ``B``) or
  an output staging buffer (``kind="staging"``, one stage; a staging ring of R buffers is R of them,
  ``D0.0``, ``D0.1``, ...).
* An **op** is one step of a program, see :class:`Op`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields


#: The ``format`` of a protocol's JSON (:meth:`Protocol.to_json`).
PROTOCOL_FORMAT = "gemm-ladder-protocol/1"


class ProtocolError(ValueError):
    """The protocol is malformed (unknown barrier or buffer, stage out of range, bad JSON, ...)."""

#: Operation kinds and what they mean (``barrier``/``stage``/``cta`` name one barrier instance;
#: ``cta=None`` means the role's own CTA).
OP_KINDS = {
    "wait": "mbarrier.try_wait.parity loop on barrier[stage] with `parity` (blocks until it passes)",
    "arrive": "mbarrier.arrive on barrier[stage] of CTA `cta` (remote when not the role's own), `count` arrivals",
    "expect_tx": "mbarrier.arrive.expect_tx: tx-count += `bytes`, then arrive (`count`); arrive=False: expect only",
    "issue_load": "cp.async.bulk.tensor load of `buffers`[stage] into CTAs `dests` (multicast when several); "
                  "asynchronously writes the buffers and completes `bytes` on barrier[stage] of each destination",
    "consume": "wgmma reads of `buffers`[stage] (issue through retirement, treated as one atomic read)",
    "read_begin": "wgmma issued on `buffers`[stage]: reads start (stay in flight until read_end)",
    "read_end": "wgmma.wait_group retired the MMA of `tag` on `buffers`[stage]: reads done",
    "write_staging": "the epilogue's st.shared of tile `tag` (column panel `panel`) into staging buffer `buffers`[0]",
    "store_commit": "TMA store of tile `tag` (panel `panel`) from staging buffer `buffers`[0] + "
                    "cp.async.bulk.commit_group (one bulk group)",
    "store_wait": "cp.async.bulk.wait_group.read `pending` (blocks until at most `pending` groups of this role remain)",
}


@dataclass(frozen=True)
class Op:
    """One step of a role's program. Unused fields keep their defaults (and are left out of JSON).

    ``tag`` names the data: the global load index (tile * k_iters + k) a load writes or a read expects,
    or the tile index an epilogue step belongs to. It is the ground truth the checker compares against.
    ``panel`` (epilogue steps only, optional) is the column panel of that tile when the epilogue stores
    a tile as several panels, one bulk group each; None: the whole tile (or the role's part of it).
    ``phase`` (waits only, optional) is the absolute phase index whose completion the waiter means to
    see (-1: the virtual phase before init, which a parity-1 wait on a fresh barrier sees); with it the
    checker reports a wait that passes on an older phase or a waiter two phases behind (aliasing).
    """

    op: str
    barrier: str | None = None
    stage: int = 0
    cta: int | None = None
    parity: int | None = None
    phase: int | None = None
    count: int = 1
    bytes: int = 0
    arrive: bool = True
    buffers: tuple[str, ...] = ()
    dests: tuple[int, ...] | None = None
    tag: int | None = None
    panel: int | None = None
    pending: int = 0
    note: str = ""

    def __post_init__(self):
        if self.op not in OP_KINDS:
            raise ValueError(f"unknown op {self.op!r}; known: {', '.join(OP_KINDS)}")
        if self.op == "wait" and self.parity not in (0, 1):
            raise ValueError(f"wait on {self.barrier}[{self.stage}] needs parity 0 or 1, got {self.parity!r}")
        if self.op in ("wait", "arrive", "expect_tx", "issue_load") and not self.barrier:
            raise ValueError(f"{self.op} needs a barrier")
        if self.op in ("issue_load", "consume", "read_begin", "read_end", "write_staging", "store_commit") \
                and not self.buffers:
            raise ValueError(f"{self.op} needs buffers")

    def to_json(self) -> dict:
        out: dict = {"op": self.op}
        for f in fields(self):
            if f.name == "op":
                continue
            v = getattr(self, f.name)
            if v != f.default:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_json(cls, d: dict) -> Op:
        d = dict(d)
        for key in ("buffers", "dests"):
            if d.get(key) is not None:
                d[key] = tuple(d[key])
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"op {d.get('op')!r} has unknown keys {sorted(unknown)}")
        return cls(**d)

    def describe(self, own_cta: int = 0) -> str:
        """A short human-readable form, e.g. ``wait full[1] parity 0``."""
        where = "" if self.cta is None or self.cta == own_cta else f"@cta{self.cta}"
        bar = f"{self.barrier}[{self.stage}]{where}"
        bufs = ",".join(self.buffers)
        tag = "" if self.tag is None else f" #{self.tag}"
        if self.op == "wait":
            return f"wait {bar} parity {self.parity}"
        if self.op == "arrive":
            n = "" if self.count == 1 else f" x{self.count}"
            return f"arrive {bar}{n}"
        if self.op == "expect_tx":
            return f"{'arrive.' if self.arrive else ''}expect_tx {bar} {self.bytes} B"
        if self.op == "issue_load":
            dest = "" if not self.dests or self.dests == (own_cta,) else \
                " multicast to " + ",".join(f"cta{c}" for c in self.dests)
            return f"issue TMA load{tag} -> {bufs}[{self.stage}]{dest} (completes on {self.barrier}[{self.stage}])"
        if self.op in ("consume", "read_begin", "read_end"):
            verb = {"consume": "wgmma reads", "read_begin": "wgmma issued on", "read_end": "wgmma retired on"}
            return f"{verb[self.op]} {bufs}[{self.stage}] expecting load{tag}"
        if self.op in ("write_staging", "store_commit"):
            what = f"tile{self.tag}" + ("" if self.panel is None else f" panel{self.panel}")
            if self.op == "write_staging":
                return f"epilogue writes {bufs} ({what})"
            return f"TMA store from {bufs} ({what}) + commit_group"
        if self.op == "store_wait":
            return f"wait_group.read {self.pending}"
        return self.op


@dataclass
class Role:
    """One program counter: a thread or a warpgroup in step. ``threads`` is how many threads it stands for."""

    name: str
    kind: str
    cta: int = 0
    threads: int = 1
    program: list[Op] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "cta": self.cta, "threads": self.threads,
                "program": [op.to_json() for op in self.program]}

    @classmethod
    def from_json(cls, d: dict) -> Role:
        return cls(name=d["name"], kind=d.get("kind", d["name"]), cta=int(d.get("cta", 0)),
                   threads=int(d.get("threads", 1)), program=[Op.from_json(o) for o in d.get("program", [])])


@dataclass(frozen=True)
class Barrier:
    """An mbarrier array: one instance per stage in each CTA of ``ctas`` (None: every CTA).

    ``kind="sync"`` marks a block-wide barrier (a ``__syncthreads`` equivalent) that every role both
    arrives on and waits on; it is exempt from the one-producer/one-consumer rule.
    """

    name: str
    arrival_count: int
    initial_phase: int = 0
    stages: int = 1
    ctas: tuple[int, ...] | None = None
    kind: str = "handoff"

    def to_json(self) -> dict:
        out = {"name": self.name, "arrival_count": self.arrival_count, "initial_phase": self.initial_phase,
               "stages": self.stages, "kind": self.kind}
        if self.ctas is not None:
            out["ctas"] = list(self.ctas)
        return out

    @classmethod
    def from_json(cls, d: dict) -> Barrier:
        ctas = d.get("ctas")
        return cls(name=d["name"], arrival_count=int(d["arrival_count"]),
                   initial_phase=int(d.get("initial_phase", 0)), stages=int(d.get("stages", 1)),
                   ctas=None if ctas is None else tuple(ctas), kind=d.get("kind", "handoff"))


@dataclass(frozen=True)
class Buffer:
    """A shared-memory region per stage in each CTA of ``ctas`` (None: every CTA)."""

    name: str
    stages: int = 1
    bytes: int = 0
    kind: str = "operand"  # or "staging"
    ctas: tuple[int, ...] | None = None

    def to_json(self) -> dict:
        out = {"name": self.name, "stages": self.stages, "bytes": self.bytes, "kind": self.kind}
        if self.ctas is not None:
            out["ctas"] = list(self.ctas)
        return out

    @classmethod
    def from_json(cls, d: dict) -> Buffer:
        ctas = d.get("ctas")
        return cls(name=d["name"], stages=int(d.get("stages", 1)), bytes=int(d.get("bytes", 0)),
                   kind=d.get("kind", "operand"), ctas=None if ctas is None else tuple(ctas))


@dataclass
class Protocol:
    """A cluster's stage-ring protocol over bounded K iterations and tiles.

    ``bounds`` records the parameters the programs were unrolled for (stages, k_iters, tiles, ...);
    the audit can only speak for those.
    """

    name: str
    ctas: int
    roles: list[Role]
    barriers: list[Barrier]
    buffers: list[Buffer]
    bounds: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def role_counts(self) -> dict[str, int]:
        """Instances per role kind, e.g. {'producer': 2, 'consumer': 4}."""
        out: dict[str, int] = {}
        for r in self.roles:
            out[r.kind] = out.get(r.kind, 0) + 1
        return out

    def barrier(self, name: str) -> Barrier:
        for b in self.barriers:
            if b.name == name:
                return b
        raise KeyError(name)

    def to_json(self) -> dict:
        return {"format": PROTOCOL_FORMAT, "name": self.name, "ctas": self.ctas,
                "bounds": dict(self.bounds), "notes": list(self.notes),
                "roles": [r.to_json() for r in self.roles],
                "barriers": [b.to_json() for b in self.barriers],
                "buffers": [b.to_json() for b in self.buffers]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def from_json(cls, d: dict) -> Protocol:
        missing = [k for k in ("roles", "barriers", "buffers") if k not in d]
        if missing:
            raise ValueError(f"protocol JSON lacks {', '.join(missing)}")
        return cls(name=d.get("name", "protocol"), ctas=int(d.get("ctas", 1)),
                   roles=[Role.from_json(r) for r in d["roles"]],
                   barriers=[Barrier.from_json(b) for b in d["barriers"]],
                   buffers=[Buffer.from_json(b) for b in d["buffers"]],
                   bounds=dict(d.get("bounds", {})), notes=list(d.get("notes", [])))
