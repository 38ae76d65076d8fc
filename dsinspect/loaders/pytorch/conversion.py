"""Batches as tensors: Arrow columns and the Loader's gathered numpy arrays turned into the dict a
training step takes (a tensor, {"values", "offsets"} or Python objects per column, plus metadata).

Torch is needed only for the tensors; `batch_arrays` makes the same dict of numpy arrays, which is
what a DataLoader worker sends.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from dsinspect.errors import UserError
from dsinspect.loaders.pytorch.packing import PACKED, pack_metadata, unpack_metadata
from dsinspect.loaders.read.batch import Batch
from dsinspect.loaders.read.columns import is_numeric_dense

__all__ = ["batch_to_torch", "batch_arrays", "worker_arrays", "unpacked", "unpack", "split_ragged", "check_columns",
           "METADATA"]

METADATA = ("step", "epoch", "positions", "indices", "sources", "padding", "seeds", "row_hashes", "nulls",
            "transformed")


def check_columns(types: dict[str, pa.DataType], columns: Sequence[str] | None, dense: Sequence[str]) -> None:
    """Column names (of the version's field `types`) may not shadow metadata keys; `dense` columns
    must be lists of numbers."""
    names = columns or list(types)
    clash = sorted(set(names) & set(METADATA))
    if clash:
        raise UserError(f"columns {clash} clash with batch metadata keys: pick columns=[...] without them")
    for name in dense:
        t = types.get(name) if name in names else None
        if t is None or not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not _is_number(t.value_type):
            raise UserError(f"dense column {name!r} must be a read column holding lists of numbers")


def batch_to_torch(batch: Batch, dense: Sequence[str] = ()) -> dict[str, Any]:
    """A Batch as a dict: per column a tensor, {"values", "offsets"} or Python objects, plus metadata.

    Numbers (and temporal values as their stored integers) give 1-D tensors; fixed-size lists of
    numbers [B, L]; strings, binary and lists of numbers give {"values": 1-D tensor (uint8 for
    bytes and UTF-8), "offsets": int64 [B + 1]}, or [B, L] for columns in `dense`; anything else
    (structs, nested lists, decimals) stays a list of Python objects. Nulls read as 0 / empty, and
    `nulls[column]` flags them.
    """
    out = _as_tensors(batch_arrays(batch, dense))
    if batch.transformed is not None:
        out["transformed"] = batch.transformed
    return out


def batch_arrays(batch: Batch, dense: Sequence[str] = (), *, own: bool = True) -> dict[str, Any]:
    """`batch_to_torch` with numpy arrays (each owning its memory) where it has tensors, and no
    `transformed`: what a DataLoader worker sends. `own=False` leaves a gathered column as the
    read-only array the Loader made, for a caller that copies it at once (into a worker's ring)."""
    out, nulls = _column_arrays(batch, dense, own)
    plan = batch.plan
    out.update(step=np.array(plan.step, dtype=np.int64), epoch=np.array(plan.epoch, dtype=np.int64),
               positions=plan.positions.astype(np.int64), indices=plan.indices.astype(np.int64),  # astype copies
               sources=plan.sources.astype(np.int64), padding=_owned(plan.padding),
               seeds=_owned(plan.seeds.view(np.int64)), row_hashes=_owned(batch.hash_array), nulls=nulls)
    return out


def worker_arrays(batch: Batch, dense: Sequence[str] = ()) -> dict[str, Any]:
    """`batch_arrays(own=False)` with the metadata packed into one array (packing.py), as a
    TorchLoader worker sends it; `unpacked` in the main process gives `batch_arrays`' dict."""
    out, nulls = _column_arrays(batch, dense, own=False)
    if PACKED in out:  # a column of that name: send it as it is
        return batch_arrays(batch, dense, own=False)
    out[PACKED] = pack_metadata(batch.plan, batch.hash_array)
    out["nulls"] = nulls
    return out


def unpacked(arrays: dict[str, Any]) -> dict[str, Any]:
    """A `worker_arrays` dict (arrays or tensors) with the metadata unpacked in place, as tensors
    when the packed array came as one."""
    packed = arrays.get(PACKED)
    if packed is None:
        return arrays
    tensors = isinstance(packed, torch.Tensor)
    fields = unpack_metadata(packed.numpy() if tensors else packed)
    if tensors:
        fields = {k: torch.from_numpy(v) for k, v in fields.items()}
    out: dict[str, Any] = {}
    for key, value in arrays.items():
        if key == PACKED:
            out.update(fields)
        else:
            out[key] = value
    return out


def _column_arrays(batch: Batch, dense: Sequence[str], own: bool) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The columns of `batch_arrays` and their null flags."""
    out: dict[str, Any] = {}
    nulls: dict[str, np.ndarray] = {}
    gathered = batch._columns or {}
    for name in batch.table.column_names if batch._columns is None else batch._columns:
        ready = gathered.get(name)
        if isinstance(ready, np.ndarray) and _dense_fits(batch._schema.field(name).type, name in dense):
            out[name] = _owned(ready) if own else ready  # a gathered dense column: no Arrow round trip
            continue
        arr = _array(batch.table.column(name))
        if arr.null_count:
            nulls[name] = _owned(arr.is_null().to_numpy(zero_copy_only=False))
        out[name] = _column(arr, name in dense, name)
    return out, nulls


def _dense_fits(t: pa.DataType, dense: bool) -> bool:
    """Whether a gathered dense column is, as it is, what batch_to_torch gives for it: integers
    and floats, fixed-size lists of them, and lists of them read as `dense` (other lists give
    values/offsets; temporal and binary columns take the Arrow path)."""
    if not is_numeric_dense(t):
        return False
    return not (pa.types.is_list(t) or pa.types.is_large_list(t)) or dense


def _as_tensors(value: Any) -> Any:
    """numpy arrays (in dicts) as tensors sharing their memory."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, dict):
        return {k: _as_tensors(v) for k, v in value.items()}
    return value


def unpack(column: dict[str, torch.Tensor], text: bool = False) -> list[bytes] | list[str]:
    """A {"values", "offsets"} column of bytes or UTF-8 back as a list of bytes (or str)."""
    data = column["values"].numpy().tobytes()
    offsets = column["offsets"].tolist()
    items = [data[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    return [item.decode("utf-8") for item in items] if text else items


def split_ragged(column: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """A {"values", "offsets"} column as one tensor per row (views, no copy)."""
    return list(torch.split(column["values"], torch.diff(column["offsets"]).tolist()))


def _array(column: pa.ChunkedArray) -> pa.Array:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _column(arr: pa.Array, dense: bool, name: str) -> Any:
    t = arr.type
    if _is_number(t):
        return _numbers(arr)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _var_bytes(arr)
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        data = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * width:(arr.offset + len(arr)) * width]
        return _owned(data.reshape(len(arr), width))
    if pa.types.is_fixed_size_list(t) and _is_number(t.value_type):
        values = arr.values.slice(arr.offset * t.list_size, len(arr) * t.list_size)
        return _numbers(values).reshape(len(arr), t.list_size)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_number(t.value_type):
        return _number_lists(arr, dense, name)
    return arr.to_pylist()


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t)


def _numbers(arr: pa.Array) -> np.ndarray:
    if pa.types.is_temporal(arr.type):
        arr = arr.view(pa.int32() if arr.type.bit_width == 32 else pa.int64())
    if arr.null_count:
        arr = arr.fill_null(False if pa.types.is_boolean(arr.type) else 0)
    return _owned(arr.to_numpy(zero_copy_only=False))


def _var_bytes(arr: pa.Array) -> dict[str, np.ndarray]:
    """Values and offsets straight from the Arrow buffers (one copy, no Python bytes per row)."""
    if arr.null_count:
        arr = arr.fill_null("" if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else b"")
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    _, offsets_buf, data_buf = arr.buffers()
    if offsets_buf is None:  # an empty array
        return {"values": np.empty(0, dtype=np.uint8), "offsets": np.zeros(1, dtype=np.int64)}
    offsets = np.frombuffer(offsets_buf, np.int64 if large else np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    values = data[offsets[0]:offsets[-1]]
    return {"values": _owned(values), "offsets": _owned(offsets.astype(np.int64) - int(offsets[0]))}


def _number_lists(arr: pa.Array, dense: bool, name: str) -> np.ndarray | dict[str, np.ndarray]:
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = _numbers(arr.flatten())  # flatten honours the slice offset and skips null slots
    if not dense:
        return {"values": values, "offsets": _owned(np.concatenate([[0], np.cumsum(lengths)]))}
    if len(lengths) and (lengths != lengths[0]).any():
        raise UserError(f"dense column {name!r} has lists of lengths {sorted(set(lengths.tolist()))[:5]} in one "
                        "batch; read it as values/offsets instead")
    return values.reshape(len(arr), int(lengths[0]) if len(lengths) else 0)


def _owned(a: np.ndarray) -> np.ndarray:
    """A writable copy: Arrow buffers are read-only, and torch wants writable memory."""
    return np.array(a, copy=True)
