"""Packings that fill each shard's sequences from that shard's documents alone (`best_fit`, `pad`):
the shard is the block. An epoch lays the shards out in their seeded order, each holding the number of
sequences the run spec's counts give it, so sequence j is found with one binary search over shards and
only the shard that holds it is read and packed (kept per (epoch, shard) in a small LRU). The packings
differ only in how a shard's documents fill its sequences (`BlockPlan._pack`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.permutation import Permutation, key_of
from dsinspect.loaders.sequences.layout import TokenLayout, epoch_places
from dsinspect.loaders.sequences.segments import DocumentSpan, Segments
from dsinspect.lru import LRU

__all__ = ["BlockPlan", "ShardPacking"]

_EPOCHS_KEPT = 4
_SHARDS_KEPT = 64


@dataclass(frozen=True, eq=False)
class ShardPacking:
    """One shard's sequences: segment i puts tokens [starts[i], stops[i]) of local document docs[i] in
    sequence seqs[i]; segments are grouped by sequence (ascending), each sequence's in the order they sit
    in it. `first[k]` is the first segment of sequence k (and the total at the end)."""

    seqs: np.ndarray
    docs: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    first: np.ndarray

    @property
    def count(self) -> int:
        return len(self.first) - 1


class BlockPlan:
    """The sequences of one source whose shard s packs into `counts[s]` sequences, for any epoch (the
    interface of ConcatPlan). A subclass packs one shard (`_pack`)."""

    def __init__(self, layout: TokenLayout, spec: SequenceSpec, seed: int, source: int, counts: np.ndarray):
        self.layout, self.spec, self.seed, self.source = layout, spec, seed, source
        self._eos = int(spec.eos is not None)
        self._counts = np.asarray(counts, np.int64)  # sequences of each shard
        self.sequences = int(self._counts.sum())
        if self.sequences < 1:
            raise UserError("no document to pack: every shard is empty")
        self._epochs: LRU[int, tuple[np.ndarray, np.ndarray]] = LRU(_EPOCHS_KEPT)
        self._packed: LRU[tuple[int, int], ShardPacking] = LRU(_SHARDS_KEPT)

    def _pack(self, sizes: np.ndarray, order: np.ndarray | None) -> ShardPacking:
        """A shard's documents of `sizes` tokens (EOS included) in its sequences; `order`: the epoch's
        order of its documents (None: stored order)."""
        raise NotImplementedError

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(shard at each place of the epoch's order, first sequence of each place + the end)."""
        hit = self._epochs.get(epoch)
        if hit is None:
            hit = epoch_places(self._counts, self.spec.shuffle_documents, self.seed, self.source, epoch)
            self._epochs.put(epoch, hit)
        return hit

    def _shard(self, epoch: int, shard: int) -> ShardPacking:
        key = (epoch, shard)
        hit = self._packed.get(key)
        if hit is None:
            sizes = self.layout.shard_lengths(shard) + self._eos
            order = None
            if self.spec.shuffle_documents:
                order = Permutation(len(sizes), key_of("doc-order", self.seed, self.source, epoch, shard))(
                    np.arange(len(sizes), dtype=np.int64))
            hit = self._pack(sizes, order)
            if hit.count != self._counts[shard]:  # pad's counts come from the spec, not from these documents
                raise UserError(f"shard {shard} of source {self.source}: its documents make {hit.count:,} "
                                f"{self.spec.packing.value} sequences, the run spec counts {self._counts[shard]:,} "
                                "(a spec made for other documents?)")
            self._packed.put(key, hit)
        return hit

    def _places(self, epoch: int, sequences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, sequence within it) of each sequence of `epoch`."""
        sequences = np.asarray(sequences, np.int64)
        if len(sequences) and (sequences.min() < 0 or sequences.max() >= self.sequences):
            bad = int(sequences[(sequences < 0) | (sequences >= self.sequences)][0])
            raise UserError(f"sequence {bad} is outside 0..{self.sequences - 1}")
        shards, firsts = self._epoch(epoch)
        place = np.searchsorted(firsts, sequences, side="right") - 1
        return shards[place], sequences - firsts[place]

    def shards(self, epoch: int, sequences: np.ndarray) -> list[int]:
        """The shards these sequences of `epoch` take tokens from (one each), in order of first need."""
        return list(dict.fromkeys(self._places(epoch, sequences)[0].tolist()))

    def segments(self, epoch: int, sequence: int) -> Segments:
        """The document segments of sequence `sequence` of `epoch`, in the order they sit in it."""
        _, docs, starts, stops = self.segments_many(epoch, np.array([sequence], np.int64))
        return Segments(docs, starts, stops)

    def segments_many(self, epoch: int, sequences: np.ndarray) -> tuple[np.ndarray, ...]:
        """Every segment of many sequences of `epoch`, as flat arrays (owner, docs, starts, stops) grouped
        by sequence in the given order (`owner[i]`: the position in `sequences` of segment i's)."""
        shard, local = self._places(epoch, sequences)
        parts = []
        for i, (s, k) in enumerate(zip(shard.tolist(), local.tolist())):
            packed = self._shard(epoch, s)
            a, b = int(packed.first[k]), int(packed.first[k + 1])
            parts.append((np.full(b - a, i, np.int64), self.layout.doc_starts[s] + packed.docs[a:b],
                          packed.starts[a:b], packed.stops[a:b]))
        if not parts:
            return tuple(np.zeros(0, np.int64) for _ in range(4))
        return tuple(np.concatenate(x) for x in zip(*parts))

    def spans(self, epoch: int, doc: int) -> list[DocumentSpan]:
        """Every sequence of `epoch` that holds tokens of document `doc`, and which of them."""
        shard = self.layout.shard_of(doc)
        shards, firsts = self._epoch(epoch)
        place = shard if not self.spec.shuffle_documents else \
            int(Permutation(len(shards), key_of("doc-shards", self.seed, self.source, epoch)).inverse(shard))
        packed = self._shard(epoch, shard)
        local = doc - int(self.layout.doc_starts[shard])
        sizes = packed.stops - packed.starts
        within = np.cumsum(sizes) - sizes
        offsets = within - within[packed.first[packed.seqs]]  # where each segment sits in its sequence
        mine = np.flatnonzero(packed.docs == local)
        spans = [DocumentSpan(int(firsts[place]) + int(packed.seqs[i]), int(packed.starts[i]), int(packed.stops[i]),
                              int(offsets[i])) for i in mine.tolist()]
        return sorted(spans, key=lambda s: s.start)
