"""The one boundary to storage: fsspec URLs, path joins and atomic writes, for any filesystem."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dsinspect.errors import StorageError

__all__ = ["url_to_fs", "join", "is_local", "write_atomic", "publish_file", "spool_dir", "cache_dir",
           "write_errors", "locked"]


def cache_dir() -> Path:
    """$DSINSPECT_CACHE, else the user's cache directory (~/.cache/dsinspect)."""
    env = os.environ.get("DSINSPECT_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dsinspect"


def url_to_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and root path of `url` (a plain path is a local directory)."""
    fs, path = fsspec.core.url_to_fs(str(url))
    if is_local(fs):
        path = os.path.abspath(path)
    from dsinspect.loaders.faults import wrap_from_env  # debug: $DSINSPECT_INJECT_FAULTS (--inject-faults)
    return wrap_from_env(fs), path.rstrip("/") or "/"


def join(*parts: str) -> str:
    return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def write_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Write `data` so that readers see the old file or the new one, never a part. A failed write
    (disk full, permission denied, read-only) raises StorageError naming `path` and leaves no temp file."""
    with write_errors(fs, path):
        if not is_local(fs):
            fs.pipe_file(path, data)  # object stores publish a whole object at once
            return
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise


def publish_file(fs: fsspec.AbstractFileSystem, local_path: str, path: str) -> bool:
    """Move a finished local file to `path` unless that content-addressed path already exists.

    True when this call published it. The local file is gone afterwards either way. An existing
    local file gets a fresh mtime: it is about to be referenced again, which gc's grace period honours.
    """
    try:
        with write_errors(fs, path):
            if fs.exists(path):
                if is_local(fs):
                    os.utime(path)
                return False
            if is_local(fs):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.replace(local_path, path)
            else:
                fs.put_file(local_path, path)
            return True
    finally:
        _unlink_quietly(local_path)


def spool_dir(fs: fsspec.AbstractFileSystem, near: str) -> str:
    """Where to write a file before publishing it: beside its destination when local (so the final
    rename is atomic), else the system temp directory."""
    if is_local(fs):
        with write_errors(fs, near):
            os.makedirs(near, exist_ok=True)
        return near
    return tempfile.gettempdir()


@contextlib.contextmanager
def write_errors(fs: fsspec.AbstractFileSystem, path: str) -> Iterator[None]:
    """Turn an OSError from writing `path` into one StorageError line naming it (and the reason)."""
    try:
        yield
    except OSError as e:
        where = path if path.startswith("/") else fs.unstrip_protocol(path)
        raise StorageError(f"cannot write {where}: {_reason(e)}") from e


@contextlib.contextmanager
def locked(fs: fsspec.AbstractFileSystem, path: str) -> Iterator[None]:
    """Hold an exclusive lock for a read-modify-write of `path`: flock on `<path>.lock` for local
    files (released by the kernel if the process dies). Object stores get no lock here: a
    conditional write (If-Match on the object's ETag) would be their fix (docs/RELIABILITY.md)."""
    if not is_local(fs):
        yield
        return
    lock_path = path + ".lock"
    with write_errors(fs, path):
        os.makedirs(os.path.dirname(lock_path), exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _reason(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0)
    text = e.strerror or str(e) or e.__class__.__name__
    return f"{text} ({name})" if name else text


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
