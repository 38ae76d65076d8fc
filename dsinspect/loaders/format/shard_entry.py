"""One shard entry of a manifest (docs/FORMAT.md): the `Shard` value, and how a JSON entry is read
and checked. `ShardTable` (shard_table.py) holds a manifest's entries as columns of these."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from dsinspect.errors import ManifestError
from dsinspect.loaders.format.pathnames import check_sha256

__all__ = ["Shard", "parse_shard", "need"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Shard:
    """A Parquet shard: its sha256 (and file name), size and rows, the sha256 of its index
    (`shards/<sha256>.index.json`, format/shard_index.py) when it was written with one, and the
    tokens each `tokens` field holds in it (what packing documents into sequences locates by)."""

    sha256: str
    bytes: int
    rows: int
    index_sha256: str | None = None
    tokens: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        check_sha256(self.sha256, "shard sha256", ManifestError)  # it becomes the shard's file name
        if self.index_sha256 is not None:
            check_sha256(self.index_sha256, "shard index_sha256", ManifestError)
        counts = dict(self.tokens)  # a {field: count} object (JSON) or pairs
        if not all(isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 0
                   for k, n in counts.items()):
            raise ManifestError(f"shard tokens must map field names to counts >= 0, not {self.tokens!r:.80}")
        object.__setattr__(self, "tokens", tuple(sorted(counts.items())))

    def token_count(self, name: str) -> int | None:
        """Tokens of field `name` in this shard (None when the shard was written without the count)."""
        return dict(self.tokens).get(name)

    @classmethod
    def from_json(cls, data: Any, where: str = "shard") -> "Shard":
        """A shard as a manifest (or a stream commit) records it, every value checked."""
        return parse_shard(data, where)

    def to_json(self) -> dict:
        out = {"sha256": self.sha256, "bytes": self.bytes, "rows": self.rows}
        if self.index_sha256 is not None:  # absent, not null: versions written before indexes keep their ids
            out["index_sha256"] = self.index_sha256
        if self.tokens:  # absent when empty: versions without tokens fields (or written before) keep their ids
            out["tokens"] = dict(self.tokens)
        return out


def need(obj: Mapping, key: str, kind: type | tuple, where: str) -> Any:
    if key not in obj:
        raise ManifestError(f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ManifestError(f"{where}: {key!r} has the wrong type ({type(value).__name__})")
    return value


def parse_shard(s: Any, where: str) -> Shard:
    if not isinstance(s, dict):
        raise ManifestError(f"{where}: a shard must be an object")
    sha = need(s, "sha256", str, where)
    if not _SHA256.match(sha):
        raise ManifestError(f"{where}: sha256 {sha!r} is not 64 lowercase hex digits")
    size, rows = need(s, "bytes", int, where), need(s, "rows", int, where)
    if size < 0 or rows < 0:
        raise ManifestError(f"{where}: bytes and rows must not be negative")
    index = s.get("index_sha256")
    if index is not None and not (isinstance(index, str) and _SHA256.match(index)):
        raise ManifestError(f"{where}: index_sha256 {index!r} is not 64 lowercase hex digits")
    tokens = s.get("tokens", {})
    if not isinstance(tokens, dict):
        raise ManifestError(f"{where}: 'tokens' must be an object of field name -> token count")
    try:
        return Shard(sha, size, rows, index, tokens)
    except ManifestError as e:
        raise ManifestError(f"{where}: {e}") from None
