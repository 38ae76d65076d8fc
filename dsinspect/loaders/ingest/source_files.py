"""The files behind a source URL (one file, a directory or a glob), in a sorted, deterministic order.

Shared by every ingest reader, so "which files, in which order" means the same thing for all kinds.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import IO, Iterable, Iterator

from dsinspect.errors import UserError
from dsinspect.loaders.store.storage import url_to_fs

__all__ = ["SourceFile", "is_glob", "list_files", "open_file", "read_bytes", "BATCH_ROWS", "BATCH_BYTES"]

BATCH_ROWS = 1024  # a batch holds at most this many rows ...
BATCH_BYTES = 16 << 20  # ... or about this many bytes of values, whichever comes first

_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class SourceFile:
    url: str  # full URL with protocol, so another process can reopen it
    size: int
    stamp: str = ""  # the store's change marker (ETag, generation, mtime): a rewrite changes the job id

# what each store reports as its change marker, strongest first (s3/http, gcs, azure, local/sftp)
_STAMP_KEYS = ("ETag", "etag", "generation", "md5Hash", "content_md5", "mtime", "LastModified", "last_modified",
               "updated", "created")


def is_glob(url: str) -> bool:
    return any(c in url for c in _GLOB_CHARS)


def list_files(url: str, suffixes: Iterable[str] | None = None, what: str = "source files",
               skip: tuple[str, ...] = (".", "_")) -> list[SourceFile]:
    """The files `url` names, sorted by path: the file itself, a directory's files (recursively,
    names starting with `skip` — hidden and `_`-prefixed — left out) or a glob's matches; only names
    ending in `suffixes` unless `url` names one file. No match is a UserError naming `url`."""
    fs, path = url_to_fs(url)
    ends = tuple(suffixes or ())
    try:
        if is_glob(url):
            infos = {p: i for p, i in fs.glob(path, detail=True).items() if i.get("type") == "file"}
        elif fs.isdir(path):
            infos = {p: i for p, i in fs.find(path, detail=True).items() if not _hidden(p[len(path):], skip)}
        elif fs.isfile(path):
            return [_source_file(fs, path, fs.info(path))]
        else:
            raise UserError(f"{url}: no such file or directory")
    except (OSError, ValueError) as e:
        raise UserError(f"cannot list {url}: {e}") from None
    paths = sorted(p for p in infos if not ends or p.endswith(ends))
    if not paths:
        wanted = f" ending in {', '.join(ends)}" if ends else ""
        raise UserError(f"{url}: no {what}{wanted} found")
    return [_source_file(fs, p, infos[p]) for p in paths]


def _source_file(fs, path: str, info: dict) -> SourceFile:
    stamp = next((str(info[k]) for k in _STAMP_KEYS if info.get(k) not in (None, "")), "")
    return SourceFile(fs.unstrip_protocol(path), int(info["size"]), stamp)


def _hidden(relative: str, skip: tuple[str, ...]) -> bool:
    return any(part.startswith(skip) for part in relative.split("/") if part)


@contextlib.contextmanager
def open_file(url: str, compression: str | None = None) -> Iterator[IO[bytes]]:
    """`url` opened for binary reading (decompressed when asked); an unreadable file is one line."""
    fs, path = url_to_fs(url)
    try:
        f = fs.open(path, "rb", compression=compression)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {url}: {e}") from None
    with f:
        yield f


def read_bytes(url: str) -> bytes:
    """A small file's whole content (indexes, JSON metadata); unreadable is one line naming it."""
    fs, path = url_to_fs(url)
    try:
        return fs.cat_file(path)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {url}: {e}") from None
