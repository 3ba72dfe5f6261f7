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
    def from_json(cls, d: dict, where: str = "op") -> Op:
        """Raises :class:`ProtocolError` naming ``where`` and the key for anything malformed."""
        r = _JsonObject(d, where)
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ProtocolError(f"{where}: op {d.get('op')!r} has unknown keys {sorted(unknown)}")
        kw = {"op": r.text("op")}
        for key in ("barrier", "note"):
            if key in d:
                kw[key] = r.text(key, optional=key == "barrier")
        for key, low in (("stage", 0), ("count", 0), ("bytes", 0), ("pending", 0)):
            if key in d:
                kw[key] = r.integer(key, low)
        for key in ("cta", "parity", "phase", "tag", "panel"):
            if key in d:
                kw[key] = r.integer(key, None, optional=True)
        if "arrive" in d:
            kw["arrive"] = r.flag("arrive")
        if "buffers" in d:
            kw["buffers"] = tuple(r.texts("buffers"))
        if "dests" in d:
            dests = r.integers("dests", 0, optional=True)
            kw["dests"] = None if dests is None else tuple(dests)
        try:
            return cls(**kw)
        except ValueError as exc:
            raise ProtocolError(f"{where}: {exc}") from None

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
    def from_json(cls, d: dict, where: str = "role") -> Role:
        r = _JsonObject(d, where)
        name = r.text("name", required=True)
        return cls(name=name, kind=r.text("kind", default=name), cta=r.integer("cta", 0, default=0),
                   threads=r.integer("threads", 1, default=1),
                   program=[Op.from_json(o, f"{where}.program[{i}]") for i, o in enumerate(r.array("program"))])


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
    def from_json(cls, d: dict, where: str = "barrier") -> Barrier:
        r = _JsonObject(d, where)
        ctas = r.integers("ctas", 0, optional=True)
        return cls(name=r.text("name", required=True), arrival_count=r.integer("arrival_count", 0, required=True),
                   initial_phase=r.integer("initial_phase", 0, default=0),
                   stages=r.integer("stages", 1, default=1, most=MAX_STAGES),
                   ctas=None if ctas is None else tuple(ctas), kind=r.choice("kind", ("handoff", "sync")))


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
    def from_json(cls, d: dict, where: str = "buffer") -> Buffer:
        r = _JsonObject(d, where)
        ctas = r.integers("ctas", 0, optional=True)
        return cls(name=r.text("name", required=True), stages=r.integer("stages", 1, default=1, most=MAX_STAGES),
                   bytes=r.integer("bytes", 0, default=0), kind=r.choice("kind", ("operand", "staging")),
                   ctas=None if ctas is None else tuple(ctas))


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
        """The protocol a JSON object describes (:meth:`to_json`'s form; ``format`` optional).

        Raises :class:`ProtocolError` naming the first malformed key (a missing list, a wrong type,
        a count out of range), never a bare KeyError or TypeError.
        """
        r = _JsonObject(d, "protocol")
        missing = [k for k in ("roles", "barriers", "buffers") if k not in d]
        if missing:
            raise ProtocolError(f"protocol JSON lacks {', '.join(missing)}")
        return cls(name=r.text("name", default="protocol"), ctas=r.integer("ctas", 1, default=1, most=MAX_CTAS),
                   roles=[Role.from_json(x, f"roles[{i}]") for i, x in enumerate(r.array("roles"))],
                   barriers=[Barrier.from_json(x, f"barriers[{i}]") for i, x in enumerate(r.array("barriers"))],
                   buffers=[Buffer.from_json(x, f"buffers[{i}]") for i, x in enumerate(r.array("buffers"))],
                   bounds=r.object("bounds"), notes=r.texts("notes"))


#: Bounds on a hand-written protocol's sizes: a cluster holds at most 16 CTAs (the non-portable
#: maximum, CUDA C Programming Guide "Thread Block Clusters"); a stage ring deeper than 256 stages
#: cannot fit 227 KB of shared memory.
MAX_CTAS = 16
MAX_STAGES = 256

_REQUIRED = object()


class _JsonObject:
    """Typed reads of one JSON object of a protocol; each failure is a ProtocolError naming where."""

    def __init__(self, d: object, where: str):
        if not isinstance(d, dict):
            raise ProtocolError(f"{where} must be a JSON object, not {type(d).__name__}")
        self.d, self.where = d, where

    def _get(self, key: str, default, required: bool, optional: bool, want: str, ok):
        if key not in self.d:
            if required:
                raise ProtocolError(f"{self.where} lacks {key!r} ({want})")
            return default
        v = self.d[key]
        if v is None and optional:
            return None
        if not ok(v):
            raise ProtocolError(f"{self.where}.{key} = {v!r}: want {want}")
        return v

    def integer(self, key, low, *, default=None, required=False, optional=False, most=None):
        want = "an integer" + ("" if low is None else f" >= {low}") + ("" if most is None else f" and <= {most}")
        return self._get(key, default, required, optional, want,
                         lambda v: _is_int(v) and (low is None or v >= low) and (most is None or v <= most))

    def integers(self, key, low, *, optional=False):
        return self._get(key, None if optional else [], False, optional, f"a list of integers >= {low}",
                         lambda v: isinstance(v, list) and all(_is_int(x) and x >= low for x in v))

    def text(self, key, *, default=None, required=False, optional=False):
        return self._get(key, default, required or default is None and not optional, optional, "a string",
                         lambda v: isinstance(v, str))

    def texts(self, key):
        return self._get(key, [], False, False, "a list of strings",
                         lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))

    def flag(self, key):
        return self._get(key, True, False, False, "true or false", lambda v: isinstance(v, bool))

    def choice(self, key, options):
        return self._get(key, options[0], False, False, " or ".join(map(repr, options)), lambda v: v in options)

    def array(self, key):
        return self._get(key, [], False, False, "a list", lambda v: isinstance(v, list))

    def object(self, key):
        return dict(self._get(key, {}, False, False, "an object", lambda v: isinstance(v, dict)))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
