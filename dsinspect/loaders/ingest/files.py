"""Folders of files (kind `files`: image and video clips as they lie on disk): one row per file.

Columns: `name` (the file's path relative to the folder, `/`-separated; for a glob, relative to its
directory before the first wildcard; for one file, its base name) and `data` (its bytes, exactly).
Files are listed as for every kind — a directory recursively, a glob, or one file — sorted by path,
except that only dot-names are skipped (`_`-names stay: cameras write `_DSC0001.JPG`). A part is a
run of consecutive files, at most `part_files` (option, default 4,096) or `part_bytes` (default
256 MiB; a bigger file is a part of its own); it lists its files in `Part.options` and its stamp
hashes theirs, so parts depend only on the listing (never on the engine) and a rewritten file
changes the job id. The role of `data` comes from the magic bytes of its first values (image,
video, else bytes), except that extensions naming both images and videos make it bytes.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Any, Iterator, Mapping

import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.ingest.infer import role_for_extension
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_BYTES, BATCH_ROWS, SourceFile, is_glob, list_files, read_bytes
from dsinspect.loaders.store.storage import url_to_fs

__all__ = ["FilesSource", "NAME", "DATA", "PART_FILES", "PART_BYTES"]

NAME, DATA = "name", "data"
PART_FILES = 4096
PART_BYTES = 256 << 20
_SCHEMA = pa.schema([pa.field(NAME, pa.string(), False), pa.field(DATA, pa.binary(), False)])


class FilesSource:
    def __init__(self, spec: SourceSpec):
        self.spec = spec
        self.part_files = int(spec.options.get("part_files", PART_FILES))
        self.part_bytes = int(spec.options.get("part_bytes", PART_BYTES))

    @cached_property
    def files(self) -> list[SourceFile]:
        return list_files(self.spec.url, what="files", skip=(".",))

    @cached_property
    def _prefix(self) -> str:
        return root_prefix(self.spec.url)

    def parts(self) -> list[Part]:
        return [_part(i, run, self._prefix) for i, run in enumerate(runs(self.files, self.part_files, self.part_bytes))]

    def schema(self) -> pa.Schema:
        return _SCHEMA

    def hints(self) -> Mapping[str, Any]:
        media = {role_for_extension(f.url.rsplit("/", 1)[-1].rsplit(".", 1)[-1]) for f in self.files
                 if "." in f.url.rsplit("/", 1)[-1]}
        roles = {NAME: Role.SCALAR.value}
        if {Role.IMAGE, Role.VIDEO} <= media:  # a mixed folder: no one viewer fits every row
            roles[DATA] = Role.BYTES.value
        return {"roles": roles}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        prefix = part.options["root"]
        names: list[str] = []
        values: list[bytes] = []
        size = 0
        for name, listed in part.options["files"]:
            url = prefix + name
            data = read_bytes(url)
            if len(data) != listed:
                raise UserError(f"{url}: {len(data)} bytes, listed with {listed}: the file changed during the "
                                "ingest; run it again")
            names.append(name)
            values.append(data)
            size += len(data)
            if len(names) >= BATCH_ROWS or size >= BATCH_BYTES:
                yield pa.RecordBatch.from_arrays([pa.array(names, pa.string()), pa.array(values, pa.binary())],
                                                 schema=_SCHEMA)
                names, values, size = [], [], 0
        if names:
            yield pa.RecordBatch.from_arrays([pa.array(names, pa.string()), pa.array(values, pa.binary())],
                                             schema=_SCHEMA)


def root_prefix(url: str) -> str:
    """The URL prefix names are relative to, ending in `/`: the directory `url` names, a glob's
    directory before its first wildcard, or one file's directory."""
    fs, path = url_to_fs(url)
    path = path.rstrip("/")
    try:
        if is_glob(url):
            root = path[:min(path.index(c) for c in "*?[" if c in path)].rsplit("/", 1)[0]
        elif fs.isdir(path):
            root = path
        else:
            root = path.rsplit("/", 1)[0] if "/" in path else ""
    except (OSError, ValueError) as e:
        raise UserError(f"cannot list {url}: {e}") from None
    return fs.unstrip_protocol(root).rstrip("/") + "/"


def runs(files: list[SourceFile], max_files: int, max_bytes: int) -> list[list[SourceFile]]:
    """`files` cut, in order, into runs of at most `max_files` files and `max_bytes` bytes (a file
    bigger than `max_bytes` runs alone)."""
    out: list[list[SourceFile]] = []
    run: list[SourceFile] = []
    size = 0
    for f in files:
        if run and (len(run) >= max_files or size + f.size > max_bytes):
            out.append(run)
            run, size = [], 0
        run.append(f)
        size += f.size
    if run:
        out.append(run)
    return out


def _part(index: int, run: list[SourceFile], prefix: str) -> Part:
    files = []
    for f in run:
        if not f.url.startswith(prefix):  # list_files and root_prefix spell URLs alike; a mismatch is our bug
            raise UserError(f"{f.url}: not under {prefix}")
        files.append([f.url[len(prefix):], f.size])
    stamps = hashlib.sha256("\n".join(f"{name}\t{size}\t{f.stamp}" for (name, size), f in zip(files, run))
                            .encode()).hexdigest()[:32]
    return Part(index, run[0].url, sum(f.size for f in run), {"root": prefix, "files": files}, stamps)
