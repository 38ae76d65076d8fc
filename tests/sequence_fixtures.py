"""Shared by the packed-sequence tests: documents whose every token names its document and position,
and an epoch's stream written out by brute force (the reference the arithmetic is checked against)."""

from __future__ import annotations

import numpy as np

from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.permutation import Permutation, key_of
from dsinspect.loaders.sequences.layout import TokenLayout

EOS = 10**9


def layout_of(lengths: list[list[int]], calls: list[int] | None = None) -> TokenLayout:
    def shard_lengths(s: int) -> np.ndarray:
        if calls is not None:
            calls.append(s)
        return np.asarray(lengths[s], dtype=np.int64)

    return TokenLayout(np.array([len(x) for x in lengths]), np.array([sum(x) for x in lengths]), shard_lengths)


def tokens_of(doc: int, lengths: list[list[int]]) -> np.ndarray:
    flat = [n for shard in lengths for n in shard]
    return doc * 1000 + np.arange(flat[doc], dtype=np.int64)  # every (document, position) its own token


def brute_stream(lengths: list[list[int]], spec: SequenceSpec, seed: int, epoch: int,
                 source: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The epoch's stream written out: its tokens, and the document of each token."""
    shard_order = np.arange(len(lengths))
    if spec.shuffle_documents:
        shard_order = Permutation(len(lengths), key_of("doc-shards", seed, source, epoch))(shard_order)
    starts = np.concatenate([[0], np.cumsum([len(x) for x in lengths])])
    tokens, docs = [], []
    for shard in shard_order.tolist():
        order = np.arange(len(lengths[shard]))
        if spec.shuffle_documents:
            order = Permutation(len(order), key_of("doc-order", seed, source, epoch, shard))(order)
        for local in order.tolist():
            doc = int(starts[shard]) + local
            t = list(tokens_of(doc, lengths)) + ([EOS] if spec.eos is not None else [])
            tokens += t
            docs += [doc] * len(t)
    return np.asarray(tokens, dtype=np.int64), np.asarray(docs, dtype=np.int64)
