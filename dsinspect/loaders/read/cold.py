"""Rows of shards the node-local cache does not hold yet, read part by part instead of after a full fill.

A batch that needs rows of an uncached shard (a fresh node under global shuffle: every shard) gets
them from the parts they lie in (format/shard_index.py): the shard's footer and the row groups of
those rows, fetched as ranged reads and each checked against its sha256 before it is used. A checked
part is written at its offset into the shard's `.partial` file in the cache (where the background
fill finds it and does not fetch it again) and decoded from there, through a memory map of that
same file, so Arrow reads the row group at its real offsets without a copy. Decoded row groups are
kept (up to `max_bytes`) for the next batches until the shard is in the cache; a read holds only the
rows it returns of the others. Parsed footers are kept for a few shards only (`_FOOTERS`): Arrow's
parsed metadata takes ~12x the footer's bytes (~1.1 MB for a shard of 400 row groups), and under a
global shuffle every shard not filled yet is read cold, so a footer per shard grew with the data;
one dropped is parsed again (~1 ms) from the checked bytes in the `.partial` file. The batch reader
gathers from the rows with the same numpy views as from cached shards.

A shard of a *local* store (a catalog on this machine's disk) is read in place (`_InPlace`): the
store's own Parquet file memory-mapped, each part (footer, row group) checked against its sha256 in
the manifest-verified shard index the first time this process uses it (`ShardCache.check_in_place`),
and decoded from that map: no copy into a `.partial` file, no `.have`, no claims (its bytes cross no
network; the file is content-addressed and immutable: what was checked is what is decoded, as for
a cached block checked once per process). The cache's fill of such a shard converts the same file
where it is (cache.py). Reading in place serves the first batches; it does not replace the fill:
under a global shuffle each row group is decoded for one row of a batch, so an epoch read in place
decodes every row group about as many times as it has rows (measured, 2026-12-06, 100,000 rows of
1,024 tokens in 64-row groups: 0.4 k samples/s in place against 13-22 k/s while filling under load
6-13; 20,000 64x64 JPEGs: 4.3 k/s against 58 k/s). A fill decodes each row group once, and then
batches are gathers from a memory map (benchmarks/README.md, "fixed costs on a local catalog").

A shard the reader *streams* (one larger than the cache bound, or every shard of a version whose
working set the bound cannot hold: `reader.py`) never gets a file in the cache: its parts are held
in memory from their fetch until they are decoded, each through a file object that holds only that
part at its offset (Arrow reads a row group where the footer says it is). Only its footer's bytes
are kept, for the last `_STREAMS` shards.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.arrays import distinct
from dsinspect.errors import IntegrityError
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.format.arrow_indices import int64_array
from dsinspect.loaders.format.shard_index import ShardIndex
from dsinspect.loaders.read.cache import ShardCache, holds_part, write_at
from dsinspect.loaders.read.columns import View, column_view, gather, to_arrow
from dsinspect.loaders.read.fetch import brought_along, fetch_parts, fetch_parts_together
from dsinspect.loaders.store.storage import is_local
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.lru import LRU

__all__ = ["ColdRows", "RowsShard"]

# One cold read: (version, shard, its index, rows within the shard in batch order)
Want = tuple[DatasetVersion, int, ShardIndex, np.ndarray]
# What it gives: per row group, (its rows, rows within it, positions within the want's rows)
Pieces = list[tuple["RowsShard", np.ndarray, np.ndarray]]

_STREAMS = 64  # streamed shards whose footer bytes are kept (a few KB to ~100 KB each)
_FOOTERS = 4  # parsed footers kept (see the module docstring): what the two pool threads decode and the next
# A pool thread hands what decoding freed back to the OS after about this many bytes decoded: Arrow's
# allocator (mimalloc) keeps a thread's freed pages for that thread, and only the thread itself can
# return them (measured: ~40 MB still resident after a cold read of the 1M-row tokens set had ended)
_RELEASE_BYTES = 4 << 20


class RowsShard:
    """A decoded row group, shaped like a CachedShard for the batch gather."""

    def __init__(self, batch: pa.RecordBatch):
        self.batch, self.nbytes = batch, batch.nbytes
        self._views: dict[str, View] = {}

    def view(self, column: str) -> View:
        view = self._views.get(column)
        if view is None:
            view = self._views[column] = column_view(self.batch.column(column), 0)
        return view

    def check(self, rows: np.ndarray, columns: list[str]) -> None:
        """Nothing to do: its bytes were checked against their part's sha256 before decoding."""

    def taken(self, rows: np.ndarray) -> "RowsShard":
        """These rows (in this order) copied into a RowsShard of their own, with the same schema:
        Arrow's take copies only their bytes (a row or two of a row group, under a global shuffle), in
        ~0.03 ms where numpy gathers through the column views cost ~0.3 ms of Python a group. Rows
        each taken once hold no more than the group, which fits Arrow's 32-bit offsets; a row taken
        twice or more may not, and take would build the whole array before refusing it (2 GB for 256
        copies of a 10 MB row): the gathers check the size first and name the column."""
        if len(distinct(rows)) < len(rows):
            return self._gathered(rows)
        return RowsShard(self.batch.take(int64_array(rows)))  # not pa.array: its sniffing imports pandas

    def _gathered(self, rows: np.ndarray) -> "RowsShard":
        schema = self.batch.schema
        arrays = []
        for field in schema:
            got = gather([(self.view(field.name), rows, None)], len(rows), field.name)
            arrays.append(to_arrow(got, field.type, field.name))
        return RowsShard(pa.RecordBatch.from_arrays(arrays, schema=schema))


class _Mapped:
    """A shard's whole file mapped in `buffer`, its parts at their offsets: Arrow reads a row group
    where the footer says it is."""

    buffer: pa.Buffer

    def footer_bytes(self, index: ShardIndex) -> pa.Buffer:
        start, end = index.span(index.footer)
        return self.buffer.slice(start, end - start)

    def parquet(self, index: ShardIndex, part: int, footer: pq.FileMetaData) -> pq.ParquetFile:
        return pq.ParquetFile(pa.BufferReader(self.buffer), metadata=footer)


class _Partial(_Mapped):
    """This process's handle on one shard's `.partial` file: written through `fd`, read through a
    memory map of the same file (so a fill that publishes and removes the path meanwhile changes
    nothing here)."""

    def __init__(self, cache: ShardCache, index: ShardIndex):
        self.sha256 = index.shard
        self.fd, _ = cache.open_partial(index)
        try:
            self.buffer = pa.py_buffer(mmap.mmap(self.fd, index.size, prot=mmap.PROT_READ))
        except BaseException:
            os.close(self.fd)
            raise
        self.has_footer = False  # the footer part is in our file, checked (parsed footers: ColdRows._footers)
        self.have: set[int] = set()  # parts this process checked and wrote into this very file
        self.footer_lock = threading.Lock()  # one thread parses the footer, the others wait for it
        self.users, self.forgotten = 0, False  # under ColdRows._lock: closed when forgotten and unused

    in_cache = True  # its parts are shared with the node through the cache (see ShardCache.claim)
    streamed = False

    def put(self, index: ShardIndex, part: int, data) -> None:
        """A checked part into the file, at its offset (`write_at`: the caller guards the disk)."""
        write_at(self.fd, data, index.span(part)[0])
        self.have.add(part)

    def close(self) -> None:
        os.close(self.fd)  # the map stays valid while decoded tables may still point into it


class _InPlace(_Mapped):
    """A local store's shard read where it is: its file memory-mapped, each part checked against
    its sha256 the first time this process uses it (`ShardCache.check_in_place`), nothing written
    to the cache (the module docstring)."""

    in_cache = False
    streamed = False

    def __init__(self, cache: ShardCache, version: DatasetVersion, shard: int, index: ShardIndex):
        self.sha256, self.cache, self.index = index.shard, cache, index
        self.path, self.url = version.shard_path(shard), version.shard_url(shard)
        self.buffer = pa.memory_map(self.path).read_buffer()
        self.has_footer = False
        self.footer_lock = threading.Lock()
        self.users, self.forgotten = 0, False

    def check(self, part: int) -> None:
        self.cache.check_in_place(self.path, self.url, self.index, [part], self.buffer)

    def close(self) -> None:
        """Nothing: the map goes with the last decoded group pointing into it."""


class _Streamed:
    """A streamed shard's parts in memory: each held from its fetch until it is decoded (see the
    module docstring); the footer's bytes are kept."""

    in_cache = False
    streamed = True

    def __init__(self, index: ShardIndex):
        self.sha256, self.size, self.footer = index.shard, index.size, index.footer
        self.has_footer = False
        self.have: dict[int, bytes | memoryview] = {}  # fetched, checked, not decoded yet (the footer: kept)
        self.footer_lock = threading.Lock()
        self.users, self.forgotten = 0, False

    def put(self, index: ShardIndex, part: int, data) -> None:
        self.have[part] = data

    def footer_bytes(self, index: ShardIndex) -> pa.Buffer:
        return pa.py_buffer(self.have[self.footer])

    def parquet(self, index: ShardIndex, part: int, footer: pq.FileMetaData) -> pq.ParquetFile | None:
        """The shard as Arrow reads it, holding only `part`; the part is handed over (decoded
        again, it is fetched again). None: another read took it meanwhile."""
        data = self.have.pop(part, None)
        if data is None:
            return None
        return pq.ParquetFile(pa.PythonFile(_PartAt(data, index.span(part)[0], self.size), mode="r"), metadata=footer)


class _PartAt(io.RawIOBase):
    """A read-only file of `size` bytes of which only `data`, at `start`, is ever read."""

    def __init__(self, data, start: int, size: int):
        self.data, self.start, self.size, self.at = memoryview(data), start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.at = offset + (0 if whence == io.SEEK_SET else self.at if whence == io.SEEK_CUR else self.size)
        return self.at

    def tell(self) -> int:
        return self.at

    def readinto(self, out) -> int:
        if not self.start <= self.at <= self.start + len(self.data):
            raise OSError(f"read at {self.at}, outside the part held ({self.start}..{self.start + len(self.data)})")
        got = self.data[self.at - self.start:self.at - self.start + len(out)]
        out[:len(got)] = got
        self.at += len(got)
        return len(got)


class ColdRows:
    """Reads rows of uncached shards from their parts; decoded row groups kept up to `max_bytes`."""

    def __init__(self, cache: ShardCache, max_bytes: int = 2 << 20, threads: int = 2,
                 streamed: set[str] | None = None):
        # max_bytes: decoded groups kept for later batches. Under a global shuffle ~0.4-3 % of them
        # are read again before their shard fills (16 MiB held ~13 MB more after the first batch);
        # a few groups still serve consecutive batches of one group (shuffle "none")
        self.cache, self.max_bytes = cache, max_bytes
        self.streamed = streamed if streamed is not None else set()  # the shards to stream (the reader's set)
        self._partials: dict[str, _Partial] = {}
        self._streams: LRU[str, _Streamed] = LRU(_STREAMS)
        self._groups: LRU[tuple[str, int], RowsShard] = LRU(1 << 30)  # bounded by bytes in `_keep`
        self._held = 0
        self._footers: LRU[str, pq.FileMetaData] = LRU(_FOOTERS)
        self._decoded = threading.local()  # per pool thread: bytes decoded since it last released memory
        self._files = threading.local()  # per pool thread: its last reader of a shard read in place (`_parquet`)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="dsinspect-cold")

    def take(self, wants: Sequence[Want], columns: list[str]) -> list[Pieces | None]:
        """Per want, where its rows are: decoded row groups, rows in each, positions in the want;
        None for a shard the cache holds by now (read it there). Footers and row groups not held
        yet are fetched, checked and decoded on a small pool."""
        partials = self._use({w[2].shard: w for w in wants})
        try:
            out = self._take([w for w in wants if w[2].shard in partials], columns, partials)
            return [out.pop(0) if w[2].shard in partials else None for w in wants]
        finally:
            self._unuse(partials.values())

    def _take(self, wants: Sequence[Want], columns: list[str], partials: dict[str, _Partial]) -> list[Pieces | None]:
        """Per want its pieces; None for a shard filled since `_use` whose parts our file lacks."""
        plan = []  # per want, per row group: (its key, where its rows start among the group's taken rows, positions)
        taken: dict[tuple[str, int], list[np.ndarray]] = {}  # per row group, the rows the wants read of it
        sources = {}
        for version, shard, index, rows in wants:
            parts = index.parts_of(rows)
            pieces = []
            for part in distinct(parts).tolist():
                sel = np.flatnonzero(parts == part)
                key = (index.shard, part)
                got = taken.setdefault(key, [])
                pieces.append((key, sum(map(len, got)), sel))
                got.append(rows[sel] - int(index.row_starts[part]))
                sources.setdefault(key, (version, shard, index, part, partials[index.shard]))
            plan.append(pieces)
        filled = self._prefetch(sources)
        taken = {key: rows for key, rows in taken.items() if key[0] not in filled}
        rows_of = dict(zip(taken, self._pool.map(
            lambda key: self._rows(key, sources[key], np.concatenate(taken[key]), columns), taken)))
        return [None if want[2].shard in filled else
                [(rows_of[key], np.arange(at, at + len(sel)), sel) for key, at, sel in pieces]
                for want, pieces in zip(wants, plan)]

    def _rows(self, key: tuple[str, int], source: tuple, rows: np.ndarray, columns: list[str]) -> "RowsShard":
        """`rows` of a row group, copied out of it: the decoded group is kept (up to `max_bytes`)
        or dropped here, so a read holds only the rows it returns (a cold read of a run of 16
        shuffled batches decodes ~500 row groups of ~256 KiB for a row or two of each)."""
        with self._lock:
            group = self._groups.get(key)
        if group is not None:
            return group.taken(rows)
        group = self._decode(*source, columns)
        with self._lock:
            if self._current(source[4]):  # not forgotten meanwhile (its shard filled): kept
                self._keep(key, group)
        out, nbytes = group.taken(rows), group.nbytes
        del group  # freed here unless kept
        self._decoded.bytes = getattr(self._decoded, "bytes", 0) + nbytes
        if self._decoded.bytes >= _RELEASE_BYTES:
            self._decoded.bytes = 0
            pa.default_memory_pool().release_unused()
        return out

    def footer(self, version: DatasetVersion, shard: int, index: ShardIndex) -> pq.FileMetaData | None:
        """The shard's parsed footer, its part fetched and checked as for a read (and kept for the
        reads that follow); None when the cache holds the shard by now."""
        partials = self._use({index.shard: (version, shard, index)})
        try:
            partial = partials.get(index.shard)
            return None if partial is None else self._footer(version, shard, index, partial)
        finally:
            self._unuse(partials.values())

    def prime(self, shards: Sequence[tuple[DatasetVersion, int, ShardIndex]]) -> None:
        """Start checking and parsing these shards' footers on the pool, for the local ones (read in
        place) and at most `_FOOTERS`: a fresh reader's first batch needs a shard's footer before any
        of its row groups (~3 ms for one of 141 groups, in a fresh process), and the reader still has
        planning to do before it reads. Remote shards are left to the read, which fetches their
        footer together with its row groups (one request)."""
        for version, shard, index in [s for s in shards if is_local(s[0].catalog.fs)][:_FOOTERS]:
            self._pool.submit(self._prime, version, shard, index)

    def _prime(self, version: DatasetVersion, shard: int, index: ShardIndex) -> None:
        with contextlib.suppress(Exception):  # what went wrong is said by the read, which parses it again
            self.footer(version, shard, index)

    def forget(self, sha256: str) -> None:
        """Drop what is held of a shard (it is in the cache now)."""
        with self._lock:
            partial = self._partials.pop(sha256, None)
            for key in [k for k in self._groups if k[0] == sha256]:
                self._held -= self._groups.pop(key).nbytes
            self._footers.pop(sha256)
            if partial is not None:
                partial.forgotten = True
                if partial.users:
                    partial = None  # a read under way closes it when done (`_unuse`)
        if partial is not None:
            partial.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)  # idle unless a read is under way: no thread left
        with self._lock:
            self._groups.clear()
            self._footers.clear()
            self._streams.clear()
            self._held = 0
            partials, self._partials = list(self._partials.values()), {}
            for partial in partials:
                partial.forgotten = True
            idle = [p for p in partials if not p.users]
        for partial in idle:
            partial.close()

    # -- internals -----------------------------------------------------------------------------

    def _prefetch(self, sources: dict[tuple[str, int], tuple]) -> set[str]:
        """On remote storage, fetch the footers and row groups these reads need and nobody holds yet
        in one round of requests in flight together, before the pool decodes them (it would fetch
        them one after another on two threads: a round trip each). What is in a `.partial` file
        already, being fetched, or fails here is left to `_fetch`, as without this. Returns the
        shards filled since `_use` whose asked parts our file lacks: the caller reads them from the
        cache (fetched here, they would cross the network a second time)."""
        wanted: dict[tuple[str, int], tuple] = {}
        for version, shard, index, part, partial in sources.values():
            if is_local(version.catalog.fs):
                continue  # a local read costs no round trip: the decoding threads read in parallel
            with self._lock:
                if (index.shard, part) in self._groups:
                    continue  # decoded and kept: nothing to fetch (a streamed part is gone once decoded)
                parsed = partial.sha256 in self._footers
            for p in ([] if partial.has_footer or parsed else [index.footer]) + [part]:
                wanted.setdefault((index.shard, p), (version, shard, index, partial))
        asked = set(wanted)
        for sha, item in {sha: item for (sha, _), item in wanted.items() if item[3].in_cache}.items():
            if self.cache.holds(sha):
                continue  # filled meanwhile: only the parts asked for (their fill may have just removed them)
            index = item[2]  # the parts a coalesced read brings along too (a small shard: all), claimed alike
            spans = [index.span(p) for p in range(index.parts)]
            for p in brought_along(spans, [q for (s, q) in wanted if s == sha]):
                wanted.setdefault((sha, p), item)
        todo = self._claimed(wanted)
        filled = self._filled_meanwhile(todo, asked)
        todo = [i for i in todo if i[2].shard not in filled]
        by_fs: dict[int, list] = {}
        for item in todo:
            by_fs.setdefault(id(item[0].catalog.fs), []).append(item)
        for items in by_fs.values():
            self._fetch_together(items)
        return {sha for sha, lacking in filled.items() if lacking}

    def _claimed(self, wanted: dict[tuple[str, int], tuple]) -> list[tuple]:
        """Of the wanted parts not in our file, those to fetch here (claimed for the node, or of a
        streamed shard); those in the shard's `.partial` file are taken from there, those another
        thread or process is fetching are left to `_fetch`."""
        todo = []
        for (sha, part), (version, shard, index, partial) in wanted.items():
            if part in partial.have:
                continue
            if not partial.in_cache:  # streamed: nothing on the node's disk to share or find
                todo.append((version, shard, index, part, partial))
                continue
            data = self.cache.local_part(index, part)
            if data is not None:
                self._write(partial, index, part, data)
                continue
            if self.cache.claim(sha, [part])[0]:
                todo.append((version, shard, index, part, partial))
        return todo

    def _filled_meanwhile(self, todo: list[tuple], asked: set[tuple[str, int]]) -> dict[str, bool]:
        """Shards of `todo` the cache holds by now, each with whether our file lacks a part asked
        for; their claims released. Looked at after claiming: a fill that publishes later had to
        wait for our claims, so what we then fetch it does not; one that published before removed
        the `.have` list, so our claims found nothing noted and would fetch what it just fetched.
        A part the fill put into our very file (the `.partial` we opened) is taken from there."""
        filled: dict[str, bool] = {}
        for sha in dict.fromkeys(i[2].shard for i in todo if i[4].in_cache):
            if self.cache.holds(sha):
                filled[sha] = False
        for _, _, index, part, partial in todo:
            if index.shard not in filled:
                continue
            self.cache.release(index.shard, [part])
            if (index.shard, part) in asked and not self._in_our_file(partial, index, part):
                filled[index.shard] = True
        return filled

    def _fetch_together(self, items: list[tuple]) -> None:
        """Parts of one filesystem's shards in one round (`fetch_parts_together`), each written into
        its file and noted for the node; what fails here is released, for `_fetch` to try again."""
        spans = [(v.shard_path(s), *index.span(p), index.sha256[p]) for v, s, index, p, _ in items]
        try:
            got = fetch_parts_together(items[0][0].catalog.fs, spans, self.cache.stats)
        except Exception:  # noqa: BLE001 - a first round only: `_fetch` tries each again and says why
            got = [None] * len(items)
        for (_, _, index, p, partial), data in zip(items, got):
            if not partial.in_cache:
                if data is not None:
                    partial.put(index, p, data)
                continue
            if data is None:
                self.cache.release(index.shard, [p])  # `_fetch` fetches it again, and says why it fails
                continue
            try:
                self._write(partial, index, p, data)
            except BaseException:
                self.cache.release(index.shard, [p])
                raise
            self.cache.note_part(index, p)

    def _in_our_file(self, partial: _Partial, index: ShardIndex, part: int) -> bool:
        """Whether the shard is in the cache by now and its fill left this part in our very file
        (the `.partial` it assembled, unlinked since): then it is ours, checked."""
        if self.cache.holds(index.shard) and holds_part(partial.fd, index, part):
            partial.have.add(part)
            return True
        return False

    def _use(self, wanted: dict[str, tuple]) -> dict[str, _Partial]:
        """The partial files of these shards ((version, shard, index, ...) per sha256; opened on
        first use), each marked in use, here and in the cache (a fill that ends from now on leaves
        their parts until we are done); shards the cache holds by now are left out. A local
        store's shard is read in place (`_InPlace`)."""
        with self._lock:
            partials: dict[str, _Partial | _Streamed | _InPlace] = {}
            try:
                for sha, (version, shard, index, *_) in wanted.items():
                    if sha in self.streamed:
                        stream = self._streams.get(sha)
                        if stream is None:
                            stream = _Streamed(index)
                            self._streams.put(sha, stream)
                        stream.users += 1
                        partials[sha] = stream
                        continue
                    if is_local(version.catalog.fs):
                        if self.cache.holds(sha):
                            continue
                        partial = self._partials.get(sha)
                        if partial is None:
                            partial = self._partials[sha] = _InPlace(self.cache, version, shard, index)
                        partial.users += 1
                        partials[sha] = partial
                        continue
                    self.cache.use_partial(sha)  # first: then a fill cannot end unseen between the two
                    if self.cache.holds(sha):
                        self.cache.use_partial(sha, -1)
                        continue
                    partial = self._partials.get(sha)
                    if partial is None:
                        partial = _Partial(self.cache, index)
                        if self.cache.holds(sha):  # filled between our look and our open: read from the cache
                            partial.close()
                            self.cache.drop_partial(sha)  # the file our open made anew: gone when our use ends
                            self.cache.use_partial(sha, -1)
                            continue
                        self._partials[sha] = partial
                    partial.users += 1
                    partials[sha] = partial
            except BaseException:
                self.cache.use_partial(sha, -1)
                self._unuse(partials.values(), locked=True)
                raise
        return partials

    def _unuse(self, partials, locked: bool = False) -> None:
        done = []
        with contextlib.nullcontext() if locked else self._lock:
            for partial in partials:
                partial.users -= 1
                if partial.forgotten and not partial.users:
                    done.append(partial)
        for partial in partials:
            if partial.in_cache:
                self.cache.use_partial(partial.sha256, -1)
        for partial in done:
            partial.close()

    def _footer(self, version: DatasetVersion, shard: int, index: ShardIndex, partial: _Partial) -> pq.FileMetaData:
        """The shard's parsed footer: kept, or parsed from our file (its part fetched first if needed)."""
        with partial.footer_lock:
            with self._lock:
                meta = self._footers.get(partial.sha256)
            if meta is not None:
                return meta
            if not partial.has_footer:
                self._fetch(version, shard, index, index.footer, partial)
                partial.has_footer = True
            try:
                meta = pq.read_metadata(pa.BufferReader(partial.footer_bytes(index)))
            except UNREADABLE as e:
                raise arrow_error(e, f"shard {version.shard_url(shard)}: its footer matches its sha256 but is not "
                                     "readable Parquet", IntegrityError) from None
            if meta.num_row_groups != index.parts - 1:
                raise IntegrityError(f"shard {version.shard_url(shard)}: {meta.num_row_groups} row groups, "
                                     f"its index has {index.parts - 1}")
            with self._lock:
                if self._current(partial):  # not forgotten meanwhile (its shard filled)
                    self._footers.put(partial.sha256, meta)
            return meta

    def _decode(self, version: DatasetVersion, shard: int, index: ShardIndex, part: int, partial: _Partial,
                columns: list[str]) -> RowsShard:
        footer = self._footer(version, shard, index, partial)
        file = None
        while file is None:  # None: a streamed part another read took meanwhile (fetched again)
            self._fetch(version, shard, index, part, partial)
            file = self._parquet(partial, index, part, footer)
        try:  # Arrow reads only this row group's column chunks (the footer is given): all checked bytes
            table = file.read_row_group(part, columns=columns, use_threads=False)
        except UNREADABLE as e:
            raise arrow_error(e, f"shard {version.shard_url(shard)}: row group {part} matches its sha256 but "
                                 "is not readable Parquet", IntegrityError) from None
        if table.num_rows != index.row_starts[part + 1] - index.row_starts[part]:
            raise IntegrityError(f"shard {version.shard_url(shard)}: row group {part} holds {table.num_rows} rows, "
                                 "not what its index says")
        batches = table.combine_chunks().to_batches()
        return RowsShard(batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema))

    def _parquet(self, partial, index: ShardIndex, part: int, footer: pq.FileMetaData) -> pq.ParquetFile | None:
        """The reader Arrow decodes `part` through (given the footer, it reads nothing yet). A shard
        read in place: the last one this pool thread made, when for the same map and footer (made
        per row group, it cost ~0.07 ms of Python: ~1 ms of a cold first batch's 27 groups of
        images). One per thread, not one per shard: it holds its parsed footer (`_FOOTERS`)."""
        if not isinstance(partial, _InPlace):
            return partial.parquet(index, part, footer)
        made = getattr(self._files, "made", None)
        if made is None or made[0] is not partial or made[1] is not footer:
            made = self._files.made = (partial, footer, partial.parquet(index, part, footer))
        return made[2]

    def _fetch(self, version: DatasetVersion, shard: int, index: ShardIndex, part: int, partial: _Partial) -> None:
        """Put the checked part into this process's `.partial` file: from what the fill (or another
        process) left there when it checks out, else fetched (once: a part another thread is
        fetching is waited for)."""
        if isinstance(partial, _InPlace):
            partial.check(part)
            return
        if part in partial.have:  # checked and written into our file already (a part decoded again)
            return
        cache = self.cache
        start, end = index.span(part)
        fetch = lambda: fetch_parts(version.catalog.fs, version.shard_path(shard), version.shard_url(shard),  # noqa: E731
                                    [(start, end, index.sha256[part])], cache.stats, cache.retries, cache.backoff)[0]
        if not partial.in_cache:
            partial.put(index, part, fetch())
            return
        while True:
            data = cache.local_part(index, part)
            if data is not None:
                self._write(partial, index, part, data)  # our file may be an older one than the path's
                return
            if self._in_our_file(partial, index, part):  # filled meanwhile: nothing to fetch
                return
            claimed, busy = cache.claim(index.shard, [part])
            if claimed and self._in_our_file(partial, index, part):  # ... as we claimed it
                cache.release(index.shard, [part])
                return
            if claimed:
                break
            if busy:
                busy[0].wait()
        try:
            self._write(partial, index, part, fetch())
        except BaseException:
            cache.release(index.shard, [part])
            raise
        cache.note_part(index, part)

    def _write(self, partial: _Partial, index: ShardIndex, part: int, data) -> None:
        """A checked part into our `.partial` file, at its offset."""
        with self.cache.local_write():
            partial.put(index, part, data)

    def _current(self, partial: "_Partial | _Streamed") -> bool:
        """Whether this is still the shard's entry (under `_lock`): not forgotten since (its shard
        filled), or for a streamed shard, not pushed out by others."""
        held = self._streams.peek(partial.sha256) if partial.streamed else self._partials.get(partial.sha256)
        return held is partial

    def _keep(self, key: tuple[str, int], group: RowsShard) -> None:
        if key in self._groups:
            return
        self._groups.put(key, group)
        self._held += group.nbytes
        while self._held > self.max_bytes and len(self._groups) > 1:
            self._held -= self._groups.pop(next(iter(self._groups))).nbytes
