"""Stream rows into a new version: row groups of bounded size, content-addressed Parquet shards.

Memory holds at most one row group of pending rows, whatever the size of the version. A writer holds
a write lease on its dataset (store/leases.py) from its first spooled row group until its manifest is
written or it gives up, so gc never removes a shard it is about to publish; the commit checks that
every shard it names is there before it writes the manifest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import posixpath
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect._version import __version__
from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, arrow_error
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field, Manifest, Shard, sha256_hex
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.format.shard_index import index_bytes, part_bounds
from dsinspect.loaders.format.token_counts import token_count
from dsinspect.loaders.store.layout import display
from dsinspect.loaders.store.leases import write_lease
from dsinspect.loaders.store.publish import publish
from dsinspect.loaders.store.storage import publish_file, spool_dir, write_atomic, write_errors, writes_locally

if TYPE_CHECKING:
    from dsinspect.loaders.store.catalog import Catalog
    from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["WriteOptions", "VersionWriter", "Rows"]

Rows = pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch] | Iterable[Mapping[str, Any]]
MiB = 1 << 20


@dataclass(frozen=True)
class WriteOptions:
    """How rows are cut into row groups and shards; none of it changes a row's hash."""

    shard_bytes: int = 64 * MiB
    shard_rows: int | None = None
    row_group_rows: int = 1024
    # A row group is what a cold read decodes to reach one row (read/cold.py): at 256 KiB a shuffled
    # first batch decodes ~1 ms per row it needs (16 MiB: ~10 ms). Measured in benchmarks/README.md.
    row_group_bytes: int = 256 << 10
    compression_level: int = 3
    # Write each shard's index (format/shard_index.py), so readers can fetch and check single row
    # groups (a fresh node's first batch). False writes shards as before indexes (and their ids).
    shard_index: bool = True
    # One contiguous chunk per row group: Parquet's dictionary fallback (so the shard bytes) can
    # depend on how a group's rows were chunked; ingest sets it so bytes depend on the rows alone.
    contiguous_groups: bool = False
    # Columns of floats (log-probs, rewards, observations) zstd-compressed too. Sampled floats' mantissas
    # are noise: zstd took ~10% off 1,024 float32 log-probs a row at about the cost of writing them.
    compress_floats: bool = True
    # Min/max statistics of the items of list and struct columns: nothing here reads them (stats.py
    # counts the nulls of flat columns), and a list of 1,024 token ids pays for them on every page.
    nested_statistics: bool = True

    def __post_init__(self) -> None:
        for name in ("shard_bytes", "row_group_rows", "row_group_bytes"):
            if getattr(self, name) < 1:
                raise UserError(f"write option {name} must be at least 1")
        if self.shard_rows is not None and self.shard_rows < 1:
            raise UserError("write option shard_rows must be at least 1")


class _ShardFile:
    """One Parquet shard being written to a local spool file."""

    def __init__(self, directory: str, schema: pa.Schema, options: WriteOptions, token_fields: Iterable[str] = (),
                 sync: bool = False):
        fd, self.path = tempfile.mkstemp(dir=directory, prefix=".tmp-shard-", suffix=".parquet")
        self.sync = sync  # on disk (fsync) before it is finished, so before it is published
        self.file = os.fdopen(fd, "wb")
        self.writer = pq.ParquetWriter(self.file, schema, **_parquet_options(schema, options))
        self.rows = 0
        self.tokens = {name: 0 for name in token_fields}  # per tokens field, for the manifest entry

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table, row_group_size=table.num_rows)
        self.rows += table.num_rows
        for name in self.tokens:
            self.tokens[name] += token_count(table.column(name))

    @property
    def size(self) -> int:
        return self.file.tell()

    def finish(self) -> tuple[str, int, bytes]:
        """Close the file; its sha256, byte size and index (format/shard_index.py), hashed in one pass."""
        self.writer.close()
        if self.sync:
            self.file.flush()
            os.fsync(self.file.fileno())
        self.file.close()
        size = os.path.getsize(self.path)
        bounds, rows = part_bounds(self.writer.writer.metadata, size)  # the footer just written, not read back
        whole, digests = hashlib.sha256(), []
        with open(self.path, "rb") as f:
            for start, end in zip(bounds, bounds[1:] + [size]):
                part = hashlib.sha256()
                while start < end:
                    chunk = f.read(min(4 * MiB, end - start))
                    if not chunk:
                        raise OSError(f"{self.path} ended at byte {start}, before {end}")
                    part.update(chunk)
                    whole.update(chunk)
                    start += len(chunk)
                digests.append(part.hexdigest())
        sha = whole.hexdigest()
        return sha, size, index_bytes(sha, size, bounds, rows, digests)

    def discard(self) -> None:
        """Close and delete the spool file, also when closing fails (a full disk fails the flush)."""
        with contextlib.suppress(OSError, pa.ArrowException):
            self.writer.close()
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class VersionWriter:
    """Write one new version of dataset `name`; `commit()` publishes it (use it as a context manager)."""

    def __init__(self, catalog: "Catalog", name: str, fields: Iterable[Field], *, key: str | None = None,
                 parent: str | None = None, message: str = "", tags: Iterable[str] = (),
                 options: WriteOptions = WriteOptions(), created_at: str | None = None,
                 on_rows: Callable[[int], None] | None = None, sync_shards: bool = False):
        """`sync_shards`: each shard on disk (fsync) before it is published, for a caller that makes
        what names it durable at once (a stream's commit); a version's shards are not synced."""
        self.catalog, self.name, self.options = catalog, name, options
        self._sync_shards = sync_shards and writes_locally(catalog.fs)  # an upload is durable when done
        self.fields = tuple(fields)
        self._template = Manifest(self.fields, (), key)  # validates names, roles and the key now
        self.data_schema = self._template.schema
        self._file_schema = self.data_schema.append(pa.field(HASH_COLUMN, pa.binary(16), nullable=False))
        self._names = [f.name for f in self.fields]
        self._name_set = set(self._names)
        self._meta = {"dataset": name, "parent": parent, "message": message,
                      "created_at": created_at or dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds"),
                      "writer": _writer_versions()}
        self._tags = tuple(tags)
        self._on_rows = on_rows
        self._pending: list[pa.RecordBatch] = []
        self._pending_hashes: list[pa.Array] = []  # the row hashes of the pending rows, in order
        self._pending_rows = self._pending_bytes = 0
        self._shard: _ShardFile | None = None
        self._shards: list[Shard] = []
        self._spool = spool_dir(catalog.fs, catalog.layout.shards(name))
        self._lease: ExitStack | None = None
        self.version: "DatasetVersion | None" = None

    # -- input ---------------------------------------------------------------------------------

    def write(self, data: Rows) -> None:
        """Append rows: a Table, a RecordBatch, an iterable of RecordBatches or of row dicts."""
        if isinstance(data, pa.Table):
            for batch in data.to_batches():
                self.write_batch(batch)
        elif isinstance(data, pa.RecordBatch):
            self.write_batch(data)
        else:
            for chunk in _chunks(iter(data), self.options.row_group_rows):
                if isinstance(chunk[0], pa.RecordBatch):
                    for batch in chunk:
                        self.write_batch(batch)
                else:
                    self.write_rows(chunk)

    def write_rows(self, rows: list[Mapping[str, Any]]) -> None:
        rows = list(rows)
        for row in rows:  # from_pylist would quietly turn a missing (e.g. misspelt) key into a null
            if row.keys() != self._name_set:
                self._check_columns(set(row.keys()))
        try:
            batch = pa.RecordBatch.from_pylist(rows, schema=self.data_schema)
        except NOT_CONVERTIBLE as e:
            for f in self.fields:  # name the usual culprit plainly
                if not f.nullable and any(r[f.name] is None for r in rows):
                    raise UserError(f"dataset {self.name!r}: field {f.name!r} is not nullable but has nulls") from None
            raise arrow_error(e, f"dataset {self.name!r}: rows do not fit the schema") from None
        self.write_batch(batch)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        batch = self._conform(batch)
        if batch.num_rows == 0:
            return
        # Hashed a batch at a time, not a row group at a time: each call costs ~0.05 ms a column beside
        # its rows, and a commit of 64 rollouts of 1,024 tokens makes three 256 KiB groups.
        self._pending.append(batch)
        self._pending_hashes.append(pa.array(row_hashes(batch, self._names), pa.binary(16)))
        self._pending_rows += batch.num_rows
        self._pending_bytes += batch.nbytes
        while self._pending_rows >= self.options.row_group_rows or self._pending_bytes >= self.options.row_group_bytes:
            self._flush_group()

    def add_shard(self, shard: Shard) -> None:
        """Append an existing shard of this dataset as is (copy-on-write derivation)."""
        self._hold_lease()
        self.close_shard()
        self._shards.append(shard)

    def close_shard(self) -> None:
        """Write out pending rows and end the current shard: later rows start a new one."""
        while self._pending_rows:
            self._flush_group()
        self._end_shard()

    def _end_shard(self) -> None:
        if self._shard is not None:
            shard, self._shard = self._shard, None
            if shard.rows == 0:
                shard.discard()
                return
            try:
                with write_errors(self.catalog.fs, shard.path):
                    sha, size, index = shard.finish()
            except BaseException:
                shard.discard()
                raise
            publish_file(self.catalog.fs, shard.path, self.catalog.layout.shard(self.name, sha))
            if self.options.shard_index:
                write_atomic(self.catalog.fs, self.catalog.layout.shard_index(self.name, sha), index)
            self._shards.append(Shard(sha, size, shard.rows, sha256_hex(index) if self.options.shard_index else None,
                                      shard.tokens))

    # -- output --------------------------------------------------------------------------------

    def end_row_group(self) -> None:
        """Write out pending rows now (one row group when they fit the options' bounds), keeping the
        shard open: lets a re-ingest reproduce an exported shard's row groups exactly."""
        while self._pending_rows:
            self._flush_group()

    def finish_shards(self) -> list[Shard]:
        """Write out pending rows and return the published shards, without a manifest: one part of
        a parallel ingest, assembled into a version later by a writer given them via `add_shard`."""
        try:
            self.close_shard()
        finally:
            self._release_lease()  # from here on the shards are the caller's to commit (or gc's)
        return list(self._shards)

    def commit(self) -> "DatasetVersion":
        """Publish the manifest (a no-op returning the existing version when the content exists)."""
        self._hold_lease()
        try:
            self.close_shard()
            self._check_shards_there()
            manifest = Manifest(self.fields, tuple(self._shards), self._template.key, self._meta)
            version_id = publish(self.catalog.fs, self.catalog.layout, self.name, manifest, self._tags)
        finally:
            self._release_lease()
        self.version = self.catalog.version(self.name, version_id)
        return self.version

    def abort(self) -> None:
        if self._shard is not None:
            self._shard.discard()
            self._shard = None
        self._pending.clear()
        self._pending_hashes.clear()
        self._pending_rows = self._pending_bytes = 0
        self._release_lease()

    def __del__(self) -> None:  # a writer dropped without commit or abort must not keep gc out
        self._release_lease()

    def __enter__(self) -> "VersionWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    # -- internals -----------------------------------------------------------------------------

    def _hold_lease(self) -> None:
        if self._lease is None:
            stack = ExitStack()
            stack.enter_context(write_lease(self.catalog.fs, self.catalog.layout, self.name))
            self._lease = stack

    def _release_lease(self) -> None:
        lease, self._lease = getattr(self, "_lease", None), None
        if lease is not None:
            lease.close()

    def _check_shards_there(self) -> None:
        """IntegrityError, before any manifest is written, naming a shard this version would reference
        that is not in the catalog (under the lease only something outside dsinspect removes one)."""
        if not self._shards:
            return
        fs, directory = self.catalog.fs, self.catalog.layout.shards(self.name)
        with contextlib.suppress(AttributeError):
            fs.invalidate_cache(directory)  # s3fs lists from a cache
        with write_errors(fs, directory):
            there = {p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(directory, detail=False)}
        for s in self._shards:
            names = [f"{s.sha256}.parquet"] + ([f"{s.sha256}.index.json"] if s.index_sha256 else [])
            for missing in (n for n in names if n not in there):
                raise IntegrityError(f"dataset {self.name!r}: {display(fs, posixpath.join(directory, missing))} is "
                                     "gone, so the version was not published; write it again (an ingest re-run "
                                     "converts the missing parts again)")

    def _check_columns(self, have: set[str]) -> None:
        missing = [n for n in self._names if n not in have]
        extra = sorted(have - self._name_set)
        if missing or extra:
            raise UserError(f"dataset {self.name!r}: columns do not match the schema "
                            f"(missing {missing}, unexpected {extra})")

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        self._check_columns(set(batch.schema.names))
        for f in self.fields:
            if not f.nullable and batch.column(f.name).null_count:
                raise UserError(f"dataset {self.name!r}: field {f.name!r} is not nullable but has nulls")
        try:
            table = pa.Table.from_batches([batch]).select(self._names).cast(self.data_schema)
        except NOT_CONVERTIBLE as e:
            raise arrow_error(e, f"dataset {self.name!r}: cannot convert rows to the schema") from None
        return table.combine_chunks().to_batches()[0] if table.num_rows else batch.slice(0, 0)

    def _flush_group(self) -> None:
        """Write the first row group's worth of pending rows to the current shard."""
        table = pa.Table.from_batches(self._pending)
        n = min(self._pending_rows, self.options.row_group_rows)
        if self._pending_bytes >= self.options.row_group_bytes:
            per_row = max(1, self._pending_bytes // max(1, self._pending_rows))
            n = min(n, max(1, self.options.row_group_bytes // per_row))
        if self.options.shard_rows is not None:
            n = min(n, self.options.shard_rows - (self._shard.rows if self._shard else 0))
        group, rest = table.slice(0, n), table.slice(n)
        if self.options.contiguous_groups:
            group = group.combine_chunks()
        pending_hashes = pa.chunked_array(self._pending_hashes, pa.binary(16))
        hashes = pa.concat_arrays(pending_hashes.slice(0, n).chunks)  # one chunk, as the group's were made
        self._pending = rest.to_batches() if rest.num_rows else []
        self._pending_hashes = pending_hashes.slice(n).chunks if rest.num_rows else []
        self._pending_rows = rest.num_rows
        self._pending_bytes = rest.nbytes
        with write_errors(self.catalog.fs, self._shard.path if self._shard else self._spool):
            if self._shard is None:
                self._hold_lease()  # before a byte lands in the dataset (the spool file is there)
                self._shard = _ShardFile(self._spool, self._file_schema, self.options,
                                         [f.name for f in self.fields if f.role is Role.TOKENS], self._sync_shards)
            self._shard.write(group.append_column(self._file_schema.field(HASH_COLUMN), hashes))
        if self._on_rows:
            self._on_rows(n)
        full_rows = self.options.shard_rows is not None and self._shard.rows >= self.options.shard_rows
        if full_rows or self._shard.size >= self.options.shard_bytes:
            self._end_shard()


def _parquet_options(schema: pa.Schema, options: WriteOptions) -> dict[str, Any]:
    """The ParquetWriter's arguments for `options`: zstd at their level, dictionaries for scalars."""
    kwargs: dict[str, Any] = {"compression": "zstd", "compression_level": options.compression_level,
                              "use_dictionary": _dictionary_columns(schema)}
    if not options.compress_floats:
        compressed = [path for path, t in _leaf_columns(schema) if not pa.types.is_floating(t)]
        kwargs["compression"] = dict.fromkeys(compressed, "zstd")  # a column not named is stored plain
        kwargs["compression_level"] = dict.fromkeys(compressed, options.compression_level)
    if not options.nested_statistics:
        kwargs["write_statistics"] = [f.name for f in schema if not pa.types.is_nested(f.type)]
    return kwargs


def _leaf_columns(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    """Each Parquet column of `schema`: its path as pyarrow names it (lists as `.list.element`, maps
    as `.key_value.key` / `.value`) and its Arrow type."""
    def leaves(path: str, t: pa.DataType) -> Iterator[tuple[str, pa.DataType]]:
        if pa.types.is_dictionary(t):
            yield from leaves(path, t.value_type)
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            yield from leaves(f"{path}.list.element", t.value_type)
        elif pa.types.is_map(t):
            yield from leaves(f"{path}.key_value.key", t.key_type)
            yield from leaves(f"{path}.key_value.value", t.item_type)
        elif pa.types.is_struct(t):
            for child in t:
                yield from leaves(f"{path}.{child.name}", child.type)
        else:
            yield path, t
    return [leaf for f in schema for leaf in leaves(f.name, f.type)]


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """Columns worth dictionary-encoding: scalars and strings. Lists, binaries and structs (tokens,
    images, trajectories) are stored plain: in row groups this small a dictionary page per group made
    uniform token ids 61% larger and Zipfian ones 11% larger than plain, and decoding 2-4x slower."""
    def scalar(t: pa.DataType) -> bool:
        return not (pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
                    or pa.types.is_fixed_size_binary(t))
    return [f.name for f in schema if scalar(f.type)]


def _chunks(it: Iterator, size: int) -> Iterator[list]:
    chunk: list = []
    for item in it:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _writer_versions() -> dict[str, str]:
    return {"dsinspect": __version__, "pyarrow": pa.__version__}
