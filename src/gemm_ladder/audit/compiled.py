"""The auditor's compiled form of a protocol: names resolved to dense indices, ops to tuples."""

from __future__ import annotations

from gemm_ladder.audit.protocol import Op, Protocol, ProtocolError
from gemm_ladder.audit.reductions import block_ends, blocks_precondition, bursts_precondition


class CompiledProtocol:
    """A protocol with barriers, buffers and programs turned into dense indices and op tuples.

    ``progs[role]`` holds one tuple per op (``("wait", barrier, parity, phase)``, ``("arrive",
    barrier, count)``, ``("expect", barrier, bytes, count)``, ``("load", ((cta, buffers, barrier),
    ...), bytes, tag)``, ``("read" | "rbegin" | "rend", buffers, tag)``, ``("write" | "commit",
    staging buffer, (role, tile, panel))``, ``("swait", pending)``); ``private`` marks the staging
    ops the search may take at once; ``blocks_why_not`` / ``bursts_why_not`` say why a reduced
    search may not be used (None: it may) and ``block_end`` where each atomic block ends
    (:mod:`gemm_ladder.audit.reductions`). Raises :class:`ProtocolError` for a name the protocol lacks.
    """

    def __init__(self, p: Protocol):
        self.p = p
        self.roles = p.roles
        self.bar_index: dict[tuple[str, int, int], int] = {}
        self.bar_info: list[tuple[str, int, int, int]] = []  # name, cta, stage, arrival_count
        for b in p.barriers:
            for c in (b.ctas if b.ctas is not None else range(p.ctas)):
                for s in range(b.stages):
                    self.bar_index[(b.name, c, s)] = len(self.bar_info)
                    self.bar_info.append((b.name, c, s, b.arrival_count))
        self.buf_index: dict[tuple[str, int, int], int] = {}
        self.buf_info: list[tuple[str, int, int, str]] = []  # name, cta, stage, kind
        for b in p.buffers:
            for c in (b.ctas if b.ctas is not None else range(p.ctas)):
                for s in range(b.stages):
                    self.buf_index[(b.name, c, s)] = len(self.buf_info)
                    self.buf_info.append((b.name, c, s, b.kind))
        self.progs: list[list[tuple]] = []
        self.readers: dict[tuple[int, int], int] = {}  # (buffer, tag) -> mask of reading roles
        for ri, role in enumerate(p.roles):
            prog = []
            for pc, op in enumerate(role.program):
                prog.append(self._compile(ri, role.cta, pc, op))
            self.progs.append(prog)
        self.cta_roles = [[i for i, r in enumerate(p.roles) if r.cta == c] for c in range(p.ctas)]
        # Staging ops of a role that alone touches its staging buffers commute with every other
        # transition: the search takes them at once (a sound partial-order reduction).
        owners: dict[int, set] = {}
        for ri, prog in enumerate(self.progs):
            for op in prog:
                if op[0] in ("write", "commit"):
                    owners.setdefault(op[1], set()).add(ri)
        private_roles = {ri for ri, prog in enumerate(self.progs)
                         if all(owners[op[1]] == {ri} for op in prog if op[0] in ("write", "commit"))}
        self.private = [[ri in private_roles and op[0] in ("write", "commit", "swait") for op in prog]
                        for ri, prog in enumerate(self.progs)]
        self.blocks_why_not = blocks_precondition(self)
        self.tx_bars = {bari for prog in self.progs for op in prog if op[0] == "load" for _, _, bari in op[1]}
        self.bursts_why_not = self.blocks_why_not or bursts_precondition(self)
        self.block_end = block_ends(self)
        self.block_private = [[all(self.private[ri][i] for i in range(pc, self.block_end[ri][pc]))
                               for pc in range(len(prog))] for ri, prog in enumerate(self.progs)]

    def _bar(self, ri, op: Op, cta: int) -> int:
        key = (op.barrier, cta, op.stage)
        if key not in self.bar_index:
            raise ProtocolError(f"{self.roles[ri].name}: {op.describe()}: no barrier {op.barrier}[{op.stage}] "
                                f"in cta{cta}")
        return self.bar_index[key]

    def _buf(self, ri, op: Op, name: str, cta: int, stage: int, kind: str) -> int:
        key = (name, cta, stage)
        if key not in self.buf_index:
            raise ProtocolError(f"{self.roles[ri].name}: {op.describe()}: no buffer {name}[{stage}] in cta{cta}")
        bi = self.buf_index[key]
        if self.buf_info[bi][3] != kind:
            raise ProtocolError(f"{self.roles[ri].name}: {op.describe()}: {name} is a {self.buf_info[bi][3]} "
                                f"buffer, not {kind}")
        return bi

    def _compile(self, ri: int, own: int, pc: int, op: Op) -> tuple:
        cta = own if op.cta is None else op.cta
        if op.op == "wait":
            return ("wait", self._bar(ri, op, cta), op.parity, op.phase)
        if op.op == "arrive":
            return ("arrive", self._bar(ri, op, cta), op.count)
        if op.op == "expect_tx":
            return ("expect", self._bar(ri, op, cta), op.bytes, op.count if op.arrive else 0)
        if op.op == "issue_load":
            dests = []
            for d in (op.dests if op.dests else (cta,)):
                bufs = tuple(self._buf(ri, op, n, d, op.stage, "operand") for n in op.buffers)
                dests.append((d, bufs, self._bar(ri, op, d)))
            # destinations by CTA (they land as one event, in no order): a renamed load compares equal
            return ("load", tuple(sorted(dests)), op.bytes, -1 if op.tag is None else op.tag)
        if op.op in ("consume", "read_begin", "read_end"):
            bufs = tuple(self._buf(ri, op, n, cta, op.stage, "operand") for n in op.buffers)
            if op.op != "read_end":
                for b in bufs:
                    t = -1 if op.tag is None else op.tag
                    self.readers[(b, t)] = self.readers.get((b, t), 0) | (1 << ri)
            return ({"consume": "read", "read_begin": "rbegin", "read_end": "rend"}[op.op], bufs,
                    -1 if op.tag is None else op.tag)
        if op.op in ("write_staging", "store_commit"):
            b = self._buf(ri, op, op.buffers[0], cta, 0, "staging")
            # the staged data: whose fragment (the writing role), which tile, which panel
            return ("write" if op.op == "write_staging" else "commit", b, (ri, op.tag, op.panel))
        if op.op == "store_wait":
            return ("swait", op.pending)
        raise ProtocolError(f"cannot compile {op}")  # pragma: no cover

