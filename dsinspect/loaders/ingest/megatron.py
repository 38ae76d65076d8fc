"""Megatron-core indexed datasets (`.bin` + `.idx`, the MMIDIDX layout), in and out, without the package.

The `.idx`, as megatron/core/datasets/indexed_dataset.py (0.16.1) writes it: b"MMIDIDX\\x00\\x00", version
u64 = 1, the token type's DType code u8 (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
8 uint16), sequence count n u64, document count d u64, sequence_lengths int32[n], sequence_pointers
int64[n] (each sequence's first byte in the `.bin`), document_indices int64[d] (where each document
starts, then n), and sequence_modes int8[n] when the dataset is multimodal (which only the file's size
tells). The `.bin` is the sequences' tokens end to end.

A row is a Megatron *sequence*, what GPTDataset reads as a document: token_streams' row, whose
`document` is the sequence's index in its file, plus
- `megatron_starts` (int64): how many of Megatron's documents start at this sequence: 1 where one
  starts, 0 where the sequence continues the document before it (`add_item` ... `end_document`,
  sentence splitting), k + 1 after k documents that hold no sequence (tools/preprocess_data.py writes
  one for an empty text). BERT and T5 datasets split a corpus by these documents. A count rather than
  the document's number: a changed grouping changes only the rows it touches, so `diff` names those and
  not every later row (the document's number is a running sum, as a token offset is).
  It cannot hold documents after a file's last sequence: such a file is refused rather than ingested
  as a version whose export would not give its `.idx` back.
- `megatron_mode` (int8), only when the `.idx` is multimodal: each sequence's mode.
So `export_megatron` writes the `.bin` and `.idx` back byte for byte.

Every count is checked against the file's size before anything is allocated (a declared 2^60 allocates
nothing); then the index is read in chunks of 2^20 entries: lengths non-negative, each pointer where
the lengths before it put it, the `.bin` exactly as long as the lengths say, document_indices rising
from 0 to n. A part is a range of at most 64 MiB of tokens and 2^20 sequences of one `.bin` (a 1 GiB
`.bin` converts in parallel); it re-reads only its slice of the `.idx`. Parts depend on the lengths
alone, so the export of a version re-ingests in the same parts, the same shards, the same id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.errors import UserError
from dsinspect.loaders.format.pathnames import check_relative
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.ingest.files import root_prefix
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import SourceFile, list_files
from dsinspect.loaders.ingest.token_streams import TOKEN_TYPES, check_declared, document_batches, document_schema
from dsinspect.loaders.store.storage import join, refuse_read_only, url_to_fs
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["MegatronSource", "export_megatron", "STARTS", "MODE"]

STARTS, MODE = "megatron_starts", "megatron_mode"
PART_BYTES = 64 << 20  # a part holds at most this many bytes of tokens ...
PART_SEQUENCES = 1 << 20  # ... and this many sequences (its slice of the index: ~30 MiB at most)
_CHUNK = 1 << 20  # index entries read at once

_MAGIC = b"MMIDIDX\x00\x00"
_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequence count, document count
_DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 8: "uint16"}
_FLOATS = {6: "float64", 7: "float32"}
_CODES = {name: code for code, name in _DTYPES.items()}
# Megatron has no unsigned 32- or 64-bit type; its writer is handed int32 for any vocabulary over 65,500
# (DType.optimal_dtype). Such tokens export as the signed type of their width, every value checked to fit.
_SIGNED = {"uint32": "int32", "uint64": "int64"}
_MAX_EMPTY = 1 << 24  # empty documents an export writes, at most: a damaged column must not grow the index


@dataclass(frozen=True)
class _Index:
    """An .idx header, its counts checked against the file's size."""

    url: str
    dtype: np.dtype
    sequences: int
    documents: int  # entries of document_indices: the documents + 1
    multimodal: bool

    def entries(self, f, array: str, start: int, stop: int) -> np.ndarray:
        """Entries [start, stop) of one of the index's arrays, read from the open .idx `f`."""
        n, d = self.sequences, self.documents
        at, dtype = {"sequence_lengths": (_HEADER.size, "int32"), "sequence_pointers": (_HEADER.size + 4 * n, "int64"),
                     "document_indices": (_HEADER.size + 12 * n, "int64"),
                     "sequence_modes": (_HEADER.size + 12 * n + 8 * d, "int8")}[array]
        item = np.dtype(dtype).itemsize
        f.seek(at + start * item)
        data = f.read((stop - start) * item)
        if len(data) != (stop - start) * item:
            raise UserError(f"{self.url}: {array} end early (the file changed while read?)")
        return np.frombuffer(data, np.dtype(dtype).newbyteorder("<")).astype(dtype)


def _read_index(url: str, size: int) -> _Index:
    """The header of the .idx at `url` (`size` bytes); anything but Megatron's layout is one line."""
    with _open(url) as f:
        head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise UserError(f"{url}: truncated: {len(head)} bytes, a Megatron index header holds {_HEADER.size}")
    magic, version, code, n, d = _HEADER.unpack(head)
    if magic != _MAGIC:
        raise UserError(f"{url}: not a Megatron index (magic {magic!r}, expected {_MAGIC!r})")
    if version != 1:
        raise UserError(f"{url}: version {version}; Megatron-core writes and reads version 1 only")
    if code in _FLOATS:
        raise UserError(f"{url}: dtype code {code} ({_FLOATS[code]}): token ids are integers")
    if code not in _DTYPES:
        raise UserError(f"{url}: dtype code {code} does not exist (Megatron-core's DType: 1-8)")
    check_declared(n, 12, size - _HEADER.size, url, "the sequence count (sequence_lengths, sequence_pointers)")
    check_declared(d, 8, size - _HEADER.size - 12 * n, url, "the document count (document_indices)")
    rest = size - _HEADER.size - 12 * n - 8 * d
    if rest != 0 and (rest != n or n == 0):
        raise UserError(f"{url}: {size:,} bytes, but its counts ({n:,} sequences, {d:,} document indices) make "
                        f"{size - rest:,} (or {size - rest + n:,} with sequence_modes): truncated or damaged")
    return _Index(url, TOKEN_TYPES[_DTYPES[code]], n, d, rest == n and n > 0)


def _check_sequences(index: _Index, lengths: np.ndarray, pointers: np.ndarray, first: int, at: int,
                     bin_url: str, bin_size: int) -> np.ndarray:
    """The end byte of sequences `first`.. in the .bin, the first starting at byte `at`, once each length
    is checked non-negative, each pointer where the lengths before it put it, every byte inside the .bin."""
    if (lengths < 0).any():
        i = int(np.flatnonzero(lengths < 0)[0])
        raise UserError(f"{index.url}: sequence_lengths[{first + i:,}] = {int(lengths[i]):,} is negative")
    ends = at + np.cumsum(lengths.astype(np.int64) * index.dtype.itemsize)
    starts = np.concatenate([[at], ends[:-1]])
    if (pointers != starts).any():
        i = int(np.flatnonzero(pointers != starts)[0])
        where = (f"past the end of {bin_url} ({bin_size:,} bytes)" if not 0 <= pointers[i] <= bin_size
                 else f"expected {int(starts[i]):,}")
        raise UserError(f"{index.url}: sequence_pointers[{first + i:,}] = {int(pointers[i]):,}: {where} "
                        f"(the sequence_lengths before it × {index.dtype.itemsize} bytes)")
    if len(ends) and ends[-1] > bin_size:
        i = int(np.searchsorted(ends, bin_size, side="right"))
        raise UserError(f"{index.url}: sequence_lengths run past the end of {bin_url} ({bin_size:,} bytes) "
                        f"at sequence {first + i:,}")
    return ends


def _scan(index: _Index, bin_url: str, bin_size: int) -> list[tuple[int, int, int, int]]:
    """The parts of a pair as (first sequence, end, first document_indices entry at or after the first
    sequence, bytes of tokens), the whole index checked on the way, a chunk at a time."""
    cuts, at, start, start_byte = [], 0, 0, 0
    with _open(index.url) as f:
        for a in range(0, index.sequences, _CHUNK):
            b = min(a + _CHUNK, index.sequences)
            ends = _check_sequences(index, index.entries(f, "sequence_lengths", a, b),
                                    index.entries(f, "sequence_pointers", a, b), a, at, bin_url, bin_size)
            bounds = np.concatenate([[at], ends])  # where sequences a.. start, and where the last ends
            while True:  # cut before the first sequence past a part's bounds (a longer one alone)
                stop = min(a + int(np.searchsorted(ends, start_byte + PART_BYTES, side="right")),
                           start + PART_SEQUENCES)
                stop = max(stop, start + 1)
                if stop >= b:
                    break
                cuts.append((start, stop, int(bounds[stop - a]) - start_byte))
                start, start_byte = stop, int(bounds[stop - a])
            at = int(bounds[-1])
        if at != bin_size:
            raise UserError(f"{bin_url}: {bin_size:,} bytes, but the sequence_lengths of {index.url} add up to "
                            f"{at:,} bytes of {index.dtype.name} tokens")
        if start < index.sequences:
            cuts.append((start, index.sequences, at - start_byte))
        entries = _check_documents(f, index, np.array([cut[0] for cut in cuts], np.int64))
    return [(a, b, int(k), size) for (a, b, size), k in zip(cuts, entries)]


def _check_documents(f, index: _Index, sequences: np.ndarray) -> np.ndarray:
    """For each of `sequences`, the first document_indices entry at or after it, once the entries are
    checked: 0 first, never decreasing, n last, and no document starting at n (after the last sequence)."""
    n, d = index.sequences, index.documents
    where = f"{index.url}: document_indices"
    if d == 0:
        raise UserError(f"{where} are empty; Megatron's start with 0")
    found, last = np.zeros(len(sequences), np.int64), None
    for a in range(0, d, _CHUNK):
        values = index.entries(f, "document_indices", a, min(a + _CHUNK, d))
        if a == 0 and values[0] != 0:
            raise UserError(f"{where}[0] = {int(values[0]):,}, not 0")
        steps = np.diff(values if last is None else np.concatenate([[last], values]))
        if (steps < 0).any():
            raise UserError(f"{where} decrease at [{a + int(np.flatnonzero(steps < 0)[0]) + (last is None):,}]")
        found += np.searchsorted(values, sequences, side="left")
        last = values[-1]
    if last != n:
        raise UserError(f"{where} end at {int(last):,}, not at the sequence count {n:,}")
    if d > 1 and index.entries(f, "document_indices", d - 2, d - 1)[0] == n:
        raise UserError(f"{where}: documents without a sequence after the last one, which a row per sequence "
                        "cannot keep (such documents before a sequence are kept)")
    return found


def _open(url: str):
    fs, path = url_to_fs(url)
    try:
        return fs.open(path, "rb")
    except OSError as e:
        raise UserError(f"cannot read {url}: {e}") from None


def _size(url: str) -> int:
    fs, path = url_to_fs(url)
    try:
        return int(fs.size(path))
    except OSError as e:
        raise UserError(f"cannot read {url}: {e}") from None


class MegatronSource:
    """`.idx` files, a `.bin` beside its `.idx`, or a directory or glob of such pairs, in sorted order."""

    def __init__(self, spec: SourceSpec):
        self.spec = spec

    @cached_property
    def _pairs(self) -> list[tuple[SourceFile, SourceFile, str]]:
        """(.idx, .bin, the .bin's path relative to the source) of each pair, sorted by prefix."""
        files = list_files(self.spec.url, (".idx", ".bin"), "Megatron .idx/.bin files")
        by_url = {f.url: f for f in files}
        prefixes = sorted({f.url[:-4] for f in files if f.url.endswith((".idx", ".bin"))})
        if not prefixes:
            raise UserError(f"{self.spec.url}: not a Megatron .idx or .bin file")
        base = root_prefix(self.spec.url)
        return [(by_url.get(p + ".idx") or _sibling(p + ".idx", p + ".bin"),
                 by_url.get(p + ".bin") or _sibling(p + ".bin", p + ".idx"),
                 check_relative(p[len(base):] + ".bin" if p.startswith(base) else p.rsplit("/", 1)[-1] + ".bin",
                                f"data file name of {p}.bin"))
                for p in prefixes]

    @cached_property
    def _indexes(self) -> list[_Index]:
        indexes = [_read_index(idx.url, idx.size) for idx, _, _ in self._pairs]
        for other in indexes[1:]:
            if (other.dtype, other.multimodal) != (indexes[0].dtype, indexes[0].multimodal):
                kind = lambda i: f"{i.dtype.name}{' multimodal' if i.multimodal else ''}"  # noqa: E731
                raise UserError(f"{other.url}: holds {kind(other)} sequences, {indexes[0].url} {kind(indexes[0])}: "
                                "ingest them separately")
        return indexes

    def parts(self) -> list[Part]:
        parts = []
        for (idx, bin_, name), index in zip(self._pairs, self._indexes):
            stamp = f"idx {idx.size} {idx.stamp}; bin {bin_.size} {bin_.stamp}"
            for a, b, entry, size in _scan(index, bin_.url, bin_.size):
                options = {"idx": idx.url, "file": name, "sequences": [a, b], "entry": entry}
                parts.append(Part(len(parts), bin_.url, size, options, stamp))
        return parts

    def schema(self) -> pa.Schema:
        return _schema(self._indexes[0].dtype, self._indexes[0].multimodal)

    def hints(self) -> Mapping[str, Any]:
        return {"roles": {"tokens": Role.TOKENS.value}}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        """The part's sequences, from its slice of the .idx (checked again: a part may run in another
        process, after the plan) and ranged reads of the .bin."""
        index = _read_index(part.options["idx"], _size(part.options["idx"]))
        a, b = part.options["sequences"]
        if not 0 <= a < b <= index.sequences:
            raise UserError(f"{index.url}: holds {index.sequences:,} sequences, not {a:,}..{b:,} (changed?)")
        with _open(index.url) as f:
            pointers = index.entries(f, "sequence_pointers", a, b)
            ends = _check_sequences(index, index.entries(f, "sequence_lengths", a, b), pointers, a,
                                    int(pointers[0]), part.url, _size(part.url))
            starts = _starts(f, index, a, b, part.options["entry"])
            modes = index.entries(f, "sequence_modes", a, b) if index.multimodal else None
        offsets = np.concatenate([pointers, ends[-1:]]) // index.dtype.itemsize
        schema = _schema(index.dtype, index.multimodal)
        for batch in document_batches(part.url, part.options["file"], index.dtype, offsets, a):
            first = batch.column("document")[0].as_py() - a
            rows = slice(first, first + batch.num_rows)
            extra = [pa.array(starts[rows])] + ([pa.array(modes[rows])] if modes is not None else [])
            yield pa.RecordBatch.from_arrays([*batch.columns, *extra], schema=schema)


def _starts(f, index: _Index, a: int, b: int, entry: int) -> np.ndarray:
    """How many documents start at each of sequences a..b-1: document_indices read from `entry` (the first
    at or after a) a chunk at a time, until past b."""
    counts = np.zeros(b - a, np.int64)
    for at in range(entry, index.documents, _CHUNK):
        values = index.entries(f, "document_indices", at, min(at + _CHUNK, index.documents))
        counts += np.bincount(values[(values >= a) & (values < b)] - a, minlength=b - a)
        if values[-1] >= b:
            break
    return counts


def _schema(dtype: np.dtype, multimodal: bool) -> pa.Schema:
    schema = document_schema(dtype).append(pa.field(STARTS, pa.int64(), nullable=False))
    return schema.append(pa.field(MODE, pa.int8(), nullable=False)) if multimodal else schema


def _sibling(url: str, of: str) -> SourceFile:
    fs, path = url_to_fs(url)
    if not fs.isfile(path):
        raise UserError(f"{of}: has no {url.rsplit('/', 1)[-1]} beside it (Megatron's .bin and .idx come in pairs)")
    return list_files(url)[0]


# -- export ------------------------------------------------------------------------------------

def export_megatron(version: DatasetVersion, dest: str, on_rows: Callable[[int], None] | None = None) -> dict:
    """The tokens of `version` as Megatron `.bin`/`.idx` pairs, byte for byte what
    `IndexedDatasetBuilder(dtype=the stored token type)` writes for them: a pair per run of rows of a
    `file` value (its ending made `.bin`, and `.idx` beside it), else `data.bin`/`data.idx`; a row a
    sequence, grouped into documents by `megatron_starts` (else a row a document), multimodal with
    `megatron_mode`. The sidecar only when re-ingesting the export gives back every row as it is (fields,
    file names in sorted order, documents numbered from 0), so that the re-ingest has this version's id."""
    from dsinspect.loaders.ingest.export import write_sidecar  # export imports this module lazily

    tokens = _tokens_field(version)
    stored = str(tokens.type.value_type)
    dtype = TOKEN_TYPES[_SIGNED.get(stored, stored)]
    fs, root = url_to_fs(dest)
    refuse_read_only(fs, root)
    if fs.exists(root) and (not fs.isdir(root) or fs.ls(root, detail=False)):
        raise UserError(f"{dest}: export destination exists and is not an empty directory")
    names = [f.name for f in version.fields]
    multimodal = MODE in names
    exact = [(f.name, f.type, f.nullable) for f in version.fields] == [
        (f.name, f.type, f.nullable) for f in _schema(dtype, multimodal)]
    files, written, pair = [], [], None
    for start, table in version.iter_tables([c for c in (tokens.name, "id", "file", "document", STARTS, MODE)
                                              if c in names]):
        for value, a, b in _runs(table.column("file") if "file" in names else None, table.num_rows):
            if pair is None or pair.value != value:
                files += pair.close() if pair is not None else []
                prefix = _prefix(value, f"{version.address}:{start + a}")
                if prefix in written:
                    raise UserError(f"{version.address}:{start + a}: file {value!r} ({prefix}.bin) comes again "
                                    "after other rows: a file's rows must be consecutive")
                exact &= value == prefix + ".bin" and (not written or prefix > written[-1])  # re-ingest sorts
                written.append(prefix)
                pair = _Pair(fs, join(root, prefix), value, dtype, multimodal, version.address)
            exact &= pair.add(table.slice(a, b - a), tokens.name, start + a)
        if on_rows:
            on_rows(table.num_rows)
    files += (pair or _Pair(fs, join(root, "data"), "data", dtype, multimodal, version.address)).close()
    if exact:
        write_sidecar(version, fs, root)
    return {"address": version.address, "id": version.id, "format": "megatron", "dest": dest, "files": files,
            "rows": version.num_rows, "dtype": dtype.name, "sidecar": exact}


def _tokens_field(version: DatasetVersion):
    found = [f for f in version.fields if f.role is Role.TOKENS]
    if len(found) != 1:
        raise UserError(f"{version.address}: a Megatron export writes one tokens field; this version has "
                        f"{len(found)} ({', '.join(f.name for f in found) or 'none'})")
    t = found[0].type
    listed = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    if not listed or str(t.value_type) not in (*_CODES, *_SIGNED):
        raise UserError(f"{version.address}: field {found[0].name!r} holds {t}; Megatron stores lists of "
                        f"{', '.join(_CODES)} (uint32 and uint64 are written as int32 and int64)")
    return found[0]


def _prefix(value: object, where: str) -> str:
    """The pair a `file` value exports to: the same relative path, its ending dropped (`x.bin`, `x.npy`: x)."""
    if not isinstance(value, str):
        raise UserError(f"{where}: no file name (null)")
    check_relative(value, f"file name at {where}")
    if any(p.startswith((".", "_")) for p in value.split("/")):
        raise UserError(f"{where}: file name {value!r}: a re-ingest would skip a name starting with '.' or '_'")
    head, _, last = value.rpartition("/")
    return f"{head}/{last.rsplit('.', 1)[0] if '.' in last else last}".lstrip("/")


def _runs(files: pa.ChunkedArray | None, rows: int) -> Iterator[tuple[str | None, int, int]]:
    """(file, first row, end) of each run of consecutive rows with the same `file` ("data" without one)."""
    if files is None or rows == 0:
        yield from ([("data", 0, rows)] if rows else [])
        return
    values = files.combine_chunks()
    changes = pc.not_equal(values.slice(1), values.slice(0, rows - 1)).fill_null(True)
    bounds = [0, *(np.flatnonzero(changes.to_numpy(zero_copy_only=False)) + 1).tolist(), rows]
    for a, b in zip(bounds, bounds[1:]):
        yield values[a].as_py(), a, b


class _Pair:
    """One .bin/.idx pair written as IndexedDatasetBuilder writes it: tokens appended to the .bin, the
    index kept (12-13 bytes a sequence; the builder keeps Python lists) and written when closed."""

    def __init__(self, fs, prefix: str, value: str, dtype: np.dtype, multimodal: bool, address: str):
        self.fs, self.prefix, self.value, self.dtype, self.address = fs, prefix, value, dtype, address
        fs.makedirs(prefix.rsplit("/", 1)[0], exist_ok=True)
        self.out = fs.open(prefix + ".bin", "wb")
        self.lengths: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.modes: list[np.ndarray] | None = [] if multimodal else None
        self.sequences = 0

    def add(self, table: pa.Table, tokens: str, first_row: int) -> bool:
        """Append rows; whether a re-ingest gives them back as they are (their id and document)."""
        column = table.column(tokens).combine_chunks()
        if column.null_count:
            raise UserError(f"{self.address}:{first_row + _first(column.is_null())}: no tokens (null)")
        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
        values = column.flatten().to_numpy(zero_copy_only=False)
        limit = np.iinfo(self.dtype).max
        if len(values) and values.max() > limit:  # only uint32 and uint64 tokens can be
            row = int(np.searchsorted(np.cumsum(lengths), np.flatnonzero(values > limit)[0], side="right"))
            raise UserError(f"{self.address}:{first_row + row}: a token over {limit:,}, which Megatron's "
                            f"{self.dtype.name} cannot hold")
        if len(lengths) and lengths.max() > np.iinfo(np.int32).max:
            raise UserError(f"{self.address}:{first_row + int(np.argmax(lengths))}: more tokens than a Megatron "
                            "sequence holds (2^31 - 1)")
        self.out.write(values.astype(self.dtype.newbyteorder("<")).tobytes())
        self.lengths.append(lengths.astype(np.int32))
        self.starts.append(_column(table, STARTS, np.int64, self.address, first_row, np.ones(len(lengths), np.int64)))
        if self.modes is not None:
            self.modes.append(_column(table, MODE, np.int8, self.address, first_row))
        documents = np.arange(self.sequences, self.sequences + len(lengths))
        self.sequences += len(lengths)
        if "document" not in table.column_names or "id" not in table.column_names:
            return False
        ids = [f"{self.value}:{d}" for d in documents.tolist()]
        return table.column("id").to_pylist() == ids and np.array_equal(table.column("document").to_numpy(), documents)

    def close(self) -> list[str]:
        self.out.close()
        lengths = np.concatenate([np.zeros(0, np.int32), *self.lengths])
        documents = _document_indices(np.concatenate([np.zeros(0, np.int64), *self.starts]),
                                      f"{self.address}: file {self.value!r}")
        pointers = (np.cumsum(lengths, dtype=np.int64) - lengths) * self.dtype.itemsize
        with self.fs.open(self.prefix + ".idx", "wb") as f:
            f.write(_HEADER.pack(_MAGIC, 1, _CODES[self.dtype.name], len(lengths), len(documents)))
            for array, dtype in ((lengths, "<i4"), (pointers, "<i8"), (documents, "<i8")):
                f.write(array.astype(dtype).tobytes())
            if self.modes is not None:
                f.write(np.concatenate([np.zeros(0, np.int8), *self.modes]).tobytes())
        return [self.fs.unstrip_protocol(self.prefix + ".bin"), self.fs.unstrip_protocol(self.prefix + ".idx")]


def _column(table: pa.Table, name: str, dtype, address: str, first_row: int, default=None) -> np.ndarray:
    """Column `name` as `dtype` (`default` when the version has none); a null or a value the type cannot
    hold is one line naming the row."""
    if name not in table.column_names:
        return default
    column = table.column(name).combine_chunks()
    if column.null_count:
        raise UserError(f"{address}:{first_row + _first(column.is_null())}: no {name} (null)")
    values = column.to_numpy(zero_copy_only=False)
    info = np.iinfo(dtype)
    bad = (values < info.min) | (values > info.max) if values.dtype.kind in "iu" else np.ones(len(values), bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise UserError(f"{address}:{first_row + i}: {name} {values[i]!r} is not a {np.dtype(dtype).name}")
    return values.astype(dtype)


def _document_indices(starts: np.ndarray, where: str) -> np.ndarray:
    """Megatron's document_indices from the documents starting at each sequence: each sequence's index
    as often as documents start there, then the sequence count. The first sequence starts one (Megatron's
    first document starts at 0); no count is negative; at most _MAX_EMPTY documents hold no sequence."""
    if not len(starts):
        return np.zeros(1, np.int64)
    if starts[0] < 1 or (starts < 0).any():
        i = 0 if starts[0] < 1 else int(np.flatnonzero(starts < 0)[0])
        raise UserError(f"{where}: {STARTS} is {int(starts[i])} at its row {i:,} (at least 1 at the first row, "
                        "where Megatron's first document starts; never negative)")
    empty = int((starts[starts > 1] - 1).sum()) if starts.max() <= _MAX_EMPTY else _MAX_EMPTY + 1
    if empty > _MAX_EMPTY:
        raise UserError(f"{where}: {STARTS} would write more than {_MAX_EMPTY:,} documents without a sequence")
    return np.append(np.repeat(np.arange(len(starts), dtype=np.int64), starts), len(starts))


def _first(mask: pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])
