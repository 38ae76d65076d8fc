"""Writers in flight and gc, kept apart per dataset: gc never removes a shard a commit is about to publish.

A writer holds a *write lease* on its dataset from before its first shard until its manifest is
written (or it gives up); gc removes anything only while it *collects* the dataset, which no lease
may overlap. gc does not wait for writers: a dataset with a write in flight is skipped and reported.

- Local disks: flock on `<dataset>/leases.lock`, shared by writers (waiting while a gc collects),
  exclusive and without waiting for gc. The kernel drops a dead process's lock.
- Other stores (S3, GCS, memory): small objects under `<dataset>/leases/`. A writer puts
  `w-<id>.json`, then waits while a gc marker `gc-<id>.json` is there; gc puts its marker, then
  backs off if a writer lease is there. On a store whose listings follow its writes (S3, GCS) one of
  the two always sees the other: whichever put came second is followed by a listing that shows the
  first. A thread refreshes each object while it is held; one left unrefreshed for `STALE_AFTER`
  (its process died) protects nothing and gc removes it.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from contextlib import contextmanager, suppress
from typing import Iterator

import fsspec

from dsinspect.loaders.store.layout import Layout
from dsinspect.loaders.store.locks import SUPPORTED as FLOCK_SUPPORTED
from dsinspect.loaders.store.locks import open_locked
from dsinspect.loaders.store.storage import join, modified_time, write_errors, writes_locally

__all__ = ["write_lease", "collecting", "STALE_AFTER"]

STALE_AFTER = 600.0  # seconds without a refresh after which a lease or marker is a dead process's
REFRESH_EVERY = 60.0
_POLL = 0.05
WRITER, COLLECTOR = "w-", "gc-"


@contextmanager
def write_lease(fs: fsspec.AbstractFileSystem, layout: Layout, name: str) -> Iterator[None]:
    """Hold a write lease on dataset `name` (waiting while a gc collects it)."""
    directory = layout.leases(name)
    if writes_locally(fs) and FLOCK_SUPPORTED:
        fd = _flock(fs, directory, shared=True, wait=True)
        try:
            yield
        finally:
            os.close(fd)
        return
    with _held_object(fs, directory, WRITER):
        _wait_while(fs, directory, COLLECTOR)
        yield


@contextmanager
def collecting(fs: fsspec.AbstractFileSystem, layout: Layout, name: str) -> Iterator[bool]:
    """Collect dataset `name` if no write lease is held on it: yields False (and holds nothing) when one is."""
    directory = layout.leases(name)
    if writes_locally(fs) and FLOCK_SUPPORTED:
        fd = _flock(fs, directory, shared=False, wait=False)
        try:
            yield fd is not None
        finally:
            if fd is not None:
                os.close(fd)
        return
    with _held_object(fs, directory, COLLECTOR):
        yield not _live(fs, directory, WRITER)


def _flock(fs, directory: str, *, shared: bool, wait: bool) -> int | None:
    path = directory.rstrip("/") + ".lock"  # beside the directory, as tags.json.lock beside tags.json
    with write_errors(fs, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open_locked(path, shared=shared, wait=wait, mode=0o666)


@contextmanager
def _held_object(fs, directory: str, prefix: str) -> Iterator[None]:
    """A lease or marker object, refreshed by a thread until the block ends, then removed."""
    path = join(directory, f"{prefix}{uuid.uuid4().hex}.json")
    body = json.dumps({"pid": os.getpid(), "host": os.uname().nodename}).encode()
    with write_errors(fs, path):
        fs.pipe_file(path, body)
    done = threading.Event()

    def refresh() -> None:
        while not done.wait(REFRESH_EVERY):
            with suppress(OSError):  # a missed refresh is retried; STALE_AFTER allows several
                fs.pipe_file(path, body)

    thread = threading.Thread(target=refresh, name="dsinspect-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        with suppress(OSError):
            fs.rm_file(path)


def _wait_while(fs, directory: str, prefix: str) -> None:
    while _live(fs, directory, prefix):
        time.sleep(_POLL)


def _live(fs, directory: str, prefix: str, now: float | None = None) -> list[str]:
    """The objects of kind `prefix` in `directory` refreshed within STALE_AFTER (a fresh listing)."""
    now = time.time() if now is None else now
    with suppress(AttributeError):
        fs.invalidate_cache(directory)
    try:
        entries = fs.ls(directory, detail=True)
    except FileNotFoundError:
        return []
    return [e["name"] for e in entries if e["name"].rstrip("/").rsplit("/", 1)[-1].startswith(prefix)
            and now - (modified_time(e) or now) < STALE_AFTER]
