"""A run of packed sequences: what each (step, rank) reads, down to document segments, and where any
document was read. The run spec's order (order/plan.py) picks sequence indices exactly as it picks
rows; each source's packing (concat.py) turns an index into documents, and back."""

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
from dsinspect.loaders.sequences.concat import ConcatPlan
from dsinspect.loaders.sequences.layout import TokenLayout
from dsinspect.loaders.sequences.segments import DocumentSpan, Segments

__all__ = ["PackedRun", "PackedSequence", "DocumentReading"]


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
class DocumentReading:
    """Tokens [span.start, span.stop) of a document, read at `reading` from `span.offset` of its sequence."""

    reading: Reading
    span: DocumentSpan


class PackedRun:
    """`lengths(source, shard)` gives the document lengths of one shard of a source, in stored order
    (the caller's I/O; asked only for the shards a located sequence or document touches)."""

    def __init__(self, spec: RunSpec, lengths: Callable[[int, int], np.ndarray]):
        if spec.sequences is None:
            raise UserError("this run reads rows, not packed sequences (its spec has no `sequences`)")
        self.spec = spec
        plan = BestFitPlan if spec.sequences.packing is Packing.BEST_FIT else ConcatPlan
        self.plans = [plan(TokenLayout(np.asarray(s.shard_rows), np.asarray(s.shard_tokens), partial(lengths, k)),
                           spec.sequences, spec.seed, k) for k, s in enumerate(spec.sources)]

    def batch(self, step: int, rank: int) -> list[PackedSequence]:
        """Each slot of `rank`'s batch at `step`: its sequence and that sequence's document segments."""
        return self.sequences_of([plan_batch(self.spec, step, rank)])[0]

    def sequences_of(self, plans: Sequence[BatchPlan]) -> list[list[PackedSequence]]:
        """The sequences each batch plan names (plans of many steps come at once from `plan_steps`), the
        segments of all those of one source epoch located together."""
        sources = np.concatenate([p.sources for p in plans]).tolist()
        epochs = np.concatenate([p.source_epochs for p in plans]).tolist()
        indices = np.concatenate([p.indices for p in plans])
        segments: list[Segments | None] = [None] * len(indices)
        for k, epoch in dict.fromkeys(zip(sources, epochs)):
            picked = [i for i, key in enumerate(zip(sources, epochs)) if key == (k, epoch)]
            owner, docs, starts, stops = self.plans[k].segments_many(epoch, indices[picked])
            cuts = np.searchsorted(owner, np.arange(len(picked) + 1)).tolist()
            for i, at in enumerate(picked):
                a, b = cuts[i], cuts[i + 1]
                segments[at] = Segments(docs[a:b], starts[a:b], stops[a:b])
        out, at = [], 0
        for plan in plans:
            n = len(plan.indices)
            out.append([PackedSequence(slot, sources[at + slot], epochs[at + slot], j, padding, segments[at + slot])
                        for slot, (j, padding) in enumerate(zip(plan.indices.tolist(), plan.padding.tolist()))])
            at += n
        return out

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
