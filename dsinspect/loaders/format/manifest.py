"""Version manifests: parse and validate strictly, serialise canonically, derive the version id.

The version id is the sha256 of the canonical JSON (sorted keys, no whitespace, UTF-8) of the
manifest without its `meta` part, so equal content gives an equal id whoever wrote it and when.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from dsinspect.errors import ManifestError
from dsinspect.loaders.format.arrow_types import type_from_json, type_to_json
from dsinspect.loaders.format.canonical import ENCODING
from dsinspect.loaders.format.pathnames import check_sha256
from dsinspect.loaders.format.roles import Role, check_role_type
from dsinspect.loaders.format.shard_entry import Shard, need, parse_shard
from dsinspect.loaders.format.shard_table import PRETTY_END, PRETTY_START, ShardTable

__all__ = ["FORMAT", "HASH_COLUMN", "Field", "Shard", "Manifest", "canonical_json", "sha256_hex"]

FORMAT = "dsinspect.manifest/1"
HASH_COLUMN = "__dsinspect_row_hash"
HASH_SPEC = {"algorithm": "xxh3-128", "encoding": ENCODING, "column": HASH_COLUMN}
_BLOB_KEYS = ("blob",)  # option keys naming a side file under blobs/: they become file names


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Field:
    """One column: its Arrow type, its role for viewers, and role options (e.g. a tokenizer blob)."""

    name: str
    type: pa.DataType
    role: Role
    nullable: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", _role(self.role, self.name))
        if not isinstance(self.name, str) or not self.name or self.name.startswith("__dsinspect"):
            raise ManifestError(f"bad field name {self.name!r} (empty, or uses the reserved __dsinspect prefix)")
        type_to_json(self.type)  # refuses types the canonical encoding does not cover
        reason = check_role_type(self.name, self.role, self.type)
        if reason:
            raise ManifestError(reason)
        _check_options(self.options, f"field {self.name!r}: options")

    def to_json(self) -> dict:
        return {"name": self.name, "type": type_to_json(self.type), "role": self.role.value,
                "nullable": self.nullable, "options": dict(self.options)}

    @classmethod
    def from_json(cls, data: Any, where: str = "field") -> "Field":
        """The inverse of `to_json`, checked as a manifest's fields are (ManifestError naming `where`)."""
        return _parse_field(data, where)


@dataclass(frozen=True)
class Manifest:
    """A version's manifest. `shards` is always a `ShardTable` (columns, a Sequence of `Shard`):
    any sequence of `Shard` given is turned into one."""

    fields: tuple[Field, ...]
    shards: ShardTable
    key: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ManifestError(f"duplicate field names in {names}")
        if self.key is not None and self.key not in names:
            raise ManifestError(f"key field {self.key!r} is not one of the fields {names}")
        counted = {f.name for f in self.fields if f.role is Role.TOKENS}
        if isinstance(self.shards, ShardTable):
            for name in self.shards.tokens:  # every shard counts the same fields (ShardTable.of checks)
                if name not in counted:
                    raise ManifestError(f"shards[0] counts tokens of {name!r}, which is not a tokens field")
            return
        shards = tuple(self.shards)
        for i, shard in enumerate(shards):
            for name, _ in shard.tokens:
                if name not in counted:
                    raise ManifestError(f"shards[{i}] counts tokens of {name!r}, which is not a tokens field")
        object.__setattr__(self, "shards", ShardTable.of(shards))

    @property
    def num_rows(self) -> int:
        return self.shards.total(self.shards.rows)

    @property
    def num_bytes(self) -> int:
        return self.shards.total(self.shards.bytes)

    @property
    def shard_rows(self) -> np.ndarray:
        """Rows of each shard (int64; read-only by convention): no `Shard` object per shard."""
        return self.shards.rows

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the data fields (without the row-hash column)."""
        return pa.schema([pa.field(f.name, f.type, f.nullable) for f in self.fields])

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def content(self) -> dict:
        """The manifest without `meta`: exactly what the version id hashes."""
        return {**self._head(), "shards": [s.to_json() for s in self.shards]}

    def _head(self) -> dict:
        return {
            "format": FORMAT,
            "schema": {"fields": [f.to_json() for f in self.fields]},
            "key": self.key,
            "hash": dict(HASH_SPEC),
            "num_rows": self.num_rows,
        }

    @cached_property
    def id(self) -> str:
        """sha256 of `canonical_json(self.content())`, with the shard list rendered from its columns
        (`shards` sorts last, so it is spliced in where the canonical head ends)."""
        head = canonical_json({**self._head(), "shards": []})
        assert head.endswith(b'"shards":[]}')
        digest = hashlib.sha256(head[:-3])
        for piece in self.shards.canonical():
            digest.update(piece)
        digest.update(b"}")
        self.shards.forget_text()
        return digest.hexdigest()

    def to_json(self) -> dict:
        return {**self.content(), "meta": dict(self.meta)}

    def to_file_bytes(self) -> bytes:
        """Pretty JSON for people; the id is computed from the canonical form, not these bytes.
        Equal to `json.dumps(self.to_json(), sort_keys=True, indent=2, ensure_ascii=False) + "\\n"`."""
        head = json.dumps({**self._head(), "meta": dict(self.meta), "shards": []}, sort_keys=True, indent=2,
                          ensure_ascii=False)
        assert head.endswith('"shards": []\n}')
        return (head[:-4] + self.shards.pretty() + "\n}\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: Any, where: str = "manifest") -> "Manifest":
        """Parse and validate; every problem is a ManifestError naming `where` and the bad part."""
        return _parse(data, where)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str = "manifest") -> "Manifest":
        table, raw = _pretty_shards(raw)
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:  # RecursionError: a nesting bomb
            raise ManifestError(f"{where}: not valid JSON ({e})") from None
        return _parse(data, where, table)


def _pretty_shards(raw: bytes) -> tuple[ShardTable | None, bytes]:
    """The shard list of a manifest as `to_file_bytes` writes it, read as columns (`ShardTable.
    from_pretty`), and the rest of the file with an empty list in its place; (None, raw) for any
    other layout, which `json.loads` reads entry by entry."""
    start = raw.find(PRETTY_START)
    if start < 0 or not raw.endswith(PRETTY_END) or raw.find(PRETTY_START, start + 1) >= 0:
        return None, raw
    table = ShardTable.from_pretty(raw, start + len(PRETTY_START), len(raw) - len(PRETTY_END))
    if table is None:
        return None, raw
    return table, raw[:start] + b'\n  "shards": []\n}\n'


def _role(value: Any, name: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        roles = ", ".join(r.value for r in Role)
        raise ManifestError(f"field {name!r} has unknown role {value!r} (roles: {roles})") from None


def _check_options(options: Any, where: str) -> None:
    """Options are free-form JSON, except what becomes a path: a side file's name (`blob`) must be
    a sha256, at any depth (`{"tokenizer": {"kind": ..., "blob": ...}}` and whatever comes next)."""
    if not isinstance(options, Mapping):
        raise ManifestError(f"{where} must be an object")
    stack = [(options, where)]
    while stack:
        obj, at = stack.pop()
        items = obj.items() if isinstance(obj, Mapping) else enumerate(obj) if isinstance(obj, list) else ()
        for key, value in items:
            here = f"{at}.{key}" if isinstance(key, str) else f"{at}[{key}]"
            if key in _BLOB_KEYS:
                check_sha256(value, here, ManifestError)
            elif isinstance(value, (Mapping, list)):
                stack.append((value, here))


def _parse(data: Any, where: str, table: ShardTable | None = None) -> Manifest:
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: a manifest must be a JSON object")
    fmt = need(data, "format", str, where)
    if fmt != FORMAT:
        raise ManifestError(f"{where}: unsupported format {fmt!r} (this dsinspect reads {FORMAT!r})")
    hash_spec = need(data, "hash", dict, where)
    if hash_spec != HASH_SPEC:
        raise ManifestError(f"{where}: unsupported row hash {hash_spec!r} (expected {HASH_SPEC!r})")
    schema = need(data, "schema", dict, where)
    fields = tuple(_parse_field(f, f"{where}: schema.fields[{i}]")
                   for i, f in enumerate(need(schema, "fields", list, f"{where}: schema")))
    listed = need(data, "shards", list, where)
    shards = table if table is not None else tuple(parse_shard(s, f"{where}: shards[{i}]")
                                                   for i, s in enumerate(listed))
    key = data.get("key")
    if key is not None and not isinstance(key, str):
        raise ManifestError(f"{where}: 'key' must be a field name or null")
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise ManifestError(f"{where}: 'meta' must be an object")
    try:
        manifest = Manifest(fields, shards, key, meta)
    except ManifestError as e:
        raise ManifestError(f"{where}: {e}") from None
    if need(data, "num_rows", int, where) != manifest.num_rows:
        raise ManifestError(f"{where}: num_rows {data['num_rows']} is not the sum of shard rows {manifest.num_rows}")
    return manifest


def _parse_field(f: Any, where: str) -> Field:
    if not isinstance(f, dict):
        raise ManifestError(f"{where}: a field must be an object")
    name = need(f, "name", str, where)
    options = f.get("options", {})
    if not isinstance(options, dict):
        raise ManifestError(f"{where}: 'options' must be an object")
    try:
        return Field(name, type_from_json(need(f, "type", (str, dict), where), where),
                     need(f, "role", str, where), bool(need(f, "nullable", bool, where)), options)
    except ManifestError as e:
        raise ManifestError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None
