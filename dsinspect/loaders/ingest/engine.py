"""The ingest engine: plan a job of independent parts, convert each part to shards, commit once.

    <catalog>/datasets/<name>/ingest/<job-id>/part-00012.json   one record per converted part

A part writes content-addressed shards (publishing one twice is a no-op), then its record. The
commit reads the records in part order, publishes one manifest (parent = the `latest` of that
moment) and removes the staging directory. The job id hashes the source spec, the part listing,
the fields and the write options, so re-running an interrupted ingest finds its records and skips
those parts, while a changed source or option starts a fresh job. Nothing is visible in the
catalog before the manifest is written; shards alone are never referenced.

Each part starts its own shards and feeds the writer in fixed-size chunks counted from the part's
first row, so a part's shards depend only on its rows and the options: any engine, any number of
workers, any retry gives the same version id.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import pkgutil
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from dsinspect.errors import ManifestError, UserError
from dsinspect.loaders.format.manifest import Field, Shard, canonical_json, sha256_hex
from dsinspect.loaders.format.pathnames import check_component
from dsinspect.loaders.ingest.json_text import json_batches
from dsinspect.loaders.ingest.restore import restore_batches
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.leases import collecting
from dsinspect.loaders.store.storage import join, write_atomic
from dsinspect.loaders.store.writer import VersionWriter, WriteOptions

__all__ = ["Job", "plan_job", "convert_part", "commit_job", "tidy_staging", "open_with", "fixed_chunks",
           "DEFAULT_OPENER", "CHUNK_ROWS"]

JOB_FORMAT = "dsinspect.ingest/1"
DEFAULT_OPENER = "dsinspect.loaders.ingest.sources:open_source"
CHUNK_ROWS = 256  # rows per batch handed to the writer; fixed so shard cuts never depend on the reader
_NO_BOUND = 1 << 62
# Rows written so far in a part converting in this process (inline engine): finer progress than
# whole parts. Workers in other processes leave it unset.
ROW_PROGRESS: ContextVar[Callable[[int], None] | None] = ContextVar("ROW_PROGRESS", default=None)


@dataclass(frozen=True)
class Job:
    """Everything a part needs, as JSON; `id` names its staging directory."""

    catalog: str
    dataset: str
    source: dict
    parts: list[dict]
    fields: list[dict]
    key: str | None
    write: dict
    restore: dict | None
    opener: str

    @property
    def id(self) -> str:
        content = {"format": JOB_FORMAT, "source": self.source, "parts": self.parts, "fields": self.fields,
                   "key": self.key, "write": self.write, "restore": self.restore}
        return sha256_hex(canonical_json(content))[:32]

    def payload(self, part_index: int) -> dict:
        """What a worker needs for one part (not the whole part listing: payloads stay small)."""
        return {"job": {**asdict(self), "parts": []}, "job_id": self.id, "part": self.parts[part_index]}


def plan_job(catalog: Catalog, dataset: str, spec: SourceSpec, parts: list[Part], fields: Iterable[Field],
             key: str | None, write: WriteOptions, restore: dict | None, opener: str = DEFAULT_OPENER) -> Job:
    return Job(catalog.url, dataset, spec.to_json(), [p.to_json() for p in parts], [f.to_json() for f in fields],
               key, asdict(write), restore, opener)


def staging_dir(catalog: Catalog, dataset: str, job_id: str) -> str:
    return join(catalog.layout.staging(dataset), check_component(job_id, "ingest job id"))  # from a payload


def record_path(catalog: Catalog, dataset: str, job_id: str, part_index: int) -> str:
    return join(staging_dir(catalog, dataset, job_id), f"part-{part_index:05d}.json")


def fields_from_json(data: list[dict], where: str = "ingest job") -> list[Field]:
    return [Field.from_json(f, where) for f in data]


def load_record(catalog: Catalog, path: str) -> dict | None:
    """A finished part's record, or None when absent, unreadable or naming a shard that is gone."""
    try:
        record = json.loads(catalog.fs.cat_file(path))
        shards = [Shard(**s) for s in record["shards"]]
    except (FileNotFoundError, ValueError, KeyError, TypeError, ManifestError):  # ManifestError: a bad shard sha256
        return None
    dataset = record.get("dataset")
    if not isinstance(dataset, str) or not all(catalog.fs.exists(catalog.layout.shard(dataset, s.sha256))
                                               for s in shards):
        return None
    return record


def convert_part(payload: dict) -> dict:
    """Task: convert one part to shards and write its record (run in any process, from JSON only)."""
    job, part = Job(**payload["job"]), Part.from_json(payload["part"])
    catalog = Catalog(job.catalog)
    path = record_path(catalog, job.dataset, payload["job_id"], part.index)
    done = load_record(catalog, path)
    if done is not None:
        return {**done, "skipped": True}
    source = open_with(job.opener)(SourceSpec.from_json(job.source))
    fields = fields_from_json(job.fields)
    groups = exported_groups(job.restore, part)
    options = dataclasses.replace(WriteOptions(**job.write), contiguous_groups=True)
    if groups is not None:  # one shard, its row groups as exported: bounds that never cut early
        options = dataclasses.replace(options, shard_bytes=_NO_BOUND, shard_rows=None, row_group_rows=_NO_BOUND,
                                      row_group_bytes=_NO_BOUND)
    writer = VersionWriter(catalog, job.dataset, fields, key=job.key, options=options, on_rows=ROW_PROGRESS.get())
    try:
        batches = source.read(part)
        if job.restore:
            batches = restore_batches(batches, job.restore, part.url)
        batches = json_batches(batches, fields)  # nested columns kept as JSON text
        rows = _write_groups(writer, batches, groups, part.url) if groups is not None else _write(writer, batches)
        shards = writer.finish_shards()
    except BaseException:
        writer.abort()
        raise
    record = {"dataset": job.dataset, "index": part.index, "url": part.url, "bytes": part.size, "rows": rows,
              "shards": [s.to_json() for s in shards]}
    write_atomic(catalog.fs, path, canonical_json(record))
    return {**record, "skipped": False}


def _write(writer: VersionWriter, batches: Iterator[pa.RecordBatch]) -> int:
    rows = 0
    for batch in fixed_chunks(batches, CHUNK_ROWS):
        writer.write_batch(batch)
        rows += batch.num_rows
    return rows


def _write_groups(writer: VersionWriter, batches: Iterator[pa.RecordBatch], groups: list[int], where: str) -> int:
    """Write rows in row groups of exactly the given sizes (an exported shard's layout)."""
    bounds = list(itertools.accumulate(groups))
    rows = 0
    for batch in batches:
        while batch.num_rows:
            if not bounds:
                raise UserError(f"{where}: more rows than the export's sidecar lists ({sum(groups)})")
            take = min(batch.num_rows, bounds[0] - rows)
            writer.write_batch(batch.slice(0, take))
            batch, rows = batch.slice(take), rows + take
            if rows == bounds[0]:
                writer.end_row_group()
                bounds.pop(0)
    if bounds:
        raise UserError(f"{where}: {rows} rows, but the export's sidecar lists {sum(groups)}")
    return rows


def exported_groups(restore: dict | None, part: Part) -> list[int] | None:
    """The row-group sizes an export recorded for this part's file, when the part is that whole file."""
    if not restore or "row_groups" in part.options:
        return None
    return restore.get("layout", {}).get(part.url.rstrip("/").rsplit("/", 1)[-1])


def commit_job(catalog: Catalog, job: Job, records: list[dict], *, message: str = "",
               tags: Iterable[str] = (), inferred_key: str | None = None) -> Any:
    """Publish the version the part records make, in part order; remove the staging directory.
    `inferred_key`, verified at the commit, stands in for a job without a key (keys never change a shard)."""
    fields = fields_from_json(job.fields)
    writer = catalog.writer(job.dataset, fields, key=job.key or inferred_key, message=message, tags=tags,
                            options=WriteOptions(**job.write))
    for record in sorted(records, key=lambda r: r["index"]):
        for s in record["shards"]:
            writer.add_shard(Shard(**s))
    version = writer.commit()
    remove_staging(catalog, job.dataset, job.id)
    return version


def remove_staging(catalog: Catalog, dataset: str, job_id: str) -> None:
    directory = staging_dir(catalog, dataset, job_id)
    if catalog.fs.exists(directory):
        catalog.fs.rm(directory, recursive=True)


def tidy_staging(catalog: Catalog, dataset: str) -> None:
    """Remove `ingest/` once empty, unless a write is in flight (another ingest may be about to make
    its job directory there: removing the parent under it failed that ingest's record)."""
    parent = catalog.layout.staging(dataset)
    with collecting(catalog.fs, catalog.layout, dataset) as free:
        try:
            if free and catalog.fs.isdir(parent) and not catalog.fs.ls(parent):
                catalog.fs.rmdir(parent)
        except OSError:
            pass  # the store has no directories, or one appeared meanwhile


def fixed_chunks(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """The same rows as single-chunk batches of exactly `rows` rows (the last may be shorter)."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            table = pa.Table.from_batches(pending)
            start = 0
            while count - start >= rows:
                yield _one_batch(table.slice(start, rows))
                start += rows
            rest = table.slice(start)
            pending, count = ([_one_batch(rest)] if rest.num_rows else []), rest.num_rows
    if count:
        yield _one_batch(pa.Table.from_batches(pending))


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    return table.combine_chunks().to_batches()[0]


def open_with(name: str) -> Callable[[SourceSpec], Any]:
    """The source opener `module:function` names."""
    if ":" not in name:
        raise UserError(f"cannot load the source reader {name!r}: expected module:function")
    try:
        return pkgutil.resolve_name(name)
    except (ImportError, AttributeError, ValueError) as e:
        raise UserError(f"cannot load the source reader {name!r}: {e}") from None
