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
document, kept per (epoch, shard) in a small LRU (blocks.py: what best_fit and pad share).
"""

from __future__ import annotations

import bisect
from dataclasses import replace

import numpy as np

from dsinspect.arrays import distinct, ranges
from dsinspect.loaders.order.packing import Packing, SequenceSpec
from dsinspect.loaders.sequences.blocks import BlockPlan, ShardPacking
from dsinspect.loaders.sequences.layout import TokenLayout

__all__ = ["BestFitPlan", "ShardPacking", "pack_shard", "packing_stats"]


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


class BestFitPlan(BlockPlan):
    """The sequences of one source under `best_fit` packing, for any epoch (the interface of ConcatPlan)."""

    def __init__(self, layout: TokenLayout, spec: SequenceSpec, seed: int = 0, source: int = 0):
        stream = layout.shard_tokens + int(spec.eos is not None) * layout.shard_docs
        super().__init__(layout, spec, seed, source, -(-stream // spec.width))

    def _pack(self, sizes: np.ndarray, order: np.ndarray | None) -> ShardPacking:
        return pack_shard(sizes, self.spec.width, order)
