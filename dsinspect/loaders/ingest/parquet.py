"""Parquet sources: one file, a directory of `.parquet` files or a glob, read a bounded batch at a time.

A file larger than `part_bytes` (option, default 256 MiB) splits into parts of whole row groups
(`Part.options["row_groups"] = [first, stop)`), so a big file converts in parallel.

With `part_rows` (option), parts are fixed global row ranges instead: part k holds rows
[k * part_rows, (k + 1) * part_rows) of the files taken in order as one sequence, and
`Part.options["rows"]` lists the `[file URL, first row, stop row)` slices it reads. The parts then
depend only on the rows, never on how they were cut into files: the same rows in one file or in
forty give the same parts, so the same shards and version id (this is what lets a Ray Data write,
whose files follow its write tasks, publish an id independent of the worker count:
`dsinspect.loaders.raydata.write`). `part_bytes` is ignored then. Listing the parts reads each
file's footer. An export's directory is refused with `part_rows`: its sidecar fixes the row groups
of each whole file.
"""

from __future__ import annotations

import contextlib
import hashlib
from functools import cached_property
from typing import Any, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.errors import UserError
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.ingest.normalize import normalize_batch, normalize_schema
from dsinspect.loaders.ingest.restore import SIDECAR_KEY, find_sidecar
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_BYTES, BATCH_ROWS, SourceFile, list_files, open_file

__all__ = ["ParquetSource"]

PART_BYTES = 256 << 20


class ParquetSource:
    def __init__(self, spec: SourceSpec):
        self.spec = spec
        self.part_bytes = int(spec.options.get("part_bytes", PART_BYTES))
        self.part_rows = _part_rows(spec)

    @cached_property
    def files(self):
        return list_files(self.spec.url, (".parquet", ".pq", ".parq"), "Parquet files")

    def parts(self) -> list[Part]:
        if self.part_rows is not None:
            return self._row_parts(self.part_rows)
        parts: list[Part] = []
        for f in self.files:
            if f.size <= self.part_bytes:
                parts.append(Part(len(parts), f.url, f.size, stamp=f.stamp))
                continue
            meta = _metadata(f.url)
            for first, stop, size in _group_ranges(meta, self.part_bytes):
                parts.append(Part(len(parts), f.url, size, {"row_groups": [first, stop]}, f.stamp))
        return parts

    def _row_parts(self, part_rows: int) -> list[Part]:
        """Parts of `part_rows` consecutive rows each (the last may be shorter) across the files."""
        metas = [_metadata(f.url) for f in self.files]
        self._refuse_export(metas[0])
        counts = [(f, meta.num_rows) for f, meta in zip(self.files, metas)]
        total = sum(n for _, n in counts)
        return [_row_part(k, counts, k * part_rows, min(total, (k + 1) * part_rows))
                for k in range(-(-total // part_rows))]

    def _refuse_export(self, first: pq.FileMetaData) -> None:
        if (first.metadata or {}).get(SIDECAR_KEY) or find_sidecar(self.spec.url) is not None:
            raise UserError(f"{self.spec.url}: an export, whose sidecar fixes each file's row groups; "
                            "ingest it without part_rows")

    @cached_property
    def _schema(self) -> pa.Schema:
        url = self.files[0].url
        return normalize_schema(_metadata(url).schema.to_arrow_schema(), url)

    def schema(self) -> pa.Schema:
        return self._schema

    def hints(self) -> Mapping[str, Any]:
        return {}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        if "rows" in part.options:
            for url, first, stop in part.options["rows"]:
                yield from self._read_rows(url, first, stop)
            return
        with self._open(part.url) as pf:
            first, stop = part.options.get("row_groups", [0, pf.num_row_groups])
            for group in range(first, stop):
                yield from self._group_batches(pf, group, part.url)

    def _read_rows(self, url: str, first: int, stop: int) -> Iterator[pa.RecordBatch]:
        """Rows [first, stop) of the file, reading only the row groups that hold them."""
        with self._open(url) as pf:
            start = 0  # the file's row number of the current group's first row
            for group in range(pf.num_row_groups):
                end = start + pf.metadata.row_group(group).num_rows
                if start >= stop:
                    return
                if end > first:
                    yield from _rows_between(self._group_batches(pf, group, url), first - start, stop - start)
                start = end

    @contextlib.contextmanager
    def _open(self, url: str) -> Iterator[pq.ParquetFile]:
        with open_file(url) as f:
            try:
                pf = pq.ParquetFile(f)
            except UNREADABLE as e:
                raise arrow_error(e, f"cannot read {url} as Parquet") from None
            schema = normalize_schema(pf.schema_arrow, url)
            if schema.names != self._schema.names:
                raise UserError(f"{url}: columns {schema.names} differ from {self.files[0].url}'s "
                                f"{self._schema.names}")
            yield pf

    def _group_batches(self, pf: pq.ParquetFile, group: int, url: str) -> Iterator[pa.RecordBatch]:
        rows = _rows_per_batch(pf.metadata.row_group(group))
        # decoded in this thread: Arrow's pool must not hold the Python file object behind `pf`
        # (a late release needs the GIL and aborts a finalizing interpreter; docs/DESIGN.md)
        for batch in pf.iter_batches(batch_size=rows, row_groups=[group], use_threads=False):
            yield normalize_batch(batch, self._schema, url)


def _part_rows(spec: SourceSpec) -> int | None:
    value = spec.options.get("part_rows")
    if value is None:
        return None
    try:
        rows = int(value)
    except (TypeError, ValueError):
        rows = 0
    if rows < 1 or isinstance(value, bool):
        raise UserError(f"parquet option part_rows must be a whole number of rows, at least 1, not {value!r}")
    return rows


def _row_part(index: int, counts: list[tuple[SourceFile, int]], first: int, stop: int) -> Part:
    """Part `index`: global rows [first, stop) as slices of the files that hold them."""
    slices, size, start = [], 0, 0
    for f, rows in counts:
        lo, hi = max(first, start), min(stop, start + rows)
        if lo < hi:
            slices.append((f, lo - start, hi - start))
            size += f.size * (hi - lo) // rows
        start += rows
    stamp = hashlib.sha256("\n".join(f"{f.url}\t{f.size}\t{f.stamp}" for f, _, _ in slices).encode()).hexdigest()
    return Part(index, slices[0][0].url, size, {"rows": [[f.url, lo, hi] for f, lo, hi in slices]}, stamp[:32])


def _rows_between(batches: Iterator[pa.RecordBatch], first: int, stop: int) -> Iterator[pa.RecordBatch]:
    """The rows [first, stop) of consecutive `batches` (numbered from 0 across them)."""
    start = 0
    for batch in batches:
        end = start + batch.num_rows
        lo, hi = max(first, start), min(stop, end)
        if lo < hi:
            yield batch.slice(lo - start, hi - lo)
        if end >= stop:
            return
        start = end


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
