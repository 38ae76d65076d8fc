"""Rows of shards the node-local cache does not hold yet, read part by part instead of after a full fill.

A batch that needs rows of an uncached shard (a fresh node under global shuffle: every shard) gets
them from the parts they lie in (format/shard_index.py): the shard's footer and the row groups of
those rows, fetched as ranged reads and each checked against its sha256 before Arrow parses a byte
of it, then decoded. Decoded row groups are kept (up to `max_bytes`) for the next batches while the
shard cache fills in the background, and every checked part is handed to the cache
(`ShardCache.store_part`) so the fill never fetches it again.
"""

from __future__ import annotations

import io
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.errors import IntegrityError
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.format.arrow_indices import int64_array
from dsinspect.loaders.format.shard_index import ShardIndex
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.columns import View, column_view
from dsinspect.loaders.read.fetch import fetch_parts
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.lru import LRU

__all__ = ["ColdRows", "RowsShard"]

# One cold read: (version, shard, its index, rows within the shard in batch order)
Want = tuple[DatasetVersion, int, ShardIndex, np.ndarray]


class RowsShard:
    """Checked rows held in memory, shaped like a CachedShard for the batch gather (rows 0..n-1)."""

    def __init__(self, batch: pa.RecordBatch):
        self.batch = batch
        self._views: dict[str, View] = {}

    def view(self, column: str) -> View:
        view = self._views.get(column)
        if view is None:
            view = self._views[column] = column_view(self.batch.column(column), 0)
        return view

    def check(self, rows: np.ndarray, columns: list[str]) -> None:
        """Nothing to do: every byte was checked against its part's sha256 before it was decoded."""


class ColdRows:
    """Reads rows of uncached shards from their parts; decoded row groups kept up to `max_bytes`."""

    def __init__(self, cache: ShardCache, max_bytes: int = 64 << 20, threads: int = 2):
        self.cache, self.max_bytes = cache, max_bytes
        self._footers: dict[str, pq.FileMetaData] = {}
        self._groups: LRU[tuple[str, int], pa.Table] = LRU(1 << 30)  # bounded by bytes in `_keep`
        self._held = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="dsinspect-cold")

    def take(self, wants: Sequence[Want], columns: list[str]) -> list[RowsShard]:
        """Per want, its rows (in the order given) as a RowsShard of `columns`. The footers and row
        groups not held yet are fetched, checked and decoded on a small thread pool."""
        with self._lock:  # a snapshot: a shard whose fill ends meanwhile is forgotten (`forget`)
            footers = {w[2].shard: self._footers.get(w[2].shard) for w in wants}
        missing = {w[2].shard: w for w in wants if footers[w[2].shard] is None}
        footers.update(zip(missing, self._pool.map(lambda w: self._footer(*w[:3]), missing.values())))
        tables: dict[tuple[str, int], pa.Table] = {}
        needed = {}
        with self._lock:
            for version, shard, index, rows in wants:
                for part in np.unique(index.parts_of(rows)).tolist():
                    table = self._groups.get((index.shard, part))
                    if table is not None:
                        tables[(index.shard, part)] = table
                    else:
                        needed[(index.shard, part)] = (version, shard, index, part, footers[index.shard])
        decoded = dict(zip(needed, self._pool.map(lambda n: self._decode(*n, columns), needed.values())))
        tables.update(decoded)
        out = []
        for _, _, index, rows in wants:
            parts = index.parts_of(rows)
            pieces, order = [], []
            for part in np.unique(parts).tolist():
                sel = np.flatnonzero(parts == part)
                table = tables[(index.shard, part)]
                pieces.append(table.take(int64_array(rows[sel] - int(index.row_starts[part]))))
                order.append(sel)
            table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
            if len(pieces) > 1:
                table = table.take(int64_array(np.argsort(np.concatenate(order), kind="stable")))
            out.append(RowsShard(table.combine_chunks().to_batches()[0] if table.num_rows else
                                 pa.RecordBatch.from_pylist([], schema=table.schema)))
        with self._lock:
            for key, table in decoded.items():
                self._keep(key, table)
        return out

    def forget(self, sha256: str) -> None:
        """Drop what is held of a shard (it is in the cache now)."""
        with self._lock:
            self._footers.pop(sha256, None)
            for key in [k for k in self._groups if k[0] == sha256]:
                self._held -= self._groups.pop(key).nbytes

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._groups.clear()
            self._footers.clear()
            self._held = 0

    # -- internals -----------------------------------------------------------------------------

    def _footer(self, version: DatasetVersion, shard: int, index: ShardIndex) -> pq.FileMetaData:
        data = self._fetch(version, shard, index, index.footer)
        try:
            meta = pq.read_metadata(pa.BufferReader(data))
        except UNREADABLE as e:
            raise arrow_error(e, f"shard {version.shard_url(shard)}: its footer matches its sha256 but is not "
                                 "readable Parquet", IntegrityError) from None
        if meta.num_row_groups != index.parts - 1:
            raise IntegrityError(f"shard {version.shard_url(shard)}: {meta.num_row_groups} row groups, "
                                 f"its index has {index.parts - 1}")
        with self._lock:
            self._footers[index.shard] = meta
        return meta

    def _decode(self, version: DatasetVersion, shard: int, index: ShardIndex, part: int,
                footer: pq.FileMetaData, columns: list[str]) -> pa.Table:
        data = self._fetch(version, shard, index, part)
        source = _Parts(index.size, {index.span(part)[0]: data})
        try:  # Arrow reads only the footer (given) and this row group's column chunks: all checked bytes
            table = pq.ParquetFile(source, metadata=footer).read_row_group(
                part, columns=columns, use_threads=False)
        except UNREADABLE as e:
            raise arrow_error(e, f"shard {version.shard_url(shard)}: row group {part} matches its sha256 but "
                                 "is not readable Parquet", IntegrityError) from None
        if table.num_rows != index.row_starts[part + 1] - index.row_starts[part]:
            raise IntegrityError(f"shard {version.shard_url(shard)}: row group {part} holds {table.num_rows} rows, "
                                 "not what its index says")
        return table

    def _fetch(self, version: DatasetVersion, shard: int, index: ShardIndex, part: int) -> bytes:
        cache = self.cache
        while True:
            data = cache.local_part(index, part)  # the fill (or an earlier batch) brought it: no second fetch
            if data is not None:
                return data
            claimed, busy = cache.claim(index.shard, [part])
            if claimed:
                break
            if busy:
                busy[0].wait()  # the fill is fetching it: wait, then read it locally
        try:
            start, end = index.span(part)
            [data] = fetch_parts(version.catalog.fs, version.shard_path(shard), version.shard_url(shard),
                                 [(start, end, index.sha256[part])], cache.stats, cache.retries, cache.backoff)
            cache.store_part(index, part, data)
        finally:
            cache._release(index.shard, [part])
        return data

    def _keep(self, key: tuple[str, int], table: pa.Table) -> None:
        if key in self._groups:
            return
        self._groups.put(key, table)
        self._held += table.nbytes
        while self._held > self.max_bytes and len(self._groups) > 1:
            self._held -= self._groups.pop(next(iter(self._groups))).nbytes


class _Parts(io.RawIOBase):
    """A read-only file of `size` bytes holding only the given pieces ({offset: bytes}); the rest reads
    as zeros (Arrow never reads there: it asks for the footer, given, and one row group's chunks)."""

    def __init__(self, size: int, pieces: dict[int, bytes]):
        self._size, self._pieces, self._pos = size, sorted(pieces.items()), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._pos = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence] + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer) -> int:
        n = max(0, min(len(buffer), self._size - self._pos))
        view = memoryview(buffer).cast("B")
        view[:n] = bytes(n)
        for start, data in self._pieces:
            lo, hi = max(start, self._pos), min(start + len(data), self._pos + n)
            if lo < hi:
                view[lo - self._pos:hi - self._pos] = data[lo - start:hi - start]
        self._pos += n
        return n
