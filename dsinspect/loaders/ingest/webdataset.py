"""WebDataset tar shards (`.tar`, `.tar.gz`/`.tgz`): one row per sample, one column per extension.

Members are grouped into samples as webdataset does: the key is the member's directory plus its
basename up to the first dot, the extension the rest (`a/x.seg.png` → key `a/x`, field `seg.png`);
consecutive members with one key form a sample. Columns: `__key__` (string), then the extensions
of the first sample, sorted. Text extensions (`txt`, `text`, `transcript`, `caption`) and `json`
become UTF-8 strings (the stored bytes exactly), integer extensions (`cls`, `cls2`, `idx`, `index`,
`id`, `count`) int64 (only when the text is a plain integer, so it writes back the same), `npy`
NumPy arrays (never unpickled; see `format.npy`) in the layout `array_layouts` decides from every
sample's header (nested lists of their dtype, or the member's own bytes where dtypes or dimensions
differ: see `ndarrays`), all others binary (`npz` too). Every sample must have the same parts; a
missing or extra part is a UserError naming the tar file and the key. Tars are read as streams, one
member at a time; `array_layouts` reads only member headers and `.npy` headers where the file can seek.
"""

from __future__ import annotations

import re
import tarfile
from functools import cached_property
from typing import Any, Callable, Collection, Iterator, Mapping

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.npy import HEADER_BYTES, npy_header, read_npy
from dsinspect.loaders.ingest.infer import ndarray_role, role_for_extension
from dsinspect.loaders.ingest.ndarrays import NPY, check_layouts, check_like, layout, layout_of, layout_type, to_arrow
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_BYTES, BATCH_ROWS, list_files, open_file

__all__ = ["WebDatasetSource", "KEY", "split_member_name", "extension_type"]

KEY = "__key__"
_NAME = re.compile(r"^((?:.*/|)[^./]+)[.]([^/]*)$")  # webdataset's key/extension split
_TEXT = {"txt", "text", "transcript", "caption", "json"}
_INT = {"cls", "cls2", "idx", "index", "id", "count"}
_PLAIN_INT = re.compile(r"-?(0|[1-9][0-9]*)")


def split_member_name(name: str) -> tuple[str, str] | None:
    """(key, extension) of a tar member name, or None when it has no extension."""
    m = _NAME.match(name)
    return (m.group(1), m.group(2)) if m else None


def extension_type(ext: str) -> pa.DataType:
    """The type of an extension's column, `npy` aside (its type depends on the arrays)."""
    last = ext.lower().rsplit(".", 1)[-1]
    return pa.string() if last in _TEXT else pa.int64() if last in _INT else pa.binary()


def _is_npy(ext: str) -> bool:
    return ext.lower().rsplit(".", 1)[-1] == "npy"


class WebDatasetSource:
    def __init__(self, spec: SourceSpec):
        self.spec = spec

    @cached_property
    def files(self):
        return list_files(self.spec.url, (".tar", ".tar.gz", ".tgz"), "tar shards")

    def parts(self) -> list[Part]:
        return [Part(i, f.url, f.size, stamp=f.stamp) for i, f in enumerate(self.files)]

    @cached_property
    def _first(self) -> tuple[str, dict[str, bytes]]:
        first = self.files[0].url
        for key, members in _samples(first):
            return key, members
        raise UserError(f"{first}: no samples in the tar file")

    @cached_property
    def extensions(self) -> list[str]:
        return sorted(self._first[1])

    @cached_property
    def _schema(self) -> pa.Schema:
        fields = [pa.field(KEY, pa.string(), False)]
        for e in self.extensions:
            t = layout_type(self._arrays[e], self.spec.url) if _is_npy(e) else extension_type(e)
            fields.append(pa.field(e, t))
        return pa.schema(fields)

    @cached_property
    def _arrays(self) -> dict[str, str]:
        """Each `.npy` column's layout: pinned in the spec by the plan (workers never survey), else surveyed now."""
        pinned = self.spec.options.get("arrays")
        if pinned is None:
            return self.array_layouts(self.parts())
        return check_layouts(pinned, self.array_columns(), self.spec.url)

    def array_columns(self) -> list[str]:
        """The columns whose values carry their own dtype and shape (`.npy` members)."""
        return [e for e in self.extensions if _is_npy(e)]

    def array_layouts(self, parts: list[Part], raw: Collection[str] = ()) -> dict[str, str]:
        """Each `.npy` column's layout over every sample of `parts` (`raw` ones keep the member's bytes
        unread). Reads member headers and `.npy` headers only, and checks every sample's parts, so a
        source these refuse is refused before any part converts."""
        seen: dict[str, set] = {e: set() for e in self.array_columns() if e not in raw}
        if seen:
            wanted = set(self.extensions)
            for part in parts:
                for key, heads in _samples(part.url, lambda name: name.rsplit(".", 1)[-1].lower() == "npy"):
                    _check_parts(part.url, key, set(heads), wanted, self.files[0].url)
                    for e in seen:
                        h = npy_header(*heads[e], f"{part.url}: sample {key!r} part {e!r}")
                        seen[e].add((h.dtype.newbyteorder("=").name, len(h.shape)))
        return {**{e: NPY for e in self.array_columns() if e in raw}, **{e: layout_of(s) for e, s in seen.items()}}

    def schema(self) -> pa.Schema:
        return self._schema

    def hints(self) -> Mapping[str, Any]:
        roles = {e: r.value for e in self.extensions if (r := role_for_extension(e))}
        roles.update({f.name: ndarray_role(f.name[:-len(".npy")], f.type).value for f in self._schema
                      if _is_npy(f.name)})
        return {"roles": roles, "webdataset_extensions": {e: e for e in self.extensions}}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        wanted = set(self.extensions)
        rows: list[tuple[str, dict[str, bytes]]] = []
        size = 0
        for key, members in _samples(part.url):
            _check_parts(part.url, key, set(members), wanted, self.files[0].url)
            rows.append((key, members))
            size += sum(map(len, members.values()))
            if len(rows) >= BATCH_ROWS or size >= BATCH_BYTES:
                yield self._batch(rows, part.url)
                rows, size = [], 0
        if rows:
            yield self._batch(rows, part.url)

    def _batch(self, rows: list[tuple[str, dict[str, bytes]]], url: str) -> pa.RecordBatch:
        columns = [pa.array([key for key, _ in rows], pa.string())]
        for f in self._schema.remove(0):
            if _is_npy(f.name):
                columns.append(_npy_column(url, rows, f))
            else:
                columns.append(pa.array([_value(url, key, f.name, m[f.name]) for key, m in rows], f.type))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


def _check_parts(url: str, key: str, have: set, wanted: set, first_url: str) -> None:
    for ext in sorted(wanted - have):
        raise UserError(f"{url}: sample {key!r} has no {ext!r} part (other samples have "
                        f"{', '.join(sorted(wanted))})")
    for ext in sorted(have - wanted):
        raise UserError(f"{url}: sample {key!r} has a {ext!r} part that the first sample of {first_url} has not")


def _value(url: str, key: str, ext: str, data: bytes) -> Any:
    t = extension_type(ext)
    if t == pa.binary():
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{url}: sample {key!r} part {ext!r} is not UTF-8 text ({e})") from None
    if t == pa.string():
        return text
    if not _PLAIN_INT.fullmatch(text) or not -(1 << 63) <= int(text) < (1 << 63):
        raise UserError(f"{url}: sample {key!r} part {ext!r} should hold a plain 64-bit integer, got {text[:40]!r}")
    return int(text)


def _npy(url: str, key: str, ext: str, data: bytes) -> np.ndarray:
    """A `.npy` member's array (never unpickled), in native byte order; a UserError otherwise."""
    return read_npy(data, f"{url}: sample {key!r} part {ext!r}")


def _npy_column(url: str, rows: list[tuple[str, dict[str, bytes]]], f: pa.Field) -> pa.Array:
    if pa.types.is_binary(f.type):  # the members' own bytes (checked by the plan's survey, or raw)
        return pa.array([members[f.name] for _, members in rows], pa.binary())
    dtype, ndim = layout(f.type)
    arrays = []
    for key, members in rows:
        arrays.append(_npy(url, key, f.name, members[f.name]))
        check_like(arrays[-1], dtype, ndim, f"{url}: sample {key!r} part {f.name!r}")
    return to_arrow(arrays, f.type)


def _samples(url: str, head: Callable[[str], bool] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, {extension: bytes}) per sample, streaming the tar's members in order; with `head`, each
    value is (size, first bytes of the members `head` accepts by extension, else b"") instead."""
    key, members = None, {}
    for name, data in _members(url, head):
        split = split_member_name(name)
        if split is None:
            raise UserError(f"{url}: member {name!r} has no extension, so it belongs to no sample field")
        k, ext = split
        if k != key:
            if key is not None:
                yield key, members
            key, members = k, {}
        if ext in members:
            raise UserError(f"{url}: sample {k!r} has two {ext!r} parts")
        members[ext] = data
    if key is not None:
        yield key, members


def _members(url: str, head: Callable[[str], bool] | None) -> Iterator[tuple[str, Any]]:
    with open_file(url) as f:
        seek = head is not None and f.seekable()  # headers only: skip over member bodies
        try:
            with tarfile.open(fileobj=f, mode="r:*" if seek else "r|*") as tar:
                while (member := tar.next()) is not None:
                    tar.members = []  # tarfile lists every member it read: a tar may hold millions
                    if not member.isfile():
                        continue
                    if head is None:
                        yield member.name, tar.extractfile(member).read()
                    else:
                        wanted = head(member.name)
                        yield member.name, (tar.extractfile(member).read(HEADER_BYTES) if wanted else b"", member.size)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise UserError(f"cannot read {url} as a tar file: {e}") from None
