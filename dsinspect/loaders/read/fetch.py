"""Download one content-addressed file: stream to a temp file while hashing, retry transient
errors with backoff, re-fetch once on a hash mismatch, then fail naming the URL and both hashes."""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
import time

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dsinspect.errors import IntegrityError, NotFoundError, StorageError, UserError
from dsinspect.loaders.read.stats import ReadStats
from dsinspect.loaders.store.storage import write_errors

__all__ = ["fetch_verified", "TRANSIENT"]

_CHUNK = 4 << 20
# Errors worth another try: anything the storage client raises (network and server hiccups, a
# checksum the client itself rejects), except a missing file or a refused permission.
TRANSIENT: tuple[type[BaseException], ...] = (Exception,)


def fetch_verified(fs: fsspec.AbstractFileSystem, path: str, url: str, sha256: str, size: int, directory: str,
                   stats: ReadStats, retries: int = 4, backoff: float = 0.1) -> str:
    """A local temp file in `directory` holding exactly the bytes whose sha256 is `sha256`."""
    mismatches = 0
    attempt = 0
    while True:
        started = time.monotonic()
        try:
            tmp, got, nbytes = _download(fs, path, directory)
        except FileNotFoundError:
            raise NotFoundError(f"shard {url} is missing from storage") from None
        except PermissionError as e:
            raise UserError(f"shard {url}: permission denied ({e})") from None
        except StorageError:
            raise  # the local cache cannot be written: retrying the download would not help
        except TRANSIENT as e:
            if attempt >= retries:
                raise IntegrityError(f"shard {url}: fetch failed after {attempt + 1} tries: "
                                     f"{e.__class__.__name__}: {e}") from None
            attempt += 1
            stats.add("retries")
            time.sleep(backoff * (2 ** (attempt - 1)) * (1 + random.random()))
            continue
        if got == sha256 and nbytes == size:
            stats.fetched(nbytes, time.monotonic() - started)
            return tmp
        os.unlink(tmp)
        stats.add("verify_failures")
        mismatches += 1
        if mismatches > 1:
            raise IntegrityError(f"shard {url}: sha256 {got} ({nbytes} bytes) does not match the manifest's "
                                 f"{sha256} ({size} bytes), also after a re-fetch; refusing to read it")


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
