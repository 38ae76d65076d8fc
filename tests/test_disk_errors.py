"""Disk full, permission denied and read-only catalogs, produced for real: a size-limited tmpfs
(ENOSPC), a read-only bind mount (EROFS), and a write-protected tree written by a process without
CAP_DAC_OVERRIDE (`setpriv`, so root is refused too: EACCES). Every failure is one clear line naming
the path (CLI exit 2), and leaves no partial state: no temp files, no orphan manifest, tags unchanged.
Leftover shard files are allowed only whole and unreferenced (content-addressed, harmless).
The commands run in this process (tests/cli_inprocess.py; the test process writes to the same mounts) except
where the process is the subject: an ingest on a full disk and `ls` of a read-only catalog from real
processes (exit codes as a shell sees them), and everything run without CAP_DAC_OVERRIDE (`setpriv`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from cli_inprocess import run_cli

from dsinspect.errors import DsinspectError, StorageError
from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions
from dsinspect.loaders.read.cache import ShardCache

pytestmark = pytest.mark.slow  # real mounts, and some real CLI processes

ROOT = str(Path(__file__).resolve().parents[1])
FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("payload", pa.binary(), "bytes")]
PAGE = 4096


def rows(n: int, size: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)  # incompressible bytes: the file sizes are what we ask for
    return [{"id": i, "payload": rng.randbytes(size)} for i in range(n)]


# -- real failing filesystems ----------------------------------------------------------------------

def _mount(args: list[str]) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs / read-only bind needs root")
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"mount not permitted here: {done.stderr.strip()}")


@contextlib.contextmanager
def tmpfs(path: Path, size: int):
    """A tmpfs of `size` bytes at `path`: writes beyond it fail with ENOSPC."""
    path.mkdir(parents=True, exist_ok=True)
    _mount(["-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)])
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def read_only(path: Path):
    """`path` bind-mounted read-only over itself: writes fail with EROFS."""
    _mount(["--bind", str(path), str(path)])
    try:
        done = subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"read-only remount not permitted: {done.stderr.strip()}")
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path, leave_pages: int = 0) -> None:
    """Fill the filesystem of `directory`, leaving about `leave_pages` free pages."""
    with open(directory / "filler", "wb") as f:
        chunk = b"\0" * (64 * PAGE)
        with contextlib.suppress(OSError):
            while os.statvfs(directory).f_bavail > leave_pages + 64:
                f.write(chunk)
                f.flush()
        with contextlib.suppress(OSError):
            while os.statvfs(directory).f_bavail > leave_pages:
                f.write(b"\0" * PAGE)
                f.flush()


def unprivileged(cmd: list[str]) -> list[str]:
    """`cmd` run so that file permissions apply to it, root included (no CAP_DAC_OVERRIDE)."""
    if os.geteuid() != 0:
        return cmd
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop root's permission override")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", *cmd]


def cli(*args: str, catalog: Catalog | None = None) -> subprocess.CompletedProcess:
    """`dsinspect ARGS`, run in this process (COLUMNS=200): a CompletedProcess."""
    return run_cli(*(["--catalog", catalog.url] if catalog else []), *args, env={"COLUMNS": "200"}, unset=())


def cli_process(*args: str, catalog: Catalog | None = None, privileged: bool = True) -> subprocess.CompletedProcess:
    """`dsinspect ARGS` in a real process; with `privileged=False`, one without root's permission override."""
    cmd = [sys.executable, "-m", "dsinspect", *(["--catalog", catalog.url] if catalog else []), *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
           "COLUMNS": "200"}
    return subprocess.run(cmd if privileged else unprivileged(cmd), capture_output=True, text=True, env=env,
                          timeout=120)


def assert_one_line_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    err = done.stderr.strip()
    assert done.returncode == 2, f"exit {done.returncode}\n{done.stdout}\n{err}"
    assert "Traceback" not in err and err.count("\n") == 0, f"not one line:\n{err}"
    for needle in needles:
        assert needle in err, f"{needle!r} not in: {err}"
    return err


# -- what "no partial state" means -----------------------------------------------------------------

def catalog_state(catalog: Catalog, name: str) -> dict:
    """The visible state: version ids, tags, and every file (relative path -> sha256)."""
    files = {}
    for path in Path(catalog.root).rglob("*"):
        if path.is_file() and path.name != "filler":
            files[str(path.relative_to(catalog.root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"versions": Catalog(catalog.url).version_ids(name), "tags": Catalog(catalog.url).tags(name), "files": files}


def assert_unchanged(before: dict, catalog: Catalog, name: str) -> None:
    after = catalog_state(catalog, name)
    assert after["versions"] == before["versions"], "a version appeared or vanished"
    assert after["tags"] == before["tags"], "tags changed"
    temps = [f for f in after["files"] if Path(f).name.startswith((".tmp", ".fetch-", ".convert-"))]
    assert not temps, f"temp files left behind: {temps}"
    for path, digest in after["files"].items():
        if path in before["files"]:
            assert before["files"][path] == digest, f"{path} changed"
        else:  # only a whole, unreferenced shard (and its index) may stay (harmless; content-addressed)
            referenced = {s.sha256 for v in before["versions"] for s in catalog.version(name, v).manifest.shards}
            if path.endswith(".index.json"):  # named after its shard, a pure function of it
                sha = Path(path).name[:-len(".index.json")]
                assert "/shards/" in path and sha not in referenced, f"partial state left: {path}"
                assert any(Path(p).stem == sha and after["files"][p] == sha for p in after["files"]), path
                continue
            assert "/shards/" in path and Path(path).stem == digest, f"partial state left: {path}"
            assert digest not in referenced


# -- disk full (ENOSPC) ----------------------------------------------------------------------------

@pytest.fixture
def full_catalog(tmp_path):
    """A catalog on a 1 MiB tmpfs holding one small version tagged v1."""
    with tmpfs(tmp_path / "disk", 1 << 20) as disk:
        catalog = Catalog(str(disk / "catalog"))
        version = catalog.write_version("d", rows(20, 100), FIELDS)
        catalog.set_tag("d", "v1", version.id)
        yield catalog


def test_writing_a_version_on_a_full_disk(full_catalog):
    before = catalog_state(full_catalog, "d")
    with pytest.raises(StorageError) as caught:  # ~2 MiB of rows into a 1 MiB disk
        full_catalog.write_version("d", rows(64, 32 << 10, seed=1), FIELDS, options=WriteOptions(row_group_rows=8))
    message = str(caught.value)
    assert "\n" not in message and "No space left on device (ENOSPC)" in message
    assert f"{full_catalog.root}/datasets/d/shards/" in message, message
    assert_unchanged(before, full_catalog, "d")


def test_ingest_on_a_full_disk_is_one_line_and_changes_nothing(tmp_path, full_catalog):
    source = tmp_path / "rows.jsonl"
    rng = random.Random(5)
    source.write_text("".join(json.dumps({"id": i, "text": rng.randbytes(24000).hex()}) + "\n" for i in range(64)))
    before = catalog_state(full_catalog, "d")
    done = cli_process("ingest", str(source), "d", "--engine", "inline", catalog=full_catalog)  # exit 2 from a shell
    assert_one_line_error(done, f"{full_catalog.root}/datasets/d/shards", "No space left on device (ENOSPC)")
    assert_unchanged(before, full_catalog, "d")


def test_tagging_on_a_full_disk_is_one_line_and_changes_nothing(full_catalog):
    before = catalog_state(full_catalog, "d")
    fill(Path(full_catalog.root).parent)
    done = cli("tag", f"d@{before['versions'][0][:12]}", "v2", catalog=full_catalog)
    assert_one_line_error(done, f"{full_catalog.root}/datasets/d/tags.json", "ENOSPC")
    assert_unchanged(before, full_catalog, "d")


def test_publishing_on_a_full_disk_leaves_no_orphan_manifest(tmp_path, full_catalog):
    """The shard fits, then the manifest does not, or the manifest fits and tags.json does not:
    either way the version must not appear."""
    disk = Path(full_catalog.root).parent
    for extra in (0, 1):  # 0: the manifest fails; 1: the manifest fits, tags.json fails
        new_rows = rows(3, 3000, seed=2 + extra)  # new content each time: a shard left before is not reused
        scratch = Catalog(str(tmp_path / f"scratch{extra}")).write_version("d", new_rows, FIELDS)
        shard_pages = -(-scratch.manifest.shards[0].bytes // PAGE)
        before = catalog_state(full_catalog, "d")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(disk / "filler")
        fill(disk, leave_pages=shard_pages + 1 + extra)  # + 1: the shard's index
        with pytest.raises(StorageError, match="ENOSPC") as caught:
            Catalog(full_catalog.url).write_version("d", new_rows, FIELDS)
        where = "versions/" if extra == 0 else "tags.json"
        assert where in str(caught.value), f"{extra} extra pages: {caught.value}"
        assert_unchanged(before, full_catalog, "d")


def test_replay_export_to_a_full_disk(tmp_path, full_catalog):
    spec = tmp_path / "run.json"
    spec.write_text(RunSpec.create(full_catalog, "d", batch_size=4).dumps())
    ok = cli("replay", "--spec", str(spec), "--step", "1", "--export", str(tmp_path / "ok"), catalog=full_catalog)
    assert ok.returncode == 0, ok.stderr
    parquet = next((tmp_path / "ok").glob("*.parquet")).stat().st_size
    with tmpfs(tmp_path / "small", 1 << 20) as disk:
        for leave in (0, -(-parquet // PAGE)):  # nothing fits; the Parquet fits and its receipt does not
            os.makedirs(disk / "out", exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(disk / "filler")
            fill(disk, leave_pages=leave)
            out = str(disk / "out")
            done = cli("replay", "--spec", str(spec), "--step", "1", "--export", out, catalog=full_catalog)
            assert_one_line_error(done, str(disk / "out"), "ENOSPC")
            assert sorted(os.listdir(disk / "out")) == [], f"left behind with {leave} free pages"


def fill_cache_on_full_disk(tmp_path: Path) -> tuple[DsinspectError, Path, list[str]]:
    """Read a 320 KiB dataset through a shard cache on a 64 KiB disk: the error and the leftovers."""
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.write_version("big", rows(40, 8 << 10, seed=3), FIELDS, options=WriteOptions(row_group_rows=10))
    with tmpfs(tmp_path / "cache", 64 << 10) as disk:
        spec = RunSpec.create(catalog, "big", batch_size=4)
        with pytest.raises(DsinspectError) as caught:
            with Loader(spec, 0, catalog, cache=ShardCache(disk, retries=0)) as loader:
                for _ in loader:  # the first batch reads the local store in place: the fills write
                    pass
        left = [p.name for p in disk.iterdir() if p.name.startswith((".fetch-", ".convert-", ".tmp"))]
        return caught.value, disk, left


def test_filling_the_shard_cache_on_a_full_disk(tmp_path):
    error, _, left = fill_cache_on_full_disk(tmp_path)
    assert "\n" not in str(error) and "No space left on device" in str(error)
    assert not left, f"temp files left in the cache: {left}"


def test_a_full_cache_disk_is_a_storage_error_naming_the_cache(tmp_path):
    error, disk, _ = fill_cache_on_full_disk(tmp_path)
    assert isinstance(error, StorageError) and error.exit_code == 2
    assert str(disk) in str(error)


# -- read-only catalog (EROFS) ---------------------------------------------------------------------

def test_read_only_catalog_reads_and_refuses_writes_cleanly(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    version = catalog.write_version("d", rows(20, 100), FIELDS)
    catalog.set_tag("d", "v1", version.id)
    before = catalog_state(catalog, "d")
    with read_only(Path(catalog.root)):
        for args in (["ls"], ["info", "d@v1"], ["verify", "d@v1"], ["show", "d@v1:3"]):
            run = cli_process if args == ["ls"] else cli  # `ls`: from a real process
            done = run(*args, catalog=catalog)
            assert done.returncode == 0, f"{args} on a read-only catalog: {done.stderr}"
        assert_one_line_error(cli("tag", "d@v1", "v2", catalog=catalog), f"{catalog.root}/datasets/d/tags.json",
                              "Read-only file system (EROFS)")
        with pytest.raises(StorageError, match=r"Read-only file system \(EROFS\)"):
            Catalog(catalog.url).write_version("d", rows(5, 10, seed=4), FIELDS)
        assert_unchanged(before, catalog, "d")


# -- permission denied (EACCES) --------------------------------------------------------------------

@pytest.fixture
def shared_tmp():
    """A directory other processes can traverse (pytest's tmp_path is private to its owner)."""
    path = Path(tempfile.mkdtemp(prefix="dsinspect-eacces-"))
    path.chmod(0o755)
    yield path
    for p in [path, *path.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(path)


def write_protect(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


WRITE_SCRIPT = ("import sys\nfrom dsinspect.loaders import Catalog, Field\nimport pyarrow as pa\n"
                "from dsinspect.errors import DsinspectError\n"
                "fields = [Field('id', pa.int64(), 'scalar', nullable=False), Field('payload', pa.binary(), 'bytes')]\n"
                "try:\n    Catalog(sys.argv[1]).write_version('d', [{'id': 1, 'payload': b'x'}], fields)\n"
                "except DsinspectError as e:\n    print(f'{type(e).__name__}: {e}', file=sys.stderr); sys.exit(2)\n")


def run_write(catalog: Catalog) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run(unprivileged([sys.executable, "-c", WRITE_SCRIPT, catalog.url]), capture_output=True,
                          text=True, env=env, timeout=120)


def test_permission_denied_catalog(shared_tmp):
    catalog = Catalog(str(shared_tmp / "catalog"))
    version = catalog.write_version("d", rows(20, 100), FIELDS)
    catalog.set_tag("d", "v1", version.id)
    before = catalog_state(catalog, "d")
    write_protect(Path(catalog.root))
    assert_one_line_error(cli_process("tag", "d@v1", "v2", catalog=catalog, privileged=False),
                          f"{catalog.root}/datasets/d/tags.json", "Permission denied (EACCES)")
    done = run_write(catalog)
    assert done.returncode == 2 and "StorageError: cannot write" in done.stderr and "EACCES" in done.stderr, done.stderr
    assert_unchanged(before, catalog, "d")


def test_tags_that_cannot_be_written_take_the_new_manifest_back(shared_tmp):
    """Shards and manifest written, tags.json refused: the manifest is removed again."""
    catalog = Catalog(str(shared_tmp / "catalog"))
    catalog.write_version("d", rows(20, 100), FIELDS)
    before = catalog_state(catalog, "d")
    dataset = Path(catalog.layout.dataset("d"))
    dataset.chmod(0o555)  # versions/ and shards/ stay writable; tags.json (renamed in here) does not
    done = run_write(catalog)
    assert done.returncode == 2 and f"{dataset}/tags.json" in done.stderr and "EACCES" in done.stderr, done.stderr
    assert_unchanged(before, catalog, "d")
