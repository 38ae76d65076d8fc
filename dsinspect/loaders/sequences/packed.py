"""A run of packed sequences: what each (step, rank) reads, down to document segments, and where any
document was read. The run spec's order (order/plan.py) picks sequence indices exactly as it picks
rows; each source's packing (concat.py, best_fit.py, pad.py) turns an index into documents, and back."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.order.inverse import Reading, reading_in, source_epoch_begins_before
from dsinspect.loaders.order.packing import Packing
from dsinspect.loaders.order.plan import BatchPlan, plan_batch
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.sequences.best_fit import BestFitPlan
from dsinspect.loaders.sequences.blocks import BlockPlan
from dsinspect.loaders.sequences.concat import ConcatPlan
from dsinspect.loaders.sequences.layout import TokenLayout
from dsinspect.loaders.sequences.pad import PadPlan
from dsinspect.loaders.sequences.segments import DocumentSpan, Segments

__all__ = ["PackedRun", "PackedSequence", "SequenceTable", "DocumentReading"]


@dataclass(frozen=True)
class PackedSequence:
    """Slot `slot` of a batch: sequence `sequence` of source `source` in its epoch `source_epoch`."""

    slot: int
    source: int
    source_epoch: int
    sequence: int
    padding: bool
    segments: Segments


@dataclass(frozen=True)
class SequenceTable:
    """Many sequences as flat arrays: per sequence its source, source epoch, index and padding flag;
    per document segment (grouped by sequence, each sequence's in stream order) its document and token
    range; `bounds[i]:bounds[i + 1]` are sequence i's segments. The read path's form: a batch holds no
    object per sequence until one is asked for (`sequences`)."""

    sources: np.ndarray
    epochs: np.ndarray
    indices: np.ndarray
    padding: np.ndarray
    bounds: np.ndarray  # len(sequences) + 1
    docs: np.ndarray
    starts: np.ndarray
    stops: np.ndarray

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def sizes(self) -> np.ndarray:
        return self.stops - self.starts

    @property
    def owner(self) -> np.ndarray:
        """Per segment, its sequence's position in the table."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.bounds))

    def rows(self, a: int, b: int) -> "SequenceTable":
        """Sequences a..b-1 (views: nothing copied)."""
        lo, hi = int(self.bounds[a]), int(self.bounds[b])
        return SequenceTable(self.sources[a:b], self.epochs[a:b], self.indices[a:b], self.padding[a:b],
                             self.bounds[a:b + 1] - lo, self.docs[lo:hi], self.starts[lo:hi], self.stops[lo:hi])

    def segments(self, i: int) -> Segments:
        a, b = int(self.bounds[i]), int(self.bounds[i + 1])
        return Segments(self.docs[a:b], self.starts[a:b], self.stops[a:b])

    def sequences(self) -> list[PackedSequence]:
        """A `PackedSequence` per sequence, slot = its position in the table."""
        return [PackedSequence(slot, k, e, j, p, self.segments(slot)) for slot, (k, e, j, p) in
                enumerate(zip(self.sources.tolist(), self.epochs.tolist(), self.indices.tolist(),
                              self.padding.tolist()))]

    @classmethod
    def of(cls, sequences: Sequence[PackedSequence]) -> "SequenceTable":
        """The table of `PackedSequence`s (slot i at position i)."""
        def column(name: str, dtype: type = np.int64) -> np.ndarray:
            return np.array([getattr(s, name) for s in sequences], dtype)

        def flat(name: str) -> np.ndarray:
            parts = [getattr(s.segments, name) for s in sequences]
            return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

        bounds = np.concatenate([[0], np.cumsum([len(s.segments) for s in sequences], dtype=np.int64)])
        return cls(column("source"), column("source_epoch"), column("sequence"), column("padding", bool), bounds,
                   flat("docs"), flat("starts"), flat("stops"))


@dataclass(frozen=True)
class DocumentReading:
    """Tokens [span.start, span.stop) of a document, read at `reading` from `span.offset` of its sequence."""

    reading: Reading
    span: DocumentSpan


def _plan(spec: RunSpec, k: int, lengths: Callable[[int], np.ndarray]) -> ConcatPlan | BlockPlan:
    """Source k's packing."""
    s, packing = spec.sources[k], spec.sequences
    layout = TokenLayout(np.asarray(s.shard_rows), np.asarray(s.shard_tokens), lengths)
    if packing.packing is Packing.BEST_FIT:
        return BestFitPlan(layout, packing, spec.seed, k)
    if packing.packing is Packing.PAD:
        return PadPlan(layout, packing, spec.seed, k, np.asarray(s.shard_sequences))
    return ConcatPlan(layout, packing, spec.seed, k)


class PackedRun:
    """`lengths(source, shard)` gives the document lengths of one shard of a source, in stored order
    (the caller's I/O; asked only for the shards a located sequence or document touches)."""

    def __init__(self, spec: RunSpec, lengths: Callable[[int, int], np.ndarray]):
        if spec.sequences is None:
            raise UserError("this run reads rows, not packed sequences (its spec has no `sequences`)")
        self.spec = spec
        self.plans = [_plan(spec, k, partial(lengths, k)) for k in range(len(spec.sources))]

    def batch(self, step: int, rank: int) -> list[PackedSequence]:
        """Each slot of `rank`'s batch at `step`: its sequence and that sequence's document segments."""
        return self.sequences_of([plan_batch(self.spec, step, rank)])[0]

    def sequences_of(self, plans: Sequence[BatchPlan]) -> list[list[PackedSequence]]:
        """The sequences each batch plan names (plans of many steps come at once from `plan_steps`)."""
        table, out, at = self.locate(plans), [], 0
        for plan in plans:
            n = len(plan.indices)
            out.append(table.rows(at, at + n).sequences())
            at += n
        return out

    def locate(self, plans: Sequence[BatchPlan]) -> SequenceTable:
        """Every sequence the plans name, in order, with its document segments: those of one source
        epoch located together (one vectorised pass per shard touched)."""
        sources = np.concatenate([p.sources for p in plans]).astype(np.int64)
        epochs = np.concatenate([p.source_epochs for p in plans]).astype(np.int64)
        indices = np.concatenate([p.indices for p in plans]).astype(np.int64)
        padding = np.concatenate([p.padding for p in plans]).astype(bool)
        groups = list(dict.fromkeys(zip(sources.tolist(), epochs.tolist())))
        if len(groups) == 1:  # one source epoch (nearly every batch): already in order
            owner, docs, starts, stops = self.plans[groups[0][0]].segments_many(groups[0][1], indices)
        else:
            parts = []
            for k, epoch in groups:
                picked = np.flatnonzero((sources == k) & (epochs == epoch))
                owner, *segs = self.plans[k].segments_many(epoch, indices[picked])
                parts.append((picked[owner], *segs))
            owner, docs, starts, stops = (np.concatenate(x) for x in zip(*parts))
            order = np.argsort(owner, kind="stable")  # by sequence; within one, stream order is kept
            owner, docs, starts, stops = owner[order], docs[order], starts[order], stops[order]
        bounds = np.searchsorted(owner, np.arange(len(indices) + 1))
        return SequenceTable(sources, epochs, indices, padding, bounds, docs, starts, stops)

    def shards_of(self, plans: Sequence[BatchPlan]) -> list[tuple[int, int]]:
        """The (source, shard) pairs the batches of `plans` take tokens from, in order of first need:
        from the per-shard counts alone, no document length read (what a reader fetches ahead)."""
        sources = np.concatenate([p.sources for p in plans]).tolist()
        epochs = np.concatenate([p.source_epochs for p in plans]).tolist()
        indices = np.concatenate([p.indices for p in plans])
        wanted: dict[tuple[int, int], None] = {}
        for k, epoch in dict.fromkeys(zip(sources, epochs)):
            picked = [i for i, key in enumerate(zip(sources, epochs)) if key == (k, epoch)]
            wanted.update(dict.fromkeys((k, s) for s in self.plans[k].shards(epoch, indices[picked])))
        return list(wanted)

    def where(self, source: int, doc: int, until_step: int) -> list[DocumentReading]:
        """Every reading of document `doc` of source `source` before `until_step`, in step order."""
        if not 0 <= source < len(self.plans):
            raise UserError(f"source {source} is outside 0..{len(self.plans) - 1}")
        plan = self.plans[source]
        found = []
        source_epoch = 0
        while source_epoch_begins_before(self.spec, source, source_epoch, until_step):
            for span in plan.spans(source_epoch, doc):
                r = reading_in(self.spec, source, source_epoch, span.sequence)
                if r is not None and r.step < until_step:
                    found.append(DocumentReading(r, span))
            source_epoch += 1
        return sorted(found, key=lambda d: (d.reading.step, d.reading.rank, d.reading.slot))
