"""Token vocabularies as exact bytes per id: Hugging Face `tokenizer.json` files and OpenAI's public
encodings (cl100k_base, o200k_base) through tiktoken, with data bundled by the `bpe-openai` package.

Pieces are bytes, not characters: a byte-level BPE token that holds half of a multibyte character
is exactly that half, so byte offsets are honest (the tokenizers library's offsets count characters).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from dsinspect.extras import require
from dsinspect.loaders.format.tokenizer_docs import (
    TIKTOKEN_ENCODINGS,
    bundled_encoding,
    read_tiktoken_document,
    tiktoken_document,
)
from dsinspect.lru import LRU

__all__ = ["Vocab", "huggingface_vocab", "tiktoken_vocab", "tiktoken_encoding", "tiktoken_document",
           "tiktoken_document_vocab", "TIKTOKEN_ENCODINGS", "cached_vocab", "byte_level_decode", "tokenizer_vocab"]

PAD_NAMES = ("<|pad|>", "<pad>", "[PAD]", "<|padding|>", "<PAD>")
_CACHE_SIZE = 6


@dataclass(frozen=True)
class Vocab:
    """The bytes of every id (None where an id has no token), which ids are special, and the pad id."""

    name: str
    kind: str                                  # "huggingface" or "tiktoken"
    pieces: tuple[bytes | None, ...] = field(repr=False)
    special: frozenset[int] = field(repr=False, default=frozenset())
    pad_id: int | None = None
    encoder: Callable[[str], list[int]] | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        return len(self.pieces)

    def piece(self, token_id: int) -> bytes | None:
        return self.pieces[token_id] if 0 <= token_id < len(self.pieces) else None

    def lengths(self) -> np.ndarray:
        """Byte length of every id's piece (-1 for ids without a token)."""
        lens = self.__dict__.get("_lengths")
        if lens is None:
            lens = np.fromiter((len(p) if p is not None else -1 for p in self.pieces), np.int64, len(self.pieces))
            object.__setattr__(self, "_lengths", lens)
        return lens

    def encode(self, text: str) -> list[int]:
        if self.encoder is None:
            raise ValueError(f"tokenizer {self.name} cannot encode text")
        return self.encoder(text)


# -- Hugging Face tokenizer.json ---------------------------------------------------------------

def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as one printable character."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTE_OF_CHAR = {c: b for b, c in _bytes_to_unicode().items()}


def byte_level_decode(token: str) -> bytes:
    """A byte-level BPE token string as the bytes it stands for (characters outside the alphabet as UTF-8)."""
    return b"".join(bytes([_BYTE_OF_CHAR[c]]) if c in _BYTE_OF_CHAR else c.encode("utf-8") for c in token)


def _components(spec: Any) -> list[dict]:
    """Every pre-tokenizer / decoder dict in a (possibly nested Sequence) spec."""
    if not isinstance(spec, dict):
        return []
    nested = spec.get("pretokenizers") or spec.get("decoders") or []
    return [spec, *(c for item in nested for c in _components(item))]


def _piece_decoder(spec: dict) -> Callable[[str], bytes]:
    parts = _components(spec.get("pre_tokenizer")) + _components(spec.get("decoder"))
    types = {p.get("type") for p in parts}
    if "ByteLevel" in types:
        return byte_level_decode
    meta = next((p for p in parts if p.get("type") == "Metaspace"), None)
    space = (meta or {}).get("replacement", "▁")
    fallback = "ByteFallback" in types

    def decode(token: str) -> bytes:
        if fallback and len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            try:
                return bytes([int(token[3:5], 16)])
            except ValueError:
                pass
        return (token.replace(space, " ") if meta else token).encode("utf-8")
    return decode


def huggingface_vocab(data: bytes, name: str = "tokenizer.json", pad_id: int | None = None) -> Vocab:
    """A Vocab from `tokenizer.json` bytes; raises on a file the tokenizers library cannot load."""
    Tokenizer = require("tokenizers", "tokenizers", "decoding with a tokenizer.json").Tokenizer

    spec = json.loads(data)
    tok = Tokenizer.from_str(data.decode("utf-8"))
    vocab = tok.get_vocab(with_added_tokens=True)
    added = tok.get_added_tokens_decoder()
    pieces: list[bytes | None] = [None] * (max([*vocab.values(), *added, -1]) + 1)
    decode = _piece_decoder(spec)
    for token, i in vocab.items():
        pieces[i] = decode(token)
    for i, token in added.items():  # added tokens are literal text, not byte-level strings
        pieces[i] = token.content.encode("utf-8")
    special = frozenset(i for i, t in added.items() if t.special)
    if pad_id is None:
        pad_id = (spec.get("padding") or {}).get("pad_id")
    if pad_id is None:
        pad_id = next((i for i in sorted(special) if added[i].content in PAD_NAMES), None)
    encoder = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    return Vocab(name, "huggingface", tuple(pieces), special, pad_id, encoder)


# -- OpenAI encodings through tiktoken, offline --------------------------------------------------

def tiktoken_document_vocab(data: bytes, name: str | None = None) -> Vocab:
    """A Vocab from a `tiktoken_document` (e.g. read from the catalog); ValueError when malformed.
    Decoding needs nothing else; encoding builds a `tiktoken.Encoding` on first use."""
    doc = read_tiktoken_document(data)
    pieces = list(doc.ranks)
    special = doc.special_tokens
    pieces += [None] * (max([*special.values(), len(pieces) - 1]) + 1 - len(pieces))
    for text, i in special.items():
        pieces[i] = text.encode("utf-8")
    mergeable = {p: rank for rank, p in enumerate(pieces[:len(doc.ranks)]) if p is not None}
    encoder = _lazy_encoder(doc.name, doc.pat_str, mergeable, dict(special))
    return Vocab(name or doc.name, "tiktoken", tuple(pieces), frozenset(special.values()), None, encoder)


def _lazy_encoder(name: str, pattern: str, ranks: dict[bytes, int],
                  special: dict[str, int]) -> Callable[[str], list[int]]:
    built: list = []  # the Encoding, made on first use: viewers only decode, which needs no tiktoken

    def encode(text: str) -> list[int]:
        if not built:
            tiktoken = require("tiktoken", "tokenizers", "encoding text with tiktoken")
            built.append(tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special))
        return built[0].encode(text, allowed_special="all")
    return encode


def tiktoken_encoding(name: str) -> Any:
    """A `tiktoken.Encoding` built from bundled data: no download at run time."""
    tiktoken = require("tiktoken", "tokenizers", "a tiktoken encoding")

    ctor = bundled_encoding(name)
    return tiktoken.Encoding(ctor["name"], pat_str=ctor["pat_str"], mergeable_ranks=ctor["mergeable_ranks"],
                             special_tokens=ctor["special_tokens"])


def tiktoken_vocab(name: str) -> Vocab:
    """The encoding `name` from the bundled data (what `--tokenizer NAME` of the viewers uses)."""
    return tiktoken_document_vocab(tiktoken_document(name))


_cache: LRU[tuple, Vocab] = LRU(_CACHE_SIZE)
_lock = threading.Lock()


def cached_vocab(key: tuple, build: Callable[[], Vocab]) -> Vocab:
    """A small LRU of vocabularies by content key (blob sha256, or encoding name)."""
    with _lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    vocab = build()
    with _lock:
        _cache.put(key, vocab)
    return vocab


def tokenizer_vocab(catalog: Any, dataset: str, spec: dict) -> Vocab | None:
    """The vocabulary a field's stored tokenizer spec names (its `tokenizer` option): a tokenizer
    stored at ingest (read from the catalog's blobs) or a tiktoken encoding by name; None for a kind
    not known here. Raises when it cannot be loaded."""
    kind = spec.get("kind")
    if kind == "huggingface":
        sha = spec["blob"]
        return cached_vocab(("huggingface", sha, spec.get("pad_id")), lambda: huggingface_vocab(
            catalog.read_blob(dataset, sha, ".json"), f"tokenizer.json {sha[:12]}", spec.get("pad_id")))
    if kind == "tiktoken" and spec.get("blob"):  # stored at ingest: exact, offline, no package data
        sha = spec["blob"]
        return cached_vocab(("tiktoken", sha),
                            lambda: tiktoken_document_vocab(catalog.read_blob(dataset, sha, ".json")))
    if kind == "tiktoken":
        name = spec.get("name") or spec.get("encoding")
        return cached_vocab(("tiktoken", name), lambda: tiktoken_vocab(name))
    return None
