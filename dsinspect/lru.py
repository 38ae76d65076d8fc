"""A small bounded mapping that forgets its least recently used entries: the one LRU the package's caches
share (row groups, open Parquet files, pinned shards, table pages, vocabularies). Standard library only.

Not locked: a cache used from several threads holds its own lock around it, as it did around the dict it
replaces. One exception is safe: a `get` without the lock beside locked writers (the batch reader's fast
path), which only misses or returns a value just forgotten."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Generic, Iterator, TypeVar

__all__ = ["LRU"]

K = TypeVar("K")
V = TypeVar("V")
_MISSING: Any = object()


class LRU(Generic[K, V]):
    """At most `size` entries; `get` and `put` make an entry the most recent, `peek` does not."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"an LRU holds at least one entry, not {size}")
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value of `key` (now the most recent entry), or `default`."""
        value = self._items.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            self._items.move_to_end(key)
        except KeyError:  # forgotten meanwhile (a caller without a lock): the value is still right
            pass
        return value  # type: ignore[return-value]

    def peek(self, key: K, default: V | None = None) -> V | None:
        """The value of `key` without changing which entry goes first, or `default`."""
        return self._items.get(key, default)

    def put(self, key: K, value: V) -> list[tuple[K, V]]:
        """Store `value` as the most recent entry; the least recent entries beyond `size` are forgotten
        and returned (for a cache whose entries hold something to release)."""
        self._items[key] = value
        self._items.move_to_end(key)
        forgotten = []
        while len(self._items) > self.size:
            forgotten.append(self._items.popitem(last=False))
        return forgotten

    def pop(self, key: K, default: V | None = None) -> V | None:
        """Forget `key`; its value, or `default`."""
        return self._items.pop(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        """Keys from the least to the most recent."""
        return iter(self._items)

    def values(self) -> list[V]:
        return list(self._items.values())

    def clear(self) -> None:
        self._items.clear()
