"""Concurrency with real processes (tests/concurrency_worker.py): readers sharing one shard cache under
eviction pressure; two writers moving tags in one catalog; a reader while a writer publishes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from s3_server import s3_server

from dsinspect.loaders import Catalog, RunSpec, WriteOptions, batch_indices
from dsinspect.loaders.store.storage import locked

sys.path.insert(0, str(Path(__file__).parent))
from concurrency_worker import FIELDS, rows  # noqa: E402

pytestmark = pytest.mark.slow  # real processes

WORKER = Path(__file__).with_name("concurrency_worker.py")
ROOT = str(Path(__file__).resolve().parents[1])


def start(role: str, cfg: dict, tmp: Path, name: str) -> tuple[subprocess.Popen, Path]:
    config, out = tmp / f"{name}.json", tmp / f"{name}.out.json"
    config.write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, str(WORKER), role, str(config), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out


def finish(proc: subprocess.Popen, out: Path, timeout: float = 240) -> dict:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{out.name}: exit {proc.returncode}\n{stderr[-3000:]}"
    return json.loads(out.read_text())


def run_cache_readers(tmp: Path, processes: int = 3) -> dict:
    """N processes read different orders of one dataset through one cache bounded to ~2 shards."""
    catalog = Catalog(str(tmp / "catalog"))
    version = catalog.write_version("shared", rows("c", 0, 240), FIELDS,
                                    options=WriteOptions(row_group_rows=10, shard_rows=30))
    shard_bytes = max(s.bytes for s in version.manifest.shards)
    cache = tmp / "cache"
    runs = []
    for p in range(processes):
        spec = RunSpec.create(catalog, "shared", seed=p, batch_size=6, world_size=2, shuffle="window", window_shards=1)
        cfg = {"catalog": catalog.url, "spec": spec.to_json(), "rank": p % 2, "steps": 40, "cache": str(cache),
               "max_bytes": 3 * shard_bytes}
        runs.append((spec, p % 2, *start("read", cfg, tmp, f"reader{p}")))
    hashes = [version.row_hash(i).hex() for i in range(version.num_rows)]
    figures = {"processes": processes, "batches": 0, "samples": 0, "evictions": 0, "misses": 0}
    for spec, rank, proc, out in runs:
        result = finish(proc, out)
        for b in result["batches"]:
            want = batch_indices(spec, b["step"], rank).tolist()
            assert b["indices"] == want
            assert b["rehashed"] == [hashes[i] for i in want], f"step {b['step']}: bytes read differ from the rows"
            assert b["stored"] == b["rehashed"]
            figures["batches"] += 1
            figures["samples"] += len(want)
        stats = result["stats"]
        figures["evictions"] += stats.get("cache_evictions", 0) or stats.get("evictions", 0)
        figures["misses"] += stats.get("cache_misses", 0)
    leftovers = [p.name for p in cache.iterdir() if p.name.startswith((".fetch-", ".convert-"))]
    assert not leftovers, f"temp files left in the cache: {leftovers}"
    return figures


def test_processes_share_a_bounded_cache_and_read_exact_rows(tmp_path):
    figures = run_cache_readers(tmp_path)
    print("shared cache figures:", figures)
    assert figures["batches"] == 120
    # 8 shards pass through a bound of ~3: at least 5 evictions, and some shard is fetched again
    assert figures["evictions"] >= 5 and figures["misses"] > 8, "the bound must force shards out and back in"


def run_taggers(tmp: Path, rounds: int = 12, url: str | None = None) -> dict:
    """Two processes write versions and move tags at once while a third resolves every tag."""
    catalog = Catalog(url or str(tmp / "catalog"))
    stop = tmp / "STOP"
    watcher = start("watcher", {"catalog": catalog.url, "dataset": "tags", "stop": str(stop)}, tmp, "watcher")
    taggers = [start("tagger", {"catalog": catalog.url, "dataset": "tags", "me": me, "rounds": rounds}, tmp, me)
               for me in ("a", "b")]
    written = {}
    for proc, out in taggers:
        written.update(finish(proc, out)["tags"])
    stop.write_text("")
    watched = finish(*watcher)
    assert watched["errors"] == 0, f"a reader saw a broken catalog: {watched['first_error']}"
    tags = Catalog(catalog.url).tags("tags")
    lost = sorted(set(written) - set(tags))
    assert not lost, f"{len(lost)} tag updates lost: {lost[:6]}"
    assert all(tags[t] == v for t, v in written.items())
    assert tags["moving"] in {written[f"{me}-r{rounds - 1}"] for me in ("a", "b")}, "moving = some writer's last"
    for vid in tags.values():  # every tag names a whole version
        Catalog(catalog.url).version("tags", vid)
    return {"tag_updates": 4 * rounds, "lost": len(lost), "reader_checks": watched["checks"]}


def test_two_writers_moving_tags_lose_no_update(tmp_path):
    figures = run_taggers(tmp_path)
    print("tagging figures:", figures)
    assert figures["reader_checks"] > 0


@pytest.mark.slow
def test_two_writers_moving_tags_on_s3_lose_no_update(tmp_path):
    """On an object store there is no lock: tags.json is replaced by a put conditional on the
    ETag just read, and the writer that lost the race re-reads and applies its change again."""
    with s3_server() as (server, url, _):
        figures = run_taggers(tmp_path, rounds=8, url=url)
        puts = sum(n for (method, key), n in server.counts().items() if method == "PUT" and key.endswith("tags.json"))
    print("tagging figures on S3:", figures, "tags.json puts:", puts)
    assert figures["lost"] == 0 and puts >= figures["tag_updates"]


def run_publish_while_reading(tmp: Path, rounds: int = 8) -> dict:
    catalog = Catalog(str(tmp / "catalog"))
    catalog.write_version("pub", rows("pub", -1, 60), FIELDS, options=WriteOptions(row_group_rows=10, shard_rows=20))
    stop = tmp / "STOP-pub"
    watcher = start("watcher", {"catalog": catalog.url, "dataset": "pub", "stop": str(stop)}, tmp, "pub-watcher")
    time.sleep(0.2)
    ids = finish(*start("publisher", {"catalog": catalog.url, "dataset": "pub", "rounds": rounds, "rows": 60,
                                      "shards": 3}, tmp, "publisher"))["ids"]
    stop.write_text("")
    watched = finish(*watcher)
    assert watched["errors"] == 0, f"the reader saw a half version: {watched['first_error']}"
    assert Catalog(catalog.url).tags("pub")["latest"] == ids[-1]
    return {"versions_published": rounds, "reader_checks": watched["checks"]}


def test_reader_sees_old_or_new_version_never_half(tmp_path):
    figures = run_publish_while_reading(tmp_path)
    print("publish figures:", figures)
    assert figures["reader_checks"] > 0


def test_tag_lock_serialises_read_modify_write(tmp_path):
    """The lock is exclusive between processes: a child cannot take it while this process holds it."""
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.write_version("t", rows("x", 0, 3), FIELDS)
    tags_path = catalog.layout.tags_file("t")
    probe = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
             "except BlockingIOError:\n    print('held')")
    with locked(catalog.fs, tags_path):
        inside = subprocess.run([sys.executable, "-c", probe, tags_path + ".lock"], capture_output=True, text=True)
    outside = subprocess.run([sys.executable, "-c", probe, tags_path + ".lock"], capture_output=True, text=True)
    assert (inside.stdout.strip(), outside.stdout.strip()) == ("held", "free")
