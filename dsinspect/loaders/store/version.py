"""One immutable dataset version: row lookup by global index, read by row group, not whole shards."""

from __future__ import annotations

import bisect
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.errors import IntegrityError, ManifestError, NotFoundError
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.format.arrow_indices import int64_array
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field, Manifest, sha256_hex
from dsinspect.loaders.format.shard_index import ShardIndex
from dsinspect.loaders.store.storage import is_local, read_many, read_whole
from dsinspect.lru import LRU

if TYPE_CHECKING:
    from dsinspect.loaders.store.catalog import Catalog

__all__ = ["DatasetVersion", "RowLocation"]

_OPEN_SHARDS = 8  # open Parquet footers kept per version (an LRU: random access jumps between shards)


class RowLocation(tuple):
    """(shard index, row group index, row within that group, row within the shard)."""

    shard = property(lambda self: self[0])
    row_group = property(lambda self: self[1])
    group_row = property(lambda self: self[2])
    shard_row = property(lambda self: self[3])


class DatasetVersion:
    def __init__(self, catalog: "Catalog", name: str, version_id: str, manifest: Manifest):
        self.catalog, self.name, self.id, self.manifest = catalog, name, version_id, manifest
        self._files: LRU[int, pq.ParquetFile] = LRU(_OPEN_SHARDS)
        self._starts: dict[int, list[int]] = {}
        self._indexes: dict[int, ShardIndex] = {}

    def __repr__(self) -> str:
        return f"DatasetVersion({self.address!r}, rows={self.num_rows})"

    @property
    def address(self) -> str:
        return f"{self.name}@{self.id[:12]}"

    @property
    def num_rows(self) -> int:
        return self.manifest.num_rows

    @property
    def fields(self) -> tuple[Field, ...]:
        return self.manifest.fields

    @cached_property
    def shard_starts(self) -> np.ndarray:
        """Global index of each shard's first row, plus the total at the end."""
        return np.concatenate([[0], np.cumsum(self.manifest.shard_rows, dtype=np.int64)])

    def shard_path(self, shard: int) -> str:
        return self.catalog.layout.shard(self.name, self.manifest.shards.sha256(shard))

    def shard_url(self, shard: int) -> str:
        return self.catalog.display(self.shard_path(shard))

    def shard_index(self, shard: int) -> ShardIndex | None:
        """The shard's index (its parts and their sha256s), checked against the manifest; None for a
        shard written without one. A missing file is a NotFoundError, a damaged one an IntegrityError."""
        entry = self.manifest.shards[shard]
        if entry.index_sha256 is None:
            return None
        index = self._indexes.get(shard)
        if index is None:
            copies = self.catalog.copies
            if copies is None:
                index = self._fetch_index(shard)[1]
            else:
                index = copies.get(entry.index_sha256, "index", lambda: self._fetch_index(shard),
                                   lambda raw: self._copied_index(shard, raw))
            self._indexes[shard] = index
        return index

    def load_indexes(self, shards: Sequence[int]) -> None:
        """Fetch the indexes of these shards not loaded yet, with the requests in flight together on
        object storage: a cold first batch under a global shuffle needs one for every shard it
        touches, and one after another they cost a round trip each. One that fails or does not
        check out is left to `shard_index`, which fetches it again and names what is wrong."""
        entries = self.manifest.shards
        todo = [s for s in dict.fromkeys(shards) if s not in self._indexes and entries.index_sha256(s) is not None]
        if not todo or (len(todo) < 2 and self.catalog.copies is None):
            return
        paths = [self.catalog.layout.shard_index(self.name, entries.sha256(s)) for s in todo]

        def fetch(positions: list[int]) -> list:
            got = read_many(self.catalog.fs, [paths[i] for i in positions])
            return [self._checked_fetch(todo[i], raw) for i, raw in zip(positions, got)]

        if self.catalog.copies is None:
            found = [None if isinstance(r, BaseException) else r[1] for r in fetch(list(range(len(todo))))]
        else:
            found = self.catalog.copies.get_many([entries.index_sha256(s) for s in todo], "index",
                                                 fetch, lambda i, raw: self._copied_index(todo[i], raw))
        for shard, index in zip(todo, found):
            if index is not None:
                self._indexes[shard] = index

    def _fetch_index(self, shard: int) -> tuple[bytes, ShardIndex]:
        path = self.catalog.layout.shard_index(self.name, self.manifest.shards.sha256(shard))
        try:
            raw = read_whole(self.catalog.fs, path)
        except FileNotFoundError:
            raise NotFoundError(f"the index of shard {shard} of {self.address} is missing: "
                                f"{self.catalog.display(path)}") from None
        return raw, self._parsed_index(shard, raw)

    def _checked_fetch(self, shard: int, raw: bytes | BaseException) -> tuple[bytes, ShardIndex] | BaseException:
        if isinstance(raw, BaseException):
            return raw
        try:
            return raw, self._parsed_index(shard, raw)
        except IntegrityError as e:
            return e

    def _copied_index(self, shard: int, raw: bytes) -> ShardIndex | None:
        """A node copy's index if it is the one the manifest names, else None (fetched again)."""
        try:
            return self._parsed_index(shard, raw)
        except IntegrityError:
            return None

    def _parsed_index(self, shard: int, raw: bytes) -> ShardIndex:
        entry = self.manifest.shards[shard]
        where = self.catalog.display(self.catalog.layout.shard_index(self.name, entry.sha256))
        if sha256_hex(raw) != entry.index_sha256:
            raise IntegrityError(f"{where}: content hashes to {sha256_hex(raw)}, "
                                 f"the manifest says {entry.index_sha256}")
        try:
            return ShardIndex.from_bytes(raw, where, entry.sha256, entry.bytes, entry.rows)
        except ManifestError as e:  # its sha256 matched: the manifest names a wrong index
            raise IntegrityError(str(e)) from None

    # -- lookup --------------------------------------------------------------------------------

    def check_index(self, index: int) -> int:
        """`index` as a non-negative index (negative counts from the end), or a clear error."""
        n = self.num_rows
        if not -n <= index < n:
            raise NotFoundError(f"{self.address}: index {index} is out of range (the version has {n} rows)")
        return index + n if index < 0 else index

    def shard_of(self, index: int) -> tuple[int, int]:
        """(shard index, row within that shard) of a global index."""
        index = self.check_index(index)
        shard = bisect.bisect_right(self.shard_starts, index) - 1
        return shard, index - int(self.shard_starts[shard])

    def locate(self, index: int) -> RowLocation:
        shard, row = self.shard_of(index)
        starts = self._group_starts(shard)
        group = bisect.bisect_right(starts, row) - 1
        return RowLocation((shard, group, row - starts[group], row))

    # -- reading -------------------------------------------------------------------------------

    def parquet(self, shard: int) -> pq.ParquetFile:
        """The shard's Parquet file, opened lazily: only its footer is read until a row group is asked for."""
        pf = self._files.get(shard)
        if pf is None:
            path = self.shard_path(shard)
            try:
                pf = pq.ParquetFile(self._open_file(path))
            except FileNotFoundError:
                raise NotFoundError(f"shard {shard} of {self.address} is missing: {self.shard_url(shard)}") from None
            except UNREADABLE as e:
                raise arrow_error(e, f"shard {shard} of {self.address} is not readable Parquet "
                                     f"({self.shard_url(shard)})", IntegrityError) from None
            self._files.put(shard, pf)
        return pf

    def _open_file(self, path: str) -> Any:
        """Arrow's own file for a local catalog; elsewhere an fsspec file without read-ahead cache
        (pyarrow asks for the footer and then exactly the byte ranges of the row groups it reads, so
        one row of a remote shard costs a few small ranged GETs)."""
        if is_local(self.catalog.fs):
            return pa.OSFile(path)
        return self.catalog.fs.open(path, "rb", cache_type="none")

    @property
    def _threads(self) -> bool:
        """Decode on Arrow's thread pool only from Arrow's own files: a pool worker may drop the last
        reference to a Python file object after the read returned, which takes the GIL, and a
        thread asking for it while the interpreter finalizes aborts the process (std::terminate,
        exit 134; see verify._read_hashing)."""
        return is_local(self.catalog.fs)

    def read_row_group(self, shard: int, group: int, columns: Sequence[str] | None = None) -> pa.Table:
        try:
            return self.parquet(shard).read_row_group(group, columns=list(columns) if columns else None,
                                                      use_threads=self._threads)
        except UNREADABLE as e:
            raise arrow_error(e, f"row group {group} of shard {shard} of {self.address} is not readable "
                                 f"({self.shard_url(shard)})", IntegrityError) from None

    def read_row_groups(self, shard: int, groups: Sequence[int], columns: Sequence[str] | None = None) -> pa.Table:
        """Row groups `groups` of a shard (in that order) in one read."""
        try:
            return self.parquet(shard).read_row_groups(list(groups), columns=list(columns) if columns else None,
                                                       use_threads=self._threads)
        except UNREADABLE as e:
            raise arrow_error(e, f"row groups of shard {shard} of {self.address} are not readable "
                                 f"({self.shard_url(shard)})", IntegrityError) from None

    def row_group_rows(self, shard: int) -> list[int]:
        """Rows of each row group of a shard, from its footer."""
        meta = self.parquet(shard).metadata
        return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]

    def read_shard(self, shard: int, columns: Sequence[str] | None = None) -> pa.Table:
        try:
            return self.parquet(shard).read(columns=list(columns) if columns else None, use_threads=self._threads)
        except UNREADABLE as e:
            raise arrow_error(e, f"shard {shard} of {self.address} is not readable ({self.shard_url(shard)})",
                              IntegrityError) from None

    def row_table(self, index: int, columns: Sequence[str] | None = None, *, verify: bool = True) -> pa.Table:
        """One row as a one-row table with its stored row hash; reads a single row group.

        With `verify` the row is re-hashed and compared with its stored hash. A read that fails or
        does not match is read once more from a freshly opened file (damage in transit goes away),
        then refused with IntegrityError; `verify=False` returns the bytes as stored, for viewers
        that show a damaged row and flag it."""
        try:
            table = self._checked_row(self.locate(index), index, verify)
        except IntegrityError:
            shard, _ = self.shard_of(index)
            self._files.pop(shard, None)  # the footer may be what was damaged: reopen
            self._starts.pop(shard, None)
            table = self._checked_row(self.locate(index), index, verify)
        return table.select(list(columns)) if columns else table

    def row(self, index: int) -> dict[str, Any]:
        """One row as Python values (the data fields only), verified against its stored hash."""
        return self.row_table(index, [f.name for f in self.fields]).to_pylist()[0]

    def row_hash(self, index: int) -> bytes:
        """The stored row hash (read alone: checking it would need every field of the row)."""
        loc = self.locate(index)
        return self.read_row_group(loc.shard, loc.row_group, [HASH_COLUMN]).column(0)[loc.group_row].as_py()

    def _checked_row(self, loc: RowLocation, index: int, verify: bool) -> pa.Table:
        columns = [f.name for f in self.fields] + [HASH_COLUMN] if verify else None
        table = self.read_row_group(loc.shard, loc.row_group, columns).slice(loc.group_row, 1)
        declared = columns or [f.name for f in self.fields]
        if not set(declared) <= set(table.column_names):  # a damaged footer can rename or drop a column
            raise IntegrityError(f"shard {loc.shard} of {self.address} does not hold the columns its manifest "
                                 f"declares ({self.shard_url(loc.shard)}): {table.column_names}")
        if verify:
            if table.column_names != columns:
                raise IntegrityError(f"shard {loc.shard} of {self.address} does not hold the columns its manifest "
                                     f"declares ({self.shard_url(loc.shard)}): {table.column_names}")
            stored = table.column(HASH_COLUMN)[0].as_py()
            actual = row_hashes(table, [f.name for f in self.fields])[0]
            if stored != actual:
                raise IntegrityError(f"row {index} of {self.address} does not match its stored row hash "
                                     f"({self.shard_url(loc.shard)}): stored {stored.hex() if stored else None}, "
                                     f"read {actual.hex()}")
        return table

    def locate_many(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectorised `locate`: (shard, row group, row within group) arrays for global indices."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) and (indices.min() < 0 or indices.max() >= self.num_rows):
            bad = int(indices[(indices < 0) | (indices >= self.num_rows)][0])
            self.check_index(bad)
        shards = np.searchsorted(self.shard_starts, indices, side="right") - 1
        rows = indices - self.shard_starts[shards]
        groups = np.empty(len(indices), np.int64)
        group_rows = np.empty(len(indices), np.int64)
        for shard in np.unique(shards):
            sel = shards == shard
            starts = np.asarray(self._group_starts(int(shard)), dtype=np.int64)
            g = np.searchsorted(starts, rows[sel], side="right") - 1
            groups[sel], group_rows[sel] = g, rows[sel] - starts[g]
        return shards, groups, group_rows

    def take(self, indices: Sequence[int], columns: Sequence[str] | None = None,
             read_group: Callable[[int, int], pa.Table] | None = None) -> pa.Table:
        """The rows at `indices` in that order, reading each needed row group once (through
        `read_group(shard, group)` when given, e.g. a cache)."""
        read_group = read_group or (lambda shard, group: self.read_row_group(shard, group, columns))
        shards, groups, group_rows = self.locate_many(np.asarray(indices, dtype=np.int64))
        if not len(shards):
            return self._empty(columns)
        keys = shards * (1 << 32) + groups
        unique, inverse = np.unique(keys, return_inverse=True)
        tables = [read_group(int(k >> 32), int(k & 0xFFFFFFFF)) for k in unique]
        offsets = np.concatenate([[0], np.cumsum([t.num_rows for t in tables])])
        combined = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        return combined.take(int64_array(offsets[inverse.ravel()] + group_rows))

    def iter_tables(self, columns: Sequence[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        """(global index of the first row, row group) for every row group, in order."""
        for shard in range(len(self.manifest.shards)):
            starts = self._group_starts(shard)
            for group in range(len(starts) - 1):
                yield int(self.shard_starts[shard]) + starts[group], self.read_row_group(shard, group, columns)

    def _group_starts(self, shard: int) -> list[int]:
        """Row offset of each row group in the shard, plus its row count; checked against the manifest."""
        if shard in self._starts:
            return self._starts[shard]
        meta = self.parquet(shard).metadata
        starts = [0]
        for g in range(meta.num_row_groups):
            starts.append(starts[-1] + meta.row_group(g).num_rows)
        if starts[-1] != self.manifest.shards[shard].rows:
            raise IntegrityError(f"shard {shard} of {self.address} has {starts[-1]} rows, its manifest says "
                                 f"{self.manifest.shards[shard].rows} ({self.shard_url(shard)})")
        self._starts[shard] = starts
        return starts

    def _empty(self, columns: Sequence[str] | None) -> pa.Table:
        schema = self.manifest.schema.append(pa.field(HASH_COLUMN, pa.binary(16), nullable=False))
        table = schema.empty_table()
        return table.select(list(columns)) if columns else table
