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


def test_threads_sharing_one_cache_never_break_it():
    """The caches are per process (library_gemm's instances, repack.py's packed launches) and so shared
    by threads: evictions racing other threads' inserts raised "dictionary changed size during
    iteration" before cached() took a lock. Switching threads every microsecond made it fail within a
    few thousand calls."""
    import sys
    import threading

    cache, errors = {}, []

    def work(t):
        try:
            for i in range(20000):
                assert cached(cache, (t, i % 97), lambda t=t, i=i: (t, i % 97), size=8) == (t, i % 97)
        except Exception as exc:  # noqa: BLE001 - any exception in a thread is the failure
            errors.append(repr(exc))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == [] and len(cache) == 8
