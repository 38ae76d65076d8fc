"""OLMo-core's flat token memmaps and nanoGPT's raw `train.bin`: ingested one row per document
(token_streams.py's rows) and exported as their own writers write them.

**OLMo** (`olmo`, `*.npy`): Dolma's tokenizer and OLMo-core's `write_array_to_disk` write a file's
tokens raw, little-endian unsigned integers of 1, 2, 4 or 8 bytes in np.memmap's layout (no .npy
header), EOS after each document; Dolma writes beside each `NAME.npy` a gzipped CSV `NAME.csv.gz`,
one line `start,end[,id,src,loc]` per document, and OLMo-core reads document boundaries from it
(`iter_document_indices`; its `write_document_indices` writes one with `start,end` only). Without a
flag, the rows are the metadata file's documents and the token width is the file's bytes divided by
the last document's end; a file without metadata needs the width and EOS (options `dtype` and `eos`:
`--option dtype=uint32 --option eos=50279`). A real `.npy` (with a `\\x93NUMPY` header) is refused:
OLMo-core would read its header as tokens.

**nanoGPT** (`nanogpt`, `*.bin`): `data/*/prepare.py` writes `train.bin`/`val.bin` as raw uint16
GPT-2 tokens; openwebtext's appends the end-of-text token 50256 to each document, shakespeare's
none, so a document ends at (and holds) each 50256 and a file without one is one document. llm.c's
`.bin` (a 1 KiB header, documents *after* 50256) is refused rather than read with shifted boundaries.

One part per file: without metadata a document's index depends on the EOS count before it; with
metadata a file could split into ranges of documents, but each part starts its own shard, so the
same documents found through metadata or through EOS would make different version ids.

**Export** writes the rows' tokens concatenated as stored, never adding an EOS (a document that lacks
one runs into the next, as nanoGPT's shakespeare), one token file per run of rows of a `file` value
(its ending made `.npy`/`.bin`), else one file (`part-00000.npy`, `train.bin`). OLMo's file has the
stored unsigned type (a signed one becomes the narrowest OLMo type that holds every token, as
OLMo-core picks its dtype from the vocabulary size) and a `.csv.gz` beside it as
`write_document_indices` writes it (gzip level 9, no timestamp): OLMo-core then reads the same
documents, with or without an EOS at their ends. nanoGPT's is uint16; a wider token is refused. The
`_dsinspect.export` sidecar (fields, roles, tokenizer, key) is written only when re-ingesting the
export gives back every row as it is, so ingest → export → ingest gives the same version id.
"""

from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dsinspect.errors import UserError
from dsinspect.loaders.format.pathnames import check_relative
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.ingest.files import root_prefix
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_ROWS, SourceFile, list_files, open_file
from dsinspect.loaders.ingest.token_streams import TOKEN_TYPES, document_batches, document_schema, eos_batches
from dsinspect.loaders.store.storage import join, refuse_read_only, url_to_fs
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["OlmoSource", "NanoGptSource", "export_olmo", "export_nanogpt", "GPT2_EOT", "OLMO_TYPES"]

GPT2_EOT = 50256  # what nanoGPT's openwebtext prepare.py appends to each document (tiktoken's gpt2 eot_token)
NANOGPT_TYPE = np.dtype("<u2")
# OLMo-core's NumpyDatasetDType, by width in bytes
OLMO_TYPES = {n.itemsize: n for n in (np.dtype(f"<u{w}") for w in (1, 2, 4, 8))}
METADATA = ".csv.gz"
_NPY_MAGIC = b"\x93NUMPY"
_LLMC_MAGIC = 20240520  # llm.c's write_datafile: 256 int32 (magic, version 1 uint16 | 2 uint32, tokens), then tokens
_LLMC_HEADER = 1024


# -- ingest ------------------------------------------------------------------------------------

class _TokenFiles:
    """What both sources share: the files (one part each), their names relative to the source URL, the
    rows. A subclass says which files (`suffix`), what it checks of each (`_options`) and how a part
    finds its documents (`read`)."""

    suffix = ""
    what = ""

    def __init__(self, spec: SourceSpec):
        self.spec = spec

    @cached_property
    def _parts(self) -> list[Part]:
        files = list_files(self.spec.url, (self.suffix,), self.what)
        base = root_prefix(self.spec.url)
        parts = []
        for i, f in enumerate(files):
            if f.size == 0:
                raise UserError(f"{f.url}: an empty token file (0 bytes: no tokens, not even an EOS)")
            name = check_relative(f.url[len(base):] if f.url.startswith(base) else f.url.rsplit("/", 1)[-1],
                                  f"token file name of {f.url}")
            options, stamp = self._options(f)
            parts.append(Part(i, f.url, f.size, {"name": name, **options}, stamp))
        types = {p.options["dtype"] for p in parts}
        if len(types) > 1:
            raise UserError(f"{self.spec.url}: its token files hold {' and '.join(sorted(types))} tokens; "
                            "ingest each width as its own dataset")
        return parts

    def _options(self, f: SourceFile) -> tuple[dict, str]:
        """The part options of one token file (its `dtype`, and how documents are found) and its stamp."""
        raise NotImplementedError

    def parts(self) -> list[Part]:
        return self._parts

    def schema(self) -> pa.Schema:
        return document_schema(TOKEN_TYPES[self._parts[0].options["dtype"]])

    def hints(self) -> Mapping[str, Any]:
        return {"roles": {"tokens": Role.TOKENS.value}}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        o = part.options
        return eos_batches(part.url, o["name"], TOKEN_TYPES[o["dtype"]], o["eos"], size=part.size)


class NanoGptSource(_TokenFiles):
    """nanoGPT's `train.bin`/`val.bin`: uint16 tokens, a document ending at each GPT-2 end-of-text."""

    suffix = ".bin"
    what = "nanoGPT token files (.bin)"

    def _options(self, f: SourceFile) -> tuple[dict, str]:
        if f.size % NANOGPT_TYPE.itemsize:
            raise UserError(f"{f.url}: {f.size:,} bytes are not whole uint16 tokens (nanoGPT's .bin)")
        with open_file(f.url) as fh:
            head = np.frombuffer(fh.read(12).ljust(12, b"\0"), "<i4")
        if head[0] == _LLMC_MAGIC and head[1] in (1, 2) and f.size == _LLMC_HEADER + int(head[2]) * 2 * int(head[1]):
            raise UserError(f"{f.url}: llm.c's token file (a 1 KiB header, magic {_LLMC_MAGIC}, each document after "
                            "its end-of-text), not nanoGPT's raw .bin")
        return {"dtype": NANOGPT_TYPE.name, "eos": GPT2_EOT}, f.stamp


class OlmoSource(_TokenFiles):
    """OLMo-core's token memmaps: documents from the Dolma metadata file beside each, else split at EOS
    (options `dtype` and `eos`)."""

    suffix = ".npy"
    what = "OLMo token files (.npy)"

    def _options(self, f: SourceFile) -> tuple[dict, str]:
        header = _npy_header(f.url)
        if header:
            raise UserError(f"{f.url}: a NumPy .npy with a header ({header}), not OLMo's headerless token memmap "
                            "(OLMo-core would read the header as tokens); write the array with arr.tofile(path)")
        dtype = self._option_dtype()
        metadata = _beside(f.url[:-len(self.suffix)] + METADATA)
        if metadata is None:
            eos = self.spec.options.get("eos")
            if dtype is None or eos is None:
                raise UserError(f"{f.url}: no {f.url.rsplit('/', 1)[-1][:-4]}{METADATA} beside it, so its token "
                                "width and EOS are unknown: write it with olmo_core.data.utils.write_document_indices"
                                "(path, dtype=..., eos_token_id=...), or pass --option dtype=... --option eos=...")
            if f.size % dtype.itemsize:
                raise UserError(f"{f.url}: {f.size:,} bytes are not whole {dtype.name} tokens")
            if not isinstance(eos, int) or not 0 <= eos <= np.iinfo(dtype).max:
                raise UserError(f"option eos {eos!r}: not a {dtype.name} token id")
            return {"dtype": dtype.name, "eos": eos}, f.stamp
        end = 0  # the metadata read through once, here in the plan: a damaged one stops the ingest before any part
        for _, ends in _metadata_chunks(metadata.url):
            end = int(ends[-1])
        dtype = dtype or _width(f, end, metadata.url)
        if f.size % dtype.itemsize:
            raise UserError(f"{f.url}: {f.size:,} bytes are not whole {dtype.name} tokens")
        _check_end(metadata.url, end, f.size // dtype.itemsize, dtype)
        return {"dtype": dtype.name, "metadata": metadata.url}, f"{f.stamp} {metadata.stamp} {metadata.size}"

    def _option_dtype(self) -> np.dtype | None:
        name = self.spec.options.get("dtype")
        if name is None:
            return None
        if name not in {t.name for t in OLMO_TYPES.values()}:
            raise UserError(f"option dtype {name!r}: OLMo's token types are uint8, uint16, uint32, uint64")
        return TOKEN_TYPES[name]

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        if "metadata" not in part.options:
            yield from super().read(part)
            return
        dtype, first, end = TOKEN_TYPES[part.options["dtype"]], 0, 0
        for starts, ends in _metadata_chunks(part.options["metadata"]):
            yield from document_batches(part.url, part.options["name"], dtype, np.append(starts, ends[-1]), first)
            first, end = first + len(starts), int(ends[-1])
        _check_end(part.options["metadata"], end, part.size // dtype.itemsize, dtype)


def _beside(url: str) -> SourceFile | None:
    """The file at `url` if it exists (with its size and stamp, for the job id)."""
    fs, path = url_to_fs(url)
    try:
        if not fs.isfile(path):
            return None
    except OSError as e:
        raise UserError(f"cannot read {url}: {e}") from None
    return list_files(url)[0]


def _npy_header(url: str) -> str | None:
    """`dtype …, shape …` when the file starts with a readable .npy header, else None (raw tokens)."""
    with open_file(url) as f:
        if f.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
            return None
        f.seek(0)
        try:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
        except (ValueError, SyntaxError, TypeError):
            return None
    return f"dtype {dtype.str}, shape {shape}"


def _metadata_chunks(url: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(starts, ends) of the documents a Dolma / OLMo-core metadata file lists, a block of lines at a time
    (bounded memory); refused unless they start at 0 and each starts where the last ended."""
    end, line = 0, 0
    with open_file(url) as raw, gzip.GzipFile(fileobj=raw) as text:
        try:
            for batch in pacsv.open_csv(text, read_options=_CSV_READ, convert_options=_CSV_CONVERT):
                starts, ends = batch.column(0).to_numpy(), batch.column(1).to_numpy()
                previous = np.concatenate([[end], ends[:-1]])
                bad = np.flatnonzero((starts != previous) | (ends < starts))
                if len(bad):
                    i = int(bad[0])
                    raise UserError(f"{url}: line {line + i + 1}: document {starts[i]},{ends[i]} "
                                    + ("ends before it starts" if ends[i] < starts[i] else
                                       f"does not start where the last ended ({previous[i]})"))
                if len(ends):
                    end, line = int(ends[-1]), line + len(starts)
                    yield starts, ends
        except (pa.ArrowInvalid, gzip.BadGzipFile, EOFError, zlib.error) as e:  # not I/O errors: a retry may pass
            if "Empty CSV file" in str(e):
                raise UserError(f"{url}: lists no documents") from None
            raise UserError(f"{url}: not a Dolma/OLMo metadata file of start,end lines "
                            f"({str(e).splitlines()[0]})") from None


# the first two columns of headerless CSV lines (Dolma writes id, src, loc after them), as int64
_CSV_READ = pacsv.ReadOptions(autogenerate_column_names=True, block_size=1 << 20, use_threads=False)
_CSV_CONVERT = pacsv.ConvertOptions(include_columns=["f0", "f1"], column_types={"f0": pa.int64(), "f1": pa.int64()})


def _width(f: SourceFile, end: int, metadata: str) -> np.dtype:
    """The token type that makes the file exactly the metadata's `end` tokens."""
    if end and f.size % end == 0 and f.size // end in OLMO_TYPES:
        return OLMO_TYPES[f.size // end]
    raise UserError(f"{metadata}: its documents end at token {end:,}, which does not make {f.url}'s {f.size:,} bytes "
                    "whole uint8/16/32/64 tokens (offsets past the end, or the metadata of another file)")


def _check_end(metadata: str, end: int, tokens: int, dtype: np.dtype) -> None:
    """Refuse metadata whose documents do not end where the token file does."""
    if end != tokens:
        raise UserError(f"{metadata}: its documents end at token {end:,}; the token file holds {tokens:,} "
                        f"{dtype.name} tokens")


# -- export ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Format:
    name: str
    suffix: str
    single: str  # the file name when the version has no `file` field
    eos: int | None  # the token a re-ingest splits documents at (None: the metadata file says where)


_OLMO = _Format("olmo", ".npy", "part-00000.npy", None)
_NANOGPT = _Format("nanogpt", ".bin", "train.bin", GPT2_EOT)


def export_olmo(version: DatasetVersion, dest: str, on_rows: Callable[[int], None] | None = None) -> dict:
    """The version's tokens as OLMo-core token files with their document metadata (module docstring)."""
    return _export(version, dest, on_rows, _OLMO)


def export_nanogpt(version: DatasetVersion, dest: str, on_rows: Callable[[int], None] | None = None) -> dict:
    """The version's tokens as nanoGPT's raw uint16 `.bin` (module docstring)."""
    return _export(version, dest, on_rows, _NANOGPT)


def _export(version: DatasetVersion, dest: str, on_rows, fmt: _Format) -> dict:
    from dsinspect.loaders.ingest.export import write_sidecar

    fs, root = url_to_fs(dest)
    refuse_read_only(fs, root)
    if fs.exists(root) and (not fs.isdir(root) or fs.ls(root, detail=False)):
        raise UserError(f"{dest}: export destination exists and is not an empty directory")
    field = _tokens_field(version)
    dtype = NANOGPT_TYPE if fmt is _NANOGPT else _olmo_type(version, field)
    writer = _Writer(fs, root, fmt, dtype, version)
    fs.makedirs(root, exist_ok=True)
    try:
        for batch, first in _batches(version, field, writer.grouped):
            writer.write(batch, first)
            if on_rows:
                on_rows(batch.num_rows)
        writer.finish()
    except BaseException:
        writer.remove()
        raise
    exact = writer.exact and [(f.name, f.type, f.nullable) for f in version.fields] == [
        (f.name, f.type, f.nullable) for f in document_schema(dtype)]
    if exact:
        write_sidecar(version, fs, root)
    return {"address": version.address, "id": version.id, "format": fmt.name, "dest": dest, "files": writer.files,
            "rows": version.num_rows, "dtype": dtype.name, "sidecar": exact}


def _tokens_field(version: DatasetVersion) -> str:
    """The field whose tokens are exported: the one tokens field, or the one named `tokens`."""
    names = [f.name for f in version.fields if f.role is Role.TOKENS]
    if len(names) > 1 and "tokens" in names:
        return "tokens"
    if len(names) != 1:
        raise UserError(f"{version.address}: {'no field holds' if not names else 'several fields hold'} tokens "
                        f"({', '.join(names) or 'none'}); a token-file export writes one tokens field")
    return names[0]


def _batches(version: DatasetVersion, field: str, grouped: bool) -> Iterator[tuple[pa.RecordBatch, int]]:
    """The version's tokens (and `file`, `document`, `id` when it groups by file) a bounded batch at a
    time, with the global index of each batch's first row."""
    columns = [field] + (["file", "document", "id"] if grouped else [])
    columns = [c for c in dict.fromkeys(columns) if c in version.manifest.schema.names]
    first = 0
    for shard in range(len(version.manifest.shards)):
        with version.catalog.fs.open(version.shard_path(shard), "rb") as f:
            for batch in pq.ParquetFile(f).iter_batches(BATCH_ROWS, columns=columns, use_threads=False):
                yield batch, first
                first += batch.num_rows


def _olmo_type(version: DatasetVersion, field: str) -> np.dtype:
    """The stored type when OLMo has it; for signed tokens the narrowest OLMo type holding every one (a
    first pass over the tokens), a negative one refused."""
    stored = np.dtype(version.manifest.schema.field(field).type.value_type.to_pandas_dtype())
    if stored.kind == "u":
        return stored.newbyteorder("<")
    top = 0
    for batch, first in _batches(version, field, False):
        values = pc.list_flatten(batch.column(0))
        if not len(values):
            continue
        low, high = pc.min_max(values).values()
        if low.as_py() < 0:
            row = first + _first_row(batch.column(0), pc.less(values, 0))
            raise UserError(f"{version.address}:{row}: token {low.as_py()} is negative; OLMo stores unsigned tokens")
        top = max(top, high.as_py())
    return next(t for t in OLMO_TYPES.values() if top <= np.iinfo(t).max)


def _first_row(tokens: pa.ListArray, bad: pa.BooleanArray) -> int:
    """The row of `tokens` holding the first value flagged in `bad` (over the flattened values)."""
    at = int(np.flatnonzero(bad.to_numpy(zero_copy_only=False))[0])
    offsets = tokens.offsets.to_numpy()
    return int(np.searchsorted(offsets - offsets[0], at, side="right")) - 1


class _Writer:
    """Token files written as the rows come, one per run of a `file` value, with OLMo's metadata beside
    each; meanwhile `exact` records whether re-ingesting them gives back every row as it is."""

    def __init__(self, fs, root: str, fmt: _Format, dtype: np.dtype, version: DatasetVersion):
        self.fs, self.root, self.fmt, self.dtype, self.version = fs, root, fmt, dtype, version
        schema = version.manifest.schema
        self.grouped = "file" in schema.names and pa.types.is_string(schema.field("file").type)
        self.exact = True
        self.files: list[str] = []
        self.names: dict[str, str] = {}  # export file name -> the `file` value written there
        self.name: str | None = None
        self.out = self.metadata = self.meta_out = None
        self.tokens = self.document = 0
        self.open_tail = False  # the last document written lacks its EOS (so none may follow in this file)

    def write(self, batch: pa.RecordBatch, first: int) -> None:
        files = batch.column("file").to_pylist() if self.grouped else [None] * batch.num_rows
        start = 0
        while start < batch.num_rows:
            stop = start + 1
            while stop < batch.num_rows and files[stop] == files[start]:
                stop += 1
            self._switch(files[start], first + start)
            self._documents(batch.slice(start, stop - start), first + start)
            start = stop

    def _switch(self, value: str | None, row: int) -> None:
        name = self.fmt.single if value is None else _export_name(value, self.fmt.suffix, self.version, row)
        if name == self.name:
            return
        if name in self.names:
            raise UserError(f"{self.version.address}:{row}: rows of file {value!r} come after those of another "
                            f"file, or {self.names[name]!r} exports as the same {name!r}: a token file is written "
                            "in one piece")
        self.finish()
        self.exact &= self.name is None or name > self.name  # a re-ingest lists the files sorted
        self.exact &= value is None or name == value
        self.names[name], self.name = value or name, name
        path = join(self.root, name)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.out = self.fs.open(path, "wb")
        self.files.append(self.fs.unstrip_protocol(path))
        if self.fmt is _OLMO:
            meta = path[:-len(self.fmt.suffix)] + METADATA
            self.meta_out = self.fs.open(meta, "wb")
            self.files.append(self.fs.unstrip_protocol(meta))
            # as OLMo-core's write_document_indices writes it, without the time of writing: through a text
            # wrapper as gzip.open(path, "wt") does, whose close flushes the gzip stream (a zlib sync flush,
            # which changes the bytes) before ending it
            self.metadata = io.TextIOWrapper(gzip.GzipFile(meta.rsplit("/", 1)[-1], "wb", 9, self.meta_out, mtime=0),
                                             encoding="utf-8")
        self.tokens = self.document = 0
        self.open_tail = False

    def _documents(self, rows: pa.RecordBatch, row: int) -> None:
        """Write one run of rows of the current file."""
        tokens = rows.column(0)
        if tokens.null_count:
            raise UserError(f"{self.version.address}:{row + tokens.is_null().to_pylist().index(True)}: "
                            "its tokens are null")
        values = pc.list_flatten(tokens)
        if self.fmt is _NANOGPT and len(values):
            wide = pc.or_(pc.less(values, 0), pc.greater(values, np.iinfo(NANOGPT_TYPE).max))
            if pc.any(wide).as_py():
                at = row + _first_row(tokens, wide)
                bad = values.filter(wide)[0].as_py()
                raise UserError(f"{self.version.address}:{at}: holds token {bad}; nanoGPT's .bin stores uint16 "
                                "(0..65,535)")
        data = values.to_numpy(zero_copy_only=False).astype(self.dtype, copy=False)
        self.out.write(data.tobytes())
        offsets = tokens.offsets.to_numpy()
        bounds = self.tokens + (offsets - offsets[0])
        if self.metadata is not None:
            self.metadata.write("".join(f"{a},{b}\n" for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())))
        self._check(rows, data, offsets - offsets[0])
        self.tokens, self.document = int(bounds[-1]), self.document + rows.num_rows

    def _check(self, rows: pa.RecordBatch, data: np.ndarray, offsets: np.ndarray) -> None:
        """Whether a re-ingest reads these rows back as they are: the same `document` and `id`, and, where
        EOS marks the documents, one EOS at the end of each (none in the file's last)."""
        if not self.exact or not self.grouped:
            self.exact = False
            return
        n = rows.num_rows
        documents = np.arange(self.document, self.document + n)
        names = rows.column("file").to_pylist()
        self.exact &= "document" in rows.schema.names and "id" in rows.schema.names and bool(
            (rows.column("document").to_numpy(zero_copy_only=False) == documents).all()) and \
            rows.column("id").to_pylist() == [f"{f}:{d}" for f, d in zip(names, documents.tolist())]
        if self.fmt.eos is None or not self.exact:
            return
        lengths = np.diff(offsets)
        eos = np.flatnonzero(data == self.fmt.eos)
        ends = offsets[1:] - 1
        closed = np.isin(ends, eos) & (lengths > 0)  # the document ends with its EOS
        counts = np.diff(np.searchsorted(eos, offsets))  # EOS tokens within each document
        self.exact &= not self.open_tail and bool((lengths > 0).all()) and bool((counts == closed).all()) \
            and bool(closed[:-1].all())
        self.open_tail = not closed[-1]

    def finish(self) -> None:
        """Close the file being written; one that got no token is refused (its re-ingest would be)."""
        if self.out is not None and not self.tokens:
            raise UserError(f"{self.version.address}: the documents of {self.names[self.name]!r} hold no token; "
                            "an empty token file is not written")
        self._close()

    def _close(self) -> None:
        if self.metadata is not None:
            self.metadata.close()
            self.meta_out.close()
        if self.out is not None:
            self.out.close()
        self.out = self.metadata = self.meta_out = None

    def remove(self) -> None:
        """After a refusal: the files written so far, so that no partial export is left to read."""
        try:
            self._close()
        finally:
            for url in self.files:
                self.fs.rm(url)


def _export_name(value: str, suffix: str, version: DatasetVersion, row: int) -> str:
    """The export's name for the token file the rows call `value`: the same relative path, its
    ending made `suffix`; refused when it could name a file elsewhere, or one a re-ingest skips."""
    where = f"file name {value!r} of {version.address}:{row}"
    check_relative(value, where)
    if any(p.startswith((".", "_")) for p in value.split("/")):
        raise UserError(f"{where}: a re-ingest would skip a name starting with '.' or '_'")
    head, _, last = value.rpartition("/")
    stem = last if last.endswith(suffix) or "." not in last else last.rsplit(".", 1)[0]
    return f"{head}/{stem}{'' if stem.endswith(suffix) else suffix}".lstrip("/")
