"""Read packed-sequence batches through the node-local shard cache: each located document segment
copied straight from its verified, memory-mapped shard into a `[B, W]` token array.

Document lengths come from the cached shard's list offsets (verified before use, and checked
against the manifest's counts by `TokenLayout`), so locating and reading trust the same bytes. Every
byte a batch takes (the documents' tokens and row hashes) is checked against the hashes taken when
the shard was cached (`CachedShard.check`). The shards the next batches need are known from the
per-shard token counts alone (`PackedRun.shards`) and fetched ahead in threads.

A batch that needs a shard the cache does not hold yet (a fresh node's first batch) does not wait
for it to be filled: it reads in place only the row groups it needs (`cold.py`: each part checked
against its sha256 in the manifest-verified shard index, and written into the cache's `.partial`
file, so the fill that starts after the batch fetches it no more). Locating needs the documents'
lengths: in stored document order, a row group's tokens are its leaf column's value count in the
(checked) footer, used only when those add up to the manifest's count for the shard (so no
document is empty and each count is tokens); the row groups the sequences' windows fall in are
then decoded and their lengths checked against those counts (`locate_cold`). With shuffled
documents (or where the counts do not add up) every length of the shard is needed: all its row
groups are decoded, checked part by part, and kept for the next batches until the shard is filled.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.arrays import distinct, ranges
from dsinspect.errors import IntegrityError, NotFoundError, UserError
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.format.shard_index import ShardIndex
from dsinspect.loaders.format.token_counts import hash_rows, list_items, list_parts
from dsinspect.loaders.order.packing import Packing
from dsinspect.loaders.order.plan import BatchPlan
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.cache import CachedShard, ShardCache
from dsinspect.loaders.read.cold import ColdRows
from dsinspect.loaders.read.fetch import fetch_parts
from dsinspect.loaders.read.packed_batch import PackedBatch, PackedRows
from dsinspect.loaders.sequences.digests import flat_digests
from dsinspect.loaders.sequences.packed import PackedRun, PackedSequence, SequenceTable
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.lru import LRU

__all__ = ["PackedReader", "by_groups", "footer_group_tokens", "locate_cold"]

Key = tuple[int, int]  # (source, shard)
_OPEN = 128  # cached shards kept open (memory-mapped, pinned); opening one again costs well under a ms
_KEPT_BYTES = 64 << 20  # tokens of shards decoded whole by cold reads, kept until their fills land


class _Columns(NamedTuple):
    """One open shard's documents: list offsets into the flat tokens, and the stored row hashes.
    Read cold (`shard` None), only the rows `known` marks were decoded (their parts checked)."""

    shard: CachedShard | None
    offsets: np.ndarray  # where each document's tokens start in `tokens`
    sizes: np.ndarray    # tokens of each document (0 for a null one)
    tokens: np.ndarray
    hashes: np.ndarray  # (rows, 16) uint8
    known: np.ndarray | None = None  # read cold: the rows decoded (None: all)


class PackedReader:
    """The packed batches of `spec` (a run with `sequences`) over the versions it pins in `catalog`."""

    def __init__(self, catalog: Catalog, spec: RunSpec, cache: ShardCache | None = None,
                 fetch_threads: int = 2, fill: bool = True):
        if spec.sequences is None:
            raise UserError("this run reads rows, not packed sequences (its spec has no `sequences`): use Loader")
        self.spec, self.field, self.fill = spec, spec.sequences.field, fill
        self.versions = [catalog.version(s.name, s.version) for s in spec.sources]
        for source, version in zip(spec.sources, self.versions):
            shards = version.manifest.shards
            if (tuple(s.rows for s in shards) != source.shard_rows
                    or tuple(s.token_count(self.field) for s in shards) != source.shard_tokens):
                raise IntegrityError(f"{version.address}: its shards do not match the run spec's shard sizes")
        self.dtype = _token_type(self.versions, self.field, spec.sequences.eos, spec.sequences.pad)
        self.sources = tuple(f"{v.name}@{v.id}" for v in self.versions)
        self.cache = cache or ShardCache()
        self.run = PackedRun(spec, self._lengths)
        self._open: LRU[tuple[int, int], _Columns] = LRU(_OPEN)
        self._pending: dict[tuple[int, int], Future[CachedShard]] = {}
        self._fetch_threads = fetch_threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._cold: ColdRows | None = None
        self._indexes: dict[Key, ShardIndex | None] = {}
        self._kept: LRU[Key, _Columns] = LRU(1 << 20)  # shards decoded whole cold, bounded by _KEPT_BYTES
        self._kept_bytes = 0
        self._reads = 0
        self._to_fill: dict[Key, None] = {}  # shards read cold, to fill as threads free up
        self._filling: set[Key] = set()  # shards read cold: their fills are not cancelled by `close`

    def read(self, plan: BatchPlan) -> PackedBatch:
        """The batch of a plan (`plan_batch(spec, step, rank)`, or many from `plan_steps`): each
        sequence's tokens, document segments and digest."""
        return self.read_many([plan])[0]

    def read_many(self, plans: Sequence[BatchPlan]) -> list[PackedBatch]:
        """The batches of several plans, read together: their segments located at once, one
        verification per shard touched, a slice copy per segment (per batch, Python's overhead is what
        separates a read from a bare numpy gather of the same windows). Shards not cached yet (nor
        being filled) are read cold (see the module docstring), and filled after the batch."""
        self._start_fills()
        cold = self._cold_keys(plans)
        cold_columns: dict[Key, _Columns] = {}
        if cold:
            table = SequenceTable.of([s for mine in self._locate_cold(plans, cold, cold_columns) for s in mine])
        else:
            table = self.run.locate(plans)
        width, eos, n = self.spec.sequences.width, self.spec.sequences.eos, len(table)
        docs, starts, stops = table.docs, table.starts, table.stops
        sizes = stops - starts
        ends = np.concatenate([[0], np.cumsum(sizes)])  # where each segment ends in the batches' documents
        held = ends[table.bounds[1:]] - ends[table.bounds[:-1]]
        wrong = held > width
        if self.spec.sequences.packing is Packing.CONCAT:  # a concat sequence is full; the others' room is padding
            wrong |= held < width
        if wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            plan = plans[int(np.searchsorted(np.cumsum([len(p.indices) for p in plans]), i, side="right"))]
            raise IntegrityError(f"step {plan.step}, rank {plan.rank}, sequence {int(table.indices[i])}: its "
                                 f"segments hold {int(held[i])} tokens, not {width}")
        owner = table.owner
        dest = owner * width + ends[:-1] - ends[table.bounds[owner]]  # where each segment goes in the flat batch
        flat = np.full(n * width, self.spec.sequences.pad_token, self.dtype)  # best_fit, pad: room is padding
        hashes = np.empty((len(docs), 16), np.uint8)
        source = table.sources[owner]
        for k, (rows_of_shard, shard) in self._by_shard(source, docs).items():
            for s, sel in zip(shard, rows_of_shard):
                rows = docs[sel] - self.run.plans[k].layout.doc_starts[s]
                cols = cold_columns.get((k, s))
                if cols is None:
                    cols = self._columns((k, s))
                if cols.shard is not None:
                    cols.shard.check(rows, [self.field, HASH_COLUMN])  # every byte taken, before it is read
                elif cols.known is not None and not cols.known[rows].all():  # decoded from checked parts: only those
                    raise IntegrityError(f"source {k}, shard {s}: a sequence located a document outside the row "
                                         "groups read for it")
                size = cols.sizes[rows]
                take = np.minimum(stops[sel], size) - starts[sel]
                items = cols.tokens  # a slice copy per segment: ~7x a fancy-index gather of the same tokens
                for at, first, m in zip(dest[sel].tolist(), (cols.offsets[rows] + starts[sel]).tolist(),
                                        take.tolist()):
                    flat[at:at + m] = items[first:first + m]
                if eos is not None:  # a segment that runs past its document takes its EOS (never without one)
                    over = stops[sel] > size
                    flat[dest[sel][over] + take[over]] = eos
                hashes[sel] = cols.hashes[rows]
        tokens = flat.reshape(n, width)
        tokens.flags.writeable = False
        steps = np.repeat([p.step for p in plans], [len(p.indices) for p in plans])
        rows = PackedRows(tokens, table, self.sources, flat_digests(table.bounds, hashes, starts, stops),
                          self.spec.sequences.length, steps)
        batches, at = [], 0
        for plan in plans:
            batches.append(PackedBatch.of_rows(plan.step, plan.epoch, plan.rank, rows, at, at + len(plan.indices)))
            at += len(plan.indices)
        self._reads += 1
        if cold and self.fill:  # the shards read cold are filled behind, from now on
            self._to_fill.update(dict.fromkeys(k for k in cold if k not in self._pending))
            self._filling.update(cold)
            self._start_fills()
        return batches

    def warm(self, plans: Sequence[BatchPlan]) -> bool:
        """Start fetching the shards the batches of these plans need and the cache lacks; False when
        some were left for later (at most two fetches per thread in flight)."""
        if not self.fill or not plans:
            return True
        self._start_fills()
        deferred = False
        for key in self.run.shards_of(plans):
            if not self._reads and self._index(key) is not None and not self._cached(key):
                deferred = True  # a fresh reader's first batch reads it cold: filled after that batch
                continue
            with self._lock:
                if len(self._pending) >= 2 * self._fetch_threads:
                    return False
                if key in self._pending or self._open.peek(key) is not None:
                    continue
                if self.cache.holds(self.versions[key[0]].manifest.shards[key[1]].sha256):
                    continue  # a cached shard opens in well under a millisecond: a thread would cost more
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._fetch_threads, thread_name_prefix="dsinspect-fetch")
                self._pending[key] = self._pool.submit(self.cache.open, self.versions[key[0]], key[1])
        return not deferred

    def _start_fills(self) -> None:
        """Start filling the shards the last batches read cold (at most two per thread in flight;
        `warm` starts the others as the loader looks ahead)."""
        while self._to_fill:
            key = next(iter(self._to_fill))
            with self._lock:
                if len(self._pending) >= 2 * self._fetch_threads:
                    return
                self._to_fill.pop(key)
                if key in self._pending or self._cached(key):
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._fetch_threads, thread_name_prefix="dsinspect-fetch")
                self._pending[key] = self._pool.submit(self.cache.open, self.versions[key[0]], key[1])

    def close(self) -> None:
        if self._cold is not None:
            self._cold.close()
            self._cold = None
        self._kept.clear()
        self._kept_bytes = 0
        if self._pool is not None:
            # the fills of shards read cold run to their end (as when a batch filled them itself);
            # those only fetched ahead are cancelled if not started
            with self._lock:
                for key, future in self._pending.items():
                    if key not in self._filling:
                        future.cancel()
            for key in list(self._to_fill):
                self._pending[key] = self._pool.submit(self.cache.open, self.versions[key[0]], key[1])
            self._to_fill.clear()
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:
            for future in self._pending.values():
                if not future.cancelled() and future.exception() is None:
                    future.result().release()
            self._pending.clear()
        for cols in self._open.values():
            cols.shard.release()
        self._open.clear()

    # -- internals -----------------------------------------------------------------------------

    def _by_shard(self, source: np.ndarray, docs: np.ndarray) -> dict[int, tuple[list[np.ndarray], list[int]]]:
        """Per source, the segments in each shard its documents are in: (their positions, the shards)."""
        out = {}
        for k in distinct(source).tolist():
            mine = np.flatnonzero(source == k)
            shard = np.searchsorted(self.run.plans[k].layout.doc_starts, docs[mine], side="right") - 1
            order = np.argsort(shard, kind="stable")
            shard, mine = shard[order], mine[order]
            cuts = np.flatnonzero(shard[1:] != shard[:-1]) + 1
            out[k] = (np.split(mine, cuts), shard[np.concatenate([[0], cuts])].tolist())
        return out

    def _columns(self, key: tuple[int, int]) -> _Columns:
        cols = self._open.get(key)
        if cols is not None:
            return cols
        with self._lock:
            pending = self._pending.pop(key, None)
        shard = pending.result() if pending is not None else self.cache.open(self.versions[key[0]], key[1])
        try:
            cols = _columns_of(shard, self.field)
        except BaseException:
            shard.release()
            raise
        kept = self._kept.pop(key)
        if kept is not None:
            self._kept_bytes -= kept.tokens.nbytes
        if self._cold is not None:
            self._cold.forget(shard.sha256)
        for _, old in self._open.put(key, cols):
            old.shard.release()  # unpinned: evictable; its memory map stays valid while arrays use it
        return cols

    def _lengths(self, source: int, shard: int) -> np.ndarray:
        """A shard's document lengths from its verified list offsets (TokenLayout checks them)."""
        return self._columns((source, shard)).sizes

    def _cached(self, key: Key) -> bool:
        sha256 = self.versions[key[0]].manifest.shards[key[1]].sha256
        return self._open.peek(key) is not None or self.cache.holds(sha256)

    def _index(self, key: Key) -> ShardIndex | None:
        """The shard's index (None: written without one, or its file is missing: read it whole)."""
        if key not in self._indexes:
            try:
                self._indexes[key] = self.versions[key[0]].shard_index(key[1])
            except NotFoundError:
                self._indexes[key] = None
        return self._indexes[key]

    def _cold_keys(self, plans: Sequence[BatchPlan]) -> list[Key]:
        """The shards these plans need that are neither cached nor being filled, and can be read in place."""
        keys = [k for k in self.run.shards_of(plans) if not self._cached(k)]
        for source in dict.fromkeys(k for k, _ in keys):  # on object storage: fetched together
            self.versions[source].load_indexes([s for k, s in keys if k == source and (k, s) not in self._indexes])
        cold = []
        for key in keys:
            with self._lock:
                pending = self._pending.get(key)
            if pending is not None and (pending.running() or pending.done()):
                continue  # its fill is under way: wait for it rather than decode the same bytes twice
            if key in self._kept or self._index(key) is not None:
                cold.append(key)
        return cold

    def _locate_cold(self, plans: Sequence[BatchPlan], cold: list[Key],
                     columns: dict[Key, _Columns]) -> list[list[PackedSequence]]:
        """The plans' sequences, with the cold shards' documents read in place into `columns`."""
        if self._cold is None:
            self._cold = ColdRows(self.cache)
        grouped: dict[Key, tuple[np.ndarray, np.ndarray]] = {}
        whole: list[Key] = []
        for key in cold:
            kept = self._kept.get(key)
            if kept is not None:
                columns[key] = kept
                continue
            index = self._index(key)
            if by_groups(self.spec):
                version = self.versions[key[0]]
                meta = self._cold.footer(version, key[1], index)
                if meta is None:
                    continue  # the cache holds it by now
                tokens = footer_group_tokens(meta, self.field, version.manifest.shards[key[1]].token_count(self.field),
                                             index.parts - 1)
                if tokens is not None:
                    grouped[key] = (index.row_starts[:index.parts], tokens)
                    continue
            whole.append(key)
        if whole:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._fetch_threads, thread_name_prefix="dsinspect-fetch")
            for key, cols in zip(whole, self._pool.map(self._whole_cold, whole)):
                columns[key] = cols
                if cols.tokens.nbytes <= _KEPT_BYTES // 4:  # kept for the next batches, until the fill lands
                    self._kept.put(key, cols)
                    self._kept_bytes += cols.tokens.nbytes
                    while self._kept_bytes > _KEPT_BYTES:
                        self._kept_bytes -= self._kept.pop(next(iter(self._kept))).tokens.nbytes

        def lengths(key: Key) -> np.ndarray:
            cols = columns.get(key)
            return cols.sizes if cols is not None else self._columns(key).sizes

        def read_groups(wanted: dict[Key, np.ndarray]) -> dict[Key, np.ndarray]:
            got = self._take_cold({key: _rows_of(grouped[key][0], groups) for key, groups in wanted.items()})
            out = {}
            for key, cols in got.items():
                if cols is None:  # filled meanwhile: every length from the cached shard
                    out[key] = self._columns(key).sizes
                else:
                    columns[key] = cols
                    out[key] = cols.sizes
            return out

        return locate_cold(self.spec, plans, lengths, grouped, read_groups)

    def _whole_cold(self, key: Key) -> _Columns:
        """Every document of an uncached shard: the whole file in one read, each part checked against
        its sha256 (so the whole file is), the tokens and hashes decoded from those bytes."""
        version, shard, index = self.versions[key[0]], key[1], self._index(key)
        spans = [(*index.span(p), index.sha256[p]) for p in range(index.parts)]
        parts = fetch_parts(version.catalog.fs, version.shard_path(shard), version.shard_url(shard), spans,
                            self.cache.stats, self.cache.retries, self.cache.backoff)
        data = parts[0].obj  # the one buffer all parts are views of
        try:
            table = pq.ParquetFile(pa.BufferReader(pa.py_buffer(data))).read(
                columns=[self.field, HASH_COLUMN], use_threads=False)
        except UNREADABLE as e:
            raise arrow_error(e, f"shard {version.shard_url(shard)} matches its sha256 but is not readable Parquet",
                              IntegrityError) from None
        if table.num_rows != version.manifest.shards[shard].rows:
            raise IntegrityError(f"shard {version.shard_url(shard)} holds {table.num_rows} rows, not what its "
                                 "manifest says")
        batches = table.combine_chunks().to_batches()
        batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)
        column = batch.column(self.field)
        offsets, sizes = list_parts(column)
        del table, batches, parts, data
        # decoding's scratch memory, freed into this (pool) thread's mimalloc heap, back to the OS: held
        # there, a fresh node's first batch over shuffled documents kept ~70 MB more (measured)
        pa.default_memory_pool().release_unused()
        return _Columns(None, offsets, sizes, list_items(column), hash_rows(batch.column(HASH_COLUMN)))

    def _take_cold(self, rows: dict[Key, np.ndarray]) -> dict[Key, _Columns | None]:
        """These rows of uncached shards (sorted, within each shard), from their checked parts;
        None for a shard the cache holds by now."""
        keys = list(rows)
        wants = [(self.versions[k], s, self._index((k, s)), rows[(k, s)]) for k, s in keys]
        got = self._cold.take(wants, [self.field, HASH_COLUMN])
        out: dict[Key, _Columns | None] = {}
        for key, want, pieces in zip(keys, wants, got):
            if pieces is None:
                out[key] = None
                continue
            n = self.versions[key[0]].manifest.shards[key[1]].rows
            offsets, sizes = np.zeros(n, np.int64), np.zeros(n, np.int64)
            hashes, known = np.zeros((n, 16), np.uint8), np.zeros(n, bool)
            flat, at = [], 0
            for group, group_rows, sel in pieces:
                column = group.batch.column(self.field)
                starts, lengths = list_parts(column)
                items = list_items(column)
                r = want[3][sel]
                offsets[r], sizes[r] = starts[group_rows] + at, lengths[group_rows]
                hashes[r] = hash_rows(group.batch.column(HASH_COLUMN))[group_rows]
                known[r] = True
                flat.append(items)
                at += len(items)
            tokens = np.concatenate(flat) if flat else np.zeros(0, self.dtype)
            out[key] = _Columns(None, offsets, sizes, tokens, hashes, known)
        return out


def by_groups(spec: RunSpec) -> bool:
    """Whether sequences can be located with lengths known per row group: documents in stored order,
    laid end to end (`concat`)."""
    return spec.sequences.packing is Packing.CONCAT and not spec.sequences.shuffle_documents


def footer_group_tokens(meta, field: str, shard_tokens: int | None, groups: int) -> np.ndarray | None:
    """Tokens of each row group of a shard, from its footer (pyarrow FileMetaData, its part checked):
    the list field's leaf column's value count per group. A count is a group's tokens plus its empty
    and null documents (a level each), or only its tokens (a writer counting values alone): when the
    counts add up to the manifest's tokens for the shard, either way each count is its group's
    tokens. None otherwise (or for a field that is not one plain list column)."""
    if shard_tokens is None or meta.num_row_groups != groups:
        return None
    leaves = [i for i in range(meta.num_columns) if meta.schema.column(i).path.startswith(field + ".")]
    if len(leaves) != 1 or meta.schema.column(leaves[0]).max_repetition_level != 1:
        return None
    counts = np.array([meta.row_group(g).column(leaves[0]).num_values for g in range(groups)], np.int64)
    return counts if int(counts.sum()) == shard_tokens else None


def _spread(starts: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Lengths that add up to each group's tokens (rows [starts[g], starts[g + 1])), each at least 1
    when a group has as many tokens as rows: where a window falls among groups is then exact."""
    docs = np.diff(starts)
    base, extra = tokens // np.maximum(docs, 1), tokens % np.maximum(docs, 1)
    position = np.arange(int(starts[-1] - starts[0])) - np.repeat(starts[:-1] - starts[0], docs)
    return np.repeat(base, docs) + (position < np.repeat(extra, docs))


def locate_cold(spec: RunSpec, plans: Sequence[BatchPlan], lengths: Callable[[Key], np.ndarray],
                grouped: dict[Key, tuple[np.ndarray, np.ndarray]],
                read_groups: Callable[[dict[Key, np.ndarray]], dict[Key, np.ndarray]]) -> list[list[PackedSequence]]:
    """The plans' sequences when some shards' document lengths are known only per row group:
    `grouped[key]` = (row where each group starts + the end, tokens of each group; stored document
    order only), `lengths(key)` every length of another shard. A first pass with lengths spread
    evenly within each group finds the groups each window falls in (exact: the groups' bounds in
    the stream are); `read_groups({key: groups})` gives their exact lengths (a full-size array,
    exact in those groups), checked against the groups' tokens; the second pass locates with those.
    Each located document of a grouped shard is then in a group read."""
    spread = {key: _spread(*g) for key, g in grouped.items()}
    found = PackedRun(spec, lambda k, s: spread[(k, s)] if (k, s) in spread else lengths((k, s)))
    per_plan = found.sequences_of(plans)
    if not grouped:
        return per_plan
    wanted: dict[Key, np.ndarray] = {}
    for key, groups in _groups_of(found, per_plan, grouped).items():
        wanted[key] = groups
    exact = read_groups(wanted)
    for key, groups in wanted.items():
        starts, tokens = grouped[key]
        got = exact[key]
        mine = _rows_of(starts, groups)
        sums = np.add.reduceat(got[mine], np.searchsorted(mine, starts[groups])) if len(mine) else np.zeros(0)
        if (sums != tokens[groups]).any():
            raise IntegrityError(f"source {key[0]}, shard {key[1]}: a row group holds another number of tokens "
                                 "than its footer counts")
        spread[key][mine] = got[mine]
    located = PackedRun(spec, lambda k, s: spread[(k, s)] if (k, s) in spread else lengths((k, s)))
    per_plan = located.sequences_of(plans)
    for key, groups in _groups_of(located, per_plan, grouped).items():
        if not np.isin(groups, wanted[key]).all():
            raise IntegrityError(f"source {key[0]}, shard {key[1]}: its sequences moved to row groups not read")
    return per_plan


def _groups_of(run: PackedRun, per_plan: list[list[PackedSequence]],
               grouped: dict[Key, tuple[np.ndarray, np.ndarray]]) -> dict[Key, np.ndarray]:
    """Per grouped shard, the row groups the located documents are in."""
    found: dict[Key, list[np.ndarray]] = {}
    for sequence in (s for mine in per_plan for s in mine):
        doc_starts = run.plans[sequence.source].layout.doc_starts
        docs = sequence.segments.docs
        shards = np.searchsorted(doc_starts, docs, side="right") - 1
        for s in distinct(shards).tolist():
            key = (sequence.source, s)
            if key in grouped:
                rows = docs[shards == s] - doc_starts[s]
                found.setdefault(key, []).append(np.searchsorted(grouped[key][0], rows, side="right") - 1)
    return {key: distinct(np.concatenate(parts)) for key, parts in found.items()}


def _rows_of(starts: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The rows of these row groups (`starts`: each group's first row, and the end), in order."""
    return ranges(starts[groups], starts[groups + 1] - starts[groups])


def _columns_of(shard: CachedShard, field: str) -> _Columns:
    """Zero-copy numpy views of one cached shard's documents (token_counts.py says why not `to_numpy`)."""
    shard.view(field)  # verifies the whole offsets buffer (and refuses a damaged one)
    column = shard.batch.column(field)
    offsets, sizes = list_parts(column)
    tokens = list_items(column)
    return _Columns(shard, offsets, sizes, tokens, hash_rows(shard.batch.column(HASH_COLUMN)))


def _token_type(versions: Sequence, field: str, eos: int | None, pad: int | None = None) -> np.dtype:
    """The integer type of the batches' tokens: the sources' stored one (refused when they differ or the
    EOS or pad id does not fit in it: a silently widened or wrapped token is a wrong token)."""
    types = {v.manifest.schema.field(field).type.value_type for v in versions}
    if len(types) != 1:
        raise UserError(f"the sources store {field!r} as lists of different types ({', '.join(map(str, types))})")
    value_type = types.pop()
    if not pa.types.is_integer(value_type):
        raise UserError(f"{field!r} holds {value_type} values, not integer token ids")
    dtype = np.dtype(value_type.to_pandas_dtype())
    if eos is not None and not np.iinfo(dtype).min <= eos <= np.iinfo(dtype).max:
        raise UserError(f"eos {eos} does not fit the stored token type {dtype}")
    if pad is not None and not np.iinfo(dtype).min <= pad <= np.iinfo(dtype).max:
        raise UserError(f"pad {pad} does not fit the stored token type {dtype}")
    return dtype
