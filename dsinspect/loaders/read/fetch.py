"""Download content-addressed bytes: a whole file streamed to a temp file while hashing, or a run of
a shard's parts (format/shard_index.py) into memory; retry transient errors with backoff, re-fetch
once on a hash mismatch, then fail naming the URL, the bytes and both hashes.

Requests are coalesced where a round trip costs more than the bytes (`read_plan`): the cold path
asks, with `brought_along`, for the parts between and around the ones a batch needs when they are
few bytes (a small shard under a shuffled first batch: the whole shard), claims them for the node
like the others, and `fetch_parts_together` reads touching parts of a file in one ranged GET.
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
import time
from typing import Callable, NoReturn, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dsinspect.errors import DsinspectError, IntegrityError, NotFoundError, RetriesExhausted, StorageError, reason_of
from dsinspect.loaders.read.stats import ReadStats
from dsinspect.loaders.store.storage import write_errors
from dsinspect.loaders.store.transient import is_transient

__all__ = ["fetch_verified", "fetch_parts", "fetch_parts_together", "local_write", "read_plan", "brought_along"]

_CHUNK = 4 << 20
T = TypeVar("T")

# Bytes against round trips. A link's bandwidth-delay product is ~1 MB at 400 Mbit/s and 20 ms (and
# more on a faster link to S3, whose first byte takes 10-30 ms): reading through a gap of NEAR costs
# well under a round trip, and a file whose wanted ranges leave at most SPARE of it unwanted is read
# in one GET (from byte 0 when that adds no more than SPARE): the unwanted bytes cost ~2 round trips
# at the slowest link measured, where its ranged reads cost a connection and a request each.
NEAR = 256 << 10
SPARE = 2 << 20


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
    one ranged read and each checked against its sha256; errors as in `fetch_verified`."""
    first, last = spans[0][0], spans[-1][1]

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


def read_plan(spans: list[tuple[int, int]], near: int | None = None,
              spare: int | None = None) -> list[tuple[int, int]]:
    """The ranged reads that bring these byte ranges of one file: sorted, overlapping ones and those
    at most `near` (NEAR) apart merged; all in one read when they leave at most `spare` (SPARE)
    unwanted, from byte 0 when that adds at most `spare` more."""
    near, spare = NEAR if near is None else near, SPARE if spare is None else spare
    if not spans:
        return []
    ordered = sorted(spans)
    runs = [list(ordered[0])]
    for a, b in ordered[1:]:
        if a - runs[-1][1] <= near:
            runs[-1][1] = max(runs[-1][1], b)
        else:
            runs.append([a, b])
    first, last = runs[0][0], runs[-1][1]
    unwanted = sum(b[0] - a[1] for a, b in zip(runs, runs[1:]))
    if unwanted <= spare:
        return [(0 if first + unwanted <= spare else first, last)]
    return [(a, b) for a, b in runs]


def brought_along(spans: list[tuple[int, int]], wanted: list[int]) -> list[int]:
    """The parts (of a file cut into `spans`, in order) that `read_plan` reads for the `wanted` ones:
    those, the ones between them that it reads through, and the rest of a small file."""
    reads = read_plan([spans[p] for p in wanted])
    return [p for p, (a, b) in enumerate(spans) if any(start <= a and b <= end for start, end in reads)]


def _coalesced(fs: fsspec.AbstractFileSystem, wanted: list[tuple[str, int, int]]) -> list[bytes | BaseException]:
    """Each wanted (path, start, end) as bytes (or the exception its read raised): touching ranges
    of a file in one ranged read (no byte read that was not asked for), all in flight together."""
    reads: list[tuple[str, int, int]] = []
    for path in dict.fromkeys(p for p, _, _ in wanted):
        spans = [(a, b) for p, a, b in wanted if p == path]
        # touching ranges only (no byte not asked for); none when NEAR < 0 (tests pinning reads part by part)
        reads += [(path, a, b) for a, b in read_plan(spans, near=min(NEAR, 0), spare=-1)]
    got = fs.cat_ranges([p for p, _, _ in reads], [a for _, a, _ in reads], [b for _, _, b in reads],
                        on_error="return")
    out: list[bytes | BaseException] = []
    for path, a, b in wanted:
        i, (_, start, end) = next((i, r) for i, r in enumerate(reads) if r[0] == path and r[1] <= a and b <= r[2])
        data = got[i]
        if isinstance(data, BaseException) or len(data) != end - start:
            out.append(data if isinstance(data, BaseException) else OSError(f"short read of {path}"))
            continue
        out.append(data if (start, end) == (a, b) else bytes(memoryview(data)[a - start:b - start]))
    return out


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
