"""A Ray Data pipeline's output written as a new version: `write_version(ds, catalog, name)`, or
`ds.write_datasink(VersionDatasink(catalog, name))` on a dataset that preserves order.

Two phases, one commit:

1. **Pieces** (Ray's write tasks): each task streams its blocks into one staging Parquet file,
   `<catalog>/datasets/<name>/ingest/ray-<write id>/piece-<task index>.parquet`, and returns
   (task index, rows, path). A task without rows writes nothing.
2. **Version** (`on_write_complete`, on the driver): the ingest pipeline (`loaders/ingest/`) over
   the pieces, taken in task order, with parts that are fixed global row ranges (the Parquet
   source's `part_rows`: part k is rows [k * part_rows, (k + 1) * part_rows) of the pieces read
   as one sequence), converted on the Ray engine, so Ray workers write the content-addressed shards;
   one commit; the pieces are removed.

Why not write shards straight from the write tasks: a task's shards would start at its own first
row, so the cuts, hence the shard hashes and the version id, would follow how Ray happened to
split the rows into tasks (the number of blocks, workers, the memory budget). Fixed shard cuts
need each row's global position, which a write task cannot know before every task ahead of it has
counted its rows; running the user's pipeline twice (count, then write) would double its cost
and trust it to be deterministic. Writing the rows twice (pieces, then shards) is the price; the
pieces are lightly compressed and read back once, by row groups, never whole. In exchange the
ingest machinery (its row-exact chunking, retries, the one commit) is reused as it is, and a
version written from Ray has the id the same rows get from one Parquet file ingested with the same
`part_rows` and write options.

**Order.** Ray Data does not keep the order of blocks by default; the version's row order is the
dataset's order only when its DataContext sets `execution_options.preserve_order` (then task k
receives the blocks after task k-1's). `write_version` writes a copy of the dataset with it set
(the caller's dataset is not changed); a write task run without it refuses in one line.

**Failure.** Anything that fails (a worker raising, a piece missing, the ingest) publishes no
version; the pieces and the ingest's part records are removed (`on_write_failed`). Shards that
finished parts already wrote stay unreferenced for `dsinspect gc`, as after any failed ingest. On an
object store a write task that was still running when the write failed may put its piece after
the clean-up; gc collects such a directory as ingest staging.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq
import ray.data
from ray.data.block import Block, BlockAccessor

from dsinspect.errors import StorageError, UserError
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, arrow_error
from dsinspect.loaders.format.pathnames import check_component
from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.ingest.source import SourceSpec
from dsinspect.loaders.store.address import check_name
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.storage import is_local, join, url_to_fs, write_errors
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.loaders.store.writer import WriteOptions

__all__ = ["VersionDatasink", "write_version", "Piece", "PART_ROWS"]

# Rows per ingest part, so a version's shard cuts. Fixed, never derived from the data or the
# cluster: a part of 256 Ki rows is ~2 GiB of 2,048-token rows (dozens of 64 MiB shards) or ~25 MiB
# of short text rows (one shard). Each part starts its own shards: a multiple of `shard_rows`, when
# one is set, keeps every shard but the last full.
PART_ROWS = 1 << 18
PIECE_GROUP_BYTES = 64 << 20  # decoded bytes per row group of a piece: what phase 2 reads at a time
_PIECE_PREFIX = "piece-"


@dataclass(frozen=True)
class Piece:
    """What one write task wrote: its staging file, named by the task's index."""

    task: int
    rows: int
    path: str


class VersionDatasink(ray.data.Datasink):
    """Writes a dataset's rows as a new version of `name` in `catalog` (a `Catalog` or its URL),
    one commit, with an id that does not depend on the number of tasks or workers. The options
    are `run_ingest`'s (key, no_key, roles, tokenizer, message, tags, write) plus `part_rows`.
    After the write, `version` is the version and `pieces` what the write tasks wrote."""

    def __init__(self, catalog: Catalog | str, name: str, *, key: str | None = None, no_key: bool = False,
                 roles: Mapping[str, str] | None = None, tokenizer: str | None = None, message: str = "",
                 tags: Iterable[str] = (), write: WriteOptions = WriteOptions(), part_rows: int = PART_ROWS):
        super().__init__()
        catalog = _writable_catalog(catalog)
        self.url, self.name, self.tags = catalog.url, check_name(name), tuple(check_name(t, "tag") for t in tags)
        if key is not None and no_key:
            raise UserError("key and no_key exclude each other")
        if isinstance(part_rows, bool) or not isinstance(part_rows, int) or part_rows < 1:
            raise UserError(f"part_rows must be a whole number of rows, at least 1, not {part_rows!r}")
        self.options = {"key": key, "no_key": no_key, "roles": dict(roles or {}), "tokenizer": tokenizer,
                        "message": message, "write": write}
        self.part_rows = part_rows
        self.write_id = uuid.uuid4().hex
        self.staging = catalog.layout.staging(name)  # ingest jobs' staging: gc collects what a crash leaves
        self.directory = join(self.staging, check_component(f"ray-{self.write_id}", "write id"))
        self.pieces: list[Piece] = []
        self.version: DatasetVersion | None = None

    def get_name(self) -> str:
        return "DsinspectVersion"

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        """On the driver, before the first write task: the staging directory the tasks write into
        (a task never creates it, so a task outliving a failed write finds nothing to write to)."""
        fs, _ = url_to_fs(self.url)
        with write_errors(fs, self.directory):
            fs.makedirs(self.directory, exist_ok=True)

    def write(self, blocks: Iterable[Block], ctx: Any) -> Piece | None:
        """In a Ray worker: this task's blocks as one piece."""
        _check_order()
        fs, _ = url_to_fs(self.url)
        tables = (BlockAccessor.for_block(b).to_arrow() for b in blocks)
        return write_piece(fs, self.directory, ctx.task_idx, tables)

    def on_write_complete(self, write_result: Any) -> None:
        """On the driver: the pieces, in task order, ingested as one version; staging removed."""
        try:
            self.pieces = sorted((p for p in write_result.write_returns if p is not None), key=lambda p: p.task)
            self.version = self._publish(Catalog(self.url))
        finally:
            self._clean(failed=self.version is None)

    def on_write_failed(self, error: Exception) -> None:
        self._clean(failed=True)

    def _publish(self, catalog: Catalog) -> DatasetVersion:
        if not self.pieces:
            raise UserError(f"nothing to write as a version of {self.name}: the dataset has no rows")
        _check_listing(catalog, self.directory, self.pieces)
        spec = SourceSpec("parquet", catalog.display(self.directory), {"part_rows": self.part_rows})
        return run_ingest(catalog, spec, self.name, engine="ray", tags=self.tags, **self.options).version

    def _clean(self, failed: bool) -> None:
        """Remove the pieces and, after a failure, the part records of the ingest over them; never
        raises (it runs while another error is on its way to the caller)."""
        fs, _ = url_to_fs(self.url)
        try:
            if failed:
                _remove_ingest_records(fs, self.staging, f"/ray-{self.write_id}/")
            _remove_tree(fs, self.directory)
            for directory in (self.staging, self.staging.rsplit("/", 1)[0]):  # then the dataset's, if new
                if fs.isdir(directory) and not fs.ls(directory):
                    fs.rmdir(directory)
        except OSError:
            pass  # another writer's staging appeared, or the store is unreachable: gc collects what is left


def write_version(dataset: ray.data.Dataset, catalog: Catalog | str, name: str, *, concurrency: int | None = None,
                  ray_remote_args: dict | None = None, **options: Any) -> DatasetVersion:
    """Write `dataset`'s rows, in its order, as a new version of `name`; `options` as for
    `VersionDatasink`, `concurrency` and `ray_remote_args` for Ray's write tasks."""
    sink = VersionDatasink(catalog, name, **options)
    in_order(dataset).write_datasink(sink, concurrency=concurrency, ray_remote_args=ray_remote_args)
    assert sink.version is not None  # on_write_complete either published or raised
    return sink.version


def in_order(dataset: ray.data.Dataset) -> ray.data.Dataset:
    """A copy of `dataset` (plan and DataContext) whose execution keeps the order of its blocks."""
    ordered = ray.data.Dataset.copy(dataset, _deep_copy=True)
    ordered.context.execution_options.preserve_order = True
    return ordered


def write_piece(fs, directory: str, task: int, tables: Iterator[pa.Table]) -> Piece | None:
    """`tables` as the piece of write task `task` (published whole, or not at all); None without rows."""
    path = join(directory, f"{_PIECE_PREFIX}{_check_task(task):010d}.parquet")
    with write_errors(fs, path):  # the directory gone: this write failed and was cleaned up
        fd, local = tempfile.mkstemp(dir=directory if is_local(fs) else None, prefix=".tmp-piece-",
                                     suffix=".parquet")
        os.close(fd)
    try:
        rows = _write_tables(local, tables, task)  # runs the pipeline's fused stages: their errors are theirs
        if rows:
            with write_errors(fs, path):
                if is_local(fs):
                    os.replace(local, path)
                else:
                    fs.put_file(local, path)
    finally:
        if os.path.exists(local):
            os.unlink(local)
    return Piece(task, rows, path) if rows else None


def _check_task(task: object) -> int:
    if isinstance(task, bool) or not isinstance(task, int) or not 0 <= task < 10**10:
        raise UserError(f"bad write task index {task!r}")
    return task


def _write_tables(local: str, tables: Iterator[pa.Table], task: int) -> int:
    writer: pq.ParquetWriter | None = None
    schema: pa.Schema | None = None
    rows = 0
    try:
        for table in tables:
            if not table.num_rows:
                continue
            table = table.replace_schema_metadata(None)  # pandas' or an export's: never a sidecar to apply
            if writer is None:
                schema = table.schema
                writer = pq.ParquetWriter(local, schema, compression="zstd", compression_level=1)
            table = _conform(table, schema, task)
            writer.write_table(table, row_group_size=_group_rows(table))
            rows += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return rows


def _conform(table: pa.Table, schema: pa.Schema, task: int) -> pa.Table:
    """A later block cast to the task's first block's schema (Ray may infer types per block)."""
    if table.schema.equals(schema):
        return table
    try:
        return table.select(schema.names).cast(schema)
    except (*NOT_CONVERTIBLE, KeyError) as e:
        raise arrow_error(e, f"write task {task}: a block with schema ({table.schema}) does not fit the "
                             f"task's first block ({schema})") from None


def _group_rows(table: pa.Table) -> int:
    return max(1, PIECE_GROUP_BYTES * table.num_rows // max(table.nbytes, 1))


def _check_order() -> None:
    if not ray.data.DataContext.get_current().execution_options.preserve_order:
        raise UserError("VersionDatasink writes the rows in the dataset's order, which Ray keeps only with "
                        "DataContext execution_options.preserve_order: use write_version(ds, ...) or set it")


def _check_listing(catalog: Catalog, directory: str, pieces: list[Piece]) -> None:
    """The staging directory holds exactly the pieces the tasks reported: one missing would
    silently drop rows, a stray one add some."""
    with write_errors(catalog.fs, directory):
        listed = {p.rsplit("/", 1)[-1] for p in catalog.fs.ls(directory, detail=False)}
    listed = {n for n in listed if n.startswith(_PIECE_PREFIX)}
    reported = {p.path.rsplit("/", 1)[-1] for p in pieces}
    if listed != reported:
        odd = sorted(listed ^ reported)
        raise StorageError(f"{catalog.display(directory)}: the staging pieces differ from what the write tasks "
                           f"reported ({len(odd)} differ, e.g. {odd[0]}); nothing published")


def _remove_ingest_records(fs, staging: str, marker: str) -> None:
    """Remove the staging directory of the ingest job that read our pieces: the one whose part
    records name a piece URL containing `marker` (the job id is the ingest's own)."""
    if not fs.isdir(staging):
        return
    for job in fs.ls(staging, detail=False):
        names = fs.ls(job, detail=False) if fs.isdir(job) else []
        records = [p for p in names if p.rsplit("/", 1)[-1].startswith("part-") and p.endswith(".json")]
        if records and marker in _record_url(fs, records[0]):
            _remove_tree(fs, job)


def _record_url(fs, path: str) -> str:
    try:
        return str(json.loads(fs.cat_file(path)).get("url", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def _remove_tree(fs, path: str) -> None:
    if fs.exists(path):
        fs.rm(path, recursive=True)


def _writable_catalog(catalog: Catalog | str) -> Catalog:
    """The catalog, refused in one line unless Ray's workers can write to it."""
    catalog = catalog if isinstance(catalog, Catalog) else Catalog(str(catalog))
    if is_local(catalog.fs) and catalog.url != catalog.root:
        catalog = Catalog(catalog.root)  # absolute: a Ray worker's working directory is not ours
    if catalog.url.startswith("memory://"):
        raise UserError(f"catalog {catalog.url} lives in this process only; Ray's workers need one they can "
                        "open (a shared directory or an object store)")
    catalog.check_writable()
    return catalog
