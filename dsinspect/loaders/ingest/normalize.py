"""Arrow types from other writers, mapped onto the types a dsinspect manifest can hold.

Only lossless rewrites: dictionary-encoded → its value type, string/binary views → string/binary,
list views → lists, extension types → their storage type, and schema metadata (pandas, Hugging Face)
dropped. Anything else the canonical encoding does not cover is a UserError naming the field.
"""

from __future__ import annotations

import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, arrow_error
from dsinspect.loaders.format.arrow_types import type_to_json

__all__ = ["normalize_type", "normalize_schema", "normalize_batch"]


def normalize_type(t: pa.DataType) -> pa.DataType:
    if isinstance(t, pa.ExtensionType):
        return normalize_type(t.storage_type)
    if pa.types.is_dictionary(t):
        return normalize_type(t.value_type)
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list_view(t) or pa.types.is_list(t):
        return pa.list_(_child(t.value_field))
    if pa.types.is_large_list_view(t) or pa.types.is_large_list(t):
        return pa.large_list(_child(t.value_field))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_child(t.value_field), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct([_child(t.field(i)) for i in range(t.num_fields)])
    return t


def _child(f: pa.Field) -> pa.Field:
    return pa.field(f.name, normalize_type(f.type), f.nullable)


def normalize_schema(schema: pa.Schema, where: str) -> pa.Schema:
    """`schema` with every field's type normalised and metadata dropped; unsupported types are one
    line naming the field and `where`."""
    fields = []
    for f in schema:
        t = normalize_type(f.type)
        try:
            type_to_json(t)
        except UserError as e:
            raise UserError(f"{where}: field {f.name!r}: {e}") from None
        fields.append(pa.field(f.name, t, f.nullable))
    return pa.schema(fields)


def normalize_batch(batch: pa.RecordBatch, schema: pa.Schema, where: str) -> pa.RecordBatch:
    """`batch` cast to the normalised `schema` (same field names, same order)."""
    if batch.schema.names != schema.names:
        raise UserError(f"{where}: columns {batch.schema.names} differ from the source's {schema.names}")
    columns = []
    for column, f in zip(batch.columns, schema):
        if isinstance(column.type, pa.ExtensionType):
            column = column.storage
        if column.type != f.type:
            try:
                column = column.cast(f.type)
            except NOT_CONVERTIBLE as e:
                raise arrow_error(e, f"{where}: field {f.name!r} of type {column.type} does not match "
                                     f"the source's {f.type}") from None
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
