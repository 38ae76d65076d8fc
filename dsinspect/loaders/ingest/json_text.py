"""Nested columns no role holds (a list of structs: chat messages, tool calls) kept as JSON text.

TRL's conversational data has `prompt` and `completion` as lists of `{"role", "content"}` messages;
no role holds a list of structs, so ingest stores such a column with the `json` role, each value as
canonical JSON text (keys sorted, no spaces, UTF-8 kept) of its Arrow value: a key that another
message has and this one lacks is null, as Arrow read it. The field's type is then a string.
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator

import pyarrow as pa

from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.format.roles import Role

__all__ = ["json_able", "json_text", "json_batches", "canonical_text"]


def json_able(t: pa.DataType) -> bool:
    """A list or struct (at any depth) of numbers, bools, strings and nulls: what JSON holds."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_or_nested(t.value_type)
    if pa.types.is_struct(t):
        return all(_leaf_or_nested(f.type) for f in t)
    return False


def _leaf_or_nested(t: pa.DataType) -> bool:
    leaf = (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t))
    return leaf or json_able(t)


def canonical_text(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_text(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each value of a nested column as canonical JSON text (null stays null)."""
    return pa.array([None if v is None else canonical_text(v) for v in array.to_pylist()], pa.string())


def json_batches(batches: Iterable[pa.RecordBatch], fields: Iterable[Field]) -> Iterator[pa.RecordBatch]:
    """`batches` with each json-role string field that arrives nested turned into its JSON text."""
    names = [f.name for f in fields if f.role is Role.JSON and pa.types.is_string(f.type)]
    for batch in batches:
        nested = [n for n in names if n in batch.schema.names and json_able(batch.schema.field(n).type)]
        for name in nested:
            at = batch.schema.get_field_index(name)
            batch = batch.set_column(at, pa.field(name, pa.string(), batch.schema.field(at).nullable),
                                     json_text(batch.column(at)))
        yield batch
