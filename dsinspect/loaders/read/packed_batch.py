"""`PackedBatch`: one rank's batch of packed sequences at one step, and what a model takes from it
(docs/PRETRAINING.md, "What a batch carries").

Tokens are `[B, W]` with W the sequence width (L, or L + 1 with `labels`: inputs `tokens[:, :-1]`,
labels `tokens[:, 1:]`). Position ids and `cu_seqlens` follow the document segments, so attention
and positions restart at every document (the EOS appended after a document belongs to it).

The batches a reader reads together (a run of consecutive steps) share one `PackedRows`: their
tokens, segments and digests as flat arrays, and what a model takes from them, each made once for the
whole run on first use (a batch's arrays are row slices of the run's). Per batch, a numpy call costs
about as much as the work in it (8 × 2,049 tokens): made per batch, position ids, segment ids and the
rest cost more than reading the batch. A run crosses a DataLoader worker's pipe as one pickle: the
rows once, whatever the number of batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence, TypeVar

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.records.runlog import batch_fingerprint
from dsinspect.loaders.sequences.packed import PackedSequence, SequenceTable

__all__ = ["PackedBatch", "PackedRows", "Segment"]

T = TypeVar("T")


@dataclass(frozen=True)
class Segment:
    """Tokens [start, stop) of document `address` (dataset@version:index) at [offset, offset + stop - start)
    of its sequence; a stop one past the document's length is the EOS appended to it."""

    address: str
    start: int
    stop: int
    offset: int


class PackedRows:
    """Sequences read together: `tokens` [N, W], their `table` (segments), `digests` [N, 16], and what a
    model takes from them, made on first use for all N (`PackedBatch` rows a..b are one batch's)."""

    def __init__(self, tokens: np.ndarray, table: SequenceTable, sources: tuple[str, ...], digests: np.ndarray,
                 length: int, steps: np.ndarray):
        self.tokens, self.table, self.sources, self.digests, self.length = tokens, table, sources, digests, length
        self.steps = steps  # each row's step
        self._shared: dict[object, object] = {}

    def shared(self, key: object, make: Callable[["PackedRows"], T]) -> T:
        """`make(self)`, made once for these rows (an adapter's conversion of the run, e.g. to tensors)."""
        if key not in self._shared:
            self._shared[key] = make(self)
        return self._shared[key]  # type: ignore[return-value]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_shared": {}}  # conversions are remade where they are used

    @cached_property
    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every segment in row order: (its row, its size, its offset in the row)."""
        table = self.table
        size = table.sizes
        before = np.cumsum(size) - size
        owner = table.owner
        return owner, size, before - before[table.bounds[owner]]

    @cached_property
    def held(self) -> np.ndarray:
        ends = np.concatenate([[0], np.cumsum(self.table.sizes)])
        return ends[self.table.bounds[1:]] - ends[self.table.bounds[:-1]]

    @cached_property
    def _tiles(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pieces that tile each row in order: its segments, then its padding (size 0 but for a
        best_fit or pad sequence with room left): (sizes, offsets in the row, numbers from 1 within the row,
        0 for padding), int32. Segment i of row j is piece i + j; j's padding follows its last
        segment. (Numpy's cumsum is ~5x slower than the `repeat`s these feed: no running sums.)"""
        owner, size, offset = self.flat
        n, width = len(self.table), self.tokens.shape[1]
        index = np.arange(len(size))
        segment, padding = index + owner, self.table.bounds[1:] + np.arange(n)
        sizes, offsets, numbers = (np.empty(len(size) + n, np.int32) for _ in range(3))
        sizes[segment], offsets[segment], numbers[segment] = size, offset, index - self.table.bounds[owner] + 1
        sizes[padding], offsets[padding], numbers[padding] = width - self.held, self.held, 0
        return sizes, offsets, numbers

    @cached_property
    def position_ids(self) -> np.ndarray:
        sizes, offsets, _ = self._tiles
        return np.arange(self.tokens.shape[1], dtype=np.int32) - np.repeat(offsets, sizes).reshape(self.tokens.shape)

    @cached_property
    def segment_ids(self) -> np.ndarray:
        sizes, _, numbers = self._tiles
        return np.repeat(numbers, sizes).reshape(self.tokens.shape)

    @cached_property
    def loss_mask(self) -> np.ndarray:
        width = self.tokens.shape[1]
        if not self.table.padding.any() and (self.held == width).all():  # full sequences (concat): one pass
            return np.ones(self.tokens.shape, bool)
        return (np.arange(width) < self.held[:, None]) & ~self.table.padding[:, None]

    @cached_property
    def document_segments(self) -> np.ndarray:
        """[S, 6] int64: (row, source, document, start, stop, offset) of every segment."""
        owner, _, offset = self.flat
        table = self.table
        return np.stack([owner, table.sources[owner], table.docs, table.starts, table.stops, offset],
                        axis=1).astype(np.int64)

    def cuts(self, length: int) -> np.ndarray:
        """Where every segment of the first `length` tokens of each row ends in the flattened `[N * length]`,
        from 0, sorted (each row's end among them): a batch's `cu_seqlens_of(length)` is a stretch of it."""
        return self.shared(("cuts", length), lambda rows: rows._cuts(length))

    def _cuts(self, length: int) -> np.ndarray:
        owner, size, offset = self.flat
        start, end = np.minimum(offset, length), np.minimum(offset + size, length)
        keep = end > start  # segments past `length` (a label token's) hold none of the first `length`
        padded = np.flatnonzero(self.held < length)  # best_fit or pad padding, or a row with no segment: one more
        return np.sort(np.concatenate([[0], end[keep] + owner[keep] * length, padded * length + length]))

    def model_arrays(self, token_dtype: type, a: int, b: int) -> dict[str, np.ndarray]:
        """`PackedBatch.model_arrays` of rows a..b: slices of all the rows' (made once per type), refused
        when one of these rows holds a token id the type cannot hold (a row that does is wrapped in the
        run's arrays, never handed over)."""
        if np.dtype(token_dtype).itemsize < 8 and b > a:
            limit = np.iinfo(token_dtype).max
            top = self.shared("row_max", lambda rows: rows.tokens.max(axis=1, initial=0))[a:b]
            if int(top.max()) > limit:
                row = a + int(np.argmax(top > limit))
                raise UserError(f"token id {int(self.tokens[row].max())} in step {int(self.steps[row])} does not fit "
                                f"{np.dtype(token_dtype)}")
        arrays = self.shared(("model_arrays", np.dtype(token_dtype).str), lambda rows: rows._model_arrays(token_dtype))
        return {name: array[a:b] for name, array in arrays.items()}

    def _model_arrays(self, token_dtype: type) -> dict[str, np.ndarray]:
        length, tokens = self.length, self.tokens.astype(token_dtype)
        inputs = tokens[:, :length]
        labelled = tokens.shape[1] > length
        return {"input_ids": inputs, "labels": tokens[:, 1:] if labelled else inputs,
                "position_ids": self.position_ids[:, :length], "segment_ids": self.segment_ids[:, :length],
                "loss_mask": self.loss_mask[:, 1:] if labelled else self.loss_mask}


class PackedBatch:
    """Rows `rows[a:b]` of sequences read together, as the batch of `step` for `rank`. Built from a
    list of `PackedSequence` (slot i at position i) or their `SequenceTable` as `PackedBatch(step,
    epoch, rank, tokens, sequences, sources, digests, length)`, or from shared rows by `of_rows`."""

    def __init__(self, step: int, epoch: int, rank: int, tokens: np.ndarray,
                 sequences: Sequence[PackedSequence] | SequenceTable, sources: tuple[str, ...], digests: np.ndarray,
                 length: int):
        if not isinstance(sequences, SequenceTable):
            self.__dict__["sequences"] = list(sequences)
            sequences = SequenceTable.of(sequences)
        rows = PackedRows(tokens, sequences, sources, digests, length, np.full(len(sequences), step, np.int64))
        self._init(step, epoch, rank, rows, 0, len(sequences))

    @classmethod
    def of_rows(cls, step: int, epoch: int, rank: int, rows: PackedRows, a: int, b: int) -> "PackedBatch":
        batch = cls.__new__(cls)
        batch._init(step, epoch, rank, rows, a, b)
        return batch

    def _init(self, step: int, epoch: int, rank: int, rows: PackedRows, a: int, b: int) -> None:
        self.step, self.epoch, self.rank = step, epoch, rank
        self.rows, self.a, self.b = rows, a, b
        self.sources, self.length = rows.sources, rows.length  # each source's dataset@version; L

    def __len__(self) -> int:
        return self.b - self.a

    def __repr__(self) -> str:
        return f"PackedBatch(step={self.step}, epoch={self.epoch}, rank={self.rank}, tokens={self.tokens.shape})"

    @property
    def tokens(self) -> np.ndarray:
        """[B, W], the stored token type."""
        return self.rows.tokens[self.a:self.b]

    @property
    def digests(self) -> np.ndarray:
        """[B, 16] uint8: each sequence's digest (sequences/digests.py)."""
        return self.rows.digests[self.a:self.b]

    @cached_property
    def table(self) -> SequenceTable:
        return self.rows.table.rows(self.a, self.b)

    @cached_property
    def sequences(self) -> list[PackedSequence]:
        """Per slot its source, source epoch, sequence index, padding flag and segments."""
        return self.table.sequences()

    @property
    def padding(self) -> np.ndarray:
        """Per sequence: a repeat that fills the epoch's last global batch (last_batch="pad")."""
        return self.rows.table.padding[self.a:self.b]

    @property
    def fingerprint(self) -> str:
        """What the run record keeps for the step (as for rows: of the joined per-sample digests)."""
        return batch_fingerprint(self.digests)

    @property
    def _segments(self) -> slice:
        """This batch's segments among the rows'."""
        return slice(int(self.rows.table.bounds[self.a]), int(self.rows.table.bounds[self.b]))

    @property
    def held(self) -> np.ndarray:
        """Per sequence, the document tokens it holds: W, or fewer for a best_fit or pad sequence whose room
        after them is padding (`pad_token`)."""
        return self.rows.held[self.a:self.b]

    @property
    def position_ids(self) -> np.ndarray:
        """[B, W] int32: each token's position within its document segment (the padding after a
        sequence's documents counts as a segment of its own)."""
        return self.rows.position_ids[self.a:self.b]

    @property
    def segment_ids(self) -> np.ndarray:
        """[B, W] int32: each token's segment within its sequence, numbered from 1, 0 on padding after
        the documents (the segmentation JAX attention kernels and Grain's packing take: tokens attend
        only within equal ids)."""
        return self.rows.segment_ids[self.a:self.b]

    @property
    def loss_mask(self) -> np.ndarray:
        """[B, W] bool: False over a padding sequence (its tokens count once, in the batch that read them)
        and over the padding after a best_fit or pad sequence's documents."""
        return self.rows.loss_mask[self.a:self.b]

    @property
    def cu_seqlens(self) -> np.ndarray:
        """int32 offsets of every document segment in the flattened `[B * W]` tokens, from 0 to B * W
        (FlashAttention's varlen `cu_seqlens`: one attention block per segment, none across)."""
        return self.cu_seqlens_of(self.tokens.shape[1])

    def cu_seqlens_of(self, length: int) -> np.ndarray:
        """`cu_seqlens` of the first `length` tokens of each sequence, flattened to `[B * length]` (the
        model's inputs `tokens[:, :L]` when the sequences carry a label token: the last segment ends at L).
        The padding after a best_fit or pad sequence's documents is one more segment."""
        cuts = self.rows.cuts(length)
        lo, hi = np.searchsorted(cuts, [self.a * length, self.b * length], side="left")
        return (cuts[lo:hi + 1] - self.a * length).astype(np.int32)

    @property
    def max_seqlen(self) -> int:
        """The longest segment (FlashAttention's `max_seqlen`)."""
        return int(np.diff(self.cu_seqlens).max(initial=0))

    @property
    def document_segments(self) -> np.ndarray:
        """[S, 6] int64, a row per document segment in slot order: (slot, source, document, start,
        stop, offset): the addresses of `segments(i)` as numbers (`sources[source]:document`), for
        adapters whose batches hold arrays only."""
        table = self.rows.document_segments[self._segments].copy()
        table[:, 0] -= self.a
        return table

    def model_arrays(self, token_dtype: type = np.int64) -> dict[str, np.ndarray]:
        """What a causal language model's step takes, `[B, L]` each: `input_ids` and `labels` (with
        a label token, inputs `tokens[:, :L]` and labels `tokens[:, 1:]`; without, the tokens as
        both: the model shifts them), `position_ids` and `segment_ids` of the inputs, and `loss_mask`
        of the labels (False where the label is padding). Token ids `token_dtype` cannot hold are refused."""
        return self.rows.model_arrays(token_dtype, self.a, self.b)

    def segments(self, i: int) -> list[Segment]:
        """The documents of sequence `i`: each one's address and the token range taken from it."""
        segments = self.table.segments(i)
        source = self.sources[int(self.table.sources[i])]
        offsets = np.concatenate([[0], np.cumsum(segments.sizes)])
        return [Segment(f"{source}:{doc}", start, stop, offset)
                for doc, start, stop, offset in zip(segments.docs.tolist(), segments.starts.tolist(),
                                                    segments.stops.tolist(), offsets.tolist())]
