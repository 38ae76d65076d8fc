"""A version of 10^5 shards and 10^10 rows (benchmarks/bench_metadata.py builds it: real shards only
where the reads go, absent ones elsewhere). What holds at that scale, by memory and request counts,
never by time (the benchmark times it): a Loader's start in a fresh process stays under 200 MB,
ranks starting together on one node fetch the manifest from S3 once, their first batches touch only
the shards they read, `info` shows a bounded shard table; and the columnar manifest reads exactly
what json.loads reads."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_metadata import BATCH, NAME, WORLD, build  # noqa: E402
from s3_server import s3_server  # noqa: E402

from dsinspect.errors import ManifestError  # noqa: E402
from dsinspect.loaders import Catalog, RunSpec  # noqa: E402
from dsinspect.loaders.format.manifest import Field, Manifest, Shard, canonical_json, sha256_hex  # noqa: E402
from dsinspect.loaders.order.plan import batch_indices  # noqa: E402

START_MB = 200  # the bound for a Loader's start (measured ~170 MB; imports alone ~75 MB)

# argv: catalog URL, spec file, rank. Prints the process's peak RSS after the start and after the
# first batch, and the batch's ids (the real shards hold each row's global index as `id`).
RANK = r"""
import json, sys
from dsinspect.loaders import Catalog, Loader, RunSpec
def peak_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
spec = RunSpec.loads(open(sys.argv[2]).read())
loader = Loader(spec, rank=int(sys.argv[3]), catalog=Catalog(sys.argv[1]))
started = peak_mb()
batch = next(iter(loader))
ids = batch.table.column("id").to_pylist()
loader.close()
print(json.dumps({"start_mb": started, "batch_mb": peak_mb(), "ids": ids, "indices": batch.indices.tolist()}))
"""


@pytest.fixture(scope="session")
def frontier(tmp_path_factory):
    root = tmp_path_factory.mktemp("frontier")
    return root, build(str(root / "catalog"))


def _spec(url: str, version_id: str, shuffle: str) -> RunSpec:
    return RunSpec.create(Catalog(url), f"{NAME}@{version_id}", seed=0, batch_size=BATCH, world_size=WORLD,
                          shuffle=shuffle)


def _rank(url: str, spec_file: Path, rank: int, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RANK, url, str(spec_file), str(rank)],
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_the_version_is_what_it_says(frontier):
    root, f = frontier
    version = Catalog(f.catalog_url).resolve(f"{NAME}@v1")
    assert version.id == f.version_id and len(version.manifest.shards) == 100_000
    assert version.num_rows == 10_000_000_000 and len(f.real) == 33
    shards_dir = Path(version.catalog.layout.shards(NAME))
    assert len(list(shards_dir.glob("*.parquet"))) == 33  # the others are absent on purpose


def test_a_loader_starts_on_100k_shards_under_200_mb_and_reads_the_planned_rows(frontier, tmp_path):
    root, f = frontier
    spec = _spec(f.catalog_url, f.version_id, "global")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.dumps())
    got = _result(_rank(f.catalog_url, spec_file, 0, {"DSINSPECT_CACHE": str(tmp_path / "cache")}))
    assert got["indices"] == batch_indices(spec, 0, 0).tolist()
    assert got["ids"] == got["indices"]  # every row from its real shard, none from an absent one
    assert got["start_mb"] <= START_MB, got


def test_ranks_starting_together_on_s3_fetch_the_manifest_once_and_only_what_they_read(frontier, tmp_path):
    root, f = frontier
    ranks = 4  # 64 processes of ~170 MB each are too heavy beside other tests: the benchmark runs 64
    with s3_server() as (server, url, _):
        import fsspec

        fs = fsspec.filesystem("s3")
        fs.put(str(root / "catalog") + "/", url[len("s3://"):] + "/", recursive=True)
        spec = _spec(url, f.version_id, "none")  # every rank's first batch is in shard 0
        spec_file = tmp_path / "spec.json"
        spec_file.write_text(spec.dumps())
        server.reset_counts()
        node = {"DSINSPECT_CACHE": str(tmp_path / "node")}
        results = [_result(p) for p in [_rank(url, spec_file, r, node) for r in range(ranks)]]
        gets = server.requests(method="GET")
    for rank, got in enumerate(results):
        assert got["ids"] == got["indices"] == batch_indices(spec, 0, rank).tolist()
    manifest = f"/versions/{f.version_id}.json"
    shard0 = Catalog(str(root / "catalog")).resolve(f"{NAME}@v1").manifest.shards.sha256(0)
    assert sum(r.path.endswith(manifest) for r in gets) == 1  # once a node, not once a process
    assert sum(r.path.endswith(f"{shard0}.index.json") for r in gets) == 1
    others = [r.path for r in gets if not r.path.endswith(manifest) and shard0 not in r.path]
    assert others == []  # no tags, no listing, no other shard of the 10^5
    assert len(gets) <= 2 + ranks * 8, [(r.path[-20:], r.range) for r in gets]  # parts of shard 0: a few a rank


def test_info_shows_a_bounded_shard_table_and_json_lists_every_shard(frontier):
    root, f = frontier
    argv = [sys.executable, "-m", "dsinspect", "--catalog", f.catalog_url, "info", f"{NAME}@v1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "shards: 100,000" in done.stdout
    assert "... and 99,980 more shards (all of them: dsinspect info frontier@v1 --json)" in done.stdout
    assert len(done.stdout.splitlines()) < 60
    from dsinspect.loaders.store.describe import shard_entries, version_info

    version = Catalog(f.catalog_url).resolve(f"{NAME}@v1")
    info = version_info(version, max_shards=5)
    assert [s["index"] for s in info["shards"]] == list(range(5)) and info["shards_omitted"] == 99_995
    listed = shard_entries(version, 100_000)  # what --json lists
    assert len(listed) == 100_000 and listed[-1]["first_row"] + listed[-1]["rows"] == 10_000_000_000
    assert listed[7] == {"index": 7, **version.manifest.shards[7].to_json(), "first_row": int(version.shard_starts[7]),
                         "url": version.shard_url(7)}


# -- the columnar manifest reads what json.loads reads ------------------------------------------------

FIELDS = (Field("id", pa.int64(), "scalar"), Field("a", pa.list_(pa.int32()), "tokens"),
          Field("x_y", pa.list_(pa.int32()), "tokens"))


def _manifest(names: list[str], index: str, n: int) -> Manifest:
    def sha(x: object) -> str:
        return sha256_hex(str(x).encode())
    shards = [Shard(sha(i), [0, 1, 10, 2**62][i % 4], i * 7, None if index == "none" or (index == "some" and i % 2)
                    else sha(-i), tuple((name, i * 1000 + k) for k, name in enumerate(names))) for i in range(n)]
    return Manifest(FIELDS, shards, "id", {"message": 'a "shards": [ in a message'})


@pytest.mark.parametrize("names", [[], ["a"], ["a", "x_y"]])
@pytest.mark.parametrize("index", ["all", "none", "some"])
@pytest.mark.parametrize("n", [1, 3])
def test_the_columnar_manifest_writes_and_reads_what_json_does(names, index, n):
    m = _manifest(names, index, n)
    raw = m.to_file_bytes()
    assert raw == (json.dumps(m.to_json(), sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()
    assert m.id == sha256_hex(canonical_json(m.content()))
    fast, slow = Manifest.from_bytes(raw), Manifest.from_json(json.loads(raw))
    assert fast == slow == m and fast.id == m.id and list(fast.shards) == list(m.shards)


def test_a_changed_byte_anywhere_reads_as_json_would_read_it():
    raw = _manifest(["a", "x_y"], "all", 3).to_file_bytes()
    body = raw.index(b'"shards": [')
    rng = random.Random(35)
    for _ in range(600):  # mostly in the shard list, where the columnar reader reads
        pos = rng.randrange(body, len(raw)) if rng.random() < 0.9 else rng.randrange(len(raw))
        bad = raw[:pos] + bytes([rng.choice(b' \n,0{}"x')]) + raw[pos + (rng.random() < 0.7):]
        if bad != raw:
            assert _read(bad, Manifest.from_bytes) == _read(bad, lambda b: Manifest.from_json(json.loads(b))), \
                bad[max(0, pos - 40):pos + 40]


def _read(raw: bytes, parse) -> tuple | str:
    try:
        manifest = parse(raw)
    except (ManifestError, ValueError):
        return "refused"
    return manifest, manifest.id
