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
    def held(self) -> np.ndarray:
        """Per sequence, the document tokens it holds: W, or fewer for a best_fit sequence whose room
        after them is padding (`pad_token`)."""
        return np.fromiter((int(s.segments.sizes.sum()) for s in self.sequences), np.int64, len(self.sequences))

    @cached_property
    def position_ids(self) -> np.ndarray:
        """[B, W] int32: each token's position within its document segment (the padding after a
        sequence's documents counts as a segment of its own)."""
        width = self.tokens.shape[1]
        out = np.zeros(self.tokens.shape, np.int32)
        for i, (s, held) in enumerate(zip(self.sequences, self.held.tolist())):
            out[i, :held] = s.segments.position_ids()
            out[i, held:] = np.arange(width - held, dtype=np.int32)
        return out

    @cached_property
    def cu_seqlens(self) -> np.ndarray:
        """int32 offsets of every document segment in the flattened `[B * W]` tokens, from 0 to B * W
        (FlashAttention's varlen `cu_seqlens`: one attention block per segment, none across)."""
        return self.cu_seqlens_of(self.tokens.shape[1])

    def cu_seqlens_of(self, length: int) -> np.ndarray:
        """`cu_seqlens` of the first `length` tokens of each sequence, flattened to `[B * length]` (the
        model's inputs `tokens[:, :L]` when the sequences carry a label token: the last segment ends at L)."""
        ends = [np.unique(np.minimum(np.append(np.cumsum(s.segments.sizes), length), length)) + i * length
                for i, s in enumerate(self.sequences)]  # the padding after the documents: one more segment
        return np.concatenate([[0], *ends]).astype(np.int32)

    @property
    def max_seqlen(self) -> int:
        """The longest segment (FlashAttention's `max_seqlen`)."""
        return int(np.diff(self.cu_seqlens).max(initial=0))

    @cached_property
    def segment_ids(self) -> np.ndarray:
        """[B, W] int32: each token's segment within its sequence, numbered from 1, 0 on padding after
        the documents (the segmentation JAX attention kernels and Grain's packing take: tokens attend
        only within equal ids)."""
        out = np.zeros(self.tokens.shape, np.int32)
        for i, (s, held) in enumerate(zip(self.sequences, self.held.tolist())):
            out[i, :held] = np.repeat(np.arange(1, len(s.segments) + 1, dtype=np.int32), s.segments.sizes)
        return out

    @cached_property
    def document_segments(self) -> np.ndarray:
        """[S, 6] int64, a row per document segment in slot order: (slot, source, document, start,
        stop, offset): the addresses of `segments(i)` as numbers (`sources[source]:document`), for
        adapters whose batches hold arrays only."""
        rows = [np.column_stack([np.full(len(s.segments), s.slot), np.full(len(s.segments), s.source),
                                 s.segments.docs, s.segments.starts, s.segments.stops,
                                 np.cumsum(s.segments.sizes) - s.segments.sizes]) for s in self.sequences]
        return np.concatenate(rows).astype(np.int64) if rows else np.zeros((0, 6), np.int64)

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
