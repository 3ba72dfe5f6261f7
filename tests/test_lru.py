"""library.lru.cached: one LRU rule for dict and OrderedDict caches (the small-M kernel keeps a plain dict)."""

from collections import OrderedDict

import pytest

from gemm_ladder.library.lru import cached


@pytest.mark.parametrize("kind", [dict, OrderedDict])
def test_hits_are_kept_and_the_least_recently_used_goes_first(kind):
    cache, made = kind(), []

    def make(v):
        return lambda: made.append(v) or v

    assert cached(cache, "a", make(1), size=2) == 1
    assert cached(cache, "b", make(2), size=2) == 2
    assert cached(cache, "a", make(99), size=2) == 1  # a hit: not made again, now the most recent
    assert cached(cache, "c", make(3), size=2) == 3  # evicts b, the least recently used
    assert list(cache) == ["a", "c"] and made == [1, 2, 3]
