"""One process of a concurrency scenario (tests/test_concurrency.py, benchmarks/soak.py).

    python tests/concurrency_worker.py ROLE CONFIG.json OUT.json

Roles:
- read:    read every step of a run spec through a ShardCache with a small byte bound; for each batch
           write its indices and the hashes recomputed from the bytes it got (not the stored ones).
- tagger:  write `rounds` versions and after each one set a tag of its own plus the shared `moving` tag.
- watcher: until STOP exists, resolve every tag of the dataset and re-hash the rows of `latest`.
- publisher: publish `rounds` versions, each of `shards` shards whose rows all carry the version's number.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.read.cache import ShardCache

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("owner", pa.string(), "text"),
          Field("round", pa.int64(), "scalar", nullable=False), Field("payload", pa.binary(), "bytes")]
NAMES = [f.name for f in FIELDS]


def rows(owner: str, round_: int, n: int) -> list[dict]:
    return [{"id": i, "owner": owner, "round": round_, "payload": bytes([(i + round_) % 251]) * (50 + i % 17)}
            for i in range(n)]


def read(cfg: dict) -> dict:
    catalog = Catalog(cfg["catalog"])
    spec = RunSpec.from_json(cfg["spec"])
    cache = ShardCache(cfg["cache"], max_bytes=cfg["max_bytes"])
    batches = []
    with Loader(spec, cfg["rank"], catalog, cache=cache) as loader:
        for step in range(cfg["steps"]):
            batch = loader.batch_at(step)
            rehashed = row_hashes(batch.table, NAMES)  # from the bytes this process actually got
            batches.append({"step": step, "indices": batch.indices.tolist(),
                            "rehashed": [h.hex() for h in rehashed],
                            "stored": [h.hex() for h in batch.row_hashes]})
    return {"batches": batches, "stats": cache.stats.snapshot()}


def tagger(cfg: dict) -> dict:
    catalog = Catalog(cfg["catalog"])
    me, written = cfg["me"], {}
    for r in range(cfg["rounds"]):
        version = catalog.write_version(cfg["dataset"], rows(me, r, 20), FIELDS, message=f"{me} {r}",
                                        options=WriteOptions(row_group_rows=10))
        catalog.set_tag(cfg["dataset"], f"{me}-r{r}", version.id)
        catalog.set_tag(cfg["dataset"], "moving", version.id)
        written[f"{me}-r{r}"] = version.id
    return {"tags": written}


def watcher(cfg: dict) -> dict:
    """Every tag resolves to a whole version; latest's rows re-hash to their stored hashes."""
    catalog = Catalog(cfg["catalog"])
    checks = errors = 0
    first_error = None
    while not os.path.exists(cfg["stop"]):
        try:
            if catalog._exists(cfg["dataset"]):
                tags = catalog.tags(cfg["dataset"])
                for vid in tags.values():
                    Catalog(cfg["catalog"]).version(cfg["dataset"], vid)  # a fresh catalog: no manifest cache
                if "latest" in tags:
                    checks += check_version(Catalog(cfg["catalog"]), cfg["dataset"], tags["latest"])
                checks += len(tags)
        except Exception as e:  # noqa: BLE001 (any failure is counted and reported: the test requires none)
            errors += 1
            first_error = first_error or f"{type(e).__name__}: {e}"
        time.sleep(0.002)
    return {"checks": checks, "errors": errors, "first_error": first_error}


def check_version(catalog: Catalog, name: str, version_id: str) -> int:
    """Read every row of a version from storage; all rows of one version carry one (owner, round).
    Decoded in the calling thread: Arrow's pool workers holding this Python file object made the
    process abort at exit (-6, "terminate called without an active exception"; verify._read_hashing)."""
    version = catalog.version(name, version_id)
    seen, total = set(), 0
    for shard in range(len(version.manifest.shards)):
        with catalog.fs.open(version.shard_path(shard), "rb") as f:  # decoded in this thread (docstring)
            table = pq.ParquetFile(f).read(use_threads=False)
        if row_hashes(table, NAMES) != table.column(HASH_COLUMN).to_pylist():
            raise AssertionError(f"{name}@{version_id[:12]} shard {shard}: rows do not match their hashes")
        total += table.num_rows
        seen |= set(zip(table.column("owner").to_pylist(), table.column("round").to_pylist()))
    if total != version.num_rows or len(seen) != 1:
        raise AssertionError(f"{name}@{version_id[:12]} is not one whole version: {sorted(seen)[:4]}")
    return 1


def publisher(cfg: dict) -> dict:
    catalog = Catalog(cfg["catalog"])
    ids = []
    for r in range(cfg["rounds"]):
        options = WriteOptions(row_group_rows=10, shard_rows=cfg["rows"] // cfg["shards"])
        version = catalog.write_version(cfg["dataset"], rows("pub", r, cfg["rows"]), FIELDS, options=options)
        ids.append(version.id)
    return {"ids": ids}


ROLES = {"read": read, "tagger": tagger, "watcher": watcher, "publisher": publisher}


def main(role: str, config_path: str, out_path: str) -> None:
    with open(config_path) as f:
        cfg = json.load(f)
    result = ROLES[role](cfg)
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
