"""One small least-recently-used cache rule for the library kernels' per-instance caches (plans,
tensor maps, launch schedules), kept in ``dict`` or ``OrderedDict`` fields (both keep insertion order:
a hit is moved to the end by re-inserting it, and the first key is the least recently used)."""

from __future__ import annotations

#: Entries kept per cache (shapes, or pointers and shapes); the least recently used go first.
CACHE_SIZE = 64


def cached(cache: dict, key, make, size: int = CACHE_SIZE):
    """``cache[key]``, made by ``make()`` on a miss; past ``size`` entries the least recently used is dropped."""
    value = cache.pop(key, None)
    if value is None:
        value = make()
    cache[key] = value  # (re)inserted last: the most recently used
    while len(cache) > size:
        del cache[next(iter(cache))]
    return value


__all__ = ["CACHE_SIZE", "cached"]
