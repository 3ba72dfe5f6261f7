"""One small least-recently-used cache rule for the library kernels' per-instance caches (plans,
tensor maps, launch schedules), kept in ``dict`` or ``OrderedDict`` fields (both keep insertion order:
a hit is moved to the end by re-inserting it, and the first key is the least recently used)."""

from __future__ import annotations

import threading

#: Entries kept per cache (shapes, or pointers and shapes); the least recently used go first.
CACHE_SIZE = 64
#: Guards every cache's lookups and evictions: the caches are shared by threads (library_gemm's
#: instances and repack.py's packed launches are per process), and an eviction racing another thread's
#: insert raised "dictionary changed size during iteration". ``make`` runs outside it.
_LOCK = threading.Lock()


def cached(cache: dict, key, make, size: int = CACHE_SIZE):
    """``cache[key]``, made by ``make()`` on a miss; past ``size`` entries the least recently used is dropped.
    Safe from several threads (two that miss one key at once may both make it; the last kept)."""
    with _LOCK:
        value = cache.pop(key, None)
        if value is not None:
            cache[key] = value  # re-inserted last: the most recently used
            return value
    value = make()
    with _LOCK:
        cache[key] = value
        while len(cache) > size:
            del cache[next(iter(cache))]
    return value


__all__ = ["CACHE_SIZE", "cached"]
