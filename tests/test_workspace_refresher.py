"""runtime/workspace.py's split_workspace_refresher, CPU part: the per-launch step every bound split launch shares
(the general and small-M kernels and the small-M gated build). Its holders are taken once, at the first call, and
each call points the launch's two arguments at the partials and at fresh counters from the given arena; no GPU
(the stream's partials holder and the arena are recorders)."""

from __future__ import annotations

import ctypes

from gemm_ladder.runtime import workspace as ws


class RecordingArena:
    def __init__(self):
        self.held_calls, self.next = [], 1000

    def held(self, stream, count):
        self.held_calls.append((stream, count))
        return ["arena"]

    def take_from(self, held, count):
        assert held == ["arena"]
        self.next += 4 * count
        return self.next


def test_holders_taken_once_and_fresh_counters_every_call(monkeypatch):
    partials_calls = []
    monkeypatch.setattr(ws.WORKSPACES, "partials", lambda stream, floats: partials_calls.append((stream, floats))
                        or [None, None, 0xABC0])
    arena = RecordingArena()
    args = [ctypes.c_void_p(0), ctypes.c_void_p(0)]
    refresh = ws.split_workspace_refresher("stream", 96, 6, args, arena)
    assert partials_calls == [] and arena.held_calls == []  # nothing taken before the first launch
    refresh()
    first = args[1].value
    refresh()
    assert partials_calls == [("stream", 96)] and arena.held_calls == [("stream", 6)]  # once
    assert args[0].value == 0xABC0 and args[1].value == first + 24  # the next 6 counters, not the same ones


def test_the_default_arena_is_the_process_one(monkeypatch):
    seen = []
    monkeypatch.setattr(ws.WORKSPACES, "partials", lambda stream, floats: [None, None, 16])
    monkeypatch.setattr(ws.COUNTERS, "held", lambda stream, count: seen.append(count) or ["arena"])
    monkeypatch.setattr(ws.COUNTERS, "take_from", lambda held, count: 32)
    args = [ctypes.c_void_p(0), ctypes.c_void_p(0)]
    ws.split_workspace_refresher("stream", 8, 2, args)()
    assert seen == [2] and (args[0].value, args[1].value) == (16, 32)
