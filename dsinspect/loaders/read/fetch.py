"""Download content-addressed bytes: a whole file streamed to a temp file while hashing, or a run of
a shard's parts (format/shard_index.py) into memory; retry transient errors with backoff, re-fetch
once on a hash mismatch, then fail naming the URL, the bytes and both hashes.

Requests are coalesced where a round trip costs more than the bytes (`read_plan`): parts asked for
together whose gaps are small are read in one ranged GET, and a file they nearly cover (a small
shard under a shuffled first batch) is read whole from byte 0. The bytes read through (the gaps)
are kept, bounded, for the fetches of those parts that follow (a fill, a cold read): they cost no
request then, and are checked against their sha256 like any fetched part (a mismatch drops them and
fetches from storage).
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
import threading
import time
from collections import OrderedDict
from typing import Callable, NoReturn, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dsinspect.errors import DsinspectError, IntegrityError, NotFoundError, RetriesExhausted, StorageError, reason_of
from dsinspect.loaders.read.stats import ReadStats
from dsinspect.loaders.store.storage import write_errors
from dsinspect.loaders.store.transient import is_transient

__all__ = ["fetch_verified", "fetch_parts", "fetch_parts_together", "local_write", "read_plan", "forget_kept"]

_CHUNK = 4 << 20
T = TypeVar("T")

# Bytes against round trips. A link's bandwidth-delay product is ~1 MB at 400 Mbit/s and 20 ms (and
# more on a faster link to S3, whose first byte takes 10-30 ms): reading through a gap of NEAR costs
# well under a round trip, and a file whose wanted ranges leave at most SPARE of it unwanted is read
# in one GET (from byte 0 when that adds no more than SPARE): the unwanted bytes cost ~2 round trips
# at the slowest link measured, where its ranged reads cost a connection and a request each.
NEAR = 256 << 10
SPARE = 2 << 20
KEEP = 64 << 20  # bytes read through and kept for the parts' own fetches, per process


def fetch_verified(fs: fsspec.AbstractFileSystem, path: str, url: str, sha256: str, size: int, directory: str,
                   stats: ReadStats, retries: int = 4, backoff: float = 0.1) -> str:
    """A local temp file in `directory` holding exactly the bytes whose sha256 is `sha256`.

    Transient errors (`is_transient`) are retried `retries` times with backoff, then RetriesExhausted;
    a download whose bytes do not match (our sha256 or the client's own checksum) is fetched once
    more, then IntegrityError; anything else fails at once (see `_fail_at_once`)."""
    def check(got: tuple[str, str, int], seconds: float) -> str | None:
        tmp, digest, nbytes = got
        if digest == sha256 and nbytes == size:
            stats.fetched(nbytes, seconds)
            return None
        os.unlink(tmp)
        return f"sha256 {digest} ({nbytes} bytes) does not match the manifest's {sha256} ({size} bytes)"

    return _checked(lambda: _download(fs, path, directory), check, url, f"shard {url}", stats, retries, backoff)[0]


def fetch_parts(fs: fsspec.AbstractFileSystem, path: str, url: str, spans: list[tuple[int, int, str]],
                stats: ReadStats, retries: int = 4, backoff: float = 0.1) -> list[memoryview]:
    """The bytes of consecutive parts [(start, end, sha256), ...] of the file at `path`, fetched as
    one ranged read and each checked against its sha256; errors as in `fetch_verified`. Bytes a
    coalesced read brought along are used first (no request), and only while they check out."""
    first, last = spans[0][0], spans[-1][1]
    kept = _KEPT.take(_key(fs, path), first, last)
    if kept is not None:
        parts = [kept[a - first:b - first] for a, b, _ in spans]
        if all(hashlib.sha256(part).hexdigest() == want for part, (_, _, want) in zip(parts, spans)):
            stats.add("parts_fetched", len(spans))  # fetched, by the read that brought them (no latency)
            stats.add("bytes_fetched", last - first)
            return parts
        # damaged in the read that brought them: these parts from storage (the read's other parts,
        # each checked on its own use, may still serve)

    def cut(data: bytes) -> list[memoryview]:
        view = memoryview(data)  # slices without copies: a fill's run is up to 2 MiB
        return [view[a - first:b - first] for a, b, _ in spans]

    def check(data: bytes, seconds: float) -> str | None:
        for (a, b, want), part in zip(spans, cut(data)):
            got = hashlib.sha256(part).hexdigest()
            if got != want:
                return f"bytes {a}..{b}: sha256 {got} does not match the manifest's shard index ({want})"
        stats.fetched_parts(len(data), len(spans), seconds)
        return None

    return cut(_checked(lambda: fs.cat_file(path, start=first, end=last), check, url,
                        f"shard {url} bytes {first}..{last}", stats, retries, backoff))


def fetch_parts_together(fs: fsspec.AbstractFileSystem, wanted: list[tuple[str, int, int, str]],
                         stats: ReadStats) -> list[bytes | None]:
    """Parts of several files [(path, start, end, sha256), ...] as ranged reads in flight together
    (on object storage: one round trip for all, where `fetch_parts` one after another would take
    one each); per part its bytes when they match the sha256, else None (failed, or not what was
    asked): the caller fetches those again through `fetch_parts`, which retries and names the
    error. A first round, not a replacement."""
    if not wanted:
        return []
    started = time.monotonic()
    got = _coalesced(fs, [(p, a, b) for p, a, b, _ in wanted])
    seconds = time.monotonic() - started
    out: list[bytes | None] = []
    for (_, a, b, want), data in zip(wanted, got):
        ok = isinstance(data, bytes) and len(data) == b - a and hashlib.sha256(data).hexdigest() == want
        out.append(data if ok else None)
        if ok:
            stats.fetched_parts(len(data), 1, seconds / len(wanted))
    return out


def read_plan(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranged reads that bring these byte ranges of one file: sorted, overlapping ones and those
    at most NEAR apart merged; all in one read when they leave at most SPARE unwanted, from byte 0
    when that adds at most SPARE more."""
    if not spans:
        return []
    ordered = sorted(spans)
    runs = [list(ordered[0])]
    for a, b in ordered[1:]:
        if a - runs[-1][1] <= NEAR:
            runs[-1][1] = max(runs[-1][1], b)
        else:
            runs.append([a, b])
    first, last = runs[0][0], runs[-1][1]
    unwanted = sum(b[0] - a[1] for a, b in zip(runs, runs[1:]))
    if unwanted <= SPARE:
        return [(0 if first + unwanted <= SPARE else first, last)]
    return [(a, b) for a, b in runs]


def forget_kept() -> None:
    """Drop every kept byte (tests; a process that wants its memory back)."""
    _KEPT.clear()


def _coalesced(fs: fsspec.AbstractFileSystem, wanted: list[tuple[str, int, int]]) -> list[bytes | BaseException]:
    """Each wanted (path, start, end) as bytes (or the exception its read raised), read by the
    file's `read_plan` in one round of requests in flight together; the rest of each read kept."""
    reads: list[tuple[str, int, int]] = []
    for path in dict.fromkeys(p for p, _, _ in wanted):
        reads += [(path, a, b) for a, b in read_plan([(a, b) for p, a, b in wanted if p == path])]
    got = fs.cat_ranges([p for p, _, _ in reads], [a for _, a, _ in reads], [b for _, _, b in reads],
                        on_error="return")
    out: list[bytes | BaseException] = []
    for path, a, b in wanted:
        i, (_, start, end) = next((i, r) for i, r in enumerate(reads) if r[0] == path and r[1] <= a and b <= r[2])
        data = got[i]
        if isinstance(data, BaseException) or len(data) != end - start:
            out.append(data if isinstance(data, BaseException) else OSError(f"short read of {path}"))
            continue
        out.append(bytes(memoryview(data)[a - start:b - start]) if (start, end) != (a, b) else data)
    for (path, start, end), data in zip(reads, got):
        wanted_here = sum(b - a for p, a, b in wanted if p == path and start <= a and b <= end)
        if isinstance(data, bytes) and len(data) == end - start and wanted_here < end - start:
            _KEPT.put(_key(fs, path), start, data, wanted_here)
    return out


def _key(fs: fsspec.AbstractFileSystem, path: str) -> tuple[object, str]:
    """A file by its filesystem's options (fsspec's token: the same in a forked DataLoader worker,
    which inherits what its parent kept from the first batch) and its path."""
    return getattr(fs, "_fs_token", None) or id(fs), path


class _Kept:
    """Bytes of files read through by coalesced reads, by (filesystem, path), each read dropped once
    all of its bytes were taken (a fill takes each part once) and the oldest first past KEEP bytes.
    Shard paths are content-addressed: kept bytes never go stale, and each use checks them."""

    def __init__(self, limit: int):
        self.limit, self.held = limit, 0
        self._reads: OrderedDict[tuple[object, str], list[list]] = OrderedDict()  # [start, data, bytes taken]
        self._lock = threading.Lock()

    def put(self, key: tuple[object, str], start: int, data: bytes, taken: int) -> None:
        if len(data) > self.limit:
            return
        with self._lock:
            self._reads.setdefault(key, []).append([start, data, taken])
            self.held += len(data)
            while self.held > self.limit:
                _, reads = self._reads.popitem(last=False)
                self.held -= sum(len(r[1]) for r in reads)

    def take(self, key: tuple[object, str], first: int, last: int) -> memoryview | None:
        """Bytes first..last of the file when one kept read holds them all, else None."""
        with self._lock:
            reads = self._reads.get(key, [])
            for read in reads:
                start, data, _ = read
                if start <= first and last <= start + len(data):
                    read[2] += last - first
                    if read[2] >= len(data):
                        reads.remove(read)
                        self.held -= len(data)
                        if not reads:
                            del self._reads[key]
                    return memoryview(data)[first - start:last - start]
        return None

    def clear(self) -> None:
        with self._lock:
            self._reads.clear()
            self.held = 0


_KEPT = _Kept(KEEP)


def _checked(fetch: Callable[[], T], check: Callable[[T, float], str | None], url: str, what: str,
             stats: ReadStats, retries: int, backoff: float) -> T:
    """`fetch()` until `check(result, seconds)` finds nothing wrong (None): transient errors retried
    with backoff, then RetriesExhausted naming `what`; a mismatch (check's reason, or the storage
    client's own checksum) fetched once more, then IntegrityError; anything else at once."""
    mismatches = attempt = 0
    while True:
        started = time.monotonic()
        try:
            got = fetch()
        except Exception as e:  # noqa: BLE001 - sorted here: damaged in transit, transient, or final
            if _rejected_checksum(e):
                mismatch = f"the storage client's checksum check failed ({reason_of(e)})"
            elif not is_transient(e):
                _fail_at_once(e, url)
            elif attempt < retries:
                attempt += 1
                stats.add("retries")
                time.sleep(backoff * (2 ** (attempt - 1)) * (1 + random.random()))
                continue
            else:
                raise RetriesExhausted(f"{what}: fetch failed after {attempt + 1} tries: "
                                       f"{e.__class__.__name__}: {e}") from None
        else:
            mismatch = check(got, time.monotonic() - started)
            if mismatch is None:
                return got
        stats.add("verify_failures")
        mismatches += 1
        if mismatches > 1:
            raise IntegrityError(f"shard {url}: {mismatch}, also after a re-fetch; refusing to read it")


def _fail_at_once(e: Exception, url: str) -> NoReturn:
    """Raise what a final (not transient) failure surfaces as: a missing shard is a NotFoundError; an
    OSError or a storage client's own exception a StorageError naming the shard; our own errors (a
    cache disk that refused the write, say) and Python's built-in errors (a bug) as they are."""
    if isinstance(e, FileNotFoundError):
        raise NotFoundError(f"shard {url} is missing from storage") from None
    if isinstance(e, DsinspectError) or (type(e).__module__ == "builtins" and not isinstance(e, OSError)):
        raise e
    raise StorageError(f"shard {url}: cannot read: {reason_of(e)}") from e


def _rejected_checksum(e: BaseException) -> bool:
    """A download the storage client refused because its own checksum disagreed (botocore's
    FlexibleChecksumError): damage in transit, handled like a sha256 mismatch of ours."""
    return any("Checksum" in cls.__name__ for cls in type(e).__mro__)


def _download(fs: fsspec.AbstractFileSystem, path: str, directory: str) -> tuple[str, str, int]:
    digest, nbytes = hashlib.sha256(), 0
    with local_write(directory):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fetch-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, fs.open(path, "rb", block_size=_CHUNK, cache_type="none") as src:
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                digest.update(chunk)
                with local_write(directory):  # a full or read-only cache disk is no network hiccup
                    out.write(chunk)
                nbytes += len(chunk)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, digest.hexdigest(), nbytes


def local_write(directory: str):
    """Around a write into a local directory (the cache): a full or read-only disk is a StorageError."""
    return write_errors(LocalFileSystem(), directory)
