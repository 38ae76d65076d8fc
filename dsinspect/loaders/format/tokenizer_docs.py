"""How an OpenAI encoding (cl100k_base, o200k_base) is stored in the catalog: one self-contained JSON
document, written from the `bpe-openai` package's data files at ingest and read back by the viewers,
so they decode offline and exactly as at ingest, whatever that package's later data.

Reads the package's files without importing it; nothing here needs tiktoken.
"""

from __future__ import annotations

import base64
import gzip
import importlib.util
import json
from pathlib import Path
from typing import NamedTuple

from dsinspect.extras import missing_extra

__all__ = ["TIKTOKEN_ENCODINGS", "TIKTOKEN_FORMAT", "TiktokenDocument", "bundled_encoding", "tiktoken_document",
           "read_tiktoken_document"]

TIKTOKEN_ENCODINGS = ("cl100k_base", "o200k_base")
TIKTOKEN_FORMAT = "dsinspect.tiktoken/1"
_MAX_ID = 1 << 24  # ids beyond any real vocabulary: a document naming one is refused, not allocated

# tiktoken's split patterns and special tokens for the two public encodings (as in tiktoken_ext.openai_public;
# a test holds them equal to what bpe-openai ships). The merge ranks are read from bpe-openai's data files.
_O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+""",
])
_ENCODINGS = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
         "<|endofprompt|>": 100276}),
    "o200k_base": (_O200K_PATTERN, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}


class TiktokenDocument(NamedTuple):
    """A stored encoding as read back: the bytes of every rank (None for a rank without bytes)."""
    name: str
    pat_str: str
    ranks: list[bytes | None]
    special_tokens: dict[str, int]


def _bundled_ranks(name: str) -> dict[bytes, int]:
    """The merge ranks of `name` from the bpe-openai package's data files (found without importing it)."""
    if name not in _ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}: known are {', '.join(TIKTOKEN_ENCODINGS)}")
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise missing_extra(["tokenizers"], f"the {name} encoding (its data comes with the bpe-openai package)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.tiktoken.gz"
    ranks: dict[bytes, int] = {}
    with gzip.open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def bundled_encoding(name: str) -> dict:
    """The encoding `name` from bundled data, as `tiktoken.Encoding`'s keyword arguments."""
    pattern, special = _ENCODINGS.get(name, (None, None))
    ranks = _bundled_ranks(name)
    return {"name": name, "pat_str": pattern, "mergeable_ranks": ranks, "special_tokens": dict(special)}


def tiktoken_document(name: str) -> bytes:
    """The encoding `name` as one self-contained JSON document (sorted keys, no spaces, so the same
    bytes and sha256 every time): what ingest stores in the catalog as a blob.

        {"format": "dsinspect.tiktoken/1", "name": ..., "pat_str": ..., "special_tokens": {text: id},
         "ranks": [base64 of the bytes of rank 0, of rank 1, ...]}   (null for a rank without bytes)
    """
    ctor = bundled_encoding(name)
    ranks = ctor["mergeable_ranks"]
    pieces: list[str | None] = [None] * (max(ranks.values(), default=-1) + 1)
    for piece, rank in ranks.items():
        pieces[rank] = base64.b64encode(piece).decode("ascii")
    doc = {"format": TIKTOKEN_FORMAT, "name": name, "pat_str": ctor["pat_str"],
           "special_tokens": ctor["special_tokens"], "ranks": pieces}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def read_tiktoken_document(data: bytes) -> TiktokenDocument:
    """A `tiktoken_document` (e.g. read from the catalog) checked and decoded; ValueError when malformed."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != TIKTOKEN_FORMAT:
        raise ValueError(f"not a {TIKTOKEN_FORMAT} document")
    ranks, special, label = doc.get("ranks"), doc.get("special_tokens"), doc.get("name")
    if not (isinstance(ranks, list) and isinstance(special, dict) and isinstance(doc.get("pat_str"), str)
            and isinstance(label, str)):
        raise ValueError(f"{TIKTOKEN_FORMAT} document without name, ranks, special_tokens or pat_str")
    if not all(p is None or isinstance(p, str) for p in ranks) or len(ranks) >= _MAX_ID:
        raise ValueError(f"{TIKTOKEN_FORMAT} ranks must be fewer than {_MAX_ID} base64 strings or nulls")
    if not all(type(i) is int and 0 <= i < _MAX_ID for i in special.values()):
        raise ValueError(f"special token ids must be integers in [0, {_MAX_ID})")
    pieces = [None if p is None else base64.b64decode(p, validate=True) for p in ranks]
    return TiktokenDocument(label, doc["pat_str"], pieces, special)
