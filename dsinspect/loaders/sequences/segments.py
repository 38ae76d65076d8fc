"""What one packed sequence holds: its document segments, and what a model derives from them
(position ids that restart at each document, `cu_seqlens` for variable-length attention)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["Segments", "DocumentSpan", "assemble"]


@dataclass(frozen=True)
class Segments:
    """The documents of one sequence in order: document `docs[i]` contributes its tokens
    [starts[i], stops[i]) (a stop one past the document's length is its appended EOS)."""

    docs: np.ndarray
    starts: np.ndarray
    stops: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        return self.stops - self.starts

    def cu_seqlens(self) -> np.ndarray:
        """Cumulative segment sizes from 0 (FlashAttention's varlen `cu_seqlens`), int32."""
        return np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int32)

    def position_ids(self) -> np.ndarray:
        """Each token's position in its own document segment (restarting at every segment)."""
        sizes = self.sizes
        total = int(sizes.sum())
        firsts = np.repeat(np.cumsum(sizes) - sizes, sizes)
        return (np.arange(total, dtype=np.int64) - firsts).astype(np.int32)

    def __len__(self) -> int:
        return len(self.docs)


@dataclass(frozen=True)
class DocumentSpan:
    """Where a document's tokens [start, stop) went: sequence `sequence` of the epoch, from `offset` on."""

    sequence: int
    start: int
    stop: int
    offset: int


def assemble(segments: Segments, tokens_of: Callable[[int], np.ndarray], eos: int | None,
             width: int | None = None, pad: int = 0) -> np.ndarray:
    """The sequence's tokens: each segment's stretch of its document (EOS appended when given), then
    `pad` up to `width` tokens when given (a best_fit or pad sequence's room after its documents)."""
    parts = []
    for doc, start, stop in zip(segments.docs.tolist(), segments.starts.tolist(), segments.stops.tolist()):
        tokens = np.asarray(tokens_of(doc))
        parts.append(tokens[start:stop])
        if eos is not None and stop > len(tokens):
            parts.append(np.asarray([eos], dtype=tokens.dtype))
    out = np.concatenate(parts)
    if width is not None and len(out) < width:
        out = np.concatenate([out, np.full(width - len(out), pad, dtype=out.dtype)])
    return out
