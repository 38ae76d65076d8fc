"""`best_fit` packing: each shard's documents packed into sequences by best-fit decreasing, one shard
at a time (a shard is the block: OLMo-core's `NumpyPackedFSLDataset` packs blocks of documents the
same way; Ding et al., "Fewer Truncations Improve Language Modeling", ICML 2024).

A shard whose documents hold T tokens (with an EOS each, when asked) becomes exactly
S = ceil(T / W) sequences of W tokens (W = L, or L + 1 with labels: a best_fit sequence holds its own
label token, none is shared). S comes from the manifest's per-shard counts alone, so the epoch's
layout (the shards in their seeded order, each S sequences) locates sequence j with one binary search
over shards, as `concat` does, and only the shard that holds it is read and packed.

Within a shard: a document of m tokens gives floor(m / W) full pieces (each a sequence of its own)
and a remainder piece of m mod W tokens. The remainder pieces, longest first (ties in the epoch's
document order), each go to the open sequence whose free room fits it most tightly, or to a new
sequence while the shard has sequences left. A piece that fits nowhere then (rare: best fit into
ceil(T / W) sequences leaves at most W - 1 tokens free in all) is split over the sequences with the
most room, largest first. No token is dropped and no document truncated; the free room, fewer than
W tokens per shard, is padding. `packing_stats` counts the split documents and the padding.

Packing a shard is a loop over its documents (bisect over the open sequences' free room): ~2 us a
document, kept per (epoch, shard) in a small LRU.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

import numpy as np

from dsinspect.arrays import distinct, ranges
from dsinspect.errors import UserError
from dsinspect.loaders.order.packing import Packing, SequenceSpec, sequence_count
from dsinspect.loaders.order.permutation import Permutation, key_of
from dsinspect.loaders.sequences.layout import TokenLayout, epoch_places
from dsinspect.loaders.sequences.segments import DocumentSpan, Segments
from dsinspect.lru import LRU

__all__ = ["BestFitPlan", "ShardPacking", "pack_shard", "packing_stats"]

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


def pack_shard(sizes: np.ndarray, width: int, order: np.ndarray | None = None) -> ShardPacking:
    """Pack documents of `sizes` tokens (EOS included) into ceil(sum / width) sequences of `width`
    tokens by best-fit decreasing (the module's rules); `order` breaks ties between equal remainders
    (default: stored order)."""
    sizes = np.asarray(sizes, np.int64)
    total = int(sizes.sum())
    count = -(-total // width)
    order = np.arange(len(sizes), dtype=np.int64) if order is None else np.asarray(order, np.int64)
    sized = sizes[order]
    full = sized // width
    # full pieces first, a sequence each, in document order
    full_docs = np.repeat(order, full)
    piece = ranges(np.zeros(len(full), np.int64), full)  # each full piece's number within its document
    seqs = [np.arange(len(full_docs), dtype=np.int64)]
    docs, starts, stops = [full_docs], [piece * width], [(piece + 1) * width]
    # the remainders, longest first, each where it fits most tightly
    rest = sized % width
    ranked = np.flatnonzero(rest)[np.argsort(-rest[rest > 0], kind="stable")]
    opened = len(full_docs)
    free: list[int] = []  # the open sequences' free room, ascending, and their sequence numbers alike
    which: list[int] = []
    placed_seq, placed_doc, placed_start, placed_stop = [], [], [], []
    overflow: list[int] = []
    for i in ranked.tolist():
        r, doc = int(rest[i]), int(order[i])
        at = bisect.bisect_left(free, r)
        if at < len(free):
            room, seq = free.pop(at), which.pop(at)
        elif opened < count:
            room, seq = width, opened
            opened += 1
        else:
            overflow.append(i)
            continue
        placed_seq.append(seq)
        placed_doc.append(doc)
        placed_start.append(int(full[i]) * width)
        placed_stop.append(int(sized[i]))
        if room > r:
            k = bisect.bisect_left(free, room - r)
            free.insert(k, room - r)
            which.insert(k, seq)
    for i in overflow:  # split over the sequences with the most room, largest first
        doc, start, stop = int(order[i]), int(full[i]) * width, int(sized[i])
        while start < stop:
            room, seq = free.pop(), which.pop()
            take = min(room, stop - start)
            placed_seq.append(seq)
            placed_doc.append(doc)
            placed_start.append(start)
            placed_stop.append(start + take)
            start += take
            if room > take:
                k = bisect.bisect_left(free, room - take)
                free.insert(k, room - take)
                which.insert(k, seq)
    seqs.append(np.asarray(placed_seq, np.int64))
    docs.append(np.asarray(placed_doc, np.int64))
    starts.append(np.asarray(placed_start, np.int64))
    stops.append(np.asarray(placed_stop, np.int64))
    seq, doc, start, stop = (np.concatenate(x) for x in (seqs, docs, starts, stops))
    by = np.argsort(seq, kind="stable")  # grouped by sequence, each in placement order
    seq = seq[by]
    return ShardPacking(seq, doc[by], start[by], stop[by], np.searchsorted(seq, np.arange(count + 1)))


def packing_stats(lengths: np.ndarray, spec: SequenceSpec) -> dict[str, float]:
    """What best_fit does to documents of `lengths` packed as one shard (`spec`'s width and EOS), beside
    what `concat` does to the same stream: sequences, padding fraction, documents split over several
    sequences (those longer than a sequence must be; the others), tokens dropped."""
    sizes = np.asarray(lengths, np.int64) + int(spec.eos is not None)
    width, total = spec.width, int(sizes.sum())
    packed = pack_shard(sizes, width)
    count = len(packed.first) - 1
    longer = sizes > width
    split = np.bincount(packed.docs, minlength=len(sizes)) > 1
    concat = replace(spec, packing=Packing.CONCAT, pad=None)
    windows = max(0, (total - concat.overlap) // concat.length)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    cuts = np.arange(1, windows, dtype=np.int64) * concat.length  # where one window ends and the next begins
    inside = np.searchsorted(starts, cuts, side="right") - 1
    cut_docs = distinct(inside[starts[inside] < cuts])  # a cut strictly inside a document splits it
    return {"documents": len(sizes), "tokens": total, "sequences": count,
            "padding_fraction": (width * count - total) / max(1, width * count),
            "split_longer_than_a_sequence": int(longer.sum()), "split_others": int((split & ~longer).sum()),
            "dropped_tokens": 0, "concat_sequences": windows, "concat_split": len(cut_docs),
            "concat_dropped_tokens": total - (windows * concat.length + concat.overlap if windows else 0)}


class BestFitPlan:
    """The sequences of one source under `best_fit` packing, for any epoch (the interface of ConcatPlan)."""

    def __init__(self, layout: TokenLayout, spec: SequenceSpec, seed: int = 0, source: int = 0):
        self.layout, self.spec, self.seed, self.source = layout, spec, seed, source
        self._eos = int(spec.eos is not None)
        stream = layout.shard_tokens + self._eos * layout.shard_docs
        self._counts = -(-stream // spec.width)  # sequences of each shard
        self.sequences = sequence_count(layout.shard_tokens.tolist(), layout.shard_docs.tolist(), spec)
        if self.sequences < 1:
            raise UserError("no document to pack: every shard is empty")
        self._epochs: LRU[int, tuple[np.ndarray, np.ndarray]] = LRU(_EPOCHS_KEPT)
        self._packed: LRU[tuple[int, int], ShardPacking] = LRU(_SHARDS_KEPT)

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
            hit = pack_shard(sizes, self.spec.width, order)
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
