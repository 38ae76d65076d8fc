"""Tokenized corpora as the pretraining ecosystem writes them (Megatron-core's indexed datasets,
OLMo-core's token memmaps, nanoGPT's `.bin`, LitData's token chunks, datatrove's `.ds`), ingested as
one row per document: what the format modules beside this one share.

Each of these formats is, per file, a flat stream of fixed-width little-endian integer tokens, and
somewhere the place where each document starts: an index (Megatron's `.idx`, datatrove's
`.ds.index`, LitData's chunk header) or an end-of-document token (OLMo, nanoGPT). A format module
parses only its index (every declared count checked against the bytes that exist before anything is
allocated: `check_declared`, `check_offsets`) and hands this module a file's document offsets; the
tokens are then read by ranged reads, a batch of documents at a time (`document_batches`,
`eos_batches`), so a 1 GiB stream converts under the same memory bound as any source.

A row: `id` (`FILE:INDEX`, the version's key: the document's index in its token file, the file's
path relative to the source URL), `tokens` (a list of the stored integer type, exactly the tokens of
the stream: EOS included where the stream holds it, so the rows of a file concatenated are its token
stream bit for bit), `file` and `document` (the two parts of `id`, for queries and exports). A
document's token offset in its file is not stored: it is the sum of the lengths before it
(`dsinspect query NAME --sql "SELECT id, sum(tokens_len) OVER (PARTITION BY file ORDER BY document) -
tokens_len AS token_offset FROM v"`); stored, it would change for every later document when one
document's length changes, and `dsinspect diff` would name them all instead of the one that changed.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.ingest.source_files import BATCH_BYTES, BATCH_ROWS, open_file

__all__ = ["TOKEN_TYPES", "document_schema", "check_declared", "check_offsets", "document_batches", "eos_batches"]

# the token types these formats store, as numpy little-endian dtypes
TOKEN_TYPES = {name: np.dtype(name).newbyteorder("<") for name in
               ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64")}


def document_schema(dtype: np.dtype) -> pa.Schema:
    """The rows of a token-stream source whose tokens are of `dtype`."""
    return pa.schema([pa.field("id", pa.string(), nullable=False),
                      pa.field("tokens", pa.list_(pa.from_numpy_dtype(dtype.newbyteorder("="))), nullable=False),
                      pa.field("file", pa.string(), nullable=False),
                      pa.field("document", pa.int64(), nullable=False)])


def check_declared(count: int, itemsize: int, available: int, where: str, what: str) -> None:
    """Refuse a declared `count` of `itemsize`-byte items that `available` bytes cannot hold: checked
    before anything is allocated, so a declared 2^60 allocates nothing."""
    if count < 0 or count * itemsize > available:
        raise UserError(f"{where}: {what} declares {count:,} entries ({count * itemsize:,} bytes); "
                        f"the file holds {available:,} bytes for them (truncated or not this format)")


def check_offsets(offsets: np.ndarray, tokens: int, where: str, what: str) -> np.ndarray:
    """`offsets` (each document's first token, and the end) as int64, refused unless they start at 0,
    never decrease and end at `tokens`, the stream's length."""
    offsets = np.asarray(offsets)
    if offsets.dtype.kind not in "iu":
        raise UserError(f"{where}: {what} are not integers ({offsets.dtype})")
    if offsets.dtype == np.uint64 and len(offsets) and int(offsets.max()) > np.iinfo(np.int64).max:
        raise UserError(f"{where}: {what} overflow a 64-bit offset")
    offsets = offsets.astype(np.int64)
    if not len(offsets) or offsets[0] != 0:
        raise UserError(f"{where}: {what} must start at 0")
    steps = np.diff(offsets)
    if (steps < 0).any():
        i = int(np.flatnonzero(steps < 0)[0])
        raise UserError(f"{where}: {what} decrease at document {i} ({int(offsets[i])} then {int(offsets[i + 1])})")
    if offsets[-1] != tokens:
        raise UserError(f"{where}: {what} end at token {int(offsets[-1]):,}, the file holds {tokens:,} tokens")
    return offsets


def document_batches(url: str, name: str, dtype: np.dtype, offsets: np.ndarray, first: int = 0,
                     base: int = 0) -> Iterator[pa.RecordBatch]:
    """The rows of documents `first`, `first + 1`, … of the token file at `url` (called `name` in the
    rows), whose token offsets (absolute, in tokens from the file's start; one more than the
    documents, checked by the caller) are `offsets`; the file's tokens start `base` bytes in. A batch
    holds at most BATCH_ROWS documents and about BATCH_BYTES of tokens (one longer document alone)."""
    offsets = np.asarray(offsets, np.int64)
    schema = document_schema(dtype)
    item = dtype.itemsize
    with open_file(url) as f:
        a = 0
        while a < len(offsets) - 1:
            b = a + 1
            limit = min(len(offsets) - 1, a + BATCH_ROWS)
            b = max(b, int(np.searchsorted(offsets, offsets[a] + BATCH_BYTES // item, side="right")) - 1)
            b = min(b, limit)
            lo, hi = int(offsets[a]), int(offsets[b])
            f.seek(base + lo * item)
            data = f.read((hi - lo) * item)
            if len(data) != (hi - lo) * item:
                raise UserError(f"{url}: ends at byte {base + lo * item + len(data):,}; documents {first + a:,}.."
                                f"{first + b - 1:,} need it to reach byte {base + hi * item:,} (truncated?)")
            yield _batch(schema, np.frombuffer(data, dtype), offsets[a:b + 1] - lo, name, first + a)
            a = b


def eos_batches(url: str, name: str, dtype: np.dtype, eos: int, base: int = 0,
                size: int | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of a token file whose documents each end with the token `eos` (OLMo, nanoGPT): the
    file read in blocks of about BATCH_BYTES, a document ending at (and holding) each EOS; tokens after
    the last EOS are a last document without one. `size`: the stream's bytes after `base` (default:
    to the end of the file); a length that is not whole tokens is refused."""
    schema = document_schema(dtype)
    item = dtype.itemsize
    block = max(item, BATCH_BYTES // item * item)
    with open_file(url) as f:
        f.seek(base)
        read = 0
        open_parts: list[np.ndarray] = []  # the tokens of a document still open, block by block (each scanned once)
        document = 0  # the next document's index
        while True:
            want = block if size is None else min(block, size - read)
            data = f.read(want) if want > 0 else b""
            read += len(data)
            if len(data) % item or (size is not None and want > 0 and len(data) < want):
                raise UserError(f"{url}: the token stream ends at byte {base + read:,}, not on a whole "
                                f"{dtype.name} token{'' if size is None else f' at byte {base + size:,}'}")
            fresh = np.frombuffer(data, dtype)
            ends = np.flatnonzero(fresh == eos) + 1
            if data and not len(ends):  # no document ends here: joined once one does
                open_parts.append(fresh)
                continue
            held = sum(len(x) for x in open_parts)
            cut = int(ends[-1]) if len(ends) else 0
            tokens = np.concatenate([*open_parts, fresh[:cut]]) if open_parts else fresh[:cut]
            ends = ends + held
            if not data and len(tokens):
                ends = np.append(ends, len(tokens))  # the tail without an EOS: a document of its own
            starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
            for i in range(0, len(ends), BATCH_ROWS):
                first, stops = starts[i:i + BATCH_ROWS], ends[i:i + BATCH_ROWS]
                lo = int(first[0])
                yield _batch(schema, tokens[lo:int(stops[-1])], np.concatenate([[0], stops - lo]), name, document)
                document += len(first)
            if not data:
                return
            open_parts = [fresh[cut:]] if cut < len(fresh) else []


def _batch(schema: pa.Schema, values: np.ndarray, offsets: np.ndarray, name: str, first: int) -> pa.RecordBatch:
    """Documents `first`.. of the file `name`, whose tokens are `values` cut at `offsets` (from 0)."""
    n = len(offsets) - 1
    if offsets[-1] > np.iinfo(np.int32).max:  # only a single document can get here (a batch holds ~16 MiB)
        raise UserError(f"{name}: document {first:,} holds {int(offsets[-1]):,} tokens, more than a list holds "
                        f"(2^31 - 1): no document boundary in {int(offsets[-1]):,} tokens (not this format?)")
    tokens = pa.ListArray.from_arrays(pa.array(np.asarray(offsets, np.int32)),
                                      pa.array(values.astype(values.dtype.newbyteorder("="), copy=False)))
    documents = np.arange(first, first + n, dtype=np.int64)
    return pa.RecordBatch.from_arrays(
        [pa.array([f"{name}:{d}" for d in documents.tolist()], pa.string()), tokens, pa.array([name] * n, pa.string()),
         pa.array(documents)], schema=schema)
