"""Real processes against a real (loopback) object store: torchrun with 4 ranks on CPU/gloo reads
a version from moto's S3 server through ONE node-local cache directory under a byte bound smaller
than the version. Batches are exact, the ranks together read the epoch once, and the server saw
each shard fetched once per residency in the cache."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("torch")
pytest.importorskip("s3fs")
pytest.importorskip("moto.moto_server.werkzeug_app")

from s3_server import s3_server  # noqa: E402

from dsinspect.loaders import (  # noqa: E402
    HASH_COLUMN,
    Catalog,
    Field,
    RunSpec,
    WriteOptions,
    batch_indices,
    epoch_order,
    steps_in_epoch,
)

SCRIPT = Path(__file__).with_name("torchrun_s3_reader.py")
RANKS, BATCH, WINDOW = 4, 5, 2
SHARDS, SHARD_ROWS = 24, 46
FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("blob", pa.binary(), "bytes"),
          Field("tokens", pa.list_(pa.int32()), "tokens")]


def random_rows(n):
    rng = np.random.default_rng(5)
    return [{"id": i, "blob": rng.bytes(200), "tokens": rng.integers(0, 1 << 30, i % 13, dtype=np.int32).tolist()}
            for i in range(n)]


@pytest.mark.slow
def test_torchrun_four_ranks_read_s3_through_one_bounded_cache(tmp_path):
    with s3_server() as (server, url, _):
        catalog = Catalog(url)
        version = catalog.write_version("ddp", random_rows(SHARDS * SHARD_ROWS), FIELDS, key="id",
                                        # whole-shard fills: one download per shard per residency, counted
                                        # below (cold reads by part are test_cold_reads.py's)
                                        options=WriteOptions(shard_rows=SHARD_ROWS, row_group_rows=16,
                                                             shard_index=False))
        stored = pa.concat_tables([version.read_shard(s, [HASH_COLUMN]) for s in range(SHARDS)])
        hashes = [h.hex() for h in stored.column(HASH_COLUMN).to_pylist()]
        sizes = [s.bytes for s in version.manifest.shards]
        bound = 2 * WINDOW * max(sizes)
        assert bound < sum(sizes) / 4
        # 1,104 rows, global batch 20: 55 steps, the last 4 positions of the order dropped
        spec = RunSpec.create(catalog, "ddp", seed=3, batch_size=BATCH, world_size=RANKS, shuffle="window",
                              window_shards=WINDOW, last_batch="drop")
        out = tmp_path / "out"
        out.mkdir()
        job = {"catalog": url, "out": str(out), "spec": spec.to_json(), "cache": str(tmp_path / "node-cache"),
               "max_bytes": bound, "torch_workers": 1}
        (tmp_path / "job.json").write_text(json.dumps(job))
        server.reset_counts()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={RANKS}",
               str(SCRIPT), str(tmp_path / "job.json")]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "DSINSPECT_CACHE": str(tmp_path / "torch-cache"),
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"torchrun timed out\n--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}")
        assert done.returncode == 0, (f"torchrun failed ({done.returncode})\n"
                                      f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
        requests = server.requests()

    steps = steps_in_epoch(spec, 0)
    assert steps == SHARDS * SHARD_ROWS // (BATCH * RANKS) == 55
    shard_paths = {"/" + version.shard_path(s): s for s in range(SHARDS)}
    bounded = [json.loads((out / f"bounded-rank{r}.json").read_text()) for r in range(RANKS)]
    seen = []
    for rank, result in enumerate(bounded):
        assert result["rank"] == rank
        assert [b[0] for b in result["batches"]] == list(range(steps))
        for step, indices, got, rehashed in result["batches"]:
            assert indices == batch_indices(spec, step, rank).tolist(), f"rank {rank} step {step}"
            assert got == [hashes[i] for i in indices] and rehashed == got, f"rank {rank} step {step}"
            seen += indices
    assert len(seen) == len(set(seen)), "ranks overlap"
    assert sorted(seen) == sorted(epoch_order(spec, 0)[:steps * spec.global_batch].tolist()), "not the epoch"

    # downloads the server served from the bounded run: each shard once per residency
    fetched = sum(r["stats"]["shards_fetched"] for r in bounded)
    evictions = sum(r["stats"]["evictions"] for r in bounded)
    torch_runs = [json.loads((out / f"torch-rank{r}.json").read_text()) for r in range(RANKS)]
    whole = [r for r in requests if r.method == "GET" and r.path in shard_paths and r.start == 0]
    per_shard = {p: sum(r.path == p for r in whole) for p in shard_paths}
    # the TorchLoader run afterwards has its own (unbounded) cache: exactly one more download per shard it read
    torch_shards = {int(np.searchsorted(version.shard_starts, i, side="right") - 1)
                    for r in torch_runs for _, indices, _ in r["batches"] for i in indices}
    assert sum(per_shard.values()) == fetched + len(torch_shards), (per_shard, fetched, torch_shards)
    evicted = [sha for r in bounded for sha in r["evicted"]]
    assert len(evicted) == evictions
    for path, s in shard_paths.items():
        downloads = per_shard[path] - (s in torch_shards)
        sha = version.manifest.shards[s].sha256
        assert 1 <= downloads <= 1 + evicted.count(sha), (s, downloads, evicted.count(sha))
    assert evictions >= 1, "the bound was exercised"
    assert fetched <= SHARDS + 2 * WINDOW, f"ranks in step share downloads ({fetched} for {SHARDS} shards)"
    assert all(r.start == 0 for r in requests if r.method == "GET" and r.path in shard_paths and r.status < 300)

    # the PyTorch adapter (DataLoader worker processes) over the same S3 catalog
    for rank, result in enumerate(torch_runs):
        assert result["rank"] == rank
        assert [b[0] for b in result["batches"]] == list(range(steps))
        for step, indices, got in result["batches"]:
            assert indices == batch_indices(spec, step, rank).tolist() and got == [hashes[i] for i in indices]
