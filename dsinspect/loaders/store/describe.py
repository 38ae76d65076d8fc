"""Plain-data descriptions of datasets and versions, shared by the CLI's --json and the viewers."""

from __future__ import annotations

from typing import Any

from dsinspect.errors import DamagedError, DsinspectError
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["tags_by_version", "version_summary", "version_info", "shard_entries", "catalog_listing"]


def tags_by_version(tags: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for tag, vid in sorted(tags.items()):
        out.setdefault(vid, []).append(tag)
    return out


def version_summary(version: DatasetVersion, tags: list[str]) -> dict[str, Any]:
    meta = version.manifest.meta
    return {
        "id": version.id, "short_id": version.id[:12], "tags": tags,
        "parent": meta.get("parent"), "created_at": meta.get("created_at"), "message": meta.get("message", ""),
        "rows": version.num_rows, "bytes": version.manifest.num_bytes, "shards": len(version.manifest.shards),
    }


def version_info(version: DatasetVersion, max_shards: int | None = None) -> dict[str, Any]:
    """Everything a manifest says, with shard URLs resolved. A damaged tags.json does not hide the
    version: its tags are then [] and `tags_error` says why. `max_shards`: list only the first
    ones (`shards_omitted` counts the rest; a terminal has no use for 10^5 rows)."""
    try:
        tags, damage = tags_by_version(version.catalog.tags(version.name)).get(version.id, []), {}
    except DamagedError as e:
        tags, damage = [], {"tags_error": str(e)}
    count = len(version.manifest.shards)
    listed = count if max_shards is None else min(count, max_shards)
    return {
        "address": version.address, "name": version.name, **version_summary(version, tags), **damage,
        "key": version.manifest.key,
        "schema": [f.to_json() for f in version.fields],
        "shards": shard_entries(version, listed),
        **({"shards_omitted": count - listed} if listed < count else {}),
        "meta": dict(version.manifest.meta),
    }


def shard_entries(version: DatasetVersion, count: int) -> list[dict[str, Any]]:
    """The first `count` shards as `info` lists them (the manifest's entry, its index, first row and
    URL), from the manifest's columns: no `Shard` object or path join per shard."""
    table = version.manifest.shards
    if not count:
        return []
    first = table.sha256(0)
    before, after = version.shard_url(0).rsplit(first, 1)  # every shard's URL differs only by its sha256
    starts = version.shard_starts[:count].tolist()
    out = []
    for i, (shard, start) in enumerate(zip(table if count == len(table) else table[:count], starts)):
        out.append({"index": i, **shard.to_json(), "first_row": start, "url": before + shard.sha256 + after})
    return out


def catalog_listing(catalog: Catalog) -> dict[str, Any]:
    """Every dataset with its versions (oldest first) and tags. A stored file that cannot be read
    (a truncated manifest, a damaged tags.json) is listed under the dataset's `broken` as
    {"id", "short_id", "path", "reason", "tags"} (id None for tags.json) and the rest lists as usual;
    `broken` at the top counts them all. A catalog that does not exist is a NotFoundError."""
    catalog.check_exists()
    datasets = [_dataset_listing(catalog, name) for name in catalog.datasets()]
    return {"catalog": catalog.url, "datasets": datasets, "broken": sum(len(d["broken"]) for d in datasets)}


def _dataset_listing(catalog: Catalog, name: str) -> dict[str, Any]:
    broken = []
    try:
        tags = catalog.tags(name)
    except DsinspectError as e:
        tags = {}
        broken.append(_broken(None, catalog.display(catalog.layout.tags_file(name)), e))
    versions = []
    for vid in catalog.version_ids(name):
        try:
            versions.append(catalog.version(name, vid))
        except DsinspectError as e:
            broken.append(_broken(vid, catalog.display(catalog.layout.manifest(name, vid)), e))
    versions.sort(key=lambda v: (str(v.manifest.meta.get("created_at", "")), v.id))
    by_id = tags_by_version(tags)
    for b in broken:
        b["tags"] = by_id.get(b["id"], [])
    return {"name": name, "tags": tags, "versions": [version_summary(v, by_id.get(v.id, [])) for v in versions],
            "broken": broken}


def _broken(version_id: str | None, path: str, error: DsinspectError) -> dict[str, Any]:
    reason = str(error)
    if reason.startswith(f"{path}: "):  # errors name their file first; it is in "path" already
        reason = reason[len(path) + 2:]
    return {"id": version_id, "short_id": version_id[:12] if version_id else None, "path": path, "reason": reason}
