"""`PackedBatch`: one rank's batch of packed sequences at one step, and what a model takes from it
(docs/PRETRAINING.md, "What a batch carries").

Tokens are `[B, W]` with W the sequence width (L, or L + 1 with `labels`: inputs `tokens[:, :-1]`,
labels `tokens[:, 1:]`). Position ids and `cu_seqlens` follow the document segments, so attention
and positions restart at every document (the EOS appended after a document belongs to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dsinspect.arrays import ranges
from dsinspect.errors import UserError
from dsinspect.loaders.records.runlog import batch_fingerprint
from dsinspect.loaders.sequences.packed import PackedSequence

__all__ = ["PackedBatch", "Segment"]


@dataclass(frozen=True)
class Segment:
    """Tokens [start, stop) of document `address` (dataset@version:index) at [offset, offset + stop - start)
    of its sequence; a stop one past the document's length is the EOS appended to it."""

    address: str
    start: int
    stop: int
    offset: int


@dataclass(frozen=True, eq=False)
class PackedBatch:
    step: int
    epoch: int
    rank: int
    tokens: np.ndarray            # [B, W], the stored token type
    sequences: list[PackedSequence]
    sources: tuple[str, ...]      # each source's dataset@version
    digests: np.ndarray           # [B, 16] uint8: each sequence's digest (sequences/digests.py)
    length: int                   # L: W is L + 1 when the sequences carry a label token

    def __len__(self) -> int:
        return len(self.sequences)

    def __repr__(self) -> str:
        return f"PackedBatch(step={self.step}, epoch={self.epoch}, rank={self.rank}, tokens={self.tokens.shape})"

    @property
    def padding(self) -> np.ndarray:
        """Per sequence: a repeat that fills the epoch's last global batch (last_batch="pad")."""
        return np.fromiter((s.padding for s in self.sequences), bool, len(self.sequences))

    @property
    def fingerprint(self) -> str:
        """What the run record keeps for the step (as for rows: of the joined per-sample digests)."""
        return batch_fingerprint(self.digests)

    @cached_property
    def _flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every segment of the batch in slot order: (its sequence, its size, its offset in the sequence)."""
        sizes = [s.segments.sizes for s in self.sequences]
        counts = np.fromiter((len(x) for x in sizes), np.int64, len(sizes))
        size = np.concatenate(sizes).astype(np.int64) if sizes else np.zeros(0, np.int64)
        owner = np.repeat(np.arange(len(sizes), dtype=np.int64), counts)
        before = np.cumsum(size) - size
        firsts = np.cumsum(counts) - counts
        offset = before - np.repeat(before[firsts[counts > 0]], counts[counts > 0]) if len(size) else before
        return owner, size, offset

    @cached_property
    def held(self) -> np.ndarray:
        """Per sequence, the document tokens it holds: W, or fewer for a best_fit sequence whose room
        after them is padding (`pad_token`)."""
        owner, size, _ = self._flat
        return np.bincount(owner, weights=size, minlength=len(self.sequences)).astype(np.int64)

    @cached_property
    def _tiles(self) -> tuple[np.ndarray, np.ndarray]:
        """The pieces that tile the flattened `[B * W]` tokens in order: each sequence's segments, then
        its padding (size 0 but for a best_fit sequence with room left): (sizes, number of each piece
        within its sequence from 1, 0 for padding)."""
        owner, size, _ = self._flat
        counts = np.bincount(owner, minlength=len(self.sequences))
        ends = np.cumsum(counts)
        numbers = ranges(np.ones(len(counts), np.int64), counts)
        pad = self.tokens.shape[1] - self.held
        return np.insert(size, ends, pad), np.insert(numbers, ends, 0)

    @cached_property
    def position_ids(self) -> np.ndarray:
        """[B, W] int32: each token's position within its document segment (the padding after a
        sequence's documents counts as a segment of its own)."""
        sizes, _ = self._tiles
        starts = np.cumsum(sizes) - sizes
        return (np.arange(self.tokens.size, dtype=np.int64) - np.repeat(starts, sizes)).astype(np.int32).reshape(
            self.tokens.shape)

    @cached_property
    def cu_seqlens(self) -> np.ndarray:
        """int32 offsets of every document segment in the flattened `[B * W]` tokens, from 0 to B * W
        (FlashAttention's varlen `cu_seqlens`: one attention block per segment, none across)."""
        return self.cu_seqlens_of(self.tokens.shape[1])

    def cu_seqlens_of(self, length: int) -> np.ndarray:
        """`cu_seqlens` of the first `length` tokens of each sequence, flattened to `[B * length]` (the
        model's inputs `tokens[:, :L]` when the sequences carry a label token: the last segment ends at L).
        The padding after a best_fit sequence's documents is one more segment."""
        owner, size, offset = self._flat
        start, end = np.minimum(offset, length), np.minimum(offset + size, length)
        keep = end > start  # segments past `length` (a label token's) hold none of the first `length`
        padded = np.flatnonzero(self.held < length)
        ends = np.concatenate([[0], end[keep] + owner[keep] * length, padded * length + length])
        return np.sort(ends).astype(np.int32)

    @property
    def max_seqlen(self) -> int:
        """The longest segment (FlashAttention's `max_seqlen`)."""
        return int(np.diff(self.cu_seqlens).max(initial=0))

    @cached_property
    def segment_ids(self) -> np.ndarray:
        """[B, W] int32: each token's segment within its sequence, numbered from 1, 0 on padding after
        the documents (the segmentation JAX attention kernels and Grain's packing take: tokens attend
        only within equal ids)."""
        sizes, numbers = self._tiles
        return np.repeat(numbers.astype(np.int32), sizes).reshape(self.tokens.shape)

    @cached_property
    def document_segments(self) -> np.ndarray:
        """[S, 6] int64, a row per document segment in slot order: (slot, source, document, start,
        stop, offset): the addresses of `segments(i)` as numbers (`sources[source]:document`), for
        adapters whose batches hold arrays only."""
        owner, _, offset = self._flat
        if not len(owner):
            return np.zeros((0, 6), np.int64)
        slots = np.fromiter((s.slot for s in self.sequences), np.int64, len(self.sequences))
        sources = np.fromiter((s.source for s in self.sequences), np.int64, len(self.sequences))
        table = np.empty((len(owner), 6), np.int64)
        table[:, 0], table[:, 1], table[:, 5] = slots[owner], sources[owner], offset
        for column, name in ((2, "docs"), (3, "starts"), (4, "stops")):
            table[:, column] = np.concatenate([getattr(s.segments, name) for s in self.sequences])
        return table

    def model_arrays(self, token_dtype: type = np.int64) -> dict[str, np.ndarray]:
        """What a causal language model's step takes, `[B, L]` each: `input_ids` and `labels` (with
        a label token, inputs `tokens[:, :L]` and labels `tokens[:, 1:]`; without, the tokens as
        both: the model shifts them), `position_ids` and `segment_ids` of the inputs, and `loss_mask`
        of the labels (False where the label is padding). Token ids `token_dtype` cannot hold are refused."""
        length = self.length
        tokens = self.tokens
        if tokens.size and np.dtype(token_dtype).itemsize < 8 and int(tokens.max()) > np.iinfo(token_dtype).max:
            raise UserError(f"token id {int(tokens.max())} in step {self.step} does not fit {np.dtype(token_dtype)}")
        tokens = tokens.astype(token_dtype)
        inputs = tokens[:, :length]
        return {"input_ids": inputs, "labels": tokens[:, 1:] if tokens.shape[1] > length else inputs,
                "position_ids": self.position_ids[:, :length], "segment_ids": self.segment_ids[:, :length],
                "loss_mask": self.loss_mask[:, 1:] if tokens.shape[1] > length else self.loss_mask}

    @cached_property
    def loss_mask(self) -> np.ndarray:
        """[B, W] bool: False over a padding sequence (its tokens count once, in the batch that read them)
        and over the padding after a best_fit sequence's documents."""
        real = np.arange(self.tokens.shape[1]) < self.held[:, None]
        return real & ~self.padding[:, None]

    def segments(self, i: int) -> list[Segment]:
        """The documents of sequence `i`: each one's address and the token range taken from it."""
        seq = self.sequences[i]
        source = self.sources[seq.source]
        offsets = np.concatenate([[0], np.cumsum(seq.segments.sizes)])
        return [Segment(f"{source}:{doc}", start, stop, offset)
                for doc, start, stop, offset in zip(seq.segments.docs.tolist(), seq.segments.starts.tolist(),
                                                    seq.segments.stops.tolist(), offsets.tolist())]
