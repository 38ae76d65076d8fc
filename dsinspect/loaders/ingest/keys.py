"""The row key of an ingested version: given (`--key`), kept from the parent, or inferred and verified.

Without `--key` or `--no-key` (and without an export's sidecar, whose key is exact), a new version
keeps its parent's key (`inherited_key`). A version with no parent key gets an inferred one: a
`files` folder's `name`, else a field named `id` (any case), else the one field whose name ends in
`_id`, holding integers or strings (`key_candidate`). The candidate becomes the key only when the
converted rows hold it for every row, never twice (`verified_key`, at the commit: keys never change a
shard, only the manifest); otherwise the version has no key.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dsinspect.errors import UserError
from dsinspect.loaders.format.manifest import Field, Shard
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["inherited_key", "key_candidate", "verified_key"]

_MEDIA_KEY = "name"  # a `files` folder's path relative to the folder: one row per file


def inherited_key(name: str, parent: DatasetVersion | None, fields: list[Field]) -> str | None:
    """The key a new version of `name` keeps from its parent: the parent's, when the new fields hold
    it with the same type (so `diff` keeps matching rows by key); a UserError when they do not,
    rather than silently matching by row hash."""
    if parent is None or parent.manifest.key is None:
        return None
    key = parent.manifest.key
    want = parent.manifest.field(key).type
    have = next((f.type for f in fields if f.name == key), None)
    if have == want:
        return key
    found = "has no such field" if have is None else f"holds it as {have}"
    raise UserError(f"{name}@{parent.id[:12]} (latest) has key {key!r} ({want}), but the source {found}: "
                    "pass --key FIELD to name another key, or --no-key to match rows by row hash")


def key_candidate(kind: str, fields: list[Field]) -> str | None:
    """The field a key is inferred from, if any: `name` for a `files` source; else `id` (any case),
    else the only field named `*_id`; integers or strings only."""
    usable = {f.name: f for f in fields if _key_type(f.type)}
    if kind == "files":
        return _MEDIA_KEY if _MEDIA_KEY in usable else None
    ids = [n for n in usable if n.lower() == "id"]
    if len(ids) == 1:
        return ids[0]
    suffixed = [n for n in usable if n.lower().endswith("_id")]
    return suffixed[0] if not ids and len(suffixed) == 1 else None


def verified_key(catalog: Catalog, dataset: str, shards: list[Shard], candidate: str | None) -> str | None:
    """`candidate` when every row of `shards` holds a value for it and no value repeats, else None.
    Reads only that column of each shard (in this thread: see docs/DESIGN.md on Arrow's threads)."""
    if candidate is None:
        return None
    chunks: list[pa.Array] = []
    for shard in shards:
        with catalog.fs.open(catalog.layout.shard(dataset, shard.sha256), "rb") as f:
            column = pq.ParquetFile(f).read(columns=[candidate], use_threads=False).column(candidate)
        if column.null_count:
            return None
        chunks += column.chunks
    if not chunks:
        return None
    values = pa.chunked_array(chunks)
    return candidate if pc.count_distinct(values, mode="all").as_py() == len(values) else None


def _key_type(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
