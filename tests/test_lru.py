"""dsinspect.lru.LRU: the one bounded cache mapping (row groups, open Parquet files, table pages, vocabularies)."""

import pytest

from dsinspect.lru import LRU


def test_the_least_recently_used_entry_goes_first():
    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # now the most recent
    assert cache.put("c", 3) == [("b", 2)]  # forgotten entries come back (a shard to unpin, ...)
    assert list(cache) == ["a", "c"] and "b" not in cache and len(cache) == 2


def test_peek_reads_without_keeping_an_entry_longer():
    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1
    cache.put("c", 3)
    assert "a" not in cache and cache.peek("a", "gone") == "gone" and cache.get("a") is None


def test_put_of_a_known_key_replaces_it_as_the_most_recent():
    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.put("a", 10) == []
    cache.put("c", 3)
    assert list(cache) == ["a", "c"] and cache.get("a") == 10


def test_pop_values_and_clear():
    cache = LRU(3)
    for k in "abc":
        cache.put(k, k.upper())
    assert cache.pop("b") == "B" and cache.pop("b") is None
    assert cache.values() == ["A", "C"]
    cache.clear()
    assert len(cache) == 0


def test_a_size_below_one_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        LRU(0)
