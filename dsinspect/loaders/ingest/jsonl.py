"""JSON Lines sources (`.jsonl`, `.ndjson`, `.json`, optionally `.gz`/`.zst`/`.bz2`/`.xz` compressed).

One JSON object per line, streamed a bounded batch at a time, so a file larger than memory converts.
The schema is inferred from the first `infer_lines` lines (option, default 1000) across the files in
order: JSON null → null (any later type fits), true/false → bool, integers → int64, numbers with a
fraction → float64 (int and float in one field → float64; integers past 2**53 then lose precision),
strings → string, arrays → list of the items' common type, objects → struct with keys in order of
first appearance. Every field is nullable, so a missing key is a null. A later line that does not fit
that schema (a new key, another type) is a UserError naming file and line. A `.json` file that holds
one JSON array of objects instead of lines is read whole.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any, Iterator, Mapping

import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_BYTES, BATCH_ROWS, list_files, open_file

__all__ = ["JsonlSource", "LineSplitter", "INFER_LINES", "SUFFIXES", "value_type", "unify"]

INFER_LINES = 1000
_COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
_PLAIN = (".jsonl", ".ndjson", ".json")
SUFFIXES = _PLAIN + tuple(p + c for p in _PLAIN for c in _COMPRESSION)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class Mismatch(Exception):
    """Two JSON values whose types have no common Arrow type (`path` names the nested field)."""

    def __init__(self, path: str, a: pa.DataType, b: pa.DataType):
        super().__init__(path)
        self.path, self.a, self.b = path, a, b


def kind_name(t: pa.DataType) -> str:
    names = {pa.int64(): "int", pa.float64(): "float", pa.string(): "str", pa.bool_(): "bool", pa.null(): "null"}
    if t in names:
        return names[t]
    return "array" if pa.types.is_list(t) else "object" if pa.types.is_struct(t) else str(t)


def value_type(v: Any, path: str) -> pa.DataType:
    """The Arrow type of one parsed JSON value."""
    if v is None:
        return pa.null()
    if isinstance(v, bool):
        return pa.bool_()
    if isinstance(v, int):
        if not _INT64[0] <= v <= _INT64[1]:
            raise UserError(f"integer {v} in field {path!r} does not fit in 64 bits")
        return pa.int64()
    if isinstance(v, float):
        return pa.float64()
    if isinstance(v, str):
        return pa.string()
    if isinstance(v, list):
        return pa.list_(_items_type(v, path + "[]"))
    if isinstance(v, dict):
        return pa.struct([pa.field(k, value_type(x, f"{path}.{k}")) for k, x in v.items()])
    raise UserError(f"unexpected JSON value of type {type(v).__name__} in field {path!r}")


def _items_type(items: list, path: str) -> pa.DataType:
    kinds = set(map(type, items))
    if kinds == {int}:  # the common case (token ids): no per-item recursion
        if items and not (_INT64[0] <= min(items) and max(items) <= _INT64[1]):
            raise UserError(f"an integer in field {path!r} does not fit in 64 bits")
        return pa.int64()
    t = pa.null()
    for x in items:
        t = unify(t, value_type(x, path), path)
    return t


def unify(a: pa.DataType, b: pa.DataType, path: str) -> pa.DataType:
    """The narrowest type holding values of both `a` and `b`; Mismatch when there is none."""
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if {a, b} == {pa.int64(), pa.float64()}:
        return pa.float64()
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(unify(a.value_type, b.value_type, path + "[]"))
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields = {f.name: f.type for f in a}
        for f in b:
            fields[f.name] = unify(fields[f.name], f.type, f"{path}.{f.name}") if f.name in fields else f.type
        return pa.struct([pa.field(k, t) for k, t in fields.items()])
    raise Mismatch(path, a, b)


class JsonlSource:
    def __init__(self, spec: SourceSpec):
        self.spec = spec
        self.infer_lines = int(spec.options.get("infer_lines", INFER_LINES))

    @cached_property
    def files(self):
        return list_files(self.spec.url, SUFFIXES, "JSON Lines files")

    def parts(self) -> list[Part]:
        return [Part(i, f.url, f.size, stamp=f.stamp) for i, f in enumerate(self.files)]

    def hints(self) -> Mapping[str, Any]:
        return {}

    def schema(self) -> pa.Schema:
        return self._schema

    @cached_property
    def _schema(self) -> pa.Schema:
        fields: dict[str, pa.DataType] = {}
        first_seen: dict[str, str] = {}  # field path -> where its current type was first seen
        seen = 0
        for f in self.files:
            for where, row in _rows(f.url):
                _merge(fields, first_seen, row, where)
                seen += 1
                if seen >= self.infer_lines:
                    return pa.schema([pa.field(k, t) for k, t in fields.items()])
        if not seen:
            raise UserError(f"{self.spec.url}: no JSON lines found")
        return pa.schema([pa.field(k, t) for k, t in fields.items()])

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        schema = self._schema
        types = dict(zip(schema.names, schema.types))
        rows: list[dict] = []
        size = 0
        for where, row in _rows(part.url):
            _check(types, row, where, self.infer_lines)
            rows.append(row)
            del row  # a long line's object lives only in `rows`, freed once it is a batch
            size += where.line_bytes
            if len(rows) >= BATCH_ROWS or size >= BATCH_BYTES:
                yield _take_batch(rows, schema)
                size = 0
        if rows:
            yield _take_batch(rows, schema)


def _take_batch(rows: list[dict], schema: pa.Schema) -> pa.RecordBatch:
    """The rows as a batch, emptying `rows`: while the consumer works on the batch, the Python
    objects are gone (with a line of hundreds of MB, they would double the memory held)."""
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    rows.clear()
    return batch


class _Where(str):
    """'file:line', carrying the line's byte length for batch sizing."""

    line_bytes: int = 0


def _merge(fields: dict, first_seen: dict, row: dict, where: str) -> None:
    for k, v in row.items():
        t = value_type(v, k)
        old = fields.get(k, pa.null())
        try:
            fields[k] = unify(old, t, k)
        except Mismatch as m:
            raise UserError(f"mixed types in field {m.path!r}: {kind_name(m.a)} at {first_seen[k]}, "
                            f"{kind_name(m.b)} at {where}") from None
        if pa.types.is_null(old) and not pa.types.is_null(t):
            first_seen[k] = str(where)


def _check(types: dict, row: dict, where: str, infer_lines: int) -> None:
    for k, v in row.items():
        if k not in types:
            raise UserError(f"{where}: field {k!r} is not in the schema inferred from the first {infer_lines} "
                            "lines (raise the infer_lines option to read more)")
        t = value_type(v, k)
        try:
            fits = unify(types[k], t, k) == types[k]
        except Mismatch as m:
            raise UserError(f"mixed types in field {m.path!r}: {kind_name(m.a)} in the first {infer_lines} lines, "
                            f"{kind_name(m.b)} at {where}") from None
        if not fits:
            raise UserError(f"{where}: field {k!r} holds {t}, which the schema inferred from the first "
                            f"{infer_lines} lines ({types[k]}) cannot hold (raise the infer_lines option)")


def _compression(url: str) -> str | None:
    for suffix, name in _COMPRESSION.items():
        if url.endswith(suffix):
            return name
    return None


def _rows(url: str) -> Iterator[tuple[_Where, dict]]:
    """(where, object) for every non-blank line of `url`, streamed. Neither the line nor its object
    stays referenced here while the consumer holds them (see `_take_batch`)."""
    with open_file(url, _compression(url)) as f:
        if url.endswith(".json") and _starts_with_array(f):
            yield from _array_rows(url, f)
            return
        for number, line in enumerate(_lines(f, url), 1):
            if not line.strip():
                continue
            where = _Where(f"{url}:{number}")
            where.line_bytes = len(line)
            parsed = [_parse(line, where)]
            del line
            yield where, parsed.pop()


def _parse(line: bytes, where: _Where) -> dict:
    try:
        row = json.loads(line)
    except ValueError as e:
        raise UserError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
    return row


def _lines(f, url: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    """Lines split from fixed-size reads (some decompressors cannot iterate lines themselves)."""
    splitter = LineSplitter()
    while True:
        try:
            data = f.read(chunk)
        except (OSError, EOFError, ValueError) as e:  # truncated or corrupt compressed data
            raise UserError(f"cannot read {url}: {e}") from None
        if not data:
            break
        lines = splitter.feed(data)
        lines.reverse()
        while lines:  # popped, so a yielded line is not kept alive here
            yield lines.pop()
    last = splitter.end()
    if last:
        yield last


class LineSplitter:
    """Splits a byte stream fed in chunks into lines, in time linear in the stream: each chunk is
    searched once, and a line longer than a chunk is kept as a list of pieces joined once at its
    end (re-joining and re-splitting the pending text on every read was quadratic in a long line).
    `scanned` counts the bytes searched for newlines."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # the start of a line not yet ended
        self.scanned = 0

    def feed(self, data: bytes) -> list[bytes]:
        self.scanned += len(data)
        end = data.rfind(b"\n")
        if end < 0:
            self._pending.append(data)
            return []
        lines = data[:end].split(b"\n")
        if self._pending:
            lines[0] = b"".join([*self._pending, lines[0]])
        self._pending = [data[end + 1:]] if end + 1 < len(data) else []
        return lines

    def end(self) -> bytes:
        """What follows the last newline (empty when the stream ended with one)."""
        rest, self._pending = b"".join(self._pending), []
        return rest


def _starts_with_array(f) -> bool:
    head = f.read(64).lstrip()
    f.seek(0)
    return head.startswith(b"[")


def _array_rows(url: str, f) -> Iterator[tuple[_Where, dict]]:
    try:
        rows = json.loads(f.read())
    except ValueError as e:
        raise UserError(f"{url}: not valid JSON ({e})") from None
    for i, row in enumerate(rows):
        where = _Where(f"{url}:[{i}]")
        where.line_bytes = 0
        if not isinstance(row, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
        yield where, row
