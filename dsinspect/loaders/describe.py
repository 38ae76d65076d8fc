"""Plain-data descriptions of datasets and versions, shared by the CLI's --json and the viewers."""

from __future__ import annotations

from typing import Any

from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.version import DatasetVersion

__all__ = ["tags_by_version", "version_summary", "version_info", "catalog_listing"]


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


def version_info(version: DatasetVersion) -> dict[str, Any]:
    """Everything a manifest says, with shard URLs resolved."""
    tags = tags_by_version(version.catalog.tags(version.name)).get(version.id, [])
    return {
        "address": version.address, "name": version.name, **version_summary(version, tags),
        "key": version.manifest.key,
        "schema": [f.to_json() for f in version.fields],
        "shards": [{"index": i, **s.to_json(), "first_row": int(version.shard_starts[i]), "url": version.shard_url(i)}
                   for i, s in enumerate(version.manifest.shards)],
        "meta": dict(version.manifest.meta),
    }


def catalog_listing(catalog: Catalog) -> dict[str, Any]:
    datasets = []
    for name in catalog.datasets():
        tags = catalog.tags(name)
        by_id = tags_by_version(tags)
        versions = [version_summary(v, by_id.get(v.id, [])) for v in catalog.versions(name)]
        datasets.append({"name": name, "tags": tags, "versions": versions})
    return {"catalog": catalog.url, "datasets": datasets}
