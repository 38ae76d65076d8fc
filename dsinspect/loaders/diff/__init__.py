"""Diff two versions: schema, shards (manifests alone), rows matched by key or hash, and per field
down to the first differing token, pixel or array element, with exact per-field counts.

May import `read` (column views), `store`, `format`, `dsinspect.errors`.
"""

from dsinspect.loaders.diff.compare import RowChanges, SchemaChange, ShardChanges, VersionDiff, diff

__all__ = ["diff", "VersionDiff", "SchemaChange", "ShardChanges", "RowChanges"]
