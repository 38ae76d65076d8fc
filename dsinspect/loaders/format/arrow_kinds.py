"""Which physical layout an Arrow type has: the questions every byte-level module here asks."""

from __future__ import annotations

import pyarrow as pa

__all__ = ["is_fixed_width", "is_var_binary", "has_large_offsets"]


def is_fixed_width(t: pa.DataType) -> bool:
    """Values of one byte width in one buffer (numbers, dates, times, decimals, fixed binary)."""
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)
            or pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t))


def is_var_binary(t: pa.DataType) -> bool:
    """Strings and binary: offsets plus a data buffer."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t))


def has_large_offsets(t: pa.DataType) -> bool:
    """64-bit offsets (large_string, large_binary, large_list)."""
    return pa.types.is_large_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_list(t)
