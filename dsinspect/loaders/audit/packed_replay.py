"""Replay the packed batch of (step, rank): its sequences by arithmetic (`sequences/`, no iteration),
then only the documents they take tokens from, each read and re-hashed against its stored row hash
on every replay. The batch comes back as the `PackedLoader` yields it (tokens, segments, digests,
fingerprint), with each document whose bytes no longer hash to its stored row hash named.

Locating needs the document lengths of the shards a batch touches. In stored document order they
come from the row groups the windows fall in (`read/packed_reader.locate_cold`: each group's tokens
from the shard's footer, its part checked against the manifest-verified shard index, then the exact
lengths of those groups only). Those groups are decoded once, with every field and the stored
hashes, and the documents are taken from them. Decoding is most of a warm replay (~1 ms a group of
64K tokens, a group or two per sequence): the groups of different shards decode at once, on threads
kept for the process (Arrow decodes without the GIL; new threads cost ~2 ms more). Otherwise the
lengths come from the whole shard, checked against the manifest's sha256, and the documents are
read by row (rows.py). A shard whose bytes no longer match is read as it is (its lengths checked
against the manifest's counts), as before. With `cache` (a node cache, `ShardCache`), shards it
holds are read from it instead: their lengths from the verified list offsets, the documents from
the blocks they occupy, checked against the hashes taken when the shard was cached; this replays
what the node's copy holds, not the catalog's files.

What a replay keeps for the next ones in the process is only what verified bytes give, keyed by
their sha256 (the same bytes give the same answer): a shard's parsed index (`_INDEXES`), its
footer's group tokens (`_GROUPS`), a whole shard's lengths (`_LENGTHS`). Nothing of a document is
kept."""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import groupby
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.arrays import distinct
from dsinspect.errors import IntegrityError, NotFoundError, UserError
from dsinspect.loaders.audit.bounds import ReadBound
from dsinspect.loaders.audit.replay import SpecSource, parse_rank, resolve
from dsinspect.loaders.audit.rows import RowReader, conformed
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.format.shard_index import ShardIndex
from dsinspect.loaders.format.token_counts import document_lengths, hash_rows, list_items, list_parts
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.plan import BatchPlan, locate_step, plan_batch
from dsinspect.loaders.order.spec import LastBatch, RunSpec, Start
from dsinspect.loaders.read.cache import CachedShard, ShardCache
from dsinspect.loaders.read.packed_batch import PackedBatch
from dsinspect.loaders.read.packed_reader import by_groups, footer_group_tokens, locate_cold
from dsinspect.loaders.sequences.digests import sequence_digests
from dsinspect.loaders.sequences.packed import PackedRun
from dsinspect.loaders.sequences.segments import assemble
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.lru import LRU

__all__ = ["PackedReplay", "replay_packed"]

Key = tuple[int, int]  # (source, shard)
Doc = tuple[int, int]  # (source, document)

# What was read of verified bytes, by their sha256: the same bytes give the same answer.
_LENGTHS: LRU[tuple[str, str], np.ndarray] = LRU(256)  # a whole shard's document lengths (shard sha256, field)
_GROUPS: LRU[tuple[str, str], np.ndarray | None] = LRU(4096)  # its row groups' tokens (None: not usable)
_INDEXES: LRU[str, ShardIndex] = LRU(256)  # a shard's index by its own sha256 (~50 KB for 400 row groups)
_MEMO = threading.Lock()
_THREADS = 2  # shards whose row groups decode at once (`_pool`)
# A pool thread hands the memory its decoded groups held back to the OS after decoding about this
# much: Arrow's allocator (mimalloc) keeps a thread's freed pages for that thread (read/cold.py)
_RELEASE_BYTES = 16 << 20
_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (the process it was made in, the pool)
_TALLY = threading.local()  # per thread: bytes decoded since it last released memory
_OPENING = threading.Lock()


@dataclass
class PackedReplay:
    """The packed batch of one step for one rank or all ranks, and the documents that no longer verify."""

    spec: RunSpec
    step: int
    epoch: int
    batches: list[PackedBatch]             # one per rank, as PackedLoader(spec, rank).batch_at(step) gives it
    damaged: list[tuple[int, int, str]]    # (rank, slot, document address): bytes that no longer hash as stored
    record_end: int | None = None

    @property
    def fingerprints(self) -> dict[int, str]:
        return {b.rank: b.fingerprint for b in self.batches}

    def to_json(self) -> dict[str, Any]:
        seq = self.spec.sequences
        return {"spec_hash": self.spec.hash, "order_hash": self.spec.order_hash, "step": self.step,
                "epoch": self.epoch, "ranks": [b.rank for b in self.batches], "world_size": self.spec.world_size,
                "batch_size": self.spec.batch_size, "sequences": seq.to_json(),
                "batches": [{"rank": b.rank, "fingerprint": b.fingerprint, "sequences": [
                    {"slot": i, "source": s.source, "source_epoch": s.source_epoch, "sequence": s.sequence,
                     "padding": s.padding, "digest": bytes(b.digests[i]).hex(),
                     "segments": [vars(g) for g in b.segments(i)], "tokens": b.tokens[i].tolist()}
                    for i, s in enumerate(b.sequences)]} for b in self.batches],
                "damaged": [{"rank": r, "slot": i, "document": a} for r, i, a in self.damaged],
                "record_end": self.record_end}


def replay_packed(spec: SpecSource, step: int, rank: int | str, catalog: Catalog,
                  max_bytes: int | None = None, cache: ShardCache | None = None) -> PackedReplay:
    """The packed batch that `rank` (or "all") read at `step`; `spec` may be a run record directory.
    `max_bytes` bounds the documents' row groups and rows held (audit/bounds.py). With `cache`, the
    shards that node cache holds are read from it (see the module docstring)."""
    run_spec, record = resolve(spec, step)
    if run_spec.sequences is None:
        raise UserError("this run reads rows, not packed sequences: use replay")
    ranks = parse_rank(rank, run_spec)
    field = run_spec.sequences.field
    rows = RowReader(catalog, documents_spec(run_spec), [field])
    for source, version in zip(run_spec.sources, rows.versions):
        if tuple(s.token_count(field) for s in version.manifest.shards) != source.shard_tokens:
            raise IntegrityError(f"{version.address}: its shards do not match the run spec's shard sizes")
    names = tuple(f"{s.name}@{s.version}" for s in run_spec.sources)
    epoch = locate_step(run_spec, step)[0]
    bound = None if max_bytes is None else ReadBound(max_bytes, f"step {step}: the documents of the packed batch")
    shards = _Shards(rows, field, cache, bound)
    try:
        per_rank = _locate(run_spec, [plan_batch(run_spec, step, r) for r in ranks], shards)
        batches, damaged = [], []
        for r, sequences in zip(ranks, per_rank):
            batch, bad = _read_rank(sequences, shards, run_spec.sequences, (step, epoch, r), names)
            batches.append(batch)
            damaged += bad
    finally:
        shards.close()
    return PackedReplay(run_spec, step, epoch, batches, damaged, record.end if record is not None else None)


class _Shards:
    """The shards a replay reads lengths and documents from: the node cache's verified copies when
    given and held, else the catalog's files (their row groups read to locate, or rows by index)."""

    def __init__(self, rows: RowReader, field: str, cache: ShardCache | None, bound: ReadBound | None):
        self.rows, self.versions, self.field, self.cache, self.bound = rows, rows.versions, field, cache, bound
        self.grouped: dict[Key, tuple[np.ndarray, np.ndarray]] = {}  # located by row groups: (row starts, tokens)
        self._decoded: dict[tuple[int, int, int], pa.Table] = {}  # their groups read, by (source, shard, group)
        self._open: dict[Key, CachedShard | None] = {}

    def cached(self, key: Key) -> CachedShard | None:
        if self.cache is None:
            return None
        if key not in self._open:
            entry = self.versions[key[0]].manifest.shards[key[1]]
            self._open[key] = self.cache.open(self.versions[key[0]], key[1]) if self.cache.holds(entry.sha256) else None
        return self._open[key]

    def lengths(self, key: Key) -> np.ndarray:
        """Every document length of a shard: cached copy, verified whole file (kept), or the file as it is."""
        shard = self.cached(key)
        if shard is not None:
            shard.view(self.field)  # verifies the whole offsets buffer
            return list_parts(shard.batch.column(self.field))[1]
        version, s = self.versions[key[0]], key[1]
        memo = (version.manifest.shards[s].sha256, self.field)
        with _MEMO:
            kept = _LENGTHS.get(memo)
        if kept is not None:
            return kept
        with version.catalog.fs.open(version.shard_path(s), "rb") as f:
            data = f.read()
        try:  # the bytes read once, whether or not they still match their sha256
            lengths = document_lengths(pq.ParquetFile(pa.BufferReader(data)).read(columns=[self.field],
                                                                                use_threads=False).column(self.field))
        except UNREADABLE as e:
            raise arrow_error(e, f"shard {version.shard_url(s)} is not readable Parquet", IntegrityError) from None
        if hashlib.sha256(data).hexdigest() == memo[0]:  # kept only when verified (an edited file: read anew)
            with _MEMO:
                _LENGTHS.put(memo, lengths)
        return lengths

    def groups(self, key: Key) -> tuple[np.ndarray, np.ndarray] | None:
        """(row where each row group starts + the end, tokens of each) from the shard's checked footer,
        or None (no index, a footer that does not check out, counts that do not add up)."""
        version, s = self.versions[key[0]], key[1]
        entry = version.manifest.shards[s]
        if entry.index_sha256 is None or self.cached(key) is not None:
            return None
        index = self._index(version, s)
        if index is None:
            return None
        memo = (entry.sha256, self.field)
        with _MEMO:
            if memo in _GROUPS:
                tokens = _GROUPS.get(memo)
                return None if tokens is None else (index.row_starts[:index.parts], tokens)
        start, end = index.span(index.footer)
        with version.catalog.fs.open(version.shard_path(s), "rb") as f:
            f.seek(start)
            raw = f.read(end - start)
        if hashlib.sha256(raw).hexdigest() != index.sha256[index.footer]:
            return None  # not the manifest's bytes: read as it is, as before (not kept)
        try:
            meta = pq.read_metadata(pa.BufferReader(raw))
        except UNREADABLE:
            return None
        tokens = footer_group_tokens(meta, self.field, entry.token_count(self.field), index.parts - 1)
        with _MEMO:
            _GROUPS.put(memo, tokens)
        return None if tokens is None else (index.row_starts[:index.parts], tokens)

    @staticmethod
    def _index(version: DatasetVersion, s: int) -> ShardIndex | None:
        """The shard's index (checked against the manifest when fetched: kept by its sha256), or None."""
        sha = version.manifest.shards[s].index_sha256
        with _MEMO:
            index = _INDEXES.get(sha)
        if index is None:
            try:
                index = version.shard_index(s)
            except NotFoundError:
                return None
            with _MEMO:
                _INDEXES.put(sha, index)
        return index

    def read_groups(self, wanted: dict[Key, np.ndarray]) -> dict[Key, np.ndarray]:
        """Exact lengths in these row groups of grouped shards, from the groups the documents are then
        taken from (each decoded once, with every column the re-hash needs, and charged to the bound)."""
        jobs = [(self.versions[k], s, wanted[(k, s)].tolist(), _columns(self.versions[k], self.field))
                for k, s in wanted]
        out = {}
        for (k, s), tables in zip(wanted, _decode_all(jobs)):
            starts, version = self.grouped[(k, s)][0], self.versions[k]
            lengths = np.zeros(version.manifest.shards[s].rows, np.int64)
            for g, table in zip(wanted[(k, s)].tolist(), tables):
                if table.num_rows != starts[g + 1] - starts[g]:
                    raise IntegrityError(f"row group {g} of shard {s} of {version.address} holds {table.num_rows} "
                                         "rows, not what its index says")
                if self.bound is not None:
                    self.bound.charge(table, 0)
                lengths[starts[g]:starts[g + 1]] = document_lengths(table.column(self.field))
                self._decoded[(k, s, g)] = table
            out[(k, s)] = lengths
        return out

    def documents(self, docs: list[Doc], at: tuple[int, int, int]) -> tuple[dict, dict, dict]:
        """Per document (sorted): its tokens, its stored row hash and whether its bytes still hash to
        it. Taken from cached shards (their blocks checked first) and the row groups read to locate,
        and re-hashed here, a source at a time; the others read by index (rows.py re-hashes them)."""
        values, stored, intact = {}, {}, {}
        rest = []
        for k, mine in groupby(docs, key=lambda doc: doc[0]):
            version = self.versions[k]
            indices = np.array([d for _, d in mine], np.int64)
            shards = np.searchsorted(version.shard_starts, indices, side="right") - 1
            pieces, taken = [], []
            for s in distinct(shards).tolist():
                here = indices[shards == s]
                got = self._take((k, s), here - int(version.shard_starts[s]))
                if got is None:
                    rest += [(k, d) for d in here.tolist()]
                else:
                    pieces += got
                    taken += here.tolist()
            if pieces:
                _rehashed(version, self.field, pa.concat_tables(pieces), [(k, d) for d in taken], values, stored,
                          intact)
        if rest:
            self._read(rest, at, values, stored, intact)
        return values, stored, intact

    def _take(self, key: Key, rows: np.ndarray) -> list[pa.Table] | None:
        """These rows (sorted) of a cached or grouped shard with every column the re-hash needs, or None."""
        version, columns = self.versions[key[0]], _columns(self.versions[key[0]], self.field)
        shard = self.cached(key)
        if shard is not None:
            shard.check(rows, columns)  # every byte taken, before it is read
            taken = pa.Table.from_batches([shard.batch.slice(r, 1) for r in rows.tolist()]).select(columns)
            return [conformed(version, key[1], taken, columns)]
        if key not in self.grouped:
            return None
        starts = self.grouped[key][0]
        groups = np.searchsorted(starts, rows, side="right") - 1
        out = []
        for g in distinct(groups).tolist():  # locate_cold made sure each is a group read
            table = self._decoded[(*key, g)]
            taken = pa.concat_tables([table.slice(r, 1) for r in (rows[groups == g] - starts[g]).tolist()])
            if self.bound is not None:
                self.bound.charge(taken, 0)
            out.append(taken)
        return out

    def _read(self, docs: list[Doc], at: tuple[int, int, int], values: dict, stored: dict, intact: dict) -> None:
        """Documents of the other shards, read from the catalog by index and re-hashed (rows.py)."""
        step, epoch, rank = at
        zeros = np.zeros(len(docs), np.int64)
        plan = BatchPlan(step, epoch, rank, zeros, np.array([k for k, _ in docs], np.int64),
                         np.array([d for _, d in docs], np.int64), zeros.astype(bool), zeros, zeros)
        rows = self.rows.read(plan, rehash=True, bound=self.bound)
        column = rows.table.column(self.field).combine_chunks()
        starts, sizes = list_parts(column)
        items = list_items(column)
        values.update({doc: items[a:a + n] for doc, a, n in zip(docs, starts.tolist(), sizes.tolist())})
        stored.update(zip(docs, rows.stored))
        intact.update(zip(docs, rows.verified.tolist()))

    def close(self) -> None:
        for shard in self._open.values():
            if shard is not None:
                shard.release()
        self._open.clear()
        self._decoded.clear()


def _columns(version: DatasetVersion, field: str) -> list[str]:
    """What a document is taken with: the tokens, every field (to re-hash it), the stored hash."""
    return list(dict.fromkeys([field, *(f.name for f in version.fields), HASH_COLUMN]))


def _rehashed(version: DatasetVersion, field: str, table: pa.Table, docs: list[Doc], values: dict, stored: dict,
              intact: dict) -> None:
    """Each document's tokens, stored hash and verdict, from its row of `table` (in `docs` order)."""
    names = [f.name for f in version.fields]
    now = row_hashes(table.select(names), names)
    hashes = hash_rows(table.column(HASH_COLUMN).combine_chunks())
    column = table.column(field).combine_chunks()
    starts, sizes = list_parts(column)
    items = list_items(column)
    for i, (doc, a, n) in enumerate(zip(docs, starts.tolist(), sizes.tolist())):
        values[doc] = items[a:a + n]
        stored[doc] = hashes[i].tobytes()
        intact[doc] = stored[doc] == now[i]


def _decode_all(jobs: list[tuple]) -> list[list[pa.Table]]:
    """Each job's row groups decoded (`_decode`), the jobs of different shards in pool threads."""
    if len(jobs) < 2:
        return [_decode(*job) for job in jobs]
    return list(_pool().map(lambda job: _decode(*job), jobs))


def _pool() -> ThreadPoolExecutor:
    """The decoding threads, made once per process (a forked child makes its own): fresh threads
    cost a replay ~2 ms more, in their first decodes into memory not yet faulted in."""
    global _POOL
    with _MEMO:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(_THREADS, thread_name_prefix="dsinspect-replay"))
        return _POOL[1]


def _decode(version: DatasetVersion, shard: int, groups: list[int], columns: list[str]) -> list[pa.Table]:
    """Row groups of one shard in the manifest's schema, one after another from the shard's file (a
    file is read by one thread at a time; Arrow's own threads stay out of a pool thread)."""
    if getattr(_TALLY, "bytes", 0) >= _RELEASE_BYTES:  # what earlier replays' groups held is freed by now
        pa.default_memory_pool().release_unused()
        _TALLY.bytes = 0
    with _OPENING:  # the version's open files are an LRU, not for threads
        file = version.parquet(shard)
    out = []
    for g in groups:
        try:
            table = file.read_row_group(g, columns=columns, use_threads=False)
        except UNREADABLE as e:
            raise arrow_error(e, f"row group {g} of shard {shard} of {version.address} is not readable "
                                 f"({version.shard_url(shard)})", IntegrityError) from None
        out.append(conformed(version, shard, table, columns))
    _TALLY.bytes = getattr(_TALLY, "bytes", 0) + sum(t.nbytes for t in out)
    return out


def _locate(spec: RunSpec, plans: list[BatchPlan], shards: _Shards) -> list[list]:
    """Each plan's sequences: in stored document order, shards not cached are located by row groups."""
    if by_groups(spec):
        probe = PackedRun(spec, lambda k, s: np.zeros(0, np.int64))
        for key in probe.shards_of(plans):
            got = shards.groups(key)
            if got is not None:
                shards.grouped[key] = got
    return locate_cold(spec, plans, shards.lengths, shards.grouped, shards.read_groups)


def _read_rank(sequences: list, shards: _Shards, packing: SequenceSpec, at: tuple[int, int, int],
               names: tuple[str, ...]) -> tuple[PackedBatch, list[tuple[int, int, str]]]:
    """One rank's packed batch from its located sequences: each document read (and re-hashed) once.
    `packing`: how the run packs its field; `at`: step, epoch and rank."""
    step, epoch, rank = at
    docs = sorted({(s.source, d) for s in sequences for d in s.segments.docs.tolist()})
    values, stored, intact = shards.documents(docs, at)
    tokens = np.stack([assemble(s.segments, partial(_of, values, s.source), packing.eos, packing.width,
                                packing.pad_token) for s in sequences])
    hashes = [np.frombuffer(b"".join(stored[(s.source, d)] for d in s.segments.docs.tolist()), np.uint8)
              for s in sequences]
    damaged = [(rank, i, f"{names[s.source]}:{d}") for i, s in enumerate(sequences)
               for d in s.segments.docs.tolist() if not intact[(s.source, d)]]
    digests = sequence_digests([s.segments for s in sequences], hashes)
    return PackedBatch(step, epoch, rank, tokens, sequences, names, digests, packing.length), damaged


def _of(values: dict, source: int, doc: int) -> np.ndarray:
    return values[(source, doc)]


def documents_spec(spec: RunSpec) -> RunSpec:
    """A row spec over the same versions, for reading a packed run's documents as rows by index."""
    return spec.replace(sequences=None, start=Start(), last_batch=LastBatch.PAD, epoch_size=None)
