"""Diff two dataset versions: schema, shards (from the manifests alone) and rows (reading only the
shards the versions do not share, and of those only the key and row-hash columns; then the fields
of the changed rows, hashed per field for exact per-field counts, and decoded only for the changed
rows it lists). docs: diff_rows.py says why that is exact and what "moved" means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.diff.counts import field_changes
from dsinspect.loaders.diff.fields import field_detail
from dsinspect.loaders.diff.rows import Matches, Side, match_by_hash, match_by_key, moved_items, read_side
from dsinspect.loaders.format.manifest import Manifest
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["SchemaChange", "ShardChanges", "RowChanges", "VersionDiff", "diff", "schema_changes", "shard_changes"]


@dataclass(frozen=True)
class SchemaChange:
    field: str
    change: str        # added, removed, type, role, nullable, options, order, key
    before: Any = None
    after: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "change": self.change, "before": self.before, "after": self.after}


@dataclass
class ShardChanges:
    """Shards by sha256: shared (listed by both), added (only in b), removed (only in a), and shared
    shards that moved relative to the others. Each entry: sha256, rows, index_a and/or index_b."""

    shared: list[dict] = field(default_factory=list)
    added: list[dict] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    moved: list[dict] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"shared": self.shared, "added": self.added, "removed": self.removed, "moved": self.moved}


@dataclass
class RowChanges:
    matched_by: str                  # "key" or "row_hash"
    key: str | None = None
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"added": 0, "removed": 0, "changed": 0, "moved": 0})
    added: list[dict] = field(default_factory=list)    # at most `limit` of each list; counts are exact
    removed: list[dict] = field(default_factory=list)
    changed: list[dict] = field(default_factory=list)
    moved: list[dict] = field(default_factory=list)
    fields: dict[str, int] = field(default_factory=dict)  # changed rows per field (all of them, in schema order)
    rows_read: int = 0               # rows whose key and hash were read (those of unshared shards)

    def to_json(self) -> dict[str, Any]:
        return {"matched_by": self.matched_by, "key": self.key, "notes": self.notes, "counts": self.counts,
                "fields": self.fields, "rows_read": self.rows_read, "added": self.added, "removed": self.removed,
                "changed": self.changed, "moved": self.moved}


@dataclass
class VersionDiff:
    a: str
    b: str
    a_id: str
    b_id: str
    a_rows: int
    b_rows: int
    schema: list[SchemaChange]
    shards: ShardChanges
    rows: RowChanges
    limit: int | None

    @property
    def empty(self) -> bool:
        """Nothing changed (shards may still have been rewritten byte-differently with equal rows)."""
        return not self.schema and not any(self.rows.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {"a": {"address": self.a, "id": self.a_id, "rows": self.a_rows},
                "b": {"address": self.b, "id": self.b_id, "rows": self.b_rows}, "empty": self.empty,
                "limit": self.limit, "schema": [c.to_json() for c in self.schema],
                "shards": self.shards.to_json(), "rows": self.rows.to_json()}


def diff(a: str | DatasetVersion, b: str | DatasetVersion, catalog: Catalog | None = None, *,
         limit: int | None = 100, on_rows: Callable[[int], None] | None = None) -> VersionDiff:
    """What changed from version `a` to version `b` (addresses or versions). Lists hold at most
    `limit` entries each (None: all); the counts, per-field counts included, are exact; field-level
    details are computed for the listed changed rows.
    `on_rows(n)` is told as the key and hash columns of n more rows are read."""
    if catalog is None and (isinstance(a, str) or isinstance(b, str)):
        raise UserError("diff of addresses needs a catalog: diff(a, b, catalog=Catalog(url)), or pass two versions")
    va = a if isinstance(a, DatasetVersion) else catalog.resolve(a)  # type: ignore[union-attr]
    vb = b if isinstance(b, DatasetVersion) else catalog.resolve(b)  # type: ignore[union-attr]
    shards, pairs, only_a, only_b = shard_changes(va.manifest, vb.manifest)
    rows, moved_shards = _row_changes(va, vb, pairs, only_a, only_b, limit, on_rows)
    shards.moved = [shards.shared[i] for i in moved_shards]
    return VersionDiff(va.address, vb.address, va.id, vb.id, va.num_rows, vb.num_rows,
                       schema_changes(va.manifest, vb.manifest), shards, rows, limit)


# -- schema and shards: manifests only ------------------------------------------------------------

def schema_changes(a: Manifest, b: Manifest) -> list[SchemaChange]:
    fa, fb = {f.name: f for f in a.fields}, {f.name: f for f in b.fields}
    out = [SchemaChange(n, "removed", fa[n].to_json(), None) for n in fa if n not in fb]
    out += [SchemaChange(n, "added", None, fb[n].to_json()) for n in fb if n not in fa]
    for name in (n for n in fa if n in fb):
        x, y = fa[name].to_json(), fb[name].to_json()
        for part, change in (("type", "type"), ("role", "role"), ("nullable", "nullable")):
            if x[part] != y[part]:
                out.append(SchemaChange(name, change, x[part], y[part]))
        for option in sorted(set(x["options"]) | set(y["options"])):
            if x["options"].get(option) != y["options"].get(option):
                out.append(SchemaChange(name, "options", {option: x["options"].get(option)},
                                        {option: y["options"].get(option)}))
    common_a = [n for n in fa if n in fb]
    common_b = [n for n in fb if n in fa]
    if common_a != common_b:
        out.append(SchemaChange("*", "order", common_a, common_b))
    if a.key != b.key:
        out.append(SchemaChange(a.key or b.key or "", "key", a.key, b.key))
    return out


def shard_changes(a: Manifest, b: Manifest) -> tuple[ShardChanges, list[tuple[int, int]], list[int], list[int]]:
    """Shard lists compared by sha256 (the n-th copy of a sha in a pairs with the n-th in b); also
    the (index_a, index_b) pairs of shared shards and the unshared shard indices of each side."""
    positions_b: dict[str, list[int]] = {}
    for i, s in enumerate(b.shards):
        positions_b.setdefault(s.sha256, []).append(i)
    pairs, only_a = [], []
    for i, s in enumerate(a.shards):
        free = positions_b.get(s.sha256)
        if free:
            pairs.append((i, free.pop(0)))
        else:
            only_a.append(i)
    paired_b = {j for _, j in pairs}
    only_b = [j for j in range(len(b.shards)) if j not in paired_b]
    changes = ShardChanges(
        shared=[{"sha256": a.shards[i].sha256, "rows": a.shards[i].rows, "index_a": i, "index_b": j} for i, j in pairs],
        added=[{"sha256": b.shards[j].sha256, "rows": b.shards[j].rows, "index_b": j} for j in only_b],
        removed=[{"sha256": a.shards[i].sha256, "rows": a.shards[i].rows, "index_a": i} for i in only_a])
    return changes, pairs, only_a, only_b


# -- rows ------------------------------------------------------------------------------------------

def _row_changes(va: DatasetVersion, vb: DatasetVersion, pairs: list[tuple[int, int]], only_a: list[int],
                 only_b: list[int], limit: int | None, on_rows) -> tuple[RowChanges, list[int]]:
    """The row-level changes, and which shared shards (by their place in `pairs`) moved."""
    key, notes = _key_of(va, vb)
    hash_fields = _hash_fields(va, vb, notes)
    side_a = read_side(va, only_a, key, hash_fields, on_rows)
    side_b = read_side(vb, only_b, key, hash_fields, on_rows)
    matches = match_by_key(side_a, side_b) if key else None
    if key and matches is None:
        notes.append(f"key {key!r} repeats among the rows read: rows matched by row hash instead")
        key = None
    if not key:
        notes.append("without a common key a changed row shows as one removed and one added row")
        matches = match_by_hash(side_a, side_b)
    result = RowChanges("key" if key else "row_hash", key, notes, rows_read=len(side_a) + len(side_b))
    _list_added_removed(result, side_a, side_b, matches, key, limit)
    moved_shards = _list_moved(result, va, vb, side_a, side_b, matches, pairs, key, limit)
    _list_changed(result, va, vb, side_a, side_b, matches, key, hash_fields, limit)
    return result, moved_shards


def _key_of(va: DatasetVersion, vb: DatasetVersion) -> tuple[str | None, list[str]]:
    ka, kb = va.manifest.key, vb.manifest.key
    if ka and ka == kb and va.manifest.field(ka).type == vb.manifest.field(kb).type:
        return ka, []
    if ka or kb:
        return None, [f"the versions do not declare the same key ({ka!r} vs {kb!r}): rows matched by row hash"]
    return None, ["no key declared: rows matched by row hash"]


def _hash_fields(va: DatasetVersion, vb: DatasetVersion, notes: list[str]) -> list[str] | None:
    """None when stored row hashes compare (same field names and types, in order); else the fields
    both share with one type, over which rows are re-hashed."""
    fa = [(f.name, f.type) for f in va.fields]
    fb = [(f.name, f.type) for f in vb.fields]
    if fa == fb:
        return None
    types_b = dict(fb)
    common = [n for n, t in fa if types_b.get(n) == t]
    if not common:
        notes.append("the versions share no field with one type: every row counts as removed and added")
        return None  # stored hashes, which name their fields, so no row of one matches a row of the other
    notes.append(f"the schemas differ: rows compared over the {len(common)} field(s) both share with one type "
                 f"({', '.join(common)})")
    return common


def _key_json(side: Side, position: int) -> Any:
    value = side.keys[position].as_py() if side.keys is not None else None
    return value.hex() if isinstance(value, bytes) else value


def _ident(side: Side, position: int, key: str | None) -> dict[str, Any]:
    if key:
        return {"key": _key_json(side, position)}
    return {"row_hash": side.hashes[position].astype("<u8").tobytes().hex()}


def _cut(items: np.ndarray, limit: int | None) -> np.ndarray:
    return items if limit is None else items[:limit]


def _list_added_removed(result: RowChanges, a: Side, b: Side, m: Matches, key: str | None, limit: int | None) -> None:
    removed = m.removed[np.argsort(a.indices[m.removed], kind="stable")]
    added = m.added[np.argsort(b.indices[m.added], kind="stable")]
    result.counts["removed"], result.counts["added"] = len(removed), len(added)
    result.removed = [{**_ident(a, int(p), key), "index_a": int(a.indices[p])} for p in _cut(removed, limit)]
    result.added = [{**_ident(b, int(p), key), "index_b": int(b.indices[p])} for p in _cut(added, limit)]


def _list_moved(result: RowChanges, va: DatasetVersion, vb: DatasetVersion, a: Side, b: Side, m: Matches,
                pairs: list[tuple[int, int]], key: str | None, limit: int | None) -> list[int]:
    starts_a = np.array([va.shard_starts[i] for i, _ in pairs], np.int64)
    starts_b = np.array([vb.shard_starts[j] for _, j in pairs], np.int64)
    rows = np.array([va.manifest.shards[i].rows for i, _ in pairs], np.int64)
    moved = moved_items(np.concatenate([starts_a, a.indices[m.pair_a]]),
                        np.concatenate([starts_b, b.indices[m.pair_b]]),
                        np.concatenate([rows, np.ones(len(m.pair_a), np.int64)]))
    shards_moved = np.flatnonzero(moved[:len(pairs)])
    rows_moved = np.flatnonzero(moved[len(pairs):])
    result.counts["moved"] = int(rows[shards_moved].sum()) + len(rows_moved)
    if len(shards_moved):
        result.notes.append(f"{len(shards_moved)} shared shard(s) moved as a whole: their rows count as moved "
                            "and are listed by shard")
    rows_moved = rows_moved[np.argsort(b.indices[m.pair_b[rows_moved]], kind="stable")]
    result.moved = [{**_ident(a, int(m.pair_a[i]), key), "index_a": int(a.indices[m.pair_a[i]]),
                     "index_b": int(b.indices[m.pair_b[i]])} for i in _cut(rows_moved, limit)]
    return shards_moved.tolist()


def _list_changed(result: RowChanges, va: DatasetVersion, vb: DatasetVersion, a: Side, b: Side, m: Matches,
                  key: str | None, hash_fields: list[str] | None, limit: int | None) -> None:
    changed = np.flatnonzero(m.changed)
    changed = changed[np.argsort(b.indices[m.pair_b[changed]], kind="stable")]
    result.counts["changed"] = len(changed)
    if not len(changed):
        return
    ia, ib = a.indices[m.pair_a[changed]], b.indices[m.pair_b[changed]]
    names = hash_fields if hash_fields is not None else [f.name for f in va.fields]
    masks = field_changes(va, vb, ia, ib, names, key)  # every changed row: the counts are exact at any limit
    result.fields = {n: int(masks[n].sum()) for n in names if masks[n].any()}
    listed = len(_cut(changed, limit))
    per_row = [[n for n in names if masks[n][i]] for i in range(listed)]
    shown = [n for n in names if masks[n][:listed].any()]  # full values: the listed rows' changed fields only
    rows_a, rows_b = va.take(ia[:listed], shown), vb.take(ib[:listed], shown)
    for i, fields in enumerate(per_row):
        details = {name: field_detail(va.manifest.field(name), rows_a.column(name)[i].as_py(),
                                      rows_b.column(name)[i].as_py()) for name in fields}
        result.changed.append({**_ident(a, int(m.pair_a[changed[i]]), key), "index_a": int(ia[i]),
                               "index_b": int(ib[i]), "fields": fields, "details": details})
