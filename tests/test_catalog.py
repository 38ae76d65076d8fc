import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from conftest import TOY_FIELDS, toy_rows

from dsinspect.errors import NotFoundError, UserError
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field
from dsinspect.loaders.store.derive import derive_version
from dsinspect.loaders.store.writer import WriteOptions

TRAJ = pa.struct([("obs", pa.list_(pa.list_(pa.float32()))), ("action", pa.list_(pa.int32())),
                  ("reward", pa.list_(pa.float32())), ("done", pa.list_(pa.bool_()))])
ALL_ROLES = [
    Field("key", pa.int64(), "scalar", nullable=False),
    Field("tokens", pa.list_(pa.int32()), "tokens"),
    Field("text", pa.string(), "text"),
    Field("image", pa.binary(), "image"),
    Field("video", pa.large_binary(), "video"),
    Field("trajectory", TRAJ, "trajectory"),
    Field("meta", pa.string(), "json"),
    Field("score", pa.float64(), "scalar"),
    Field("flag", pa.bool_(), "scalar"),
    Field("raw", pa.binary(), "bytes"),
]


def all_role_rows(n):
    rows = []
    for i in range(n):
        steps = i % 4
        rows.append({
            "key": i, "tokens": [i, i + 1, 2**31 - 1][: i % 4], "text": f"row {i} — ünïcödé 日本 🎉" * (i % 3),
            "image": b"\x89PNG\r\n\x1a\n" + bytes([i % 256]) * i, "video": b"\x00\x00\x00\x18ftypmp42" * (i % 3),
            "trajectory": None if i % 7 == 3 else {"obs": [[float(s), -0.5] for s in range(steps)],
                                                   "action": list(range(steps)), "reward": [0.25] * steps,
                                                   "done": [s == steps - 1 for s in range(steps)]},
            "meta": json.dumps({"i": i}), "score": None if i % 5 == 0 else i / 3, "flag": i % 2 == 0,
            "raw": bytes(range(i % 256)),
        })
    return rows


def test_round_trip_every_role(catalog):
    rows = all_role_rows(50)
    v = catalog.write_version("all", rows, ALL_ROLES, key="key", options=WriteOptions(row_group_rows=8, shard_rows=20))
    assert [s.rows for s in v.manifest.shards] == [20, 20, 10]
    assert [v.row(i) for i in range(50)] == rows
    assert v.take([49, 0, 21, 21]).to_pylist() == [{**rows[i], HASH_COLUMN: v.row_hash(i)} for i in (49, 0, 21, 21)]
    streamed = pa.concat_tables([t for _, t in v.iter_tables()])
    assert streamed.drop_columns([HASH_COLUMN]).to_pylist() == rows
    names = [f.name for f in ALL_ROLES]
    assert streamed.column(HASH_COLUMN).to_pylist() == row_hashes(pa.Table.from_pylist(rows, v.manifest.schema), names)


def test_every_input_form_gives_the_same_version(catalog):
    rows = toy_rows(100)
    table = pa.Table.from_pylist(rows, pa.schema([(f.name, f.type) for f in TOY_FIELDS]))
    opts = WriteOptions(row_group_rows=16)
    ids = {
        catalog.write_version("a", rows, TOY_FIELDS, options=opts).id,
        catalog.write_version("b", iter(rows), TOY_FIELDS, options=opts).id,
        catalog.write_version("c", table, TOY_FIELDS, options=opts).id,
        catalog.write_version("d", table.to_batches(max_chunksize=7), TOY_FIELDS, options=opts).id,
        catalog.write_version("e", (b for b in table.to_batches(max_chunksize=33)), TOY_FIELDS, options=opts).id,
    }
    assert len(ids) == 1


def test_row_groups_and_shards_follow_the_options(catalog):
    v = catalog.write_version("toy", toy_rows(1000), TOY_FIELDS,
                              options=WriteOptions(row_group_rows=64, shard_rows=300))
    assert [s.rows for s in v.manifest.shards] == [300, 300, 300, 100]
    groups = [v.parquet(i).metadata.num_row_groups for i in range(4)]
    assert groups == [math.ceil(300 / 64)] * 3 + [2]
    big = [{"id": i, "tokens": [], "blob": os.urandom(10_000)} for i in range(200)]
    v = catalog.write_version("big", big, TOY_FIELDS, options=WriteOptions(shard_bytes=300_000, row_group_bytes=50_000))
    assert len(v.manifest.shards) >= 6 and all(s.bytes < 300_000 + 60_000 for s in v.manifest.shards)
    assert v.parquet(0).metadata.num_row_groups >= 5
    assert [v.row(i)["blob"] for i in range(200)] == [r["blob"] for r in big]


def test_shard_files_are_named_by_their_sha256(catalog):
    v = catalog.write_version("toy", toy_rows(500), TOY_FIELDS, options=WriteOptions(shard_rows=100))
    for i, s in enumerate(v.manifest.shards):
        data = catalog.fs.cat_file(v.shard_path(i))
        assert hashlib.sha256(data).hexdigest() == s.sha256 and len(data) == s.bytes
        assert v.shard_path(i).endswith(f"/shards/{s.sha256}.parquet")


def test_copy_on_write_rewrites_only_the_changed_shard(catalog):
    v1 = catalog.write_version("toy", toy_rows(1000), TOY_FIELDS, key="id", options=WriteOptions(shard_rows=100))
    assert len(v1.manifest.shards) == 10
    before = set(catalog.fs.ls(catalog.layout.shards("toy"), detail=False))
    v2 = derive_version(v1, update={512: {"tokens": [42]}, 517: {"blob": b"new"}}, remove=[550],
                        options=WriteOptions(shard_rows=100))
    after = set(catalog.fs.ls(catalog.layout.shards("toy"), detail=False))
    new = sorted(after - before)
    assert len(new) == 2 and new[0].endswith(".index.json") and new[1].endswith(".parquet"), \
        "exactly one new shard file (and its index)"
    assert new[0].split("/")[-1].split(".")[0] == new[1].split("/")[-1].split(".")[0]
    shared = [a.sha256 == b.sha256 for a, b in zip(v1.manifest.shards, v2.manifest.shards)]
    assert shared == [True] * 5 + [False] + [True] * 4
    assert v2.num_rows == 999 and v2.manifest.meta["parent"] == v1.id
    assert v2.row(512)["tokens"] == [42] and v2.row(517)["blob"] == b"new"
    assert v2.row(549)["id"] == 549 and v2.row(550)["id"] == 551
    assert v1.row(512)["tokens"] == toy_rows(1, 512)[0]["tokens"]  # the parent is untouched


def test_derive_adds_rows_and_validates(catalog):
    v1 = catalog.write_version("toy", toy_rows(30), TOY_FIELDS, key="id", options=WriteOptions(shard_rows=10))
    v2 = derive_version(v1, add=toy_rows(2, start=100))
    assert v2.manifest.shards[:3] == v1.manifest.shards and v2.num_rows == 32 and v2.row(-1)["id"] == 101
    with pytest.raises(NotFoundError, match=r"no rows with keys \[999\]"):
        derive_version(v1, remove=[999])
    with pytest.raises(UserError, match="already exists"):
        derive_version(v1, add=toy_rows(1, start=5))
    with pytest.raises(UserError, match="may not change the key"):
        derive_version(v1, update={3: {"id": 4}})
    assert catalog.tags("toy")["latest"] == v2.id  # failed derivations publish nothing


def test_derive_by_index_without_a_key(catalog):
    v1 = catalog.write_version("nokey", toy_rows(30), TOY_FIELDS, options=WriteOptions(shard_rows=10))
    v2 = derive_version(v1, update={25: {"tokens": [7]}}, remove=[0])
    assert [a == b for a, b in zip(v1.manifest.shards, v2.manifest.shards)] == [False, True, False]
    assert v2.row(24)["tokens"] == [7] and v2.row(0)["id"] == 1


def test_tags(catalog):
    v1 = catalog.write_version("toy", toy_rows(5), TOY_FIELDS, tags=["v1"])
    v2 = catalog.write_version("toy", toy_rows(6), TOY_FIELDS)
    assert catalog.tags("toy") == {"v1": v1.id, "latest": v2.id}
    catalog.set_tag("toy", "stable", v1.id)
    assert catalog.resolve("toy@stable").id == v1.id
    with pytest.raises(NotFoundError):
        catalog.set_tag("toy", "bad", "0" * 64)
    with pytest.raises(UserError, match="bad tag"):
        catalog.set_tag("toy", "../x", v1.id)
    assert [v.id for v in catalog.versions("toy")] == [v1.id, v2.id]
    assert catalog.datasets() == ["toy"]


@pytest.mark.parametrize("rows, message", [
    ([{"id": 1, "tokens": [1]}], r"missing \['blob'\]"),
    ([{"id": 1, "tokens": [1], "blob": b"", "x": 1}], r"unexpected \['x'\]"),
    ([{"id": 1, "tokens": ["a"], "blob": b""}], "do not fit the schema"),
    ([{"id": None, "tokens": [], "blob": b""}], "'id' is not nullable"),
])
def test_writer_errors_are_clear(catalog, rows, message):
    with pytest.raises(UserError, match=message):
        catalog.write_version("toy", rows, TOY_FIELDS)
    assert catalog.datasets() == []


def test_unsupported_types_and_bad_names(catalog):
    with pytest.raises(UserError, match="not supported"):
        catalog.write_version("m", [], [Field("m", pa.map_(pa.string(), pa.int32()), "trajectory")])
    with pytest.raises(UserError, match="bad dataset name"):
        catalog.write_version("../escape", [], TOY_FIELDS)


def test_a_row_read_touches_only_its_row_group(catalog):
    rows = [{"id": i, "tokens": [], "blob": os.urandom(4000)} for i in range(400)]
    v = catalog.write_version("big", rows, TOY_FIELDS, options=WriteOptions(row_group_rows=20))
    shard_bytes = v.manifest.shards[0].bytes
    counted = []
    real_open = catalog.fs.open

    def counting_open(path, mode="rb", **kw):
        f = real_open(path, mode, **kw)
        real_read = f.read
        f.read = lambda n=-1: counted.append(len(chunk := real_read(n))) or chunk
        return f
    catalog.fs.open = counting_open
    try:
        fresh = catalog.resolve("big")
        assert fresh.row(217)["blob"] == rows[217]["blob"]
    finally:
        catalog.fs.open = real_open
    assert 0 < sum(counted) < shard_bytes / 5, (sum(counted), shard_bytes)


BOUNDED = textwrap.dedent("""
    import os, sys
    import pyarrow as pa
    from dsinspect.loaders.store.catalog import Catalog
    from dsinspect.loaders.format.manifest import Field
    from dsinspect.loaders.store.writer import WriteOptions
    fields = [Field("id", pa.int64(), "scalar"), Field("blob", pa.binary(), "bytes")]
    def peak():  # VmHWM, which exec resets (ru_maxrss keeps the forking pytest's peak, which hid any growth)
        return int([line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]) << 10
    halfway = []
    def rows():  # 160 MiB in total, never all in memory
        for i in range(40_000):
            if i == 20_000:
                halfway.append(peak())
            yield {"id": i, "blob": os.urandom(4096)}
    before = peak()
    v = Catalog(sys.argv[1]).write_version("big", rows(), fields,
                                           options=WriteOptions(row_group_rows=1000, shard_bytes=32 << 20))
    print(v.num_rows, v.manifest.num_bytes, halfway[0] - before, peak() - before)
""")


def test_writing_a_generator_far_larger_than_a_row_group_uses_bounded_memory(tmp_path):
    done = subprocess.run([sys.executable, "-c", BOUNDED, str(tmp_path / "cat")], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    rows, nbytes, at_half, at_end = map(int, done.stdout.split())
    assert rows == 40_000 and nbytes > 100 << 20
    # a working set of its own (~100 MiB here: a chunk of 1,000 rows as dicts, Arrow's pool), the same at
    # any size: the second 80 MiB written adds nothing to the peak the first reached (holding rows: +80 MiB)
    assert at_end - at_half < 24 << 20, f"the peak grew by {(at_end - at_half) >> 20} MiB over the second half"
    assert at_end < nbytes, f"peak memory grew by {at_end >> 20} MiB while writing {nbytes >> 20} MiB"
