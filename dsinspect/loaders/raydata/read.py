"""A version as a Ray Data datasource: one read task per run of consecutive shards; a task fetches
each shard whole with the engine's verified download (retries, sha256 against the manifest, a
mismatch refused naming the URL), reads the requested columns from it and yields them as Arrow
tables in shard order. The tasks carry only the catalog URL and the shards' names and hashes:
each Ray worker opens the catalog's filesystem itself."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import ray.data
from ray.data.block import BlockMetadata

from dsinspect.errors import UserError
from dsinspect.loaders.read.fetch import fetch_verified
from dsinspect.loaders.read.stats import ReadStats
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["VersionDatasource", "read_version"]


class VersionDatasource(ray.data.Datasource):
    """Every shard of `version` (the rows in stored order within each), `columns` only if given."""

    def __init__(self, version: DatasetVersion, columns: Sequence[str] | None = None):
        super().__init__()
        names = [f.name for f in version.fields]
        self.columns = list(columns) if columns else names
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise UserError(f"{version.address} has no field(s) {missing}")
        self.url, self.address = version.catalog.url, version.address
        self.shards = [(version.shard_path(s), version.shard_url(s), e.sha256, e.bytes, e.rows)
                       for s, e in enumerate(version.manifest.shards)]

    def get_name(self) -> str:
        return f"dsinspect({self.address})"

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(size for _, _, _, size, _ in self.shards)  # stored (compressed): a lower bound

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ray.data.ReadTask]:
        count = max(1, min(parallelism, len(self.shards)))
        bounds = [len(self.shards) * k // count for k in range(count + 1)]
        tasks = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            shards = self.shards[lo:hi]
            meta = BlockMetadata(num_rows=sum(s[4] for s in shards), size_bytes=sum(s[3] for s in shards),
                                 exec_stats=None, input_files=tuple(s[1] for s in shards))
            tasks.append(ray.data.ReadTask(_reader(self.url, shards, self.columns), meta))
        return tasks


def read_version(version: DatasetVersion, columns: Sequence[str] | None = None, **read_args: Any) -> ray.data.Dataset:
    """`ray.data.read_datasource` of the version (`read_args`: its options, e.g. `concurrency`)."""
    return ray.data.read_datasource(VersionDatasource(version, columns), **read_args)


def _reader(url: str, shards: list[tuple], columns: list[str]):
    def read() -> Iterator[pa.Table]:
        catalog = Catalog(url)
        scratch = tempfile.mkdtemp(prefix="dsinspect-ray-read-")
        try:
            for path, shard_url, sha256, size, _ in shards:
                local = fetch_verified(catalog.fs, path, shard_url, sha256, size, scratch, ReadStats())
                try:
                    yield pq.read_table(local, columns=columns)
                finally:
                    os.unlink(local)
        finally:
            os.rmdir(scratch)
    return read
