"""A replay is bounded by bytes, not only by samples (issue #31): the shards' footers say what a batch
will hold before a row is read, a batch past the bound is one line (what was asked, its size, the
bound, what to do instead), `--export` writes a batch of any size a part at a time in bounded memory,
and a batch past Arrow's 2 GiB for one column is one line, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dsinspect.loaders.audit.bounds import BatchTooLarge, spans
from dsinspect.loaders.audit.export import export_replay, export_step
from dsinspect.loaders.audit.replay import replay
from dsinspect.loaders.audit.rows import RowReader
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.order.plan import plan_batch
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.loaders.store.writer import WriteOptions

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text")]
BIG = 10_000_000  # one row of the issue's reproduction: 256 copies of it passed the sample cap


def text(i: int, n: int) -> str:
    """n characters that do not compress or dictionary-encode (each row its own)."""
    return np.random.default_rng(i).integers(32, 127, n, dtype=np.uint8).tobytes().decode("ascii")


@pytest.fixture(scope="module")
def cat(tmp_path_factory):
    """`rows`: 60 rows of 20-60 KB text in row groups of 4; `same`: 64 rows holding one 200 KB value
    in one row group (dictionary-encoded: its footer counts 200 KB); `big`: one row of 10 MB."""
    c = Catalog(str(tmp_path_factory.mktemp("bounds") / "cat"))
    c.write_version("rows", [{"id": i, "text": text(i, 20_000 + 700 * i)} for i in range(60)], FIELDS,
                    options=WriteOptions(row_group_rows=4), tags=["v1"])
    c.write_version("same", [{"id": i, "text": "x" * 200_000} for i in range(64)], FIELDS,
                    options=WriteOptions(row_group_bytes=64 << 20), tags=["v1"])
    c.write_version("big", [{"id": 0, "text": text(0, BIG)}], FIELDS, tags=["v1"])
    return c


def test_the_footers_tell_what_a_replay_holds_before_it_reads(cat):
    spec = RunSpec.create(cat, "rows@v1", batch_size=12, seed=5)
    reader = RowReader(cat, spec)
    plan = plan_batch(spec, 1, 0)
    groups, rows = reader.estimate(plan)
    version = reader.versions[0]
    shards, group_of, _ = version.locate_many(plan.indices)
    decoded = sum(version.read_row_group(int(s), int(g), ["id", "text", "__dsinspect_row_hash"]).nbytes
                  for s, g in set(zip(shards.tolist(), group_of.tolist())))
    held = reader.read(plan).table.nbytes
    assert 0.9 < groups / decoded < 1.1 and 0.7 < rows / held < 1.3, (groups, decoded, rows, held)


def test_a_replay_past_its_bound_is_refused_before_a_row_is_read(cat, monkeypatch):
    spec = RunSpec.create(cat, "big@v1", batch_size=256, last_batch="pad")
    reads = []
    original = DatasetVersion.read_row_group
    monkeypatch.setattr(DatasetVersion, "read_row_group",
                        lambda self, *a, **k: reads.append(a) or original(self, *a, **k))
    with pytest.raises(BatchTooLarge) as refused:
        replay(spec, 0, 0, cat, max_bytes=256 << 20)
    assert str(refused.value) == ("step 0, rank 0: the batch of 256 samples would hold ~2.4 GiB (2.4 GiB of rows "
                                  "read from 9.5 MiB of row groups), more than the bound of 256.0 MiB")
    assert reads == [] and refused.value.exit_code == 2
    assert len(replay(spec, 0, 0, cat, max_bytes=256 << 20, columns=["id"], verify=False).samples) == 256  # ids: 2 KB


def test_a_column_that_decodes_larger_than_its_footer_is_refused_as_it_decodes(cat):
    spec = RunSpec.create(cat, "same@v1", batch_size=64, shuffle="none")
    groups, rows = RowReader(cat, spec).estimate(plan_batch(spec, 0, 0))
    assert groups + rows < 1 << 20  # one dictionary entry: the footer counts it once
    with pytest.raises(BatchTooLarge, match="decoded so far; its Parquet footers said less"):
        replay(spec, 0, 0, cat, max_bytes=4 << 20)  # the rows are 12.8 MB decoded
    assert len(replay(spec, 0, 0, cat, max_bytes=64 << 20).samples) == 64


def test_parts_hold_at_most_the_bound_or_one_sample():
    groups, sizes, rows = np.array([1, 1, 2, 3, 3, 3]), np.array([10, 10, 40, 5, 5, 5]), np.array([3, 3, 30, 1, 1, 1])
    assert spans(groups, sizes, rows, 20) == [(0, 2), (2, 3), (3, 6)]
    assert spans(groups, sizes, rows, 10**6) == [(0, 6)] and spans(groups[:0], sizes[:0], rows[:0], 1) == []


def test_an_export_written_a_part_at_a_time_equals_the_batch_replayed_whole(cat, tmp_path):
    spec = RunSpec.create(cat, "rows@v1", batch_size=10, world_size=2, seed=3)
    whole = export_replay(replay(spec, 2, "all", cat), str(tmp_path / "whole"))
    parts = export_step(spec, 2, "all", cat, str(tmp_path / "parts"), part_bytes=200_000)
    a = pq.ParquetFile(tmp_path / "whole" / whole["parquet"]["file"])
    b = pq.ParquetFile(tmp_path / "parts" / parts.receipt["parquet"]["file"])
    assert a.metadata.num_row_groups == 1 and b.metadata.num_row_groups >= 4
    assert a.read().equals(b.read())
    assert {k: v for k, v in parts.receipt.items() if k not in ("parquet", "directory")} == \
        {k: v for k, v in whole.items() if k not in ("parquet", "directory")}
    assert json.loads((tmp_path / "parts" / parts.receipt["receipt_file"]).read_text())["parquet"] == \
        parts.receipt["parquet"]


# -- the command line --------------------------------------------------------------------------------

def dsinspect(*args: str, peak_file: str | None = None) -> subprocess.CompletedProcess:
    """`python -m dsinspect ARGS` in a child; with `peak_file`, its peak resident size (KiB) is written there:
    VmHWM, which exec resets (ru_maxrss keeps the forking pytest's own peak: after a test that grew
    pytest to 560 MB, this child "peaked" at 562 MB while its own program held under 400)."""
    script = ("import os, sys\nfrom dsinspect.cli import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
              "    if os.environ.get('PEAK_FILE'):\n"
              "        peak = [line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]\n"
              "        open(os.environ['PEAK_FILE'], 'w').write(peak)\n")
    env = {**os.environ, "PEAK_FILE": peak_file or ""}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=900, env=env)


def test_the_issues_replay_is_one_line_and_exit_2(cat):
    done = dsinspect("--catalog", cat.url, "replay", "--address", "big@v1", "--batch-size", "256",
                     "--last-batch", "pad", "--step", "0")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("dsinspect: error: step 0, rank 0: the batch of 256 samples would hold ~2.4 GiB")
    assert done.stderr.rstrip().endswith("more than the bound of 512.0 MiB: add --export DIR to write it as "
                                         "Parquet, a part at a time")


def test_export_writes_a_batch_past_the_bound_in_bounded_memory(cat, tmp_path):
    peak = tmp_path / "peak"
    done = dsinspect("--catalog", cat.url, "replay", "--address", "big@v1", "--batch-size", "64",
                     "--last-batch", "pad", "--step", "0", "--export", str(tmp_path / "out"), "--json",
                     peak_file=str(peak))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    table = pq.read_table(tmp_path / "out" / data["export"]["parquet"]["file"], columns=["id", "__dsinspect_position"])
    assert table.column("__dsinspect_position").to_pylist() == list(range(64)) and data["fields"] is None
    receipt = json.loads((tmp_path / "out" / data["export"]["receipt"]).read_text())
    spec = RunSpec.create(cat, "big@v1", batch_size=64, last_batch="pad")
    replayed = replay(spec, 0, 0, cat, columns=["id"], verify=False)  # the ids and hashes alone
    assert receipt["fingerprints"] == data["fingerprints"] == {"0": replayed.fingerprints[0]}
    # 640 MB of rows, in 64 MiB parts: a few hundred MB at most (whole, it took 1.7 GB)
    assert int(peak.read_text()) << 10 < 450 << 20, int(peak.read_text()) >> 10


def test_export_with_a_transform_past_the_bound_says_why_not(cat, tmp_path):
    done = dsinspect("--catalog", cat.url, "replay", "--address", "big@v1", "--batch-size", "64", "--last-batch",
                     "pad", "--step", "0", "--export", str(tmp_path / "out"), "--transform", "json:dumps")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.rstrip().endswith("--transform needs the whole batch in memory: export it without --transform")
    assert not (tmp_path / "out").exists()
