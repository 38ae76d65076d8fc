"""Node-local copies of a remote catalog's immutable metadata: version manifests and shard indexes.

Both are content-addressed (a manifest by its version id, an index by the sha256 its manifest
records), so a copy never goes stale, and it is checked on every use exactly as a fetched one is.
The ranks and DataLoader workers of a node start together and need the same files: the first
process to need one fetches it while holding `<key>.lock` (flock: a holder that dies releases it),
the others wait for that and read its copy. A node asks the store once per file, not once per
process (Mosaic #662: a 20 GB index downloaded on every rank). A wait is bounded: past `WAIT`
seconds a stuck holder is ignored and the file fetched anyway (a second fetch costs a request;
a hung rank must not stop the node). A copy that is missing, unreadable or fails its check is
fetched again; a cache directory that cannot be written costs only the sharing.

Local catalogs are read in place: a copy would be a second read of the same disk.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

import fsspec

from dsinspect.loaders.format.pathnames import is_sha256
from dsinspect.loaders.store.locks import SUPPORTED as LOCKS_SUPPORTED
from dsinspect.loaders.store.locks import open_locked
from dsinspect.loaders.store.storage import cache_dir, is_local, write_atomic

__all__ = ["NodeCopies", "WAIT"]

log = logging.getLogger("dsinspect.node_copies")

WAIT = 60.0      # seconds a process waits for another one's fetch before fetching itself
_POLL = 0.005    # how often a waiting process tries the lock (a fetch takes milliseconds to seconds)
KINDS = ("manifest", "index")

_BUSY = object()  # another process holds the lock

T = TypeVar("T")
Parse = Callable[[bytes], "T | None"]  # a copy's value, or None when it does not check out


class NodeCopies:
    """The copies under `root` ($DSINSPECT_CACHE/meta by default), one file per (key, kind)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root else cache_dir() / "meta"
        self._writable = True

    @classmethod
    def for_store(cls, fs: fsspec.AbstractFileSystem) -> "NodeCopies | None":
        """Copies for a catalog on `fs`: None for a local one (see the module's docstring)."""
        return None if is_local(fs) else cls()

    def get(self, key: str, kind: str, fetch: Callable[[], tuple[bytes, T]], parse: Parse) -> T:
        """The value of (`key`, `kind`): from this node's copy when it checks out (`parse`), else
        `fetch()`ed (its raw bytes and value, checked by the caller) once for the node and kept."""
        path = self._path(key, kind)
        got = self._load(path, parse)
        if got is not None:
            return got
        with self._turn(path):
            got = self._load(path, parse)  # fetched by the process we waited for
            if got is not None:
                return got
            raw, value = fetch()
            self._keep(path, raw)
            return value

    def get_many(self, keys: Sequence[str], kind: str,
                 fetch_many: Callable[[list[int]], list[tuple[bytes, T] | BaseException]],
                 parse_at: Callable[[int, bytes], T | None]) -> list[T | None]:
        """`get` for several keys with one `fetch_many(positions)` for all this process fetches
        (their requests in flight together); `parse_at(position, raw)` checks a copy. None where
        nothing checked out: a failed fetch, or a holder that fetched nothing usable (the caller
        fetches those one by one, and says what is wrong)."""
        paths = [self._path(k, kind) for k in keys]
        parses = [functools.partial(parse_at, i) for i in range(len(keys))]
        out: list[T | None] = [self._load(p, parse) for p, parse in zip(paths, parses)]
        held: dict[int, "int | None"] = {}
        theirs: list[int] = []
        try:
            for i, path in enumerate(paths):
                if out[i] is None:
                    fd = self._try_lock(path)
                    if fd is _BUSY:
                        theirs.append(i)
                        continue
                    held[i] = fd
                    out[i] = self._load(path, parses[i])  # finished between our look and our lock
            mine = [i for i in held if out[i] is None]
            for i, got in zip(mine, fetch_many(mine) if mine else []):
                if not isinstance(got, BaseException):
                    self._keep(paths[i], got[0])
                    out[i] = got[1]
        finally:
            for fd in held.values():
                if fd is not None:
                    os.close(fd)
        for i in theirs:
            with self._turn(paths[i]):
                out[i] = self._load(paths[i], parses[i])
        return out

    # -- internals -----------------------------------------------------------------------------

    def _path(self, key: str, kind: str) -> Path:
        if not is_sha256(key) or kind not in KINDS:  # both become a file name
            raise ValueError(f"not a content key: {key!r} ({kind!r})")
        return self.root / f"{key}.{kind}"

    def _load(self, path: Path, parse: Parse) -> T | None:
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        value = parse(raw)
        if value is None:
            log.warning("%s does not check out; fetching it again", path)
        return value

    def _keep(self, path: Path, raw: bytes) -> None:
        if not self._writable:
            return
        try:
            write_atomic(fsspec.filesystem("file"), str(path), raw)
        except Exception as e:  # noqa: BLE001 - a full or read-only cache: read on without sharing
            self._writable = False
            log.warning("cannot keep metadata in %s (%s): every process fetches its own", self.root, e)

    def _try_lock(self, path: Path) -> "int | None | object":
        """The lock's descriptor; _BUSY when another process holds it; None when no lock can be
        had here (no flock, a cache that cannot be written: fetch without sharing)."""
        if not LOCKS_SUPPORTED or not self._writable:
            return None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = open_locked(f"{path}.lock", wait=False)
        except OSError:
            self._writable = False
            return None
        return _BUSY if fd is None else fd

    @contextmanager
    def _turn(self, path: Path) -> Iterator[None]:
        """Hold the file's lock (waiting at most WAIT seconds for another holder), or go on without."""
        deadline = time.monotonic() + WAIT
        fd = self._try_lock(path)
        while fd is _BUSY and time.monotonic() < deadline:
            time.sleep(_POLL)
            fd = self._try_lock(path)
        if fd is _BUSY:
            log.warning("%s: another process has been fetching it for %.0f s; fetching it here too", path, WAIT)
        try:
            yield
        finally:
            if isinstance(fd, int):
                os.close(fd)
