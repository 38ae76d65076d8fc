"""A source's token layout: documents and tokens per shard (what locating needs up front, memory
proportional to shards), and the function that gives one shard's document lengths when asked."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.order.permutation import Permutation, key_of

__all__ = ["TokenLayout", "epoch_places"]


@dataclass(frozen=True, eq=False)
class TokenLayout:
    """`shard_docs[s]` documents holding `shard_tokens[s]` tokens in shard s; `lengths(s)` gives the
    token count of each document of shard s, in stored order (it must sum to `shard_tokens[s]`)."""

    shard_docs: np.ndarray
    shard_tokens: np.ndarray
    lengths: Callable[[int], np.ndarray]

    def __post_init__(self) -> None:
        docs = np.asarray(self.shard_docs, dtype=np.int64)
        tokens = np.asarray(self.shard_tokens, dtype=np.int64)
        if docs.ndim != 1 or docs.shape != tokens.shape or not len(docs):
            raise UserError("a token layout needs one document count and one token count per shard")
        if (docs < 0).any() or (tokens < 0).any():
            raise UserError("document and token counts must be non-negative")
        object.__setattr__(self, "shard_docs", docs)
        object.__setattr__(self, "shard_tokens", tokens)

    @cached_property
    def doc_starts(self) -> np.ndarray:
        """The index of each shard's first document (and the total at the end)."""
        return np.concatenate([[0], np.cumsum(self.shard_docs)])

    @property
    def documents(self) -> int:
        return int(self.doc_starts[-1])

    @property
    def tokens(self) -> int:
        return int(self.shard_tokens.sum())

    def shard_of(self, doc: int) -> int:
        if not 0 <= doc < self.documents:
            raise UserError(f"document {doc} is outside 0..{self.documents - 1}")
        return int(np.searchsorted(self.doc_starts, doc, side="right") - 1)

    def shard_lengths(self, shard: int) -> np.ndarray:
        """`lengths(shard)`, checked against the layout's counts (a wrong layout reads wrong tokens)."""
        lengths = np.asarray(self.lengths(shard), dtype=np.int64)
        if lengths.shape != (self.shard_docs[shard],) or int(lengths.sum()) != self.shard_tokens[shard] \
                or (len(lengths) and lengths.min() < 0):
            raise UserError(f"shard {shard}: {len(lengths)} document lengths summing to {int(lengths.sum())}, "
                            f"the layout says {self.shard_docs[shard]} documents of {self.shard_tokens[shard]} tokens")
        return lengths


def epoch_places(per_shard: np.ndarray, shuffled: bool, seed: int, source: int, epoch: int) -> tuple[np.ndarray, ...]:
    """An epoch's shard order, every packing's: (the shard at each place, the running total of
    `per_shard` where each place starts, and the end). The shards in stored order, or with `shuffled`
    in a keyed permutation of their own per epoch (then each shard's documents in another, which the
    packings draw themselves)."""
    order = np.arange(len(per_shard), dtype=np.int64)
    if shuffled:
        order = Permutation(len(order), key_of("doc-shards", seed, source, epoch))(order)
    return order, np.concatenate([[0], np.cumsum(per_shard[order])])
