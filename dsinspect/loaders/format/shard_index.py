"""A shard's index: its bytes cut into parts that can be fetched and verified one at a time.

A shard's sha256 proves the whole file, so a reader that trusts only it must fetch and hash the whole
file before using any row. The index cuts the file at its row groups' byte ranges: part k holds row
group k (part 0 also the leading magic), the last part the footer (no rows). Each part's sha256 is in
the index, and the index's own sha256 is in the manifest (so in the version id): a reader fetches the
footer and the row groups a batch needs, checks each against its sha256 and decodes only those.
The parts partition the file, so once every part is checked the whole file is.

The file `shards/<shard sha256>.index.json` is canonical JSON (docs/FORMAT.md):
{"format": "dsinspect.shard-index/1", "shard": sha256, "bytes": N, "rows": R,
 "parts": {"offset": [...], "rows": [...], "sha256": [...]}}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsinspect.errors import ManifestError

__all__ = ["INDEX_FORMAT", "ShardIndex", "index_bytes", "part_bounds"]

INDEX_FORMAT = "dsinspect.shard-index/1"
_HEX = re.compile(r"[0-9a-f]*")


def part_bounds(metadata: Any, size: int) -> tuple[list[int], list[int]]:
    """(where each part starts, its rows), from a Parquet file's metadata (pyarrow FileMetaData):
    part k starts after row group k-1's last byte, so the parts cover the file without gaps; the
    last part is the footer (0 rows). Part k is Parquet row group k, so a file with an empty row
    group has no index (ValueError)."""
    bounds, rows = [0], []
    for k in range(metadata.num_row_groups):
        group = metadata.row_group(k)
        end = 0
        for c in range(group.num_columns):
            col = group.column(c)
            start = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset else None
            start = min(start, col.data_page_offset) if start is not None else col.data_page_offset
            end = max(end, start + col.total_compressed_size)
        if group.num_rows == 0:
            raise ValueError(f"row group {k} is empty")
        if not bounds[-1] < end < size:
            raise ValueError(f"row group {k} ends at byte {end}, outside {bounds[-1]}..{size}")
        bounds.append(end)
        rows.append(group.num_rows)
    return bounds, rows + [0]


def index_bytes(shard_sha256: str, size: int, bounds: list[int], rows: list[int], digests: list[str]) -> bytes:
    """The canonical index file of a shard cut at `bounds` (from `part_bounds`) with these part digests."""
    doc = {"format": INDEX_FORMAT, "shard": shard_sha256, "bytes": size, "rows": sum(rows),
           "parts": {"offset": bounds, "rows": rows, "sha256": digests}}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class ShardIndex:
    """A parsed, checked index: part k is bytes [offsets[k], offsets[k+1]) with rows
    [row_starts[k], row_starts[k+1]); the last part is the footer."""

    shard: str
    size: int
    offsets: np.ndarray      # int64, parts + 1 (the file size last)
    row_starts: np.ndarray   # int64, parts + 1 (the shard's rows last)
    sha256: tuple[str, ...]

    @property
    def parts(self) -> int:
        return len(self.sha256)

    @property
    def footer(self) -> int:
        return self.parts - 1

    def span(self, part: int) -> tuple[int, int]:
        return int(self.offsets[part]), int(self.offsets[part + 1])

    def parts_of(self, rows: np.ndarray) -> np.ndarray:
        """The part of each row (rows within the shard)."""
        return np.searchsorted(self.row_starts, rows, side="right") - 1

    @classmethod
    def from_bytes(cls, raw: bytes, where: str, shard_sha256: str, size: int, rows: int) -> "ShardIndex":
        """Parse and check against the manifest's shard; every problem a ManifestError naming `where`."""
        try:
            doc = json.loads(raw.decode("utf-8"))
            parts = doc["parts"]
            offsets, counts, digests = parts["offset"], parts["rows"], parts["sha256"]
            ok = (doc["format"] == INDEX_FORMAT and doc["shard"] == shard_sha256 and doc["bytes"] == size
                  and doc["rows"] == rows and len(offsets) == len(counts) == len(digests) >= 1
                  and all(type(x) is int for x in offsets + counts)
                  and all(type(d) is str and len(d) == 64 for d in digests)
                  and _HEX.fullmatch("".join(digests)) is not None)
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError):
            ok = False
        if not ok:
            raise ManifestError(f"{where}: not a shard index of shard {shard_sha256} ({size} bytes, {rows} rows)")
        bounds = np.array(offsets + [size], np.int64)
        counts_ = np.array(counts, np.int64)
        if bounds[0] != 0 or (np.diff(bounds) <= 0).any() or (counts_ < 0).any() or counts_[-1] != 0 \
                or counts_.sum() != rows:
            raise ManifestError(f"{where}: its parts do not cut the shard's {size} bytes and {rows} rows in order")
        starts = np.concatenate([[0], np.cumsum(counts_)]).astype(np.int64)
        return cls(shard_sha256, size, bounds, starts, tuple(digests))
