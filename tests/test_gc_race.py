"""gc beside writers in flight (store/leases.py): whatever the grace, gc never removes a shard a commit is
about to publish, and a commit never publishes a manifest naming a shard that is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from s3_server import s3_server

from dsinspect.errors import IntegrityError
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.gc import find_garbage, remove_garbage
from dsinspect.loaders.store.leases import collecting
from dsinspect.loaders.store.verify import verify_version

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text")]
WORKER = Path(__file__).with_name("gc_race_worker.py")
ROOT = str(Path(__file__).resolve().parents[1])


def env() -> dict[str, str]:
    """This process's environment (an S3 server's, when one is set) with the tree under test first."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}


def gc_in_another_process(url: str) -> dict:
    """`dsinspect gc --apply --older-than 0` as a user runs it, in a process of its own."""
    done = subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", url, "gc", "--apply", "--older-than", "0",
                           "--json"], capture_output=True, text=True, env=env(), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def a_writer_between_its_shards_and_its_manifest(catalog: Catalog):
    """A writer whose one shard is published and named by no manifest yet: (writer, the shard's path)."""
    writer = catalog.writer("d", FIELDS, key="id")
    writer.write([{"id": i, "text": f"row {i}"} for i in range(50)])
    writer.close_shard()
    [shard] = [p for p in catalog.fs.ls(catalog.layout.shards("d"), detail=False) if p.endswith(".parquet")]
    return writer, shard


@pytest.fixture(params=["local", "s3"])
def shared_catalog(request, tmp_path):
    """A catalog another process can open: a local folder, or S3 on loopback (moto's server)."""
    if request.param == "local":
        yield Catalog(str(tmp_path / "catalog"))
        return
    with s3_server() as (_, url, _):
        yield Catalog(url)


def test_gc_with_no_grace_in_another_process_keeps_what_a_writer_is_about_to_commit(shared_catalog):
    writer, _ = a_writer_between_its_shards_and_its_manifest(shared_catalog)
    report = gc_in_another_process(shared_catalog.url)
    version = writer.commit()
    assert verify_version(Catalog(shared_catalog.url).version("d", version.id)).ok
    assert report["busy"] == ["d"] and report["removed"] == []
    # once the write has ended the dataset is collected again (nothing is garbage: the version is whole)
    assert gc_in_another_process(shared_catalog.url)["busy"] == []


def test_in_process_catalog_keeps_gc_out_through_lease_objects():
    catalog = Catalog(f"memory://gc-race-{uuid.uuid4().hex}")
    writer, _ = a_writer_between_its_shards_and_its_manifest(catalog)
    removal = remove_garbage(catalog, find_garbage(catalog, grace_hours=0))
    assert removal.busy == ["d"] and removal.removed == []
    assert verify_version(writer.commit()).ok
    assert not catalog.fs.find(catalog.layout.leases("d")), "the writer's lease object outlived its commit"


def test_a_commit_refuses_a_manifest_naming_a_shard_that_is_gone(catalog):
    writer, shard = a_writer_between_its_shards_and_its_manifest(catalog)
    catalog.fs.rm_file(shard)  # removed behind dsinspect's back
    name = shard.rsplit("/", 1)[-1]
    with pytest.raises(IntegrityError, match=f"{name} is gone, so the version was not published"):
        writer.commit()
    assert not catalog.fs.exists(catalog.layout.versions("d")) and not catalog.fs.exists(catalog.layout.tags_file("d"))


def test_a_writer_waits_while_a_gc_collects_its_dataset():
    """The other half of the handshake on object stores: a gc marker put first holds a new writer back."""
    catalog = Catalog(f"memory://gc-race-{uuid.uuid4().hex}")
    catalog.write_version("d", [{"id": 0, "text": "a"}], FIELDS)
    done = threading.Event()

    def write() -> None:
        catalog.write_version("d", [{"id": 1, "text": "b"}], FIELDS)
        done.set()

    with collecting(catalog.fs, catalog.layout, "d") as free:
        assert free
        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60  # the writer's lease appears; it publishes nothing while gc collects
        while not [p for p in catalog.fs.ls(catalog.layout.leases("d"), detail=False) if "/w-" in p]:
            assert time.monotonic() < deadline, "the writer never put its lease"
            time.sleep(0.01)
        assert not done.is_set() and len(catalog.version_ids("d")) == 1
    thread.join(60)
    assert done.is_set() and len(catalog.version_ids("d")) == 2


@pytest.mark.slow
def test_gc_with_no_grace_in_a_loop_beside_concurrent_ingests_never_tears_a_version(tmp_path):
    """What outside testing saw: gc --older-than 0 in a loop beside live ingests tore published
    versions (a shard removed 0.5 ms before the manifest naming it was written)."""
    url, stop = str(tmp_path / "catalog"), tmp_path / "STOP"
    Catalog(url).write_version("d", [{"id": 0, "text": "seed"}], FIELDS)

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(WORKER), *args], env=env(), stderr=subprocess.PIPE, text=True)

    collector = start("gc", url, str(stop), str(tmp_path / "gc.json"))
    ingests = [start("ingest", url, "d", f"w{w}", "12", str(tmp_path / "src"), str(tmp_path / f"w{w}.json"))
               for w in range(2)]
    for proc in ingests:
        assert proc.wait(600) == 0, proc.stderr.read()
    stop.touch()
    assert collector.wait(120) == 0, collector.stderr.read()
    results = [json.loads((tmp_path / f"w{w}.json").read_text()) for w in range(2)]
    catalog = Catalog(url)
    torn = [vid[:12] for vid in catalog.version_ids("d") if not verify_version(catalog.version("d", vid)).ok]
    assert torn == [], f"published versions torn by gc: {torn}"
    assert [r["errors"] for r in results] == [[], []]  # no ingest failed either (gc removed no spool file)
    published = [v for r in results for v in r["published"]]
    assert len(published) == 24 and set(published) <= set(catalog.version_ids("d"))
