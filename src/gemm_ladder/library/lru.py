"""One small least-recently-used cache rule for the library kernels' per-instance caches (plans,
tensor maps, launch schedules), kept in plain ``OrderedDict`` fields."""

from __future__ import annotations

from collections import OrderedDict

#: Entries kept per cache (shapes, or pointers and shapes); the least recently used go first.
CACHE_SIZE = 64


def cached(cache: OrderedDict, key, make, size: int = CACHE_SIZE):
    """``cache[key]``, made by ``make()`` on a miss; past ``size`` entries the least recently used is dropped."""
    value = cache.get(key)
    if value is None:
        value = cache[key] = make()
        while len(cache) > size:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return value


__all__ = ["CACHE_SIZE", "cached"]
