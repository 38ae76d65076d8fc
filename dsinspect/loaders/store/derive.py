"""Derive a version from a parent by replacing, removing and adding rows, copy-on-write per shard.

Only shards that hold a change are rewritten; every other shard of the parent is shared as is.
Rows are named by their key field's value when the manifest declares a key, else by global index.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pyarrow as pa

from dsinspect.errors import NotFoundError, UserError
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, arrow_error
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.loaders.store.writer import Rows, WriteOptions

__all__ = ["derive_version"]


def derive_version(parent: DatasetVersion, *, update: Mapping[Any, Mapping[str, Any]] | None = None,
                   remove: Iterable[Any] = (), add: Rows = (), message: str = "", tags: Iterable[str] = (),
                   options: WriteOptions = WriteOptions(), created_at: str | None = None) -> DatasetVersion:
    """A new version of `parent`'s dataset. `update` maps a row's name to the fields that change."""
    update, remove = dict(update or {}), set(remove)
    if update.keys() & remove:
        raise UserError(f"rows both updated and removed: {sorted(update.keys() & remove)[:5]}")
    key = parent.manifest.key
    names = [f.name for f in parent.fields]
    writer = parent.catalog.writer(parent.name, parent.fields, key=key, parent=parent.id, message=message,
                                   tags=tags, options=options, created_at=created_at)
    touched: set = set()
    seen_keys: set = set()
    try:
        for shard, entry in enumerate(parent.manifest.shards):
            start = int(parent.shard_starts[shard])
            row_names = (parent.read_shard(shard, [key]).column(0).to_pylist() if key
                         else range(start, start + entry.rows))
            if key:
                seen_keys.update(row_names)
            hits = [(pos, n) for pos, n in enumerate(row_names) if n in update or n in remove]
            if not hits:
                writer.add_shard(entry)
                continue
            writer.write(_apply(parent.read_shard(shard, names), hits, update, key, writer.data_schema))
            writer.close_shard()
            touched.update(n for _, n in hits)
        missing = (update.keys() | remove) - touched
        if missing:
            what = "keys" if key else "indices"
            raise NotFoundError(f"{parent.address}: no rows with {what} {sorted(missing, key=repr)[:5]}")
        if key:
            add = _check_new_keys(add, key, seen_keys - remove)
        writer.write(add)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise


def _apply(table: pa.Table, hits: list[tuple[int, Any]], update: Mapping, key: str | None,
           schema: pa.Schema) -> pa.Table:
    """`table` with the hit rows replaced (merged with their update) or dropped, order kept."""
    pieces, prev = [], 0
    for pos, name in hits:
        pieces.append(table.slice(prev, pos - prev))
        prev = pos + 1
        if name in update:
            row = {**table.slice(pos, 1).to_pylist()[0], **update[name]}
            if key and row[key] != name:
                raise UserError(f"an update may not change the key of row {name!r} (use remove + add)")
            try:
                pieces.append(pa.Table.from_pylist([row], schema=schema))
            except NOT_CONVERTIBLE as e:
                raise arrow_error(e, f"update of row {name!r} does not fit the schema") from None
    pieces.append(table.slice(prev))
    return pa.concat_tables([p.cast(schema) for p in pieces])


def _check_new_keys(add: Rows, key: str, existing: set) -> list:
    """Added rows as a list, refusing keys that already exist (diffs match rows by key)."""
    if isinstance(add, (pa.Table, pa.RecordBatch)):
        rows = add.to_pylist()
    else:
        rows = [r for part in add for r in (part.to_pylist() if isinstance(part, pa.RecordBatch) else [part])]
    for r in rows:
        if r.get(key) in existing:
            raise UserError(f"added row has key {r.get(key)!r}, which already exists (keys must be unique)")
        existing.add(r.get(key))
    return rows
