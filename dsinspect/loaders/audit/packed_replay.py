"""Replay the packed batch of (step, rank): its sequences by arithmetic (`sequences/`, no iteration),
then only the documents they take tokens from, read from the catalog and re-hashed (rows.py). The
batch comes back as the `PackedLoader` yields it (tokens, segments, digests, fingerprint), with each
document whose bytes no longer hash to its stored row hash named.

Locating needs the document lengths of the shards a batch touches. In stored document order they
come from the row groups the windows fall in (`read/packed_reader.locate_cold`: each group's tokens
from the shard's footer, its part checked against the manifest-verified shard index, then the exact
lengths of those groups only); otherwise from the whole shard, checked against the manifest's sha256
and kept for the rest of the process (`_LENGTHS`, by sha256: the same bytes give the same lengths).
A shard whose bytes no longer match is read as it is (its lengths checked against the manifest's
counts), as before. With `cache` (a node cache, `ShardCache`), shards it holds are read from it
instead: their lengths from the verified list offsets, the documents from the blocks they occupy,
checked against the hashes taken when the shard was cached, and each re-hashed; this replays what
the node's copy holds, not the catalog's files."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.errors import IntegrityError, NotFoundError, UserError
from dsinspect.loaders.audit.bounds import ReadBound
from dsinspect.loaders.audit.replay import SpecSource, parse_rank, resolve
from dsinspect.loaders.audit.rows import RowReader
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN
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

# Per shard sha256 and field, what was read of verified bytes: the same bytes give the same answer.
_LENGTHS: LRU[tuple[str, str], np.ndarray] = LRU(256)  # a whole shard's document lengths
_GROUPS: LRU[tuple[str, str], np.ndarray | None] = LRU(4096)  # its row groups' tokens (None: not usable)
_MEMO = threading.Lock()


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
    documents = RowReader(catalog, documents_spec(run_spec), [field])
    versions = documents.versions
    for source, version in zip(run_spec.sources, versions):
        if tuple(s.token_count(field) for s in version.manifest.shards) != source.shard_tokens:
            raise IntegrityError(f"{version.address}: its shards do not match the run spec's shard sizes")
    names = tuple(f"{s.name}@{s.version}" for s in run_spec.sources)
    epoch = locate_step(run_spec, step)[0]
    bound = None if max_bytes is None else ReadBound(max_bytes, f"step {step}: the documents of the packed batch")
    shards = _Shards(versions, field, cache)
    try:
        per_rank = _locate(run_spec, [plan_batch(run_spec, step, r) for r in ranks], shards, documents)
        batches, damaged = [], []
        for r, sequences in zip(ranks, per_rank):
            batch, bad = _read_rank(sequences, documents, shards, field, run_spec.sequences, (step, epoch, r), names,
                                    bound)
            batches.append(batch)
            damaged += bad
    finally:
        shards.close()
    return PackedReplay(run_spec, step, epoch, batches, damaged, record.end if record is not None else None)


class _Shards:
    """The shards a replay reads lengths and documents from: the node cache's verified copies when
    given and held, else the catalog's files."""

    def __init__(self, versions: list[DatasetVersion], field: str, cache: ShardCache | None):
        self.versions, self.field, self.cache = versions, field, cache
        self._open: dict[tuple[int, int], CachedShard | None] = {}

    def cached(self, key: tuple[int, int]) -> CachedShard | None:
        if self.cache is None:
            return None
        if key not in self._open:
            entry = self.versions[key[0]].manifest.shards[key[1]]
            self._open[key] = self.cache.open(self.versions[key[0]], key[1]) if self.cache.holds(entry.sha256) else None
        return self._open[key]

    def lengths(self, key: tuple[int, int]) -> np.ndarray:
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

    def groups(self, key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
        """(row where each row group starts + the end, tokens of each) from the shard's checked footer,
        or None (no index, a footer that does not check out, counts that do not add up)."""
        version, s = self.versions[key[0]], key[1]
        entry = version.manifest.shards[s]
        if entry.index_sha256 is None or self.cached(key) is not None:
            return None
        try:
            index = version.shard_index(s)
        except NotFoundError:
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

    def close(self) -> None:
        for shard in self._open.values():
            if shard is not None:
                shard.release()
        self._open.clear()


def _locate(spec: RunSpec, plans: list[BatchPlan], shards: _Shards, documents: RowReader) -> list[list]:
    """Each plan's sequences: in stored document order, shards not cached are located by row groups."""
    grouped: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    if by_groups(spec):
        probe = PackedRun(spec, lambda k, s: np.zeros(0, np.int64))
        for key in probe.shards_of(plans):
            got = shards.groups(key)
            if got is not None:
                grouped[key] = got

    def read_groups(wanted: dict[tuple[int, int], np.ndarray]) -> dict[tuple[int, int], np.ndarray]:
        """Exact lengths in these row groups, from the groups the documents are then read from
        (decoded once, with every column the re-hash needs: the reader keeps them)."""
        out = {}
        for (k, s), groups in wanted.items():
            version = shards.versions[k]
            starts, columns = grouped[(k, s)][0], tuple(documents._wanted(version, True))
            lengths = np.zeros(version.manifest.shards[s].rows, np.int64)
            for g in groups.tolist():
                table = documents._group(k, s, g, columns)
                if table.num_rows != starts[g + 1] - starts[g]:
                    raise IntegrityError(f"row group {g} of shard {s} of {version.address} holds {table.num_rows} "
                                         "rows, not what its index says")
                lengths[starts[g]:starts[g + 1]] = document_lengths(table.column(shards.field))
            out[(k, s)] = lengths
        return out

    return locate_cold(spec, plans, shards.lengths, grouped, read_groups)


def _read_rank(sequences: list, documents: RowReader, shards: _Shards, field: str, packing: SequenceSpec,
               at: tuple[int, int, int], names: tuple[str, ...],
               bound: ReadBound | None) -> tuple[PackedBatch, list[tuple[int, int, str]]]:
    """One rank's packed batch from its located sequences: each document read (and re-hashed) once.
    `packing`: how the run packs `field`; `at`: step, epoch and rank."""
    eos, length = packing.eos, packing.length
    step, epoch, rank = at
    keys = sorted({(s.source, d) for s in sequences for d in s.segments.docs.tolist()})
    values, stored, intact = {}, {}, {}
    rest = []  # documents read from the catalog
    by_shard: dict[tuple[int, int], list[int]] = {}  # documents of shards the node cache holds
    for k, d in keys:
        s = int(np.searchsorted(shards.versions[k].shard_starts, d, side="right") - 1)
        if shards.cached((k, s)) is None:
            rest.append((k, d))
        else:
            by_shard.setdefault((k, s), []).append(d)
    for (k, s), docs in by_shard.items():  # from the node cache: blocks checked, rows re-hashed
        shard, version = shards.cached((k, s)), shards.versions[k]
        rows = np.array(docs, np.int64) - int(version.shard_starts[s])
        names_ = [f.name for f in version.fields]
        shard.check(rows, [*dict.fromkeys([field, *names_, HASH_COLUMN])])
        table = pa.Table.from_batches([shard.batch.slice(int(r), 1) for r in rows.tolist()])
        column = table.column(field).combine_chunks()
        starts, sizes = list_parts(column)
        items = list_items(column)
        now = row_hashes(table.select(names_).cast(version.manifest.schema), names_)
        hashes = hash_rows(table.column(HASH_COLUMN).combine_chunks())
        for i, (d, a, n) in enumerate(zip(docs, starts.tolist(), sizes.tolist())):
            values[(k, d)] = items[a:a + n]
            stored[(k, d)] = hashes[i].tobytes()
            intact[(k, d)] = stored[(k, d)] == now[i]
    if rest:
        zeros = np.zeros(len(rest), np.int64)
        plan = BatchPlan(step, epoch, rank, zeros, np.array([k for k, _ in rest], np.int64),
                         np.array([d for _, d in rest], np.int64), zeros.astype(bool), zeros, zeros)
        rows = documents.read(plan, rehash=True, bound=bound)
        column = rows.table.column(field).combine_chunks()
        starts, sizes = list_parts(column)
        items = list_items(column)
        values.update({key: items[a:a + n] for key, a, n in zip(rest, starts.tolist(), sizes.tolist())})
        stored.update(zip(rest, rows.stored))
        intact.update(zip(rest, rows.verified.tolist()))
    tokens = np.stack([assemble(s.segments, partial(_of, values, s.source), eos, packing.width, packing.pad_token)
                       for s in sequences])
    hashes = [np.frombuffer(b"".join(stored[(s.source, d)] for d in s.segments.docs.tolist()), np.uint8)
              for s in sequences]
    damaged = [(rank, i, f"{names[s.source]}:{d}") for i, s in enumerate(sequences)
               for d in s.segments.docs.tolist() if not intact[(s.source, d)]]
    digests = sequence_digests([s.segments for s in sequences], hashes)
    return PackedBatch(step, epoch, rank, tokens, sequences, names, digests, length), damaged


def _of(values: dict, source: int, doc: int) -> np.ndarray:
    return values[(source, doc)]


def documents_spec(spec: RunSpec) -> RunSpec:
    """A row spec over the same versions, for reading a packed run's documents as rows by index."""
    return spec.replace(sequences=None, start=Start(), last_batch=LastBatch.PAD, epoch_size=None)
