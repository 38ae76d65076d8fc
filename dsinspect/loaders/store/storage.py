"""The one boundary to storage: fsspec URLs, path joins and atomic writes, for any filesystem."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dsinspect.errors import StorageError, UserError
from dsinspect.loaders.store.locks import open_locked

__all__ = ["url_to_fs", "join", "is_local", "read_only", "refuse_read_only", "write_atomic", "publish_file",
           "move_file", "spool_dir", "cache_dir", "write_errors", "locked", "rewrite", "read_whole", "read_many",
           "writes_locally", "modified_time"]

CAS_TRIES = 20  # conditional puts on object stores: a lost race is re-read and retried this often


def cache_dir() -> Path:
    """$DSINSPECT_CACHE, else the user's cache directory (~/.cache/dsinspect)."""
    env = os.environ.get("DSINSPECT_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dsinspect"


# Object stores whose clients cache directory listings: a catalog changes under a long-running
# reader (a viewer, a training job resolving `latest`), and a stale listing would answer "no such
# version" or "no tags" for files another process just published. Listings are small; ask anew.
_NO_LISTINGS_CACHE = ("s3", "s3a", "gs", "gcs")


# Read-only stores: HTTP has no listing or atomic-write API to build a catalog on (fsspec's HTTP
# filesystem would PUT or POST to whatever answers). Their listings are index pages that change as
# a catalog is published to: never cached (fsspec's default for http today; said here for good).
_READ_ONLY = ("http", "https")


# botocore opens at most 10 connections per client: a cold first batch's ~30 ranged reads went out
# in waves of 10, a round trip each (first batch at RTT 80 ms: 904 -> 735 ms with 64).
# Its default ("legacy") retries take 5 attempts with up to 15 s of backoff, each connect waiting up
# to 60 s: `dsinspect ls` on an endpoint that refused connections took 8-11 s to fail. The standard
# mode's 3 attempts (up to 3 s of backoff) and a 10 s connect timeout; dsinspect's own reads retry
# transient errors on top (store/transient.py). FSSPEC_S3's config_kwargs override these.
_S3_CONFIG = {"max_pool_connections": 64, "retries": {"total_max_attempts": 3, "mode": "standard"},
              "connect_timeout": 10}



def url_to_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and root path of `url` (a plain path is a local directory)."""
    protocol = fsspec.core.split_protocol(str(url))[0]
    options: dict = {"use_listings_cache": False} if protocol in _NO_LISTINGS_CACHE + _READ_ONLY else {}
    if protocol in ("s3", "s3a"):  # fsspec's configuration (FSSPEC_S3) kept; ours where it sets nothing
        configured = fsspec.config.conf.get(protocol, {}).get("config_kwargs", {})
        options["config_kwargs"] = {**_S3_CONFIG, **configured}
    try:
        fs, path = fsspec.core.url_to_fs(str(url), **options)
    except ImportError as e:  # a protocol fsspec knows whose client package is not installed
        raise UserError(f"{url}: protocol {protocol!r} needs a package that is not installed ({e})") from None
    except ValueError as e:
        if "Protocol not known" not in str(e):
            raise
        raise UserError(f"{url}: unknown protocol {protocol!r}; known here: {', '.join(usable_protocols())}") from None
    if is_local(fs):
        path = os.path.abspath(path)
    if os.environ.get("DSINSPECT_INJECT_FAULTS"):  # debug (--inject-faults); its module costs ~2 ms to import
        from dsinspect.loaders.store.faults import wrap_from_env
        fs = wrap_from_env(fs)
    return fs, path.rstrip("/") or "/"


def usable_protocols() -> list[str]:
    """The fsspec protocols whose implementation is installed here (the rest need a package)."""
    from importlib.util import find_spec

    from fsspec.registry import known_implementations

    top = {p: str(impl.get("class", "")).split(".")[0] for p, impl in known_implementations.items()}
    return sorted(p for p, module in top.items() if module and module != "dsinspect" and find_spec(module))


def join(*parts: str) -> str:
    return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def read_only(fs: fsspec.AbstractFileSystem) -> bool:
    """A store dsinspect only reads (http, https), also under the fault-injecting wrapper."""
    inner = getattr(fs, "fs", None) if getattr(fs, "protocol", None) == "faulty" else fs
    protocols = inner.protocol if isinstance(inner.protocol, tuple) else (inner.protocol,)
    return any(p in _READ_ONLY for p in protocols)


def refuse_read_only(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """A StorageError (exit 2) before anything is sent, when `path` is on a store dsinspect only reads."""
    if read_only(fs):
        raise StorageError(f"cannot write {fs.unstrip_protocol(path)}: http(s) stores are read-only")


def writes_locally(fs: fsspec.AbstractFileSystem) -> bool:
    """Local for writing: faults (--inject-faults) are injected into reads only, so a wrapped local
    catalog still gets atomic renames and locks."""
    return is_local(fs) or (getattr(fs, "protocol", None) == "faulty" and is_local(getattr(fs, "fs", None)))


def read_whole(fs: fsspec.AbstractFileSystem, path: str) -> bytes:
    """A small file's bytes in one request. s3fs asks for an object's size (a HEAD) before reading
    it whole, to choose a concurrent download: a round trip more per metadata file, which a cold
    start pays one after another. A read from byte 0 on is one ranged GET on every filesystem; an
    empty object refuses that range (EINVAL, as a bad request does: its size tells them apart)."""
    try:
        return fs.cat_file(path, start=0)
    except OSError as e:
        if e.errno != errno.EINVAL or not _empty(fs, path):
            raise
        return b""


def _empty(fs: fsspec.AbstractFileSystem, path: str) -> bool:
    try:
        return fs.size(path) == 0
    except Exception:  # noqa: BLE001 - the read's own error is the one to report
        return False


def read_many(fs: fsspec.AbstractFileSystem, paths: list[str]) -> list[bytes | BaseException]:
    """Several small files, each as `read_whole` reads it: requests in flight together on
    asynchronous filesystems (s3, gcs, http), one after another on the others; per path its bytes
    or the exception it raised."""
    if not paths:
        return []
    return fs.cat_ranges(list(paths), [0] * len(paths), [None] * len(paths), on_error="return")


def write_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Write `data` so that readers see the old file or the new one, never a part. A failed write
    (disk full, permission denied, read-only) raises StorageError naming `path` and leaves no temp file."""
    with write_errors(fs, path):
        if not writes_locally(fs):
            fs.pipe_file(path, data)  # object stores publish a whole object at once
            return
        tmp = _synced_temp(path, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise


def _synced_temp(path: str, data: bytes) -> str:
    """`data` in a new temp file beside local `path` (its directory made), on disk: the temp file's path."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def create_exclusive(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> bool:
    """Write `data` to `path` unless `path` exists: True when this call created it, False when another
    writer had (nothing written then). Readers see the whole file or none. Local files: a temp file
    linked to `path` (link fails on an existing name); S3: a put with If-None-Match: *. Other stores
    have no such primitive here: refused (StorageError), as two writers could both "create" `path`."""
    with write_errors(fs, path):
        if _is_s3(fs):
            bucket, key, _ = fs.split_path(path)
            try:
                fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            except OSError as e:
                if _lost_race(e):
                    return False
                raise
            finally:
                fs.invalidate_cache(path)
            return True
        if not writes_locally(fs):
            raise StorageError(f"{fs.unstrip_protocol(path)}: this store has no exclusive create "
                               "(dsinspect uses local disks' links and S3's conditional puts)")
        tmp = _synced_temp(path, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            _unlink_quietly(tmp)
        return True


def publish_file(fs: fsspec.AbstractFileSystem, local_path: str, path: str) -> bool:
    """Move a finished local file to `path` unless that content-addressed path already exists.

    True when this call published it. The local file is gone afterwards either way. An existing
    local file gets a fresh mtime: it is about to be referenced again, which gc's grace period honours.
    """
    try:
        with write_errors(fs, path):
            if fs.exists(path):
                if writes_locally(fs):
                    os.utime(path)
                return False
            if writes_locally(fs):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.replace(local_path, path)
            else:
                fs.put_file(local_path, path)
            return True
    finally:
        _unlink_quietly(local_path)


def move_file(fs: fsspec.AbstractFileSystem, local_path: str, path: str) -> None:
    """Move a finished local file (written under `spool_dir(fs, dirname(path))`) to `path`, replacing
    what is there: a rename for local stores, one upload elsewhere. The local file is gone afterwards."""
    try:
        with write_errors(fs, path):
            if writes_locally(fs):
                os.replace(local_path, path)
            else:
                fs.put_file(local_path, path)
    finally:
        _unlink_quietly(local_path)


def spool_dir(fs: fsspec.AbstractFileSystem, near: str) -> str:
    """Where to write a file before publishing it: beside its destination when local (so the final
    rename is atomic), else the system temp directory. A read-only store (http) is refused here,
    before a byte is converted."""
    refuse_read_only(fs, near)
    if writes_locally(fs):
        with write_errors(fs, near):
            os.makedirs(near, exist_ok=True)
        return near
    return tempfile.gettempdir()


@contextlib.contextmanager
def write_errors(fs: fsspec.AbstractFileSystem, path: str) -> Iterator[None]:
    """Turn an OSError from writing `path` into one StorageError line naming it (and the reason).
    A read-only store (http) is refused before anything is tried."""
    refuse_read_only(fs, path)
    try:
        yield
    except OSError as e:
        where = path if path.startswith("/") else fs.unstrip_protocol(path)
        raise StorageError(f"cannot write {where}: {_reason(e)}") from e


@contextlib.contextmanager
def locked(fs: fsspec.AbstractFileSystem, path: str) -> Iterator[None]:
    """Hold an exclusive lock for a read-modify-write of `path`: flock on `<path>.lock` for local
    files (released by the kernel if the process dies). Object stores get no lock: `rewrite`
    makes their update a conditional put instead."""
    if not writes_locally(fs):
        with write_errors(fs, path):  # refuses read-only stores
            pass
        yield
        return
    lock_path = path + ".lock"
    with write_errors(fs, path):
        os.makedirs(os.path.dirname(lock_path), exist_ok=True)
        fd = open_locked(lock_path, mode=0o666)
    try:
        yield
    finally:
        os.close(fd)  # closing drops the lock


def rewrite(fs: fsspec.AbstractFileSystem, path: str, change: Callable[[bytes | None], bytes]) -> None:
    """Replace the small file `path` by `change(its bytes, or None when absent)` without losing a
    concurrent writer's update. Local files: callers hold `locked(fs, path)`. S3: a put conditional
    on the ETag just read (If-None-Match: * when absent); a writer that lost the race re-reads and
    applies its change again. Other stores: a plain read and write (no primitive to build on)."""
    if _is_s3(fs):
        return _rewrite_s3(fs, path, change)
    with write_errors(fs, path):
        current = fs.cat_file(path) if fs.exists(path) else None
    write_atomic(fs, path, change(current))


def _is_s3(fs: fsspec.AbstractFileSystem) -> bool:
    return "s3" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)) and hasattr(fs, "call_s3")


def _rewrite_s3(fs, path: str, change: Callable[[bytes | None], bytes]) -> None:
    bucket, key, _ = fs.split_path(path)
    for attempt in range(CAS_TRIES):
        fs.invalidate_cache(path)
        with write_errors(fs, path):
            try:  # the ETag first, then the bytes: if they differ, the put below is refused
                etag = fs.info(path)["ETag"]
                current = fs.cat_file(path)
            except FileNotFoundError:
                etag, current = None, None
            condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            try:
                fs.call_s3("put_object", Bucket=bucket, Key=key, Body=change(current), **condition)
                fs.invalidate_cache(path)
                return
            except OSError as e:
                if not _lost_race(e):
                    raise
        time.sleep(random.uniform(0, 0.02 * 2 ** min(attempt, 6)))  # jitter: racing writers spread out
    raise StorageError(f"cannot write {fs.unstrip_protocol(path)}: {CAS_TRIES} conditional writes in a row "
                       "lost to other writers")


def _lost_race(e: BaseException) -> bool:
    """Did a conditional put fail because another writer changed the object first (HTTP 412
    PreconditionFailed; 409 ConditionalRequestConflict while another put is in flight)?"""
    text = " ".join(str(x) for x in (e, e.__cause__, e.__context__) if x is not None)
    return any(marker in text for marker in ("PreconditionFailed", "Precondition Failed", "412",
                                             "ConditionalRequestConflict"))


def _reason(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0)
    text = e.strerror or str(e) or e.__class__.__name__
    return f"{text} ({name})" if name else text


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def modified_time(info: dict) -> float | None:
    """Seconds since the epoch of a file's last change, from the listing info each store reports."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, dt.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None
