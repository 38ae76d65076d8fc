"""datatrove's tokenized files (`DocumentTokenizer`, `DocumentTokenizerMerger`: `TokenizedFile`), read
without the package: one row per document of each `.ds` file, plus its loss mask when there is one.

Per `NAME.ds` (datatrove/pipeline/tokens/tokenizer.py):
- `NAME.ds`: the documents' tokens end to end, little-endian, 2 bytes each (uint16) or 4 (uint32,
  when the tokenizer's vocabulary passes 65,536), nothing else;
- `NAME.ds.index`: one little-endian uint64 per document, where it ends, in tokens (no count, no
  leading 0): required, as nothing else marks where a document ends;
- `NAME.ds.loss` (`save_loss_metadata`): one byte per token, 1 where the loss counts, 0 where not;
  kept as the row's `loss_mask` (list<bool>, role array: as uint8 it would pass for token ids);
- `NAME.ds.metadata` (on by default): `TOKENIZER|TOKEN_SIZE`, then the token count.

datatrove's own reader (`DatatroveFolderDataset`) is told the token size; here it comes from the
files: the `.ds.metadata` when there is one, else the `.ds` bytes over the tokens the index ends at;
both must agree, and every file of a source must have the same size (one token type per version).
The index is checked whole (never back, no end past the `.ds`, the last at its last token) while the
parts are listed, before any part converts, in chunks (bounded memory); a part is a range of whole
documents of one file (at most PART_BYTES of tokens and PART_DOCUMENTS documents) and re-reads only
its slice of the index.
Under `shuffle_chunk_size` datatrove cuts documents at its chunk ends and its index marks those
cuts too: a row is then what the index calls a document, a piece of one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.ingest.files import root_prefix
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import SourceFile, is_glob, list_files, open_file, read_bytes
from dsinspect.loaders.ingest.token_streams import TOKEN_TYPES, document_batches, document_schema
from dsinspect.loaders.store.storage import url_to_fs

__all__ = ["DatatroveSource", "LOSS_MASK", "PART_BYTES", "PART_DOCUMENTS"]

PART_BYTES = 64 << 20  # a part holds at most this many bytes of tokens (as Megatron's parts) ...
PART_DOCUMENTS = 1 << 20  # ... and this many documents (its slice of the index: 8 MiB)
_CHUNK = 1 << 20  # index entries read and checked at once while the parts are listed
_TOKEN_TYPES = {2: TOKEN_TYPES["uint16"], 4: TOKEN_TYPES["uint32"]}  # datatrove's token sizes, as its reader reads them
_SIDECARS = (".ds.index", ".ds.loss", ".ds.metadata")
_METADATA_BYTES = 1 << 16  # a .ds.metadata is three short lines: a larger one is not datatrove's
LOSS_MASK = "loss_mask"


@dataclass(frozen=True)
class _TokenFile:
    """One `.ds` and what lies beside it."""

    tokens: SourceFile
    index: SourceFile
    loss: SourceFile | None
    metadata: SourceFile | None

    @property
    def stamp(self) -> str:
        """Changes when any of the file's pieces changes, so a rewritten index is read again too."""
        pieces = [self.tokens, self.index, self.loss, self.metadata]
        return hashlib.sha256(repr([(f.size, f.stamp) if f else None for f in pieces]).encode()).hexdigest()[:32]


class DatatroveSource:
    def __init__(self, spec: SourceSpec):
        self.spec = spec

    @cached_property
    def _url(self) -> str:
        """The source URL, a sidecar (`.ds.index`, `.ds.loss`) standing for its `.ds`."""
        url = self.spec.url.rstrip("/")
        for suffix in (".ds.index", ".ds.loss"):
            if url.endswith(suffix) and not is_glob(url):
                return url[:-len(suffix) + len(".ds")]
        return url

    @cached_property
    def _files(self) -> list[_TokenFile]:
        found = list_files(self._url, (".ds",), "datatrove .ds files")
        beside = _beside(self._url, found)
        files = []
        for f in found:
            index = beside.get(f.url + ".index")
            if index is None:
                raise UserError(f"{f.url}: no {f.url.rsplit('/', 1)[-1]}.index beside it: datatrove's index of "
                                "where each document ends is needed (the tokenizer's save_index)")
            files.append(_TokenFile(f, index, beside.get(f.url + ".loss"), beside.get(f.url + ".metadata")))
        return files

    @cached_property
    def _layout(self) -> tuple[np.dtype, bool, list[list[tuple[int, int, int]]]]:
        """(the token type, whether rows carry a loss mask, each file's document ranges [a, b) with
        their token bytes), every file's index read and checked."""
        sizes: dict[int, str] = {}
        ranges = []
        for f in self._files:
            size, file_ranges = _check_file(f)
            if size is not None:
                sizes.setdefault(size, f.tokens.url)
            ranges.append(file_ranges)
        if len(sizes) > 1:
            (a, url_a), (b, url_b) = sorted(sizes.items())
            raise UserError(f"{url_a} holds {a}-byte tokens, {url_b} {b}-byte ones: ingest them separately")
        with_loss = [f.loss is not None for f in self._files]
        if any(with_loss) and not all(with_loss):
            lacking = self._files[with_loss.index(False)].tokens.url
            raise UserError(f"{lacking}: no .ds.loss beside it, where other files of the source have one")
        return _TOKEN_TYPES[next(iter(sizes), 2)], all(with_loss), ranges

    def parts(self) -> list[Part]:
        dtype, with_loss, ranges = self._layout
        root = root_prefix(self._url)
        parts = []
        for f, file_ranges in zip(self._files, ranges):
            options = {"name": f.tokens.url[len(root):], "dtype": dtype.name,
                       "tokens": f.tokens.size // dtype.itemsize, "loss": with_loss}
            for a, b, size in file_ranges:
                parts.append(Part(len(parts), f.tokens.url, size, {**options, "documents": [a, b]}, f.stamp))
        return parts

    def schema(self) -> pa.Schema:
        dtype, with_loss, _ = self._layout
        return _schema(dtype, with_loss)

    def hints(self) -> Mapping[str, Any]:
        return {"roles": {"tokens": Role.TOKENS.value, LOSS_MASK: Role.ARRAY.value}}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        dtype = TOKEN_TYPES[part.options["dtype"]]
        first, stop = part.options["documents"]
        offsets = _part_offsets(part.url + ".index", first, stop, part.options["tokens"])
        batches = document_batches(part.url, part.options["name"], dtype, offsets, first)
        if not part.options["loss"]:
            yield from batches
            return
        schema = _schema(dtype, True)
        with open_file(part.url + ".loss") as loss:
            for batch in batches:
                start = int(offsets[batch.column("document")[0].as_py() - first])  # the batch's first token
                yield pa.RecordBatch.from_arrays([*batch.columns, _loss_mask(loss, batch, start, part.url + ".loss")],
                                                 schema=schema)


def _schema(dtype: np.dtype, with_loss: bool) -> pa.Schema:
    schema = document_schema(dtype)
    return schema.append(pa.field(LOSS_MASK, pa.list_(pa.bool_()), nullable=False)) if with_loss else schema


def _beside(url: str, found: list[SourceFile]) -> dict[str, SourceFile]:
    """The index, loss and metadata files beside the `.ds` files `found`, by URL: one listing of the
    source's directory, or of each directory a glob or a single file's name lies in (each listing
    holds the `.ds` files themselves, so it is never empty)."""
    fs, path = url_to_fs(url)
    if not is_glob(url) and fs.isdir(path):
        listed = list_files(url)
    else:
        listed = [g for parent in sorted({f.url.rsplit("/", 1)[0] for f in found}) for g in list_files(parent + "/*")]
    return {g.url: g for g in listed if g.url.endswith(_SIDECARS)}


def _check_file(f: _TokenFile) -> tuple[int | None, list[tuple[int, int, int]]]:
    """(the file's token size: None when it holds no token and says none, its parts' document
    ranges), its index checked against every size it has to fit."""
    if f.index.size % 8:
        raise UserError(f"{f.index.url}: {f.index.size:,} bytes, not whole uint64 document ends (truncated?)")
    last = 0
    if f.index.size:
        with open_file(f.index.url) as fh:
            fh.seek(f.index.size - 8)
            last = int(np.frombuffer(fh.read(8).ljust(8, b"\0"), "<u8")[0])
    size = _token_size(f, last)
    tokens = f.tokens.size // (size or 2)
    if f.loss is not None and f.loss.size != tokens:
        raise UserError(f"{f.loss.url}: {f.loss.size:,} bytes, one per token; {f.tokens.url} holds {tokens:,} tokens")
    return size, _document_ranges(f.index, tokens, size or 2)


def _token_size(f: _TokenFile, last_end: int) -> int | None:
    """The file's token size in bytes: the `.ds.metadata`'s (`NAME|SIZE` on its first line, the token
    count on its second, both checked against the `.ds`), else the `.ds`'s bytes over the tokens its
    index ends at; None for a file without tokens and without metadata."""
    said = _metadata_size(f) if f.metadata is not None else None
    if said is not None:
        size, count = said
        if f.tokens.size != count * size:
            raise UserError(f"{f.tokens.url}: {f.tokens.size:,} bytes; its .ds.metadata says {count:,} tokens of "
                            f"{size} bytes ({count * size:,} bytes)")
        return size
    if last_end == 0:
        if f.tokens.size:
            raise UserError(f"{f.index.url}: its documents end at token 0; {f.tokens.url} holds "
                            f"{f.tokens.size:,} bytes")
        return None
    if f.tokens.size % last_end or f.tokens.size // last_end not in _TOKEN_TYPES:
        raise UserError(f"{f.tokens.url}: {f.tokens.size:,} bytes for the {last_end:,} tokens its .ds.index "
                        f"ends at: {f.tokens.size / last_end:g} bytes a token, where datatrove writes 2 or 4")
    return f.tokens.size // last_end


def _metadata_size(f: _TokenFile) -> tuple[int, int]:
    """(token size, token count) from a `.ds.metadata`: `TOKENIZER|SIZE`, then the count."""
    where = f.metadata.url
    if f.metadata.size > _METADATA_BYTES:
        raise UserError(f"{where}: {f.metadata.size:,} bytes, not datatrove's metadata (a few short lines)")
    lines = read_bytes(where).decode("utf-8", "replace").splitlines()
    size = lines[0].rsplit("|", 1)[-1] if lines and "|" in lines[0] else None
    if size is None or not size.isascii() or not size.isdigit() or int(size) not in _TOKEN_TYPES:
        raise UserError(f"{where}: token size {size!r} (line 1, after the last '|'): datatrove writes 2 or 4")
    count = lines[1].strip() if len(lines) > 1 else ""
    if not count.isascii() or not count.isdigit():
        raise UserError(f"{where}: token count {count!r} (line 2) is not a whole number")
    return int(size), int(count)


def _document_ranges(index: SourceFile, tokens: int, item: int) -> list[tuple[int, int, int]]:
    """The parts of a file: documents [a, b) of at most PART_BYTES of tokens and PART_DOCUMENTS
    documents (a longer document alone), with their bytes; one empty range for a file without
    documents. The index is read in chunks of _CHUNK entries and checked on the way: every end within
    the file's `tokens`, none before the one before it, the last at `tokens`."""
    count, part_tokens = index.size // 8, PART_BYTES // item
    ranges = []
    a = start = end = 0  # the open range's first document and first token; where the last document read ends
    with open_file(index.url) as f:
        for k in range(0, count, _CHUNK):
            data = f.read(8 * min(_CHUNK, count - k))
            if len(data) != 8 * min(_CHUNK, count - k):
                raise UserError(f"{index.url}: ends at byte {8 * k + len(data):,} of {index.size:,} "
                                "(changed while read?)")
            ends = np.frombuffer(data, "<u8")
            if (ends > tokens).any():
                i = int(np.flatnonzero(ends > tokens)[0])
                raise UserError(f"{index.url}: document {k + i:,} ends at token {int(ends[i]):,}, past the "
                                f"{tokens:,} tokens of its .ds")
            ends = ends.astype(np.int64)
            back = np.flatnonzero(np.diff(ends, prepend=end) < 0)
            if len(back):
                i = int(back[0])
                before = int(ends[i - 1]) if i else end
                raise UserError(f"{index.url}: document {k + i:,} ends at token {int(ends[i]):,}, before the one "
                                f"before it ({before:,}): document ends never decrease")
            while True:  # cut before the first document past a part's bounds
                stop = min(k + int(np.searchsorted(ends, start + part_tokens, side="right")), a + PART_DOCUMENTS)
                if stop >= k + len(ends) and a + PART_DOCUMENTS > k + len(ends):
                    break  # the open range goes on into the next chunk
                stop = max(stop, a + 1)
                stop_token = int(ends[stop - 1 - k]) if stop > k else end
                ranges.append((a, stop, (stop_token - start) * item))
                a, start = stop, stop_token
                if a == k + len(ends):
                    break
            end = int(ends[-1])
    if end != tokens:
        raise UserError(f"{index.url}: the last document ends at token {end:,}; its .ds holds {tokens:,} tokens")
    if a < count or not count:
        ranges.append((a, count, (tokens - start) * item))
    return ranges


def _part_offsets(index: str, first: int, stop: int, tokens: int) -> np.ndarray:
    """Where documents first..stop-1 start, and the last one's end, from their entries of `index`
    (one ranged read), checked again: the whole index was checked when the parts were listed."""
    lead = 1 if first else 0  # the document before the range ends where the range starts
    with open_file(index) as f:
        f.seek(8 * (first - lead))
        data = f.read(8 * (stop - first + lead))
    if len(data) != 8 * (stop - first + lead):
        raise UserError(f"{index}: ends before document {stop - 1:,}'s end (changed since the ingest listed it?)")
    ends = np.frombuffer(data, "<u8").astype(np.int64)  # each end was checked to be at most the tokens
    offsets = ends if lead else np.concatenate([[0], ends])
    if len(offsets) and ((np.diff(offsets) < 0).any() or offsets[0] < 0 or offsets[-1] > tokens):
        raise UserError(f"{index}: documents {first:,}..{stop - 1:,} no longer run forward within the file's "
                        f"{tokens:,} tokens (changed since the ingest listed it?)")
    return offsets


def _loss_mask(f, batch: pa.RecordBatch, start: int, url: str) -> pa.Array:
    """The `.ds.loss` bytes of the batch's tokens (the first at token `start`), cut as its token lists
    are: 0 → False, 1 → True."""
    tokens = batch.column("tokens")
    count = len(tokens.values)
    f.seek(start)
    data = np.frombuffer(f.read(count), np.uint8)
    if len(data) != count:
        raise UserError(f"{url}: ends at byte {start + len(data):,}; the tokens need it to reach {start + count:,}")
    if (data > 1).any():
        at = int(np.flatnonzero(data > 1)[0])
        raise UserError(f"{url}: byte {start + at:,} is {int(data[at])}, where a loss mask holds 0 or 1")
    return pa.ListArray.from_arrays(tokens.offsets, pa.array(data.view(np.bool_)))
