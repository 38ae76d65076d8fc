"""Field roles: what a column means to a viewer, and which Arrow types each role accepts."""

from __future__ import annotations

import enum

import pyarrow as pa

__all__ = ["Role", "check_role_type"]


class Role(str, enum.Enum):
    TOKENS = "tokens"
    TEXT = "text"
    IMAGE = "image"
    VIDEO = "video"
    TRAJECTORY = "trajectory"
    JSON = "json"
    SCALAR = "scalar"
    BYTES = "bytes"
    ARRAY = "array"  # numbers in (nested) lists: embeddings, masks, ndarrays; or .npy files (format/npy.py)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _is_scalar(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or _is_binary(t))


def _is_number_array(t: pa.DataType) -> bool:
    while _is_list(t):
        t = t.value_type
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


_ACCEPTS = {
    Role.TOKENS: (lambda t: _is_list(t) and pa.types.is_integer(t.value_type), "a list of integers"),
    Role.TEXT: (_is_string, "a string"),
    Role.IMAGE: (_is_binary, "binary (encoded image bytes)"),
    Role.VIDEO: (_is_binary, "binary (encoded video bytes)"),
    Role.TRAJECTORY: (pa.types.is_struct, "a struct of per-step lists"),
    Role.JSON: (lambda t: _is_string(t) or _is_binary(t), "a string or binary holding JSON text"),
    Role.SCALAR: (_is_scalar, "a number, bool, string or timestamp"),
    Role.BYTES: (_is_binary, "binary"),
    Role.ARRAY: (lambda t: (_is_list(t) and _is_number_array(t)) or pa.types.is_binary(t),
                 "a list (or nested lists) of numbers or bools, or binary (.npy files)"),
}


def check_role_type(field_name: str, role: Role, arrow_type: pa.DataType) -> str | None:
    """The reason `arrow_type` cannot carry `role`, or None when it can."""
    accepts, wanted = _ACCEPTS[role]
    if accepts(arrow_type):
        return None
    return f"field {field_name!r} has role {role.value!r}, which needs {wanted}, but its type is {arrow_type}"
