"""`concat` packing: each epoch's documents concatenated (EOS after each, when asked) into one token
stream, cut into sequences of L tokens every L (L+1 with labels, sharing one token with the next).
The tokens after the epoch's last whole sequence are not read; the next epoch starts a new stream.

The document order of an epoch is its shards in a seeded order, each shard's documents in a seeded
order (stored order without `shuffle_documents`). So sequence j is found by two binary searches:
the shard stream offsets (one array per epoch, memory proportional to shards) and that shard's
document offsets (built from its lengths on first use, kept in a small LRU). A document's sequences
are the same arithmetic backwards. Nothing reads all the documents.
"""

from __future__ import annotations

import numpy as np

from dsinspect.arrays import distinct, ranges
from dsinspect.errors import UserError
from dsinspect.loaders.order.packing import SequenceSpec, sequence_count
from dsinspect.loaders.order.permutation import Permutation, key_of
from dsinspect.loaders.sequences.layout import TokenLayout, epoch_places
from dsinspect.loaders.sequences.segments import DocumentSpan, Segments
from dsinspect.lru import LRU

__all__ = ["ConcatPlan"]

_EPOCHS_KEPT = 4
_SHARDS_KEPT = 64


class ConcatPlan:
    """The sequences of one source under `concat` packing, for any epoch."""

    def __init__(self, layout: TokenLayout, spec: SequenceSpec, seed: int = 0, source: int = 0):
        self.layout, self.spec, self.seed, self.source = layout, spec, seed, source
        self._eos = int(spec.eos is not None)
        self._stream = layout.shard_tokens + self._eos * layout.shard_docs  # tokens each shard adds to a stream
        self.sequences = sequence_count(layout.shard_tokens.tolist(), layout.shard_docs.tolist(), spec)
        if self.sequences < 1:
            raise UserError(f"{int(self._stream.sum()):,} tokens (with EOS) make no sequence of {spec.width:,} tokens")
        self._epochs: LRU[int, tuple[np.ndarray, np.ndarray]] = LRU(_EPOCHS_KEPT)
        self._shards: LRU[tuple[int, int], tuple[np.ndarray, np.ndarray]] = LRU(_SHARDS_KEPT)
        self._lengths: LRU[int, np.ndarray] = LRU(_SHARDS_KEPT)  # a shard's lengths serve every epoch

    # -- the order of an epoch -------------------------------------------------------------------

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(shard at each place of the epoch's order, stream offset where each place starts + the end)."""
        hit = self._epochs.get(epoch)
        if hit is None:
            hit = epoch_places(self._stream, self.spec.shuffle_documents, self.seed, self.source, epoch)
            self._epochs.put(epoch, hit)
        return hit

    def _shard(self, epoch: int, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """(local document at each place of the shard's order, offset where each place starts + the end)."""
        key = (epoch, shard)
        hit = self._shards.get(key)
        if hit is None:
            lengths = self._shard_lengths(shard)
            order = np.arange(len(lengths), dtype=np.int64)
            if self.spec.shuffle_documents:
                order = Permutation(len(lengths), key_of("doc-order", self.seed, self.source, epoch, shard))(order)
            hit = order, np.concatenate([[0], np.cumsum(lengths[order] + self._eos)])
            self._shards.put(key, hit)
        return hit

    def _shard_lengths(self, shard: int) -> np.ndarray:
        lengths = self._lengths.get(shard)
        if lengths is None:
            lengths = self.layout.shard_lengths(shard)
            self._lengths.put(shard, lengths)
        return lengths

    # -- sequence -> documents ---------------------------------------------------------------------

    def shards(self, epoch: int, sequences: np.ndarray) -> list[int]:
        """The shards these sequences of `epoch` take tokens from, in order of first need: from the
        per-shard counts alone (what a reader fetches ahead before any document length is known)."""
        _, place = self._places(epoch, np.asarray(sequences, np.int64))
        return list(dict.fromkeys(self._epoch(epoch)[0][place].tolist()))

    def _places(self, epoch: int, sequences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(owner, place): each (sequence, place in the epoch's shard order) a window overlaps, in order,
        but for places whose shard adds nothing to the stream; `owner` is the sequence's position."""
        lo = sequences * self.spec.length
        shards, offsets = self._epoch(epoch)
        first = np.searchsorted(offsets, lo, side="right") - 1
        last = np.searchsorted(offsets, lo + self.spec.width - 1, side="right") - 1
        counts = last - first + 1
        owner = np.repeat(np.arange(len(lo), dtype=np.int64), counts)
        place = ranges(first, counts)
        keep = offsets[place] < offsets[place + 1]
        return owner[keep], place[keep]

    def _window(self, sequence: int) -> tuple[int, int]:
        """The stream range [lo, hi) of a sequence."""
        if not 0 <= sequence < self.sequences:
            raise UserError(f"sequence {sequence} is outside 0..{self.sequences - 1}")
        lo = sequence * self.spec.length
        return lo, lo + self.spec.width

    def segments(self, epoch: int, sequence: int) -> Segments:
        """The document segments of sequence `sequence` of `epoch`, in stream order."""
        self._window(sequence)  # refuses a sequence outside the epoch
        _, docs, starts, stops = self.segments_many(epoch, np.array([sequence], np.int64))
        return Segments(docs, starts, stops)

    def segments_many(self, epoch: int, sequences: np.ndarray) -> tuple[np.ndarray, ...]:
        """Every segment of many sequences of `epoch` at once, as flat arrays (owner, docs, starts, stops)
        grouped by sequence in the given order, within each in stream order (`owner[i]`: the position in
        `sequences` of segment i's). Vectorised: one pass per distinct shard touched, not per sequence."""
        lo = np.asarray(sequences, np.int64) * self.spec.length
        hi = lo + self.spec.width
        shards, offsets = self._epoch(epoch)
        owner, place = self._places(epoch, np.asarray(sequences, np.int64))
        begin = offsets[place]
        a = np.maximum(lo[owner], begin) - begin  # the window's part of this shard
        b = np.minimum(hi[owner], offsets[place + 1]) - begin
        shard = shards[place]
        parts = []
        for s in distinct(shard).tolist():
            pick = np.flatnonzero(shard == s)
            local, within = self._shard(epoch, s)
            qa = np.searchsorted(within, a[pick], side="right") - 1
            qb = np.searchsorted(within, b[pick] - 1, side="right")
            n = qb - qa
            pair = np.repeat(pick, n)
            q = ranges(qa, n)
            seg_start = np.maximum(a[pair] - within[q], 0)
            seg_stop = np.minimum(b[pair] - within[q], within[q + 1] - within[q])
            parts.append((pair, self.layout.doc_starts[s] + local[q], seg_start, seg_stop))
        pair, docs, starts, stops = (np.concatenate(x) for x in zip(*parts)) if parts else \
            (np.zeros(0, np.int64) for _ in range(4))
        order = np.argsort(pair, kind="stable")  # by (sequence, place): within a pair q already ascends
        pair, docs, starts, stops = pair[order], docs[order], starts[order], stops[order]
        keep = stops > starts
        return owner[pair[keep]], docs[keep], starts[keep], stops[keep]

    # -- document -> sequences ---------------------------------------------------------------------

    def spans(self, epoch: int, doc: int) -> list[DocumentSpan]:
        """Every sequence of `epoch` that holds tokens of document `doc`, and which of them, in order
        (none when the document lies in the epoch's unread tail or adds no token)."""
        shard = self.layout.shard_of(doc)
        shards, offsets = self._epoch(epoch)
        place = shard if not self.spec.shuffle_documents else \
            int(Permutation(len(shards), key_of("doc-shards", self.seed, self.source, epoch)).inverse(shard))
        local, within = self._shard(epoch, shard)
        at = doc - int(self.layout.doc_starts[shard])
        q = at if not self.spec.shuffle_documents else \
            int(Permutation(len(local), key_of("doc-order", self.seed, self.source, epoch, shard)).inverse(at))
        begin = int(offsets[place]) + int(within[q])
        size = int(within[q + 1] - within[q])
        if size == 0:
            return []
        length, width = self.spec.length, self.spec.width
        first = max(0, (begin - width) // length + 1)
        last = min(self.sequences - 1, (begin + size - 1) // length)
        spans = []
        for j in range(first, last + 1):
            lo = max(begin, j * length)
            hi = min(begin + size, j * length + width)
            spans.append(DocumentSpan(j, lo - begin, hi - begin, lo - j * length))
        return spans
