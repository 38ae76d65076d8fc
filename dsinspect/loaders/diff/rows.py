"""Row matching between two versions over the rows of the shards they do not share.

Shards are content-addressed, so a shard both versions list holds the same rows in both: only the
other shards are read, and only their key and row-hash columns. With unique keys (a declared key
is a promise; `derive_version` keeps it) a key read on one side cannot sit in a shared shard on the
other, so matching those rows alone is exact. Without a key, rows match by row hash as multisets;
shared shards add the same rows to both sides, so the multiset difference is exact too.

A row is *moved* when its content is unchanged but its place among the surviving rows changed:
global indices shifting after an insert or a removal are not moves. Moves are found as the rows
outside a longest increasing subsequence (weighted by rows) of matched runs and shared shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.loaders.format.arrow_indices import int64_array
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["Side", "Matches", "read_side", "match_by_key", "match_by_hash", "moved_items"]


@dataclass
class Side:
    """The rows read from one version: key values (or None), 128-bit hashes as (n, 2) uint64
    words, and global indices, in storage order."""

    keys: pa.Array | None
    hashes: np.ndarray
    indices: np.ndarray

    def __len__(self) -> int:
        return len(self.indices)


@dataclass
class Matches:
    """Positions into the two Sides: rows only in a, only in b, and matched pairs (in a order)."""

    removed: np.ndarray
    added: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    changed: np.ndarray  # per pair: the row hashes differ


def read_side(version: DatasetVersion, shards: Sequence[int], key: str | None, hash_fields: list[str] | None,
              on_rows: Callable[[int], None] | None = None) -> Side:
    """Key and row hash of every row of `shards`. `hash_fields` set: hash over those fields only
    (recomputed from the data, when the two schemas differ), else the stored hash column."""
    keys, hashes, indices = [], [], []
    for shard in shards:
        columns = ([key] if key else []) + (hash_fields if hash_fields is not None else [HASH_COLUMN])
        table = version.read_shard(shard, list(dict.fromkeys(columns)))
        if hash_fields is not None:
            data = table.select(hash_fields).cast(pa.schema([version.manifest.schema.field(f) for f in hash_fields]))
            words = _words_of(row_hashes(data, hash_fields))
        else:
            words = hash_words(table.column(HASH_COLUMN))
        if key:
            keys.append(table.column(key))
        hashes.append(words)
        start = int(version.shard_starts[shard])
        indices.append(np.arange(start, start + table.num_rows, dtype=np.int64))
        if on_rows:
            on_rows(table.num_rows)
    key_array = None
    if key:
        chunks = [c for k in keys for c in k.chunks]
        key_type = version.manifest.schema.field(key).type
        key_array = pa.chunked_array(chunks, key_type).combine_chunks() if chunks else pa.array([], key_type)
    return Side(key_array, np.concatenate(hashes) if hashes else np.empty((0, 2), np.uint64),
                np.concatenate(indices) if indices else np.empty(0, np.int64))


def hash_words(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """16-byte hashes (fixed_size_binary(16)) as an (n, 2) uint64 array, without copying per row."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(arr) == 0:
        return np.empty((0, 2), np.uint64)
    words = np.frombuffer(arr.buffers()[1], dtype=np.uint64)
    return words[2 * arr.offset:2 * (arr.offset + len(arr))].reshape(-1, 2)


def match_by_key(a: Side, b: Side) -> Matches | None:
    """Match rows with equal keys; changed = equal key, other row hash. None when a key repeats
    among the rows so that no one-to-one match exists. Rows read in the same key order on both
    sides (a derived version rewrites shards in place) match without a hash lookup."""
    if len(a) == len(b) and a.keys.equals(b.keys):
        pairs = np.arange(len(a))
        changed = (a.hashes != b.hashes).any(axis=1)
        return Matches(np.empty(0, np.int64), np.empty(0, np.int64), pairs, pairs, changed)
    in_b = _positions(pc.index_in(a.keys, value_set=b.keys))
    counts = np.bincount(in_b[in_b >= 0], minlength=len(b))
    if len(counts) and counts.max() > 1:
        return None  # rows of a share a key (index_in sends both to b's first row with it)
    hit_b = counts > 0
    if not _unique_where(b.keys, hit_b):
        return None
    pairs = np.flatnonzero(in_b >= 0)
    pair_b = in_b[pairs]
    changed = (a.hashes[pairs] != b.hashes[pair_b]).any(axis=1)
    return Matches(np.flatnonzero(in_b < 0), np.flatnonzero(~hit_b), pairs, pair_b, changed)


def _unique_where(keys: pa.Array, matched: np.ndarray) -> bool:
    """No key of b repeats: a repeat of a matched key sits among the unmatched rows, so only those
    (the added rows: few) are counted and looked up."""
    rest = np.flatnonzero(~matched)
    if not len(rest):
        return True
    unmatched = keys.take(int64_array(rest))
    if pc.count_distinct(unmatched, mode="all").as_py() != len(unmatched):
        return False
    found = pc.is_in(unmatched, value_set=keys.take(int64_array(np.flatnonzero(matched))))
    return not pc.any(found).as_py()


def match_by_hash(a: Side, b: Side) -> Matches:
    """Match rows with equal content as multisets: the n-th copy of a hash on one side pairs with
    the n-th copy on the other."""
    ka, kb = _occurrence_keys(a.hashes), _occurrence_keys(b.hashes)
    in_b = _positions(pc.index_in(ka, value_set=kb))
    in_a = _positions(pc.index_in(kb, value_set=ka))
    pair_a = np.flatnonzero(in_b >= 0)
    return Matches(np.flatnonzero(in_b < 0), np.flatnonzero(in_a < 0), pair_a, in_b[pair_a],
                   np.zeros(len(pair_a), dtype=bool))


def moved_items(a_start: np.ndarray, b_start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Which items (a shared shard or a matched row: its start in a, in b, and its row count) moved:
    those outside the heaviest order-preserving subset. Costs O(n) when nothing moved."""
    n = len(a_start)
    moved = np.zeros(n, dtype=bool)
    if n < 2:
        return moved
    order = np.argsort(a_start, kind="stable")
    a, b, w = a_start[order], b_start[order], length[order]
    if (np.diff(b) > 0).all():
        return moved
    # items that continue the previous one on both sides form a run; runs move as a whole
    cont = np.concatenate([[False], (a[1:] == a[:-1] + w[:-1]) & (b[1:] == b[:-1] + w[:-1])])
    run = np.cumsum(~cont) - 1
    run_b = b[~cont]
    run_w = np.bincount(run, weights=w).astype(np.int64)
    keep = _heaviest_increasing(run_b, run_w)
    moved[order] = ~keep[run]
    return moved


def _heaviest_increasing(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Mask of a maximum-weight strictly increasing subsequence (Fenwick tree of prefix maxima)."""
    n = len(values)
    rank = np.empty(n, np.int64)
    rank[np.argsort(values, kind="stable")] = np.arange(1, n + 1)
    tree_w, tree_i = [0] * (n + 1), [-1] * (n + 1)
    best, prev = [0] * n, [-1] * n
    for i in range(n):
        r, w, j = int(rank[i]) - 1, 0, -1
        while r > 0:  # best chain ending below this value
            if tree_w[r] > w:
                w, j = tree_w[r], tree_i[r]
            r -= r & -r
        best[i], prev[i] = w + int(weights[i]), j
        r = int(rank[i])
        while r <= n:
            if best[i] > tree_w[r]:
                tree_w[r], tree_i[r] = best[i], i
            r += r & -r
    keep = np.zeros(n, dtype=bool)
    i = int(np.argmax(best))
    while i >= 0:
        keep[i] = True
        i = prev[i]
    return keep


def _positions(found: pa.Array) -> np.ndarray:
    return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _occurrence_keys(hashes: np.ndarray) -> pa.Array:
    """Each hash with its occurrence number among equal hashes, as 24-byte keys."""
    n = len(hashes)
    occurrence = np.zeros(n, np.uint64)
    if n:
        order = np.lexsort((hashes[:, 1], hashes[:, 0]))
        ordered = hashes[order]
        start = np.concatenate([[True], (ordered[1:] != ordered[:-1]).any(axis=1)])
        first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
        occurrence[order] = (np.arange(n) - first).astype(np.uint64)
    packed = np.ascontiguousarray(np.column_stack([hashes, occurrence]).astype(np.uint64))
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(24), n, [None, pa.py_buffer(packed)])


def _words_of(digests: list[bytes]) -> np.ndarray:
    if not digests:
        return np.empty((0, 2), np.uint64)
    return np.frombuffer(b"".join(digests), dtype=np.uint64).reshape(-1, 2)
