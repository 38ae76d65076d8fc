"""Role inference for ingested columns: from magic bytes, names, types and what the source knows; and,
for rollouts of a language model, each column's meaning recorded in its options (`rollout_fields`).

Pure functions over a schema and a sample batch; the caller's `roles` and `meanings` always win.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.format.roles import Role, check_role_type
from dsinspect.loaders.format.rollout_fields import MEANING_OPTION, declare_meanings
from dsinspect.loaders.ingest.json_text import json_able

__all__ = ["infer_fields", "sniff_media", "role_for_extension", "ndarray_role", "describe_fields",
           "TEXT_NAMES", "JSON_NAMES", "TRAJECTORY_NAMES", "TOKEN_NAMES"]

TEXT_NAMES = frozenset({"text", "caption", "captions", "content", "prompt", "response", "completion",
                        "question", "answer", "document", "sentence", "transcript", "txt", "body", "summary"})
JSON_NAMES = frozenset({"json", "meta", "metadata", "info", "attributes"})
TRAJECTORY_NAMES = frozenset({"trajectory", "traj", "episode", "rollout"})
TOKEN_NAMES = frozenset({"tokens", "input_ids", "token_ids", "ids"})
_SNIFF_VALUES = 8  # first non-null values looked at per column
_LONG_TEXT = 40  # mean characters above which an unnamed string column reads as text, not a label

# WebDataset (and MDS) extensions whose role the name alone settles.
_EXTENSION_ROLES = {
    **{e: Role.IMAGE for e in ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm", "pnm")},
    **{e: Role.VIDEO for e in ("mp4", "webm", "mkv", "avi", "mov", "m4v")},
    **{e: Role.TEXT for e in ("txt", "text", "transcript", "caption")},
    **{e: Role.JSON for e in ("json",)},
    **{e: Role.SCALAR for e in ("cls", "cls2", "idx", "index", "id", "count")},
}


def role_for_extension(ext: str) -> Role | None:
    """The role a file extension implies (`jpg` → image, `txt` → text, `cls` → scalar), or None."""
    return _EXTENSION_ROLES.get(ext.lower().rsplit(".", 1)[-1])


def ndarray_role(name: str, t: pa.DataType) -> Role:
    """The role of a column of NumPy arrays (MDS `ndarray`, WebDataset `.npy`): array, as the writer
    said (also for `.npy` bytes, the arrays of varying dtype or dimensions); tokens for 1-D integer
    arrays named like token ids (`input_ids`); scalar for 0-D arrays."""
    if pa.types.is_binary(t):
        return Role.ARRAY
    if not pa.types.is_nested(t):
        return Role.SCALAR
    if name.lower() in TOKEN_NAMES and check_role_type(name, Role.TOKENS, t) is None:
        return Role.TOKENS
    return Role.ARRAY


def sniff_media(data: bytes) -> Role | None:
    """image or video from the leading magic bytes, else None."""
    head = bytes(data[:16])
    if head.startswith((b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a")):
        return Role.IMAGE
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return Role.IMAGE
    if head[4:8] == b"ftyp":  # ISO media: AVIF/HEIF brands are still images, the rest video
        return Role.IMAGE if head[8:12] in (b"avif", b"avis", b"heic", b"heix", b"mif1", b"msf1") else Role.VIDEO
    if head.startswith(b"\x1a\x45\xdf\xa3"):  # EBML: WebM / Matroska
        return Role.VIDEO
    return None


def infer_fields(schema: pa.Schema, sample: pa.RecordBatch | None, hints: Mapping[str, Any],
                 roles: Mapping[str, str] = {}, tokenizer: Mapping | None = None,
                 key: str | None = None, meanings: Mapping[str, str | None] | None = None) -> list[Field]:
    """One Field per column, in schema order, with its inferred (or overridden) role.

    `hints` is `Source.hints()`: `{"roles": {field: role}}` are the source's own knowledge (a
    WebDataset extension, a Hugging Face `Image()` feature), used before guessing. `roles` are the
    user's overrides and always win. `tokenizer` is the field option attached as `{"tokenizer": ...}`
    to every tokens field, in the shape the catalog stores (e.g. `{"kind": "huggingface", "blob":
    "<sha256 of tokenizer.json stored with Catalog.put_blob>"}`, as `dsinspect.demo.build` writes);
    every integer-list column is tokens (the only role that holds one), which the tokenizer decodes.
    `key` must name a column (the engine records it in the manifest); it gets the role it would get anyway.
    A list or struct no other role holds (chat messages) is `json`, stored as JSON text (`json_text`).
    When the columns are LLM rollouts, each one's meaning is recorded in its options; `meanings`
    ({field: meaning, or None for none}) sets or unsets one (`rollout_fields.declare_meanings`).
    """
    names = set(schema.names)
    for name in [*roles, *([key] if key else [])]:
        if name not in names:
            raise UserError(f"no field {name!r} in the source (fields: {', '.join(schema.names)})")
    source_roles = dict(hints.get("roles", {}))
    fields = []
    for f in schema:
        if f.name in roles:
            role = _parse_role(roles[f.name], f.name)
        else:
            column = sample.column(f.name) if sample is not None and f.name in sample.schema.names else None
            role = _guess(f, column, source_roles.get(f.name))
        kind = pa.string() if role is Role.JSON and json_able(f.type) else f.type  # kept as JSON text
        reason = check_role_type(f.name, role, kind)
        if reason:
            raise UserError(reason)
        options = {"tokenizer": dict(tokenizer)} if tokenizer is not None and role is Role.TOKENS else {}
        fields.append(Field(f.name, kind, role, f.nullable, options))
    if tokenizer is not None and not any(f.role is Role.TOKENS for f in fields):
        raise UserError("a tokenizer was given but no field holds token ids (a list of integers); "
                        "name one with --role FIELD=tokens")
    return declare_meanings(fields, meanings, " in the source")


def describe_fields(fields: list[Field]) -> str:
    """One line per field: name, role, type, whether a tokenizer is attached, its rollout meaning."""
    width = max((len(f.name) for f in fields), default=0)
    lines = []
    for f in fields:
        extra = "  (tokenizer attached)" if "tokenizer" in f.options else ""
        extra += f"  rollout: {f.options[MEANING_OPTION]}" if f.options.get(MEANING_OPTION) else ""
        lines.append(f"{f.name:<{width}}  {f.role.value:<10}  {f.type}{extra}")
    return "\n".join(lines)


def _parse_role(value: str, name: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise UserError(f"field {name!r}: unknown role {value!r} (roles: {', '.join(r.value for r in Role)})") from None


def _guess(f: pa.Field, column: pa.Array | None, source_role: str | None) -> Role:
    t, name = f.type, f.name.lower()
    if source_role is not None and check_role_type(f.name, Role(source_role), t) is None:
        return Role(source_role)
    values = _first_values(column)
    if _is_binary(t):
        kinds = {sniff_media(v) for v in values}  # media only when every sniffed value agrees
        media = kinds.pop() if len(kinds) == 1 else None
        return media or Role.BYTES
    if _is_int_list(t):  # named like token ids or not, tokens is the one role an integer list can hold
        return Role.TOKENS
    if check_role_type(f.name, Role.ARRAY, t) is None:  # float lists, nested lists: embeddings, ndarrays
        return Role.ARRAY
    if pa.types.is_struct(t):
        return Role.TRAJECTORY  # the only role a struct can hold; its per-step lists are what views need
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _string_role(name, values)
    if check_role_type(f.name, Role.SCALAR, t) is None:
        return Role.SCALAR
    if json_able(t):  # lists of structs or strings: chat messages, tool calls
        return Role.JSON
    raise UserError(f"field {f.name!r} of type {t} fits no role (roles hold: integer lists as tokens, "
                    "other number lists as arrays, structs as trajectories, lists of structs or strings as "
                    "JSON text, scalars, strings and binary)")


def _string_role(name: str, values: list) -> Role:
    if name in TEXT_NAMES:
        return Role.TEXT
    if (name in JSON_NAMES or name.endswith("_json")) and values and all(_is_json(v) for v in values):
        return Role.JSON
    if values and sum(map(len, values)) / len(values) > _LONG_TEXT:
        return Role.TEXT
    return Role.SCALAR


def _is_json(text: str) -> bool:
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def _first_values(column: pa.Array | None) -> list:
    if column is None:
        return []
    values = []
    for v in column:
        if v.is_valid:
            values.append(v.as_py())
            if len(values) == _SNIFF_VALUES:
                break
    return values


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _is_int_list(t: pa.DataType) -> bool:
    return check_role_type("", Role.TOKENS, t) is None
