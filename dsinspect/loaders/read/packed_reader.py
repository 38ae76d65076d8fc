"""Read packed-sequence batches through the node-local shard cache: each located document segment
copied straight from its verified, memory-mapped shard into a `[B, W]` token array.

Document lengths come from the cached shard's list offsets (verified before use, and checked
against the manifest's counts by `TokenLayout`), so locating and reading trust the same bytes. Every
byte a batch takes (the documents' tokens and row hashes) is checked against the hashes taken when
the shard was cached (`CachedShard.check`). The shards the next batches need are known from the
per-shard token counts alone (`PackedRun.shards`) and fetched ahead in threads.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from dsinspect.arrays import distinct
from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.format.token_counts import list_items, list_parts
from dsinspect.loaders.order.plan import BatchPlan
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.cache import CachedShard, ShardCache
from dsinspect.loaders.read.packed_batch import PackedBatch
from dsinspect.loaders.sequences.digests import sequence_digests
from dsinspect.loaders.sequences.packed import PackedRun
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.lru import LRU

__all__ = ["PackedReader"]

_OPEN = 128  # cached shards kept open (memory-mapped, pinned); opening one again costs well under a ms


class _Columns(NamedTuple):
    """One open shard's documents: list offsets into the flat tokens, and the stored row hashes."""

    shard: CachedShard
    offsets: np.ndarray  # where each document's tokens start in `tokens`
    sizes: np.ndarray    # tokens of each document (0 for a null one)
    tokens: np.ndarray
    hashes: np.ndarray  # (rows, 16) uint8


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
        self.dtype = _token_type(self.versions, self.field, spec.sequences.eos)
        self.sources = tuple(f"{v.name}@{v.id}" for v in self.versions)
        self.cache = cache or ShardCache()
        self.run = PackedRun(spec, self._lengths)
        self._open: LRU[tuple[int, int], _Columns] = LRU(_OPEN)
        self._pending: dict[tuple[int, int], Future[CachedShard]] = {}
        self._fetch_threads = fetch_threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def read(self, plan: BatchPlan) -> PackedBatch:
        """The batch of a plan (`plan_batch(spec, step, rank)`, or many from `plan_steps`): each
        sequence's tokens, document segments and digest."""
        return self.read_many([plan])[0]

    def read_many(self, plans: Sequence[BatchPlan]) -> list[PackedBatch]:
        """The batches of several plans, read together: their segments located at once, one
        verification per shard touched, a slice copy per segment (per batch, Python's overhead is what
        separates a read from a bare numpy gather of the same windows)."""
        per_plan = self.run.sequences_of(plans)
        sequences = [s for mine in per_plan for s in mine]
        width, eos = self.spec.sequences.width, self.spec.sequences.eos
        counts = np.array([len(s.segments) for s in sequences], np.int64)
        docs, starts, stops = (np.concatenate([getattr(s.segments, a) for s in sequences]) if sequences
                               else np.zeros(0, np.int64) for a in ("docs", "starts", "stops"))
        source = np.repeat(np.array([s.source for s in sequences], np.int64), counts)
        owner = np.repeat(np.arange(len(sequences), dtype=np.int64), counts)
        sizes = stops - starts
        held = np.bincount(owner, weights=sizes, minlength=len(sequences))
        if (held != width).any():
            i = int(np.flatnonzero(held != width)[0])
            plan = plans[int(np.searchsorted(np.cumsum([len(m) for m in per_plan]), i, side="right"))]
            raise IntegrityError(f"step {plan.step}, rank {plan.rank}, sequence {sequences[i].sequence}: its "
                                 f"segments hold {int(held[i])} tokens, not {width}")
        before = np.cumsum(sizes) - sizes  # where each segment goes in the flattened batch
        dest = owner * width + before - np.repeat(before[np.cumsum(counts) - counts], counts)
        flat = np.empty(len(sequences) * width, self.dtype)
        hashes = np.empty((len(docs), 16), np.uint8)
        shard = np.empty(len(docs), np.int64)
        for k in distinct(source).tolist():
            sel = source == k
            doc_starts = self.run.plans[k].layout.doc_starts
            shard[sel] = np.searchsorted(doc_starts, docs[sel], side="right") - 1
        for k, s in dict.fromkeys(zip(source.tolist(), shard.tolist())):
            sel = np.flatnonzero((source == k) & (shard == s))
            rows = docs[sel] - self.run.plans[k].layout.doc_starts[s]
            cols = self._columns((k, s))
            cols.shard.check(distinct(rows), [self.field, HASH_COLUMN])  # every byte taken, before it is read
            size = cols.sizes[rows]
            take = np.minimum(stops[sel], size) - starts[sel]
            items = cols.tokens  # a slice copy per segment: ~7x a fancy-index gather of the same tokens
            for at, first, n in zip(dest[sel].tolist(), (cols.offsets[rows] + starts[sel]).tolist(), take.tolist()):
                flat[at:at + n] = items[first:first + n]
            ends = stops[sel] > size  # a segment that runs past its document: its EOS
            if eos is not None:  # without one, a segment never runs past its document
                flat[dest[sel][ends] + take[ends]] = eos
            hashes[sel] = cols.hashes[rows]
        tokens = flat.reshape(len(sequences), width)
        tokens.flags.writeable = False
        digests = sequence_digests([s.segments for s in sequences], hashes)
        batches, at = [], 0
        for plan, mine in zip(plans, per_plan):
            n = len(mine)
            batches.append(PackedBatch(plan.step, plan.epoch, plan.rank, tokens[at:at + n], mine, self.sources,
                                       digests[at:at + n], self.spec.sequences.length))
            at += n
        return batches

    def warm(self, plans: Sequence[BatchPlan]) -> bool:
        """Start fetching the shards the batches of these plans need and the cache lacks; False when
        some were left for later (at most two fetches per thread in flight)."""
        if not self.fill or not plans:
            return True
        for key in self.run.shards_of(plans):
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
        return True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
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
        for _, old in self._open.put(key, cols):
            old.shard.release()  # unpinned: evictable; its memory map stays valid while arrays use it
        return cols

    def _lengths(self, source: int, shard: int) -> np.ndarray:
        """A shard's document lengths from its verified list offsets (TokenLayout checks them)."""
        return self._columns((source, shard)).sizes


def _columns_of(shard: CachedShard, field: str) -> _Columns:
    """Zero-copy numpy views of one cached shard's documents (token_counts.py says why not `to_numpy`)."""
    shard.view(field)  # verifies the whole offsets buffer (and refuses a damaged one)
    column = shard.batch.column(field)
    offsets, sizes = list_parts(column)
    tokens = list_items(column)
    hash_column = shard.batch.column(HASH_COLUMN)
    raw = np.frombuffer(hash_column.buffers()[1], np.uint8)
    hashes = raw[hash_column.offset * 16:(hash_column.offset + len(hash_column)) * 16].reshape(-1, 16)
    return _Columns(shard, offsets, sizes, tokens, hashes)


def _token_type(versions: Sequence, field: str, eos: int | None) -> np.dtype:
    """The integer type of the batches' tokens: the sources' stored one (refused when they differ or the
    EOS id does not fit in it: a silently widened or wrapped token is a wrong token)."""
    types = {v.manifest.schema.field(field).type.value_type for v in versions}
    if len(types) != 1:
        raise UserError(f"the sources store {field!r} as lists of different types ({', '.join(map(str, types))})")
    value_type = types.pop()
    if not pa.types.is_integer(value_type):
        raise UserError(f"{field!r} holds {value_type} values, not integer token ids")
    dtype = np.dtype(value_type.to_pandas_dtype())
    if eos is not None and not np.iinfo(dtype).min <= eos <= np.iinfo(dtype).max:
        raise UserError(f"eos {eos} does not fit the stored token type {dtype}")
    return dtype
