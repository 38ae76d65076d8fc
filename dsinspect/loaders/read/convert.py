"""Parquet -> one-record-batch Arrow IPC, in memory bounded by a row group, whatever the shard's size.

The shard cache wants each shard as ONE record batch (contiguous columns: a batch of rows is one gather
per column). Reading the whole table and concatenating it held the decoded shard twice in anonymous
memory. Here the file is read a row group at a time and every buffer of every column (validity bits,
offsets rebased to the running total, values, data, children recursively) is appended to its own
scratch file; the scratch files are then memory-mapped (file-backed pages, not process memory),
assembled with `pa.Array.from_buffers` and written as one batch. Runs of row groups (up to 1 MiB,
or one larger group) are decoded two at a time, by the converting thread and a helper of its own
(`_decoded`). Peak private memory: the two runs being decoded, each with Parquet's decoding buffers
for one column (measured 2.5-3.2x a run each; 5.2x together), never the whole shard; disk: the
scratch files (about the decoded size) until `dest` is written.

Dictionary-typed columns (a foreign writer's stored Arrow schema) are decoded to their value type: the
cache holds plain arrays (dictionary encoding is a storage detail, see format/arrow_types.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.loaders.format.arrow_kinds import has_large_offsets, is_fixed_width, is_var_binary

__all__ = ["parquet_to_ipc"]

_ONES_CHUNK = 1 << 20  # bytes of all-valid bits written per write when back-filling a validity bitmap
_RUN_BYTES = 1 << 20  # decoded bytes of consecutive row groups converted at once


def parquet_to_ipc(source: str, dest: str, scratch_dir: str,
                   ready: Callable[[list[int]], None] = lambda groups: None) -> int:
    """Write the Parquet file at `source` as an uncompressed Arrow IPC file at `dest` holding ONE record
    batch (same schema, same values as pq.ParquetFile(source).read().combine_chunks(); dictionary
    columns decoded), with private memory bounded by a small multiple of the largest row group,
    whatever the file's size; returns the number of rows. `dest` is not fsynced: the caller decides
    (cache.py's `_publish`). Scratch files live in a private directory under `scratch_dir` and are
    removed whatever happens; pyarrow errors propagate.
    `ready(groups)` returns once the footer and those row groups are in `source` (a file being
    filled): called with [] before the footer is read, then before each run of row groups."""
    scratch = tempfile.mkdtemp(dir=scratch_dir, prefix=".convert-scratch-")
    try:
        # memory-mapped: Arrow reads the compressed column chunks in place, not into buffers of its pool
        ready([])
        with pq.ParquetFile(source, memory_map=True) as parquet:
            schema, metadata = parquet.schema_arrow, parquet.metadata
        files = _ScratchFiles(scratch)
        columns = [_column(f.type, files) for f in schema]
        rows = 0
        for table in _decoded(pa.memory_map(source).read_buffer(), metadata, _runs(metadata, _RUN_BYTES), ready):
            rows += _append_table(table, columns)
            del table  # freed before the next is taken
        arrays = [column.finish() for column in columns]
        fields = [f.with_type(a.type) for f, a in zip(schema, arrays)]
        batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))
        with pa.OSFile(dest, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)
        del batch, arrays, columns  # unmap the scratch files before they are removed
        return rows
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _runs(metadata: pq.FileMetaData, limit: int) -> list[list[int]]:
    """Consecutive row groups in runs of at most `limit` decoded bytes (a larger group alone)."""
    runs: list[list[int]] = []
    size = 0
    for k in range(metadata.num_row_groups):
        n = metadata.row_group(k).total_byte_size
        if runs and size + n <= limit:
            runs[-1].append(k)
            size += n
        else:
            runs.append([k])
            size = n
    return runs


def _decoded(data: pa.Buffer, metadata: pq.FileMetaData, runs: list[list[int]],
             ready: Callable[[list[int]], None]) -> Iterator[pa.Table]:
    """Each run of row groups decoded, in order, two at a time: a helper thread of this conversion
    decodes one while this thread decodes the next (a shard converted alone used one core of two; a
    67 MB token shard filled alone: 0.55 -> 0.40 s, benchmarks/README.md). `ready(run)` is called
    here, in order, before the run is decoded. The helper is this conversion's own, not a pool's:
    mimalloc keeps the pages a thread freed for that thread, and only the thread itself can hand
    them back, so the helper's last task gives back what its runs held (a process-wide pool kept
    ~18 MB after four fills, and releasing as it went cost more page faults than the second core
    saved)."""
    with ThreadPoolExecutor(1, thread_name_prefix="dsinspect-decode") as helper:
        pending: Future | None = None  # the helper's run, decoding
        try:
            for run in runs:
                ready(run)
                if pending is None:
                    pending = helper.submit(_decode_run, data, metadata, run)
                    continue
                here = _decode_run(data, metadata, run)  # while the helper decodes the run before
                yield pending.result()
                pending = None
                yield here
                del here
            if pending is not None:
                yield pending.result()
                pending = None
        finally:
            if pending is not None:  # stopped early (an error, an abandoned fill)
                pending.cancel()
            helper.submit(pa.default_memory_pool().release_unused)  # after the tables it made were freed


def _decode_run(data: pa.Buffer, metadata: pq.FileMetaData, groups: list[int]) -> pa.Table:
    """A run of row groups decoded. Columns one after another: decoded in parallel, each column's
    decoding buffers would coexist (measured: peak up to 6.4x a row group, varying run to run,
    against 2.5-3.2x)."""
    return pq.ParquetFile(pa.BufferReader(data), metadata=metadata).read_row_groups(groups, use_threads=False)


def _append_table(table: pa.Table, columns: list) -> int:
    for column, chunked in zip(columns, table.columns):
        for chunk in chunked.chunks:
            column.append(chunk)
    return table.num_rows


class _ScratchFiles:
    """Names for append-only scratch files in one directory (opened per append: no fd per buffer)."""

    def __init__(self, directory: str):
        self.directory, self._count = directory, 0

    def new(self) -> "_Stream":
        self._count += 1
        return _Stream(os.path.join(self.directory, f"{self._count}.buf"))


class _Stream:
    """One buffer being built by appending bytes to a scratch file, memory-mapped when finished."""

    def __init__(self, path: str):
        self.path, self.nbytes = path, 0
        open(path, "wb").close()

    def append(self, data) -> None:
        size = memoryview(data).nbytes
        if size:
            with open(self.path, "ab") as f:
                f.write(data)
            self.nbytes += size

    def finish(self) -> pa.Buffer:
        if not self.nbytes:
            return pa.py_buffer(b"")
        return pa.memory_map(self.path).read_buffer()  # file-backed pages; the mapping outlives the unlink


class _Bits:
    """A bitmap (validity or bool values) appended bit by bit: whole bytes go to the file, the last
    partial byte's bits wait in `carry` for the next append."""

    def __init__(self, stream: _Stream):
        self.stream, self.carry = stream, np.zeros(0, bool)

    def append(self, buf: pa.Buffer, offset: int, n: int) -> None:
        first = offset // 8
        raw = np.frombuffer(buf, np.uint8)[first:(offset + n + 7) // 8]
        self._push(np.unpackbits(raw, bitorder="little")[offset - first * 8:offset - first * 8 + n].astype(bool))

    def append_ones(self, n: int) -> None:
        fill = min(n, (8 - len(self.carry)) % 8)
        self._push(np.ones(fill, bool))
        n -= fill
        while n >= 8:
            nbytes = min(n // 8, _ONES_CHUNK)
            self.stream.append(np.full(nbytes, 0xFF, np.uint8))
            n -= nbytes * 8
        self._push(np.ones(n, bool))

    def _push(self, bits: np.ndarray) -> None:
        if len(self.carry):
            bits = np.concatenate([self.carry, bits])
        whole = len(bits) // 8 * 8
        self.stream.append(np.packbits(bits[:whole], bitorder="little"))
        self.carry = bits[whole:].copy()

    def finish(self) -> pa.Buffer:
        self.stream.append(np.packbits(self.carry, bitorder="little"))  # nothing when no bits are left
        self.carry = np.zeros(0, bool)
        return self.stream.finish()


class _Offsets:
    """An offsets buffer rebased across appends: each chunk's offsets continue from the running total."""

    def __init__(self, stream: _Stream, large: bool):
        self.stream, self.dtype, self.total = stream, np.dtype(np.int64 if large else np.int32), 0
        self.stream.append(np.zeros(1, self.dtype))

    def append(self, buf: pa.Buffer, offset: int, n: int) -> tuple[int, int]:
        """Append the offsets of rows [offset, offset + n); the [start, end) they span in the child/data."""
        offsets = np.frombuffer(buf, self.dtype)[offset:offset + n + 1]
        start, end = int(offsets[0]), int(offsets[-1])
        if self.total + end - start > np.iinfo(self.dtype).max:
            raise pa.ArrowInvalid(f"offset overflow: a column's items exceed {np.iinfo(self.dtype).max:,} "
                                  "(a 32-bit offset type)")
        self.stream.append((offsets[1:] - (start - self.total)).astype(self.dtype, copy=False))
        self.total += end - start
        return start, end


class _Column:
    """One column (or child) being built: validity bits (only once a null is seen) and its own parts."""

    def __init__(self, t: pa.DataType, files: _ScratchFiles):
        self.type, self.files, self.length, self.nulls = t, files, 0, 0
        self.validity: _Bits | None = None

    def append(self, arr: pa.Array) -> None:
        n = len(arr)
        if arr.null_count:
            if self.validity is None:
                self.validity = _Bits(self.files.new())
                self.validity.append_ones(self.length)
            self.validity.append(arr.buffers()[0], arr.offset, n)
        elif self.validity is not None:
            self.validity.append_ones(n)
        self._append(arr, n)
        self.length += n
        self.nulls += arr.null_count

    def finish(self) -> pa.Array:
        validity = self.validity.finish() if self.validity is not None else None
        return self._finish(validity)

    def _append(self, arr: pa.Array, n: int) -> None:
        raise NotImplementedError

    def _finish(self, validity: pa.Buffer | None) -> pa.Array:
        raise NotImplementedError


class _NullColumn(_Column):
    def append(self, arr: pa.Array) -> None:  # no buffers at all
        self.length += len(arr)

    def finish(self) -> pa.Array:
        return pa.nulls(self.length)


class _FixedColumn(_Column):
    """Numbers, dates, times, timestamps, decimals, fixed-size binary: one values buffer."""

    def __init__(self, t: pa.DataType, files: _ScratchFiles):
        super().__init__(t, files)
        self.values = files.new()

    def _append(self, arr: pa.Array, n: int) -> None:
        width = self.type.byte_width
        self.values.append(arr.buffers()[1].slice(arr.offset * width, n * width))

    def _finish(self, validity: pa.Buffer | None) -> pa.Array:
        return pa.Array.from_buffers(self.type, self.length, [validity, self.values.finish()], null_count=self.nulls)


class _BoolColumn(_Column):
    def __init__(self, t: pa.DataType, files: _ScratchFiles):
        super().__init__(t, files)
        self.values = _Bits(files.new())

    def _append(self, arr: pa.Array, n: int) -> None:
        self.values.append(arr.buffers()[1], arr.offset, n)

    def _finish(self, validity: pa.Buffer | None) -> pa.Array:
        return pa.Array.from_buffers(self.type, self.length, [validity, self.values.finish()], null_count=self.nulls)


class _BinaryColumn(_Column):
    """Strings and binary (and their large forms): offsets and data."""

    def __init__(self, t: pa.DataType, files: _ScratchFiles):
        super().__init__(t, files)
        self.offsets, self.data = _Offsets(files.new(), has_large_offsets(t)), files.new()

    def _append(self, arr: pa.Array, n: int) -> None:
        buffers = arr.buffers()
        start, end = self.offsets.append(buffers[1], arr.offset, n)
        if end > start:
            self.data.append(buffers[2].slice(start, end - start))

    def _finish(self, validity: pa.Buffer | None) -> pa.Array:
        return pa.Array.from_buffers(self.type, self.length, [validity, self.offsets.stream.finish(),
                                                              self.data.finish()], null_count=self.nulls)


class _ListColumn(_Column):
    """list and large_list: offsets, and the items they span appended to the child."""

    def __init__(self, t: pa.DataType, files: _ScratchFiles):
        super().__init__(t, files)
        self.offsets, self.child = _Offsets(files.new(), has_large_offsets(t)), _column(t.value_type, files)

    def _append(self, arr: pa.Array, n: int) -> None:
        start, end = self.offsets.append(arr.buffers()[1], arr.offset, n)
        self.child.append(arr.values.slice(start, end - start))  # offsets index the unsliced child

    def _finish(self, validity: pa.Buffer | None) -> pa.Array:
        child = self.child.finish()
        return pa.Array.from_buffers(_with_item(self.type, child.type), self.length,
                                     [validity, self.offsets.stream.finish()], null_count=self.nulls,
                                     children=[child])


class _FixedListColumn(_Column):
    def __init__(self, t: pa.DataType, files: _ScratchFiles):
        super().__init__(t, files)
        self.child = _column(t.value_type, files)

    def _append(self, arr: pa.Array, n: int) -> None:
        size = self.type.list_size
        self.child.append(arr.values.slice(arr.offset * size, n * size))

    def _finish(self, validity: pa.Buffer | None) -> pa.Array:
        child = self.child.finish()
        return pa.Array.from_buffers(_with_item(self.type, child.type), self.length, [validity],
                                     null_count=self.nulls, children=[child])


class _StructColumn(_Column):
    def __init__(self, t: pa.DataType, files: _ScratchFiles):
        super().__init__(t, files)
        self.children = [_column(t.field(i).type, files) for i in range(t.num_fields)]

    def _append(self, arr: pa.Array, n: int) -> None:
        for i, child in enumerate(self.children):
            child.append(arr.field(i))  # sliced to the struct's offset and length

    def _finish(self, validity: pa.Buffer | None) -> pa.Array:
        children = [c.finish() for c in self.children]
        t = pa.struct([self.type.field(i).with_type(c.type) for i, c in enumerate(children)])
        return pa.Array.from_buffers(t, self.length, [validity], null_count=self.nulls, children=children)


class _DecodedColumn:
    """A dictionary-typed column, stored decoded (its value type)."""

    def __init__(self, t: pa.DataType, files: _ScratchFiles):
        self.values = _column(t.value_type, files)

    def append(self, arr: pa.Array) -> None:
        self.values.append(arr.dictionary_decode())

    def finish(self) -> pa.Array:
        return self.values.finish()


class _ExtensionColumn:
    """An extension type: its storage built as any column, wrapped back at the end."""

    def __init__(self, t: pa.DataType, files: _ScratchFiles):
        self.type, self.storage = t, _column(t.storage_type, files)

    def append(self, arr: pa.Array) -> None:
        self.storage.append(arr.storage)

    def finish(self) -> pa.Array:
        return pa.ExtensionArray.from_storage(self.type, self.storage.finish())


def _with_item(t: pa.DataType, item: pa.DataType) -> pa.DataType:
    """A list type `t` with its item type replaced (a dictionary item decoded), field name and
    nullability kept."""
    if item == t.value_type:
        return t
    field = t.value_field.with_type(item)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(field, t.list_size)
    return pa.large_list(field) if pa.types.is_large_list(t) else pa.list_(field)


def _column(t: pa.DataType, files: _ScratchFiles) -> _Column | _DecodedColumn | _ExtensionColumn:
    """The builder for type `t`; types no dataset manifest can hold (maps, unions, views) are refused."""
    make: Callable | None
    if isinstance(t, pa.BaseExtensionType):
        make = _ExtensionColumn
    elif pa.types.is_dictionary(t):
        make = _DecodedColumn
    elif pa.types.is_null(t):
        make = _NullColumn
    elif pa.types.is_boolean(t):
        make = _BoolColumn
    elif is_fixed_width(t):
        make = _FixedColumn
    elif is_var_binary(t):
        make = _BinaryColumn
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        make = _ListColumn
    elif pa.types.is_fixed_size_list(t):
        make = _FixedListColumn
    elif pa.types.is_struct(t):
        make = _StructColumn
    else:
        make = None
    if make is None:
        raise pa.ArrowNotImplementedError(f"a column of type {t} cannot be stored in the shard cache")
    return make(t, files)
