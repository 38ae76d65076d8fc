"""Parquet sources: one file, a directory of `.parquet` files or a glob, read a bounded batch at a time.

A file larger than `part_bytes` (option, default 256 MiB) splits into parts of whole row groups
(`Part.options["row_groups"] = [first, stop)`), so a big file converts in parallel.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.errors import UserError
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.ingest.normalize import normalize_batch, normalize_schema
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_BYTES, BATCH_ROWS, list_files, open_file

__all__ = ["ParquetSource"]

PART_BYTES = 256 << 20


class ParquetSource:
    def __init__(self, spec: SourceSpec):
        self.spec = spec
        self.part_bytes = int(spec.options.get("part_bytes", PART_BYTES))

    @cached_property
    def files(self):
        return list_files(self.spec.url, (".parquet", ".pq", ".parq"), "Parquet files")

    def parts(self) -> list[Part]:
        parts: list[Part] = []
        for f in self.files:
            if f.size <= self.part_bytes:
                parts.append(Part(len(parts), f.url, f.size, stamp=f.stamp))
                continue
            meta = _metadata(f.url)
            for first, stop, size in _group_ranges(meta, self.part_bytes):
                parts.append(Part(len(parts), f.url, size, {"row_groups": [first, stop]}, f.stamp))
        return parts

    @cached_property
    def _schema(self) -> pa.Schema:
        url = self.files[0].url
        return normalize_schema(_metadata(url).schema.to_arrow_schema(), url)

    def schema(self) -> pa.Schema:
        return self._schema

    def hints(self) -> Mapping[str, Any]:
        return {}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        with open_file(part.url) as f:
            try:
                pf = pq.ParquetFile(f)
            except UNREADABLE as e:
                raise arrow_error(e, f"cannot read {part.url} as Parquet") from None
            schema = normalize_schema(pf.schema_arrow, part.url)
            if schema.names != self._schema.names:
                raise UserError(f"{part.url}: columns {schema.names} differ from {self.files[0].url}'s "
                                f"{self._schema.names}")
            first, stop = part.options.get("row_groups", [0, pf.num_row_groups])
            for group in range(first, stop):
                rows = _rows_per_batch(pf.metadata.row_group(group))
                # decoded in this thread: Arrow's pool must not hold the Python file object `f`
                # (a late release needs the GIL and aborts a finalizing interpreter; docs/DESIGN.md)
                for batch in pf.iter_batches(batch_size=rows, row_groups=[group], use_threads=False):
                    yield normalize_batch(batch, self._schema, part.url)


def _metadata(url: str) -> pq.FileMetaData:
    with open_file(url) as f:
        try:
            return pq.ParquetFile(f).metadata
        except UNREADABLE as e:
            raise arrow_error(e, f"cannot read {url} as Parquet") from None


def _group_ranges(meta: pq.FileMetaData, part_bytes: int) -> list[tuple[int, int, int]]:
    """Consecutive row-group ranges [first, stop) of about `part_bytes` compressed bytes each."""
    ranges, first, size = [], 0, 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        size += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
        if size >= part_bytes or g == meta.num_row_groups - 1:
            ranges.append((first, g + 1, size))
            first, size = g + 1, 0
    return ranges or [(0, 0, 0)]


def _rows_per_batch(group: pq.RowGroupMetaData) -> int:
    """Rows per batch so a batch holds about BATCH_BYTES of decoded values, at most BATCH_ROWS."""
    per_row = group.total_byte_size / max(group.num_rows, 1)
    return max(1, min(BATCH_ROWS, int(BATCH_BYTES // max(per_row, 1))))
