"""Replay the packed batch of (step, rank): its sequences by arithmetic (`sequences/`, no iteration),
then only the documents they take tokens from, read from the catalog and re-hashed (rows.py). The
batch comes back as the `PackedLoader` yields it (tokens, segments, digests, fingerprint), with each
document whose bytes no longer hash to its stored row hash named."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.audit.bounds import ReadBound
from dsinspect.loaders.audit.replay import SpecSource, parse_rank, resolve
from dsinspect.loaders.audit.rows import RowReader
from dsinspect.loaders.format.token_counts import list_items, list_parts
from dsinspect.loaders.order.plan import BatchPlan, locate_step
from dsinspect.loaders.order.spec import LastBatch, RunSpec, Start
from dsinspect.loaders.read.packed import packed_run
from dsinspect.loaders.read.packed_batch import PackedBatch
from dsinspect.loaders.sequences.digests import sequence_digests
from dsinspect.loaders.sequences.segments import assemble
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["PackedReplay", "replay_packed"]


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
                  max_bytes: int | None = None) -> PackedReplay:
    """The packed batch that `rank` (or "all") read at `step`; `spec` may be a run record directory.
    `max_bytes` bounds the documents' row groups and rows held (audit/bounds.py)."""
    run_spec, record = resolve(spec, step)
    if run_spec.sequences is None:
        raise UserError("this run reads rows, not packed sequences: use replay")
    ranks = parse_rank(rank, run_spec)
    run = packed_run(catalog, run_spec)
    field, eos = run_spec.sequences.field, run_spec.sequences.eos
    documents = RowReader(catalog, documents_spec(run_spec), [field])
    names = tuple(f"{s.name}@{s.version}" for s in run_spec.sources)
    epoch = locate_step(run_spec, step)[0]
    bound = None if max_bytes is None else ReadBound(max_bytes, f"step {step}: the documents of the packed batch")
    batches, damaged = [], []
    for r in ranks:
        batch, bad = _read_rank(run.batch(step, r), documents, (field, eos, run_spec.sequences.length),
                                (step, epoch, r), names, bound)
        batches.append(batch)
        damaged += bad
    return PackedReplay(run_spec, step, epoch, batches, damaged, record.end if record is not None else None)


def _read_rank(sequences: list, documents: RowReader, packing: tuple[str, int | None, int], at: tuple[int, int, int],
               names: tuple[str, ...], bound: ReadBound | None) -> tuple[PackedBatch, list[tuple[int, int, str]]]:
    """One rank's packed batch from its located sequences: each document read (and re-hashed) once.
    `packing`: the field, EOS and sequence length; `at`: step, epoch and rank."""
    field, eos, length = packing
    step, epoch, rank = at
    keys = sorted({(s.source, d) for s in sequences for d in s.segments.docs.tolist()})
    zeros = np.zeros(len(keys), np.int64)
    plan = BatchPlan(step, epoch, rank, zeros, np.array([k for k, _ in keys], np.int64),
                     np.array([d for _, d in keys], np.int64), zeros.astype(bool), zeros, zeros)
    rows = documents.read(plan, rehash=True, bound=bound)
    column = rows.table.column(field).combine_chunks()
    starts, sizes = list_parts(column)
    items = list_items(column)
    values = {key: items[a:a + n] for key, a, n in zip(keys, starts.tolist(), sizes.tolist())}
    stored = dict(zip(keys, rows.stored))
    intact = dict(zip(keys, rows.verified.tolist()))
    tokens = np.stack([assemble(s.segments, partial(_of, values, s.source), eos) for s in sequences])
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
