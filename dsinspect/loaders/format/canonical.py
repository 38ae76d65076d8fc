"""The canonical byte encoding of values and the 128-bit field and row hashes built on it.

Encoding "dsinspect-canonical/1" (docs/FORMAT.md is the prose version; tests pin golden values).
A value of Arrow type T encodes as one tag byte, 0x00 for null (nothing follows) or 0x01, then:
  bool                      1 byte, 0 or 1
  ints, floats, dates, times, timestamps, durations, decimals
                            the value's little-endian bytes at its type's width; every float NaN
                            becomes the one quiet NaN of its width
  string, binary            u64 little-endian byte length, then the bytes (strings as UTF-8)
  fixed_size_binary(w)      the w bytes
  list / large_list / fixed_size_list
                            u64 item count, then each item's encoding
  struct                    for each child in order: u64 name length, UTF-8 name, child encoding
Dictionary-encoded arrays encode as their decoded values.

field hash = XXH3-128(encoding of the value), as its 16-byte canonical (big-endian) digest.
row hash   = XXH3-128("dsinspect.row/1\\0" + for each field in schema order:
                                             u64 name length, UTF-8 name, field hash).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import xxhash

from dsinspect.errors import UserError
from dsinspect.loaders.format.arrow_kinds import is_fixed_width as _fixed_width
from dsinspect.loaders.format.arrow_kinds import is_var_binary as _is_var_binary

__all__ = ["ENCODING", "ROW_DOMAIN", "encode_column", "field_hashes", "row_hashes", "combine_row_hash"]

ENCODING = "dsinspect-canonical/1"
ROW_DOMAIN = b"dsinspect.row/1\x00"
_NULL = b"\x00"
_PRESENT = b"\x01"
_U64 = struct.Struct("<Q")
_QUIET_NAN = {2: 0x7E00, 4: 0x7FC00000, 8: 0x7FF8000000000000}


def encode_column(arr: pa.Array | pa.ChunkedArray) -> list[bytes]:
    """The canonical encoding of every value in `arr`, one bytes object per row."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    valid = _validity(arr)
    payloads = _payloads(arr)
    return [_PRESENT + p if ok else _NULL for p, ok in zip(payloads, valid)]


def field_hashes(arr: pa.Array | pa.ChunkedArray) -> list[bytes]:
    """The 16-byte field hash of every value in `arr`."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    fast = _fixed_list_hashes(arr)
    if fast is not None:
        return fast
    digest = xxhash.xxh3_128_digest
    return [digest(e) for e in encode_column(arr)]


def combine_row_hash(named_field_hashes: list[tuple[str, bytes]]) -> bytes:
    """The row hash from (field name, field hash) pairs in schema order."""
    parts = [ROW_DOMAIN]
    for name, h in named_field_hashes:
        raw = name.encode("utf-8")
        parts += [_U64.pack(len(raw)), raw, h]
    return xxhash.xxh3_128_digest(b"".join(parts))


def row_hashes(table: pa.Table | pa.RecordBatch, names: list[str]) -> list[bytes]:
    """The 16-byte row hash of every row, over the fields `names` in that order."""
    prefixes = [_U64.pack(len(n.encode("utf-8"))) + n.encode("utf-8") for n in names]
    columns = [field_hashes(table.column(n)) for n in names]
    digest = xxhash.xxh3_128_digest
    return [digest(ROW_DOMAIN + b"".join(p + h for p, h in zip(prefixes, row)))
            for row in zip(*columns)] if names else [digest(ROW_DOMAIN)] * table.num_rows


# -- payloads: the bytes after the tag, for every row (whatever is there for null rows is dropped) --

# Arrays become numpy through their buffers: Array.to_numpy(zero_copy_only=False), fill_null and
# pa.scalar make pyarrow import pandas (~0.2 s of a `dsinspect replay` that needs none of it).

def _validity(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    if arr.null_count == len(arr):
        return np.zeros(len(arr), dtype=bool)
    return _bits(arr.buffers()[0], arr.offset, len(arr))


def _bits(buffer: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """n bits of an Arrow bitmap (validity or boolean values) from bit `offset`, as bools."""
    return np.unpackbits(np.frombuffer(buffer, dtype=np.uint8), bitorder="little")[offset:offset + n].astype(bool)


def _payloads(arr: pa.Array) -> list[bytes]:
    t = arr.type
    if pa.types.is_null(t):
        return [b""] * len(arr)
    if pa.types.is_boolean(t):
        return [b"\x01" if v else b"\x00" for v in _bool_values(arr)]
    if _fixed_width(t):
        return [r.tobytes() for r in _fixed_rows(arr)]
    if _is_var_binary(t):
        return _var_binary_payloads(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _list_payloads(arr)
    if pa.types.is_struct(t):
        return _struct_payloads(arr)
    raise UserError(f"cannot hash values of Arrow type {t}")


def _bool_values(arr: pa.Array) -> np.ndarray:
    return _bits(arr.buffers()[1], arr.offset, len(arr)).astype(np.uint8)  # values under nulls are dropped


def _fixed_rows(arr: pa.Array) -> np.ndarray:
    """An (n, width) uint8 view of a fixed-width array's values, NaNs made canonical."""
    width = arr.type.byte_width
    data = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    rows = data[arr.offset * width:(arr.offset + len(arr)) * width].reshape(len(arr), width)
    if pa.types.is_floating(arr.type):
        as_float = rows.view(f"<f{width}").ravel()
        nan = np.isnan(as_float)
        if nan.any():
            bits = rows.view(f"<u{width}").ravel().copy()
            bits[nan] = _QUIET_NAN[width]
            rows = bits.view(np.uint8).reshape(len(arr), width)
    return rows


def _var_binary_payloads(arr: pa.Array) -> list[bytes]:
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = memoryview(bufs[2]) if bufs[2] is not None else memoryview(b"")
    pack = _U64.pack
    return [pack(int(b - a)) + data[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])]


def _list_payloads(arr: pa.Array) -> list[bytes]:
    import pyarrow.compute as pc  # here, not at the top: it costs ~0.1 s, and reading a manifest needs none

    counts = pc.list_value_length(arr)
    lengths = np.frombuffer(counts.buffers()[1], dtype=np.int32 if counts.type == pa.int32() else np.int64)
    lengths = np.where(_validity(arr), lengths[counts.offset:counts.offset + len(counts)], 0).astype(np.int64)
    items = arr.flatten()  # drops the items under null slots, which count 0 here
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    pack = _U64.pack
    if _fixed_width(items.type) and items.null_count == 0:
        # Fast path (token ids, observations): every item is 0x01 + fixed bytes, so one packed buffer.
        rows = _fixed_rows(items)
        tagged = np.empty((len(items), rows.shape[1] + 1), dtype=np.uint8)
        tagged[:, 0] = 1
        tagged[:, 1:] = rows
        blob, stride = tagged.tobytes(), tagged.shape[1]
        return [pack(int(b - a)) + blob[a * stride:b * stride] for a, b in zip(bounds[:-1], bounds[1:])]
    encoded = encode_column(items)
    return [pack(int(b - a)) + b"".join(encoded[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _fixed_list_hashes(arr: pa.Array) -> list[bytes] | None:
    """The field hashes of a list of fixed-width items none of which is null (token ids, log-probs),
    hashed without encoding each row apart: the items tagged in one buffer, each row's hash fed its
    header and its slice of it. The same bytes as `encode_column`'s, so the same hashes; None for
    any other array (the general path)."""
    t = arr.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) \
            or not _fixed_width(t.value_type):
        return None
    items = arr.flatten()  # drops the items under null slots
    if items.null_count:
        return None
    import pyarrow.compute as pc  # as in _list_payloads: only when lists are hashed

    counts = pc.list_value_length(arr)
    lengths = np.frombuffer(counts.buffers()[1], dtype=np.int32 if counts.type == pa.int32() else np.int64)
    valid = _validity(arr)
    lengths = np.where(valid, lengths[counts.offset:counts.offset + len(counts)], 0).astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    values = _fixed_rows(items)
    width = values.shape[1]
    tagged = np.empty(len(items), dtype=np.dtype([("tag", "u1"), ("value", f"V{width}")]))  # packed: 1 + width
    tagged["tag"] = 1  # a strided copy of whole values: ~8x faster than filling an (n, 1 + width) byte array
    tagged["value"] = values.reshape(-1).view(f"V{width}")
    blob, stride = memoryview(tagged).cast("B"), 1 + width
    hasher, pack, null = xxhash.xxh3_128, _U64.pack, xxhash.xxh3_128_digest(_NULL)
    out = []
    for a, b, ok in zip(bounds[:-1], bounds[1:], valid.tolist()):
        if ok:
            h = hasher(_PRESENT + pack(b - a))
            h.update(blob[a * stride:b * stride])
            out.append(h.digest())
        else:
            out.append(null)
    return out


def _struct_payloads(arr: pa.StructArray) -> list[bytes]:
    children = arr.flatten()
    parts = []
    for f, child in zip(arr.type, children):
        raw = f.name.encode("utf-8")
        prefix = _U64.pack(len(raw)) + raw
        parts.append([prefix + e for e in encode_column(child)])
    return [b"".join(row) for row in zip(*parts)] if parts else [b""] * len(arr)
