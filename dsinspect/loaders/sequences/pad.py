"""`pad` packing: one document per sequence. A document of m tokens (with its EOS, when asked) fills
ceil(m / W) sequences of W tokens (W = L, or L + 1 with labels: like best_fit, a pad sequence holds
its own label token): pieces [0, W), [W, 2W), ..., the last one's room after the document filled with
`pad` and masked from the loss. No token is dropped; an empty document without EOS makes no sequence.
(OLMo-core's `NumpyPaddedFSLDataset` keeps only a document's first L tokens; here the rest follow.)

Within a shard the documents come in the epoch's order (stored, or the seeded document shuffle), each
one's pieces in order. A shard's sequence count depends on every document's length, which the manifest
does not keep: the run spec records it (`RunSpec.create` counts it once), and a shard packed here is
checked against that count (blocks.py)."""

from __future__ import annotations

import numpy as np

from dsinspect.arrays import ranges
from dsinspect.loaders.sequences.blocks import BlockPlan, ShardPacking

__all__ = ["PadPlan", "pack_padded"]


def pack_padded(sizes: np.ndarray, width: int, order: np.ndarray | None = None) -> ShardPacking:
    """Documents of `sizes` tokens (EOS included), in `order` (default: stored order), each cut into
    pieces of `width` tokens, a piece a sequence."""
    sizes = np.asarray(sizes, np.int64)
    order = np.arange(len(sizes), dtype=np.int64) if order is None else np.asarray(order, np.int64)
    sized = sizes[order]
    pieces = -(-sized // width)
    piece = ranges(np.zeros(len(pieces), np.int64), pieces)  # each piece's number within its document
    starts = piece * width
    stops = np.minimum(starts + width, np.repeat(sized, pieces))
    count = len(piece)
    return ShardPacking(np.arange(count, dtype=np.int64), np.repeat(order, pieces), starts, stops,
                        np.arange(count + 1, dtype=np.int64))


class PadPlan(BlockPlan):
    """The sequences of one source under `pad` packing, for any epoch; built with `counts[s]`, the
    sequences shard s makes as the run spec records them (the interface of ConcatPlan)."""

    def _pack(self, sizes: np.ndarray, order: np.ndarray | None) -> ShardPacking:
        return pack_padded(sizes, self.spec.width, order)
