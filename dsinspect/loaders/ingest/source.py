"""What every ingest source provides: a JSON-able description, independent parts, Arrow batches.

A source never holds open handles between calls, so a part can be converted in another process
(a process pool, a Ray task) from nothing but `SourceSpec.to_json()` and `Part.to_json()` — no
pickled objects travel, and a retried part reads exactly what the first attempt read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Protocol

import pyarrow as pa

__all__ = ["SourceSpec", "Part", "Source"]


@dataclass(frozen=True)
class SourceSpec:
    """Which reader (`kind`: jsonl, parquet, hf, webdataset, mds, files) over which fsspec URL, with options."""

    kind: str
    url: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"kind": self.kind, "url": self.url, "options": dict(self.options)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SourceSpec":
        return cls(data["kind"], data["url"], dict(data.get("options", {})))


@dataclass(frozen=True)
class Part:
    """One independently convertible slice of a source, in source order (usually one file)."""

    index: int
    url: str  # what it reads: named in progress and in every error about it
    size: int  # bytes, for progress and scheduling
    options: Mapping[str, Any] = field(default_factory=dict)  # e.g. a row range inside the file
    stamp: str = ""  # the file's change marker: part of the job id, so a rewritten file is re-read

    def to_json(self) -> dict:
        return {"index": self.index, "url": self.url, "size": self.size, "options": dict(self.options),
                "stamp": self.stamp}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Part":
        return cls(data["index"], data["url"], data["size"], dict(data.get("options", {})), data.get("stamp", ""))


class Source(Protocol):
    """A readable source. Rows come out in a deterministic order: parts in index order, then rows
    in file order, so the same source always gives the same version id."""

    spec: SourceSpec

    def parts(self) -> list[Part]:
        """The parts, in order; cheap (lists files, reads indexes; never reads every row)."""

    def schema(self) -> pa.Schema:
        """The Arrow schema every part's batches conform to (binary media as `pa.binary()`)."""

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        """The part's rows as record batches of bounded size (memory never holds a whole part)."""

    def hints(self) -> Mapping[str, Any]:
        """What the source knows about roles beyond types, e.g. WebDataset extensions per field."""
