"""Download content-addressed bytes: a whole file streamed to a temp file while hashing, or a run of
a shard's parts (format/shard_index.py) into memory; retry transient errors with backoff, re-fetch
once on a hash mismatch, then fail naming the URL, the bytes and both hashes."""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
import time
from typing import NoReturn

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dsinspect.errors import DsinspectError, IntegrityError, NotFoundError, RetriesExhausted, StorageError, reason_of
from dsinspect.loaders.read.stats import ReadStats
from dsinspect.loaders.store.storage import write_errors
from dsinspect.loaders.store.transient import is_transient

__all__ = ["fetch_verified", "fetch_parts"]

_CHUNK = 4 << 20


def fetch_verified(fs: fsspec.AbstractFileSystem, path: str, url: str, sha256: str, size: int, directory: str,
                   stats: ReadStats, retries: int = 4, backoff: float = 0.1) -> str:
    """A local temp file in `directory` holding exactly the bytes whose sha256 is `sha256`.

    Transient errors (`is_transient`) are retried `retries` times with backoff, then RetriesExhausted;
    a download whose bytes do not match (our sha256 or the client's own checksum) is fetched once
    more, then IntegrityError; anything else fails at once (see `_fail_at_once`)."""
    mismatches = 0
    attempt = 0
    while True:
        started = time.monotonic()
        try:
            tmp, got, nbytes = _download(fs, path, directory)
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
                raise RetriesExhausted(f"shard {url}: fetch failed after {attempt + 1} tries: "
                                       f"{e.__class__.__name__}: {e}") from None
        else:
            if got == sha256 and nbytes == size:
                stats.fetched(nbytes, time.monotonic() - started)
                return tmp
            os.unlink(tmp)
            mismatch = f"sha256 {got} ({nbytes} bytes) does not match the manifest's {sha256} ({size} bytes)"
        stats.add("verify_failures")
        mismatches += 1
        if mismatches > 1:
            raise IntegrityError(f"shard {url}: {mismatch}, also after a re-fetch; refusing to read it")


def fetch_parts(fs: fsspec.AbstractFileSystem, path: str, url: str, spans: list[tuple[int, int, str]],
                stats: ReadStats, retries: int = 4, backoff: float = 0.1) -> list[memoryview]:
    """The bytes of consecutive parts [(start, end, sha256), ...] of the file at `path`, fetched as
    one ranged read and each checked against its sha256; errors as in `fetch_verified`."""
    first, last = spans[0][0], spans[-1][1]
    what = f"shard {url} bytes {first}..{last}"
    mismatches = attempt = 0
    while True:
        started = time.monotonic()
        try:
            data = fs.cat_file(path, start=first, end=last)
        except Exception as e:  # noqa: BLE001 - sorted as in fetch_verified
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
            view = memoryview(data)  # slices without copies: a run is up to 8 MiB
            parts = [view[a - first:b - first] for a, b, _ in spans]
            got = [hashlib.sha256(p).hexdigest() for p in parts]
            bad = [(a, b, want, g) for (a, b, want), g in zip(spans, got) if g != want]
            if not bad:
                stats.fetched_parts(len(data), len(spans), time.monotonic() - started)
                return parts
            a, b, want, got = bad[0]
            mismatch = f"bytes {a}..{b}: sha256 {got} does not match the manifest's shard index ({want})"
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
    with _local_write(directory):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fetch-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, fs.open(path, "rb", block_size=_CHUNK, cache_type="none") as src:
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                digest.update(chunk)
                with _local_write(directory):  # a full or read-only cache disk is no network hiccup
                    out.write(chunk)
                nbytes += len(chunk)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, digest.hexdigest(), nbytes


def _local_write(directory: str):
    return write_errors(LocalFileSystem(), directory)
