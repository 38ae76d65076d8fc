"""The error tree a caller can act on: which type means what and exits how, retries only for
transient storage errors (the shard fetch and the catalog's metadata reads), and pyarrow's exceptions
turned into ours in one place."""

import errno
import hashlib
import http.client
import io
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dsinspect import errors
from dsinspect.errors import (
    DamagedError,
    DsinspectError,
    IntegrityError,
    ManifestError,
    NotFoundError,
    RetriesExhausted,
    StorageError,
    UserError,
)
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, UNREADABLE, arrow_error
from dsinspect.loaders.format.arrow_types import type_from_json
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.read.fetch import fetch_verified
from dsinspect.loaders.read.stats import ReadStats
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.faults import FaultSpec, FaultyFileSystem
from dsinspect.loaders.store.transient import is_transient

DATA = b"shard bytes " * 100
SHA = hashlib.sha256(DATA).hexdigest()


# -- the tree --------------------------------------------------------------------------------------

def test_each_kind_of_failure_has_its_branch_and_exit_code():
    assert [(cls, cls.exit_code) for cls in (UserError, NotFoundError, ManifestError, StorageError,
                                            RetriesExhausted, IntegrityError, DamagedError)] == [
        (UserError, 2), (NotFoundError, 2), (ManifestError, 2), (StorageError, 2), (RetriesExhausted, 1),
        (IntegrityError, 1), (DamagedError, 1)]
    assert not issubclass(StorageError, UserError), "a disk that refused a write is not a user mistake"
    assert issubclass(RetriesExhausted, StorageError) and not issubclass(RetriesExhausted, IntegrityError)
    assert issubclass(DamagedError, ManifestError) and issubclass(DamagedError, IntegrityError)
    for cls in (UserError, NotFoundError, ManifestError, StorageError, RetriesExhausted, IntegrityError, DamagedError):
        assert issubclass(cls, DsinspectError) and cls.__name__ in errors.__all__
        doc = " ".join(cls.__doc__.split())
        assert f"exit {cls.exit_code}" in doc, f"{cls.__name__}'s docstring names its exit code"


# -- which errors are transient ----------------------------------------------------------------------

def _botocore_error(code: str, status: int):
    botocore = pytest.importorskip("botocore.exceptions")
    response = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return botocore.ClientError(response, "GetObject")


def _as_s3fs_raises(error: Exception) -> Exception:
    s3fs_errors = pytest.importorskip("s3fs.errors")
    return s3fs_errors.translate_boto_error(error)


def _aiohttp_status(status: int) -> Exception:
    aiohttp = pytest.importorskip("aiohttp")
    return aiohttp.ClientResponseError(None, (), status=status, message="m")


@pytest.mark.parametrize("make", [
    lambda: TimeoutError("read timed out"),
    lambda: ConnectionResetError(errno.ECONNRESET, "reset by peer"),
    lambda: BrokenPipeError(errno.EPIPE, "broken pipe"),
    lambda: OSError(errno.EIO, "i/o error"),
    lambda: http.client.IncompleteRead(b"part", 100),  # a short read
    lambda: _as_s3fs_raises(_botocore_error("SlowDown", 503)),  # OSError(EBUSY) from a ClientError
    lambda: _as_s3fs_raises(_botocore_error("InternalError", 500)),  # OSError(EREMOTEIO)
    lambda: _as_s3fs_raises(_botocore_error("SomethingNew", 502)),  # OSError(EIO)
    lambda: _botocore_error("Throttling", 400),  # untranslated: the error code says "later"
    lambda: _aiohttp_status(503),
    lambda: _aiohttp_status(429),
], ids=["timeout", "reset", "pipe", "eio", "short-read", "s3-slowdown", "s3-500", "s3-unknown-5xx",
        "throttling-code", "http-503", "http-429"])
def test_network_and_server_hiccups_are_transient(make):
    assert is_transient(make())


@pytest.mark.parametrize("make", [
    lambda: FileNotFoundError(errno.ENOENT, "no such key"),
    lambda: PermissionError(errno.EACCES, "access denied"),
    lambda: IsADirectoryError(errno.EISDIR, "a directory"),
    lambda: OSError(errno.EINVAL, "invalid argument"),
    lambda: ValueError("a bug of ours"),
    lambda: KeyError("a bug of ours"),
    lambda: UserError("bad input"),
    lambda: StorageError("cannot write /cache: No space left on device (ENOSPC)"),
    lambda: _as_s3fs_raises(_botocore_error("AccessDenied", 403)),
    lambda: _as_s3fs_raises(_botocore_error("NoSuchKey", 404)),
    lambda: _aiohttp_status(404),
], ids=["missing", "forbidden", "directory", "einval", "value-error", "key-error", "user-error", "storage-error",
        "s3-403", "s3-404", "http-404"])
def test_final_answers_and_bugs_are_not_transient(make):
    assert not is_transient(make())


def test_every_error_the_fault_injector_raises_is_transient(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 10)
    fs = FaultyFileSystem(spec=FaultSpec(seed=0, error=0.5, timeout=0.5))
    seen = set()
    for _ in range(60):
        try:
            fs.cat_file(str(tmp_path / "f"))
        except Exception as e:  # noqa: BLE001 - each is checked below
            assert is_transient(e), repr(e)
            seen.add(type(e))
    assert seen == {ConnectionResetError, ConnectionError, OSError, TimeoutError}, seen


# -- the shard fetch: retried only when transient ----------------------------------------------------

class Scripted:
    """An fsspec-like filesystem whose `open` raises the given errors in turn, then serves DATA."""

    def __init__(self, *errors: Exception, data: bytes = DATA):
        self.errors, self.data, self.opens = list(errors), data, 0

    def open(self, path, mode="rb", **kwargs):
        self.opens += 1
        if self.errors:
            raise self.errors.pop(0)
        return io.BytesIO(self.data)


def fetch(fs, tmp_path, retries=4) -> tuple[str, ReadStats]:
    stats = ReadStats()
    return fetch_verified(fs, "bucket/s.parquet", "s3://bucket/s.parquet", SHA, len(DATA), str(tmp_path), stats,
                          retries=retries, backoff=0.0), stats


@pytest.mark.parametrize("error, raised", [(ValueError("a bug in our code"), ValueError),
                                           (OSError(errno.EINVAL, "bad request"), StorageError),
                                           (PermissionError(errno.EACCES, "access denied"), StorageError),
                                           (FileNotFoundError(errno.ENOENT, "no such key"), NotFoundError)])
def test_a_fetch_fails_at_once_on_an_error_that_is_not_transient(tmp_path, error, raised):
    """The old code retried every exception (TRANSIENT = (Exception,)): a bug was tried 5 times with backoff."""
    fs = Scripted(error, error, error, error, error)
    with pytest.raises(raised) as caught:
        fetch(fs, tmp_path)
    assert fs.opens == 1, "tried again"
    if raised is StorageError:
        assert "s3://bucket/s.parquet" in str(caught.value) and caught.value.exit_code == 2
    assert [p.name for p in tmp_path.iterdir()] == [], "a temp file left behind"


def test_a_fetch_retries_transient_errors_then_reads(tmp_path):
    fs = Scripted(ConnectionResetError(errno.ECONNRESET, "reset"), TimeoutError("slow"))
    path, stats = fetch(fs, tmp_path)
    assert Path(path).read_bytes() == DATA
    assert fs.opens == 3 and stats.snapshot()["retries"] == 2


def test_a_fetch_out_of_retries_is_retries_exhausted_naming_the_shard(tmp_path):
    fs = Scripted(*[OSError(errno.EIO, "injected")] * 10)
    with pytest.raises(RetriesExhausted, match=r"s3://bucket/s\.parquet: fetch failed after 3 tries") as caught:
        fetch(fs, tmp_path, retries=2)
    assert fs.opens == 3 and caught.value.exit_code == 1 and not isinstance(caught.value, IntegrityError)


def test_a_checksum_the_storage_client_rejects_is_damage_in_transit(tmp_path):
    """botocore's FlexibleChecksumError: re-fetched once like a sha256 mismatch, then an IntegrityError."""
    class FlexibleChecksumError(Exception):
        pass

    fs = Scripted(FlexibleChecksumError("Expected checksum a did not match calculated checksum: b"))
    path, stats = fetch(fs, tmp_path)
    assert Path(path).read_bytes() == DATA and stats.snapshot()["verify_failures"] == 1

    fs = Scripted(*[FlexibleChecksumError("Expected checksum a did not match")] * 10)
    with pytest.raises(IntegrityError, match="checksum check failed.*also after a re-fetch"):
        fetch(fs, tmp_path)
    assert fs.opens == 2


# -- the catalog's metadata reads: the same rule ---------------------------------------------------

@pytest.fixture
def catalog(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.write_version("d", [{"id": i} for i in range(4)], [Field("id", pa.int64(), "scalar")])
    return catalog


def test_catalog_metadata_reads_retry_transient_errors_then_give_up(catalog):
    catalog.fs = FaultyFileSystem(catalog.fs, FaultSpec(error=1.0, match="*tags.json"))
    with pytest.raises(RetriesExhausted, match="tags.json after 4 tries"):
        catalog.tags("d")
    assert catalog.fs.stats.faults["error"] == 4


def test_catalog_metadata_reads_fail_at_once_on_a_final_error(catalog):
    inner = catalog.fs

    class Refusing(FaultyFileSystem):
        calls = 0

        def cat_file(self, path, start=None, end=None, **kwargs):
            Refusing.calls += 1
            raise OSError(errno.EINVAL, "bad request")

    catalog.fs = Refusing(inner)
    with pytest.raises(StorageError, match="tags.json: OSError") as caught:
        catalog.tags("d")
    assert Refusing.calls == 1 and caught.value.exit_code == 2


# -- pyarrow's exceptions, translated in one place ----------------------------------------------------

def test_arrow_error_keeps_the_sites_words_on_one_line():
    error = arrow_error(pa.ArrowInvalid("bad\nthing  here\n"), "cannot read x.parquet as Parquet")
    assert type(error) is UserError and str(error) == "cannot read x.parquet as Parquet: bad thing here"
    assert type(arrow_error(ValueError("v"), "shard 0", IntegrityError)) is IntegrityError


def test_the_two_kinds_catch_what_pyarrow_raises():
    with pytest.raises(NOT_CONVERTIBLE):
        pa.array([2 ** 70], pa.int64())  # OverflowError from pyarrow's Python-side conversion
    with pytest.raises(NOT_CONVERTIBLE):
        pa.array(["x"]).cast(pa.int64())  # ArrowInvalid
    with pytest.raises(UNREADABLE):
        pq.ParquetFile(pa.BufferReader(b"PAR1 not really parquet PAR1"))


def test_a_type_too_large_for_arrow_is_a_manifest_error_not_a_crash():
    """The old code caught ArrowInvalid/ValueError/TypeError here; an OverflowError escaped as a traceback."""
    for j in ({"type": "fixed_size_binary", "width": 2 ** 70},
              {"type": "fixed_size_list", "item": "int64", "size": 2 ** 70}):
        with pytest.raises(ManifestError, match=f"manifest: bad '{j['type']}' type: "):
            type_from_json(j)


def test_a_site_keeps_its_words(tmp_path):
    catalog = Catalog(str(tmp_path / "c"))
    with pytest.raises(UserError, match=r"dataset 'd': rows do not fit the schema: "):
        catalog.write_version("d", [{"id": "not a number"}], [Field("id", pa.int64(), "scalar")])


# -- the CLI ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("raised, code, line", [
    ("ConnectionResetError(104, 'reset\\nby peer')", 2,
     "dsinspect: error: ConnectionResetError: [Errno 104] reset by peer"),
    ("__import__('dsinspect.errors').errors.RetriesExhausted('shard s3://b/s: fetch failed after 5 tries')", 1,
     "dsinspect: error: shard s3://b/s: fetch failed after 5 tries"),
    ("__import__('dsinspect.errors').errors.StorageError('cannot write /x: Permission denied (EACCES)')", 2,
     "dsinspect: error: cannot write /x: Permission denied (EACCES)"),
])
def test_the_cli_ends_every_error_in_one_line_and_its_exit_code(raised, code, line):
    script = ("import dsinspect.cli as c\n"
              "class Raising:\n"
              f"    def main(self, **kwargs): raise {raised}\n"
              "c.cli = Raising()\n"
              "c.main([])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == code and done.stderr.strip() == line, (done.returncode, done.stderr)
