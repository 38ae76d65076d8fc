"""Derived values kept beside the data: one Parquet sidecar per shard, named by the shard's sha256
and the derivations' hash (`derived.derived_kind`), computed once and read by every later query.
A sidecar also carries a copy of the shard's scalar fields (`kept`): a shard's row groups are sized
for reading rows (a few hundred rows of 1,024 tokens each), so its scalars are spread over hundreds
of column chunks (1.4 s for 3 scalars of 10^6 rows, against 0.13 s for all the sidecars).

    <catalog>/datasets/<name>/derived/<kind>/<shard-sha256>.parquet

A sidecar is made from the shard's bytes checked against its sha256 (a value derived from damaged
data would outlive the damage), and written with the catalog's atomic write; a catalog that cannot
be written (an http catalog, a read-only mount) keeps its sidecars in the node's cache directory
instead. A sidecar that does not read back as the shard's row count of the expected columns is made
again.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.errors import IntegrityError, StorageError
from dsinspect.inspect.derived import Derived, derive, derived_kind
from dsinspect.loaders.store.storage import cache_dir, write_atomic
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["derived_tables"]


def derived_tables(version: DatasetVersion, derived: Sequence[Derived], kept: Sequence[str] = (),
                   on_shard: Callable[[int], None] | None = None) -> list[pa.Table]:
    """Per shard of `version`, its rows' `kept` fields and derived values, in that order (made and
    stored where missing)."""
    kind = derived_kind(derived, kept)
    names = [*kept, *(d.name for d in derived)]
    tables = []
    for s, entry in enumerate(version.manifest.shards):
        tables.append(_load(version, kind, entry.sha256, entry.rows, names)
                      or _make(version, s, kind, derived, kept))
        if on_shard:
            on_shard(s)
    return tables


def _homes(version: DatasetVersion, kind: str, sha256: str) -> tuple[str, Path]:
    """Where a sidecar lives: the catalog's path, and the node cache's fallback."""
    return (version.catalog.layout.derived(version.name, kind, sha256),
            cache_dir() / "derived" / kind / f"{sha256}.parquet")


def _load(version: DatasetVersion, kind: str, sha256: str, rows: int, names: list[str]) -> pa.Table | None:
    in_catalog, in_cache = _homes(version, kind, sha256)
    for read in (lambda: version.catalog.fs.cat_file(in_catalog), in_cache.read_bytes):
        try:
            table = _decoded(read())
        except (OSError, pa.ArrowException):  # absent, or unreadable: made again
            continue
        if table.num_rows == rows and table.column_names == names:
            return table
    return None


def _decoded(data: bytes, columns: list[str] | None = None) -> pa.Table:
    """Parquet bytes decoded in the calling thread: an Arrow pool worker may drop the last reference
    to Python-owned bytes after the read returned, and one asking for the GIL while the interpreter
    finalizes aborts the process (see verify._read_hashing)."""
    return pq.ParquetFile(pa.BufferReader(data)).read(columns=columns, use_threads=False)


def _make(version: DatasetVersion, shard: int, kind: str, derived: Sequence[Derived],
          kept: Sequence[str]) -> pa.Table:
    entry = version.manifest.shards[shard]
    data = version.catalog.fs.cat_file(version.shard_path(shard))
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise IntegrityError(f"{version.shard_url(shard)}: its bytes do not hash to the manifest's sha256 "
                             f"{entry.sha256[:16]}...; run `dsinspect verify {version.address}`")
    rows = _decoded(data, columns=sorted({d.field for d in derived} | set(kept)))
    values = derive(rows, derived) if derived else None
    table = pa.Table.from_arrays([*(rows.column(k) for k in kept), *(values.columns if values else [])],
                                 names=[*kept, *(d.name for d in derived)])
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    in_catalog, in_cache = _homes(version, kind, entry.sha256)
    try:
        write_atomic(version.catalog.fs, in_catalog, sink.getvalue())
    except (StorageError, OSError, NotImplementedError):  # a catalog that cannot be written: the node keeps it
        in_cache.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=in_cache.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(sink.getvalue())
        os.replace(partial, in_cache)
    return table
