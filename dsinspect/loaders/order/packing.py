"""How a source's documents become sequences: the packing spec a run records (part of the order;
the arithmetic of each packing is in `sequences/`).

A sequence is `length` tokens, or `length + 1` with `labels` (Megatron's convention: sequence j holds
stream tokens [j*L, j*L + L + 1), so consecutive sequences share one token and the model's labels are
the inputs shifted by one). Without `labels` sequences do not overlap (OLMo-core's `NumpyFSLDataset`).
`eos` is appended after every document when given; None concatenates the documents as stored (corpora
written by Megatron's or OLMo's tools already end each document with it).

`best_fit` packs each shard's documents into exactly ceil(shard tokens / width) sequences (so the
manifest's per-shard counts still locate every sequence); the room a shard's sequences leave is
filled with `pad` (default: `eos`, else 0), which the loss mask excludes. `pad` puts one document in a
sequence (a longer one in several), the rest padding: its per-shard counts depend on every document's
length, so the run spec records them (`pad_sequences`, counted when the spec is created).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dsinspect.errors import UserError

__all__ = ["Packing", "SequenceSpec", "sequence_count", "pad_sequences", "pad_bounds"]


class Packing(str, enum.Enum):
    CONCAT = "concat"  # documents concatenated (with EOS) and cut into windows; the epoch's tail dropped
    BEST_FIT = "best_fit"  # each shard's documents packed by best-fit decreasing (sequences/best_fit.py)
    PAD = "pad"  # one document per sequence, a longer one split into several, the rest padded (sequences/pad.py)


@dataclass(frozen=True)
class SequenceSpec:
    length: int
    field: str = "tokens"  # the tokens field whose documents are packed
    labels: bool = False
    eos: int | None = None
    packing: Packing = Packing.CONCAT
    shuffle_documents: bool = False  # a seeded order of documents (shards, then documents within each)
    pad: int | None = None  # best_fit, pad: the token that fills a sequence's unused room (None: eos, else 0)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "packing", Packing(self.packing))
        except ValueError:
            raise UserError(f"packing must be one of {', '.join(p.value for p in Packing)}, "
                            f"not {self.packing!r}") from None
        if not isinstance(self.field, str) or not self.field:
            raise UserError(f"the field to pack must be a field name, not {self.field!r}")
        if not (isinstance(self.length, int) and not isinstance(self.length, bool) and self.length >= 1):
            raise UserError(f"sequence length must be an integer >= 1, not {self.length!r}")
        if self.eos is not None and not (isinstance(self.eos, int) and not isinstance(self.eos, bool)
                                         and self.eos >= 0):
            raise UserError(f"eos must be a token id (an integer >= 0) or none, not {self.eos!r}")
        if self.pad is not None:
            if not (isinstance(self.pad, int) and not isinstance(self.pad, bool) and self.pad >= 0):
                raise UserError(f"pad must be a token id (an integer >= 0) or none, not {self.pad!r}")
            if self.packing is Packing.CONCAT:
                raise UserError("pad is for best_fit and pad packing: concat sequences are full")
        for name in ("labels", "shuffle_documents"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be true or false, not {getattr(self, name)!r}")

    @property
    def width(self) -> int:
        """Tokens in one sequence: L, or L + 1 with labels."""
        return self.length + int(self.labels)

    @property
    def overlap(self) -> int:
        """Tokens a sequence shares with the next: 1 with labels under concat, else 0 (a best_fit or
        pad sequence holds its own L + 1 tokens)."""
        return int(self.labels and self.packing is Packing.CONCAT)

    @property
    def pad_token(self) -> int:
        """The token a best_fit or pad sequence's unused room holds."""
        return self.pad if self.pad is not None else self.eos if self.eos is not None else 0

    def to_json(self) -> dict[str, Any]:
        out = {"field": self.field, "length": self.length, "labels": self.labels, "eos": self.eos,
               "packing": self.packing.value, "shuffle_documents": self.shuffle_documents}
        if self.pad is not None:  # only when set: the order hashes of earlier specs stay as they were
            out["pad"] = self.pad
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "sequences") -> "SequenceSpec":
        try:
            return cls(field=data["field"], length=data["length"], labels=data["labels"], eos=data["eos"],
                       packing=data["packing"], shuffle_documents=data["shuffle_documents"], pad=data.get("pad"))
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
        except (KeyError, TypeError) as e:
            raise UserError(f"{where}: malformed sequence spec ({e.__class__.__name__}: {e})") from None


def sequence_count(shard_tokens: Sequence[int], shard_documents: Sequence[int], spec: SequenceSpec,
                   shard_sequences: Sequence[int] | None = None) -> int:
    """Sequences per epoch of a source whose shards hold `shard_documents` documents of `shard_tokens`
    tokens. `concat`: the stream (with an EOS per document when asked) cut every `length` tokens, a
    last sequence needing all its `width` tokens. `best_fit`: each shard's tokens (with EOS) in
    ceil(tokens / width) sequences. `pad`: the sum of `shard_sequences` (`pad_sequences` of each shard)."""
    eos = int(spec.eos is not None)
    if spec.packing is Packing.PAD:
        if shard_sequences is None:
            raise UserError("pad packing needs each shard's sequence count (RunSpec.create counts them)")
        return sum(shard_sequences)
    if spec.packing is Packing.BEST_FIT:
        return sum(-(-(t + eos * d) // spec.width) for t, d in zip(shard_tokens, shard_documents))
    stream = sum(shard_tokens) + eos * sum(shard_documents)
    return max(0, (stream - spec.overlap) // spec.length)


def pad_sequences(lengths: np.ndarray, spec: SequenceSpec) -> int:
    """Sequences `pad` packing makes of documents of `lengths` tokens: ceil((m + [eos]) / width) each
    (an empty document without EOS makes none)."""
    sizes = np.asarray(lengths, np.int64) + int(spec.eos is not None)
    return int((-(-sizes // spec.width)).sum())


def pad_bounds(tokens: int, documents: int, spec: SequenceSpec) -> tuple[int, int]:
    """The least and most sequences `pad` can make of `documents` documents holding `tokens` tokens: a
    recorded count outside them was not counted from these documents."""
    stream = tokens + documents * int(spec.eos is not None)
    return -(-stream // spec.width), (stream + documents * (spec.width - 1)) // spec.width
