"""What a stream stores, as values: its spec (fields and key, fixed when it is created) and its commits
(the shards one append added, in order). Pure: parsing checks every value, since a commit is read from
storage that anyone may have written to."""

from __future__ import annotations

import json
from dataclasses import dataclass

from dsinspect.errors import IntegrityError, ManifestError, UserError
from dsinspect.loaders.format.manifest import Field, Shard, canonical_json, sha256_hex

__all__ = ["Commit", "StreamSpec", "STREAM_FORMAT", "COMMIT_FORMAT"]

STREAM_FORMAT = "dsinspect.stream/1"
COMMIT_FORMAT = "dsinspect.commit/1"
_TEXT_MAX = 256  # a writer's name and a message are labels, not payloads


@dataclass(frozen=True)
class StreamSpec:
    """The fields every commit's rows have, and the key (a rollout id) versions of it are diffed by."""

    fields: tuple[Field, ...]
    key: str | None = None

    @property
    def id(self) -> str:
        """What each commit names, so that a commit of another stream's rows is refused."""
        return sha256_hex(canonical_json(self.to_json()))

    def to_json(self) -> dict:
        return {"format": STREAM_FORMAT, "fields": [f.to_json() for f in self.fields], "key": self.key}

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "StreamSpec":
        try:
            obj = json.loads(data)
            if obj.get("format") != STREAM_FORMAT:
                raise ValueError(f"format {obj.get('format')!r}, expected {STREAM_FORMAT!r}")
            return cls(tuple(Field.from_json(f, f"{where}: fields[{i}]") for i, f in enumerate(obj["fields"])),
                       obj.get("key"))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise IntegrityError(f"{where}: not a readable stream spec ({e})") from None


@dataclass(frozen=True)
class Commit:
    """Commit `seq` of a stream: the shards one append wrote, holding `rows` rows, by `writer`."""

    seq: int
    stream: str  # StreamSpec.id
    shards: tuple[Shard, ...]
    writer: str
    created_at: str
    message: str = ""

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def to_bytes(self) -> bytes:
        return canonical_json({"format": COMMIT_FORMAT, "seq": self.seq, "stream": self.stream,
                               "shards": [s.to_json() for s in self.shards], "writer": self.writer,
                               "created_at": self.created_at, "message": self.message})

    @classmethod
    def from_bytes(cls, data: bytes, seq: int, where: str) -> "Commit":
        """Commit `seq` as stored at `where`; refused (IntegrityError) unless every value checks out
        and it says it is commit `seq` (a file renamed or copied into another place is not)."""
        try:
            obj = json.loads(data)
            if obj.get("format") != COMMIT_FORMAT:
                raise ValueError(f"format {obj.get('format')!r}, expected {COMMIT_FORMAT!r}")
            shards = tuple(Shard.from_json(s, f"shards[{i}]") for i, s in enumerate(obj["shards"]))
            commit = cls(obj["seq"], obj["stream"], shards, obj["writer"], obj["created_at"], obj.get("message", ""))
        except (ManifestError, ValueError, KeyError, TypeError, AttributeError) as e:  # the JSON's shape
            raise IntegrityError(f"{where}: not a readable stream commit ({e})") from None
        if commit.seq != seq:
            raise IntegrityError(f"{where}: says it is commit {commit.seq!r}, stored as commit {seq}")
        for name in ("stream", "writer", "created_at", "message"):
            if not isinstance(getattr(commit, name), str):
                raise IntegrityError(f"{where}: {name} must be text")
        return commit


def check_label(text: str, what: str) -> str:
    """A writer's name or a commit message: short text."""
    if not isinstance(text, str) or len(text) > _TEXT_MAX:
        raise UserError(f"{what} must be text of at most {_TEXT_MAX} characters, not {text!r:.40}")
    return text
