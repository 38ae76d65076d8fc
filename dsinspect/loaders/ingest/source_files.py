"""The files behind a source URL (one file, a directory or a glob), in a sorted, deterministic order.

Shared by every ingest reader, so "which files, in which order" means the same thing for all kinds.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import IO, Iterable, Iterator

from dsinspect.errors import UserError
from dsinspect.loaders.storage import url_to_fs

__all__ = ["SourceFile", "is_glob", "list_files", "open_file", "read_bytes", "BATCH_ROWS", "BATCH_BYTES"]

BATCH_ROWS = 1024  # a batch holds at most this many rows ...
BATCH_BYTES = 16 << 20  # ... or about this many bytes of values, whichever comes first

_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class SourceFile:
    url: str  # full URL with protocol, so another process can reopen it
    size: int


def is_glob(url: str) -> bool:
    return any(c in url for c in _GLOB_CHARS)


def list_files(url: str, suffixes: Iterable[str] | None = None, what: str = "source files") -> list[SourceFile]:
    """The files `url` names, sorted by path: the file itself, a directory's files (recursively,
    hidden and `_`-prefixed names skipped) or a glob's matches; only names ending in `suffixes`
    unless `url` names one file. No match is a UserError naming `url`."""
    fs, path = url_to_fs(url)
    ends = tuple(suffixes or ())
    try:
        if is_glob(url):
            paths = [p for p in fs.glob(path) if fs.isfile(p)]
        elif fs.isdir(path):
            paths = [p for p in fs.find(path) if not _hidden(p[len(path):])]
        elif fs.isfile(path):
            return [SourceFile(fs.unstrip_protocol(path), int(fs.size(path)))]
        else:
            raise UserError(f"{url}: no such file or directory")
    except (OSError, ValueError) as e:
        raise UserError(f"cannot list {url}: {e}") from None
    paths = sorted(p for p in paths if not ends or p.endswith(ends))
    if not paths:
        wanted = f" ending in {', '.join(ends)}" if ends else ""
        raise UserError(f"{url}: no {what}{wanted} found")
    return [SourceFile(fs.unstrip_protocol(p), int(fs.size(p))) for p in paths]


def _hidden(relative: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


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
