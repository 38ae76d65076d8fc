"""Writing a version from a Ray Data pipeline (`dsinspect.loaders.raydata.write`) on a real local Ray
instance: the same version id whatever the number of write tasks and workers, equal to ingesting
the same rows from one Parquet file; the rows read back bit-exact, in the pipeline's order; shard
cuts at fixed global row ranges; a failure in a worker or in the ingest publishes nothing and leaves
no staging. The `part_rows` option of the Parquet source is tested here without Ray."""

import hashlib
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

from dsinspect.errors import UserError  # noqa: E402
from dsinspect.loaders.format.manifest import HASH_COLUMN  # noqa: E402
from dsinspect.loaders.ingest import export_version, ingest  # noqa: E402
from dsinspect.loaders.raydata import VersionDatasink, write_version  # noqa: E402
from dsinspect.loaders.raydata.write import in_order  # noqa: E402
from dsinspect.loaders.store.catalog import Catalog  # noqa: E402
from dsinspect.loaders.store.writer import WriteOptions  # noqa: E402

ROWS, PART_ROWS = 1000, 300
WRITE = WriteOptions(shard_rows=96, row_group_rows=32)
# parts of 300 rows, each cut into shards of 96 from its own first row: 96, 96, 96, 12 (x3), 96, 4
SHARD_ROWS = [96, 96, 96, 12] * 3 + [96, 4]


def _text(i: int) -> str:
    return " ".join(f"w{(i * 7919 + j * 104729) % 50257}" for j in range(i % 17 + 1))


def tokenise(batch: pa.Table) -> pa.Table:
    """The pipeline's map: ids -> text, its tokens (variable-length int32 lists) and a binary blob."""
    ids = batch["id"].to_pylist()
    texts = [_text(i) for i in ids]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "text": pa.array(texts, pa.string()),
        "tokens": pa.array([[int(w[1:]) for w in t.split()] for t in texts], pa.list_(pa.int32())),
        "blob": pa.array([hashlib.sha256(b"%d" % i).digest()[: i % 33] for i in ids], pa.binary()),
    })


EXPECTED = tokenise(pa.table({"id": pa.array(range(ROWS), pa.int64())}))


def pipeline(blocks: int, workers: int, batch_size: int | None = None):
    return ray.data.range(ROWS, override_num_blocks=blocks).map_batches(
        tokenise, batch_format="pyarrow", batch_size=batch_size, concurrency=workers)


def stored_rows(version) -> pa.Table:
    """The version's rows straight from its shard files, in manifest order, without the row hashes."""
    tables = [pq.read_table(version.shard_path(i)) for i in range(len(version.manifest.shards))]
    return pa.concat_tables(tables).drop_columns([HASH_COLUMN])


def assert_bit_exact(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names
    for name in want.column_names:
        assert got[name].type == want[name].type, name
        assert got[name].combine_chunks().equals(want[name].combine_chunks()), name


def leftovers(catalog: Catalog, name: str) -> list[str]:
    """What a write left in the dataset's directory besides versions, shards and tags."""
    base = Path(catalog.root) / "datasets" / name
    if not base.exists():
        return []
    return sorted(str(p.relative_to(base)) for p in base.rglob("*")
                  if p.parts[len(base.parts)] not in ("versions", "shards") and p.name != "tags.json"
                  and not p.name.endswith(".lock"))


def written(catalog: Catalog, ds, name: str = "corpus") -> VersionDatasink:
    sink = VersionDatasink(catalog, name, write=WRITE, part_rows=PART_ROWS, key="id")
    in_order(ds).write_datasink(sink)
    return sink


@pytest.mark.slow
def test_one_worker_and_four_write_the_same_version_bit_exact(ray_session, tmp_path):
    one, four, both = (Catalog(str(tmp_path / n)) for n in ("one", "four", "both"))
    by_one = written(one, pipeline(blocks=1, workers=1))
    by_four = written(four, pipeline(blocks=7, workers=4, batch_size=50))
    assert len(by_one.pieces) == 1 and len(by_four.pieces) >= 7, "the write tasks really differed"
    assert sum(p.rows for p in by_four.pieces) == ROWS
    assert by_one.version.id == by_four.version.id
    assert [s.rows for s in by_four.version.manifest.shards] == SHARD_ROWS, "cuts at fixed global row ranges"
    assert_bit_exact(stored_rows(by_four.version), EXPECTED)
    assert by_four.version.manifest.key == "id"

    again = [written(both, pipeline(blocks=1, workers=1)), written(both, pipeline(blocks=7, workers=4, batch_size=50))]
    assert {s.version.id for s in again} == {by_one.version.id}
    assert both.version_ids("corpus") == [by_one.version.id]
    for catalog in (one, four, both):
        assert leftovers(catalog, "corpus") == [], "no staging pieces or part records left"


def slowly_tokenise(batch: pa.Table) -> pa.Table:
    time.sleep(0.5)
    return tokenise(batch)


@pytest.mark.slow
def test_write_version_keeps_the_order_and_matches_ingesting_one_parquet_file(ray_session, tmp_path):
    """The first half of the rows comes from a slow map, the second is ready at once: without
    preserve_order Ray hands the second half to the first write task (rows stored out of order)."""
    half = ROWS // 2
    first = ray.data.from_arrow(pa.table({"id": pa.array(range(half), pa.int64())}))
    ds = first.map_batches(slowly_tokenise, batch_format="pyarrow").union(ray.data.from_arrow(EXPECTED.slice(half)))
    catalog = Catalog(str(tmp_path / "ray"))
    version = write_version(ds, catalog, "corpus", write=WRITE, part_rows=PART_ROWS, message="from ray",
                            tags=["v1"])
    assert ds.context.execution_options.preserve_order is False, "the caller's dataset is left as it was"
    assert catalog.resolve("corpus@v1").id == version.id and version.manifest.meta["message"] == "from ray"
    assert_bit_exact(stored_rows(version), EXPECTED)

    source = tmp_path / "one.parquet"
    pq.write_table(EXPECTED, source, row_group_size=123)
    local = ingest(Catalog(str(tmp_path / "local")), str(source), "corpus", write=WRITE, engine="inline",
                   options={"part_rows": PART_ROWS})
    assert local.id == version.id
    assert [f.to_json() for f in local.fields] == [f.to_json() for f in version.fields]


@pytest.mark.slow
def test_a_worker_that_raises_publishes_nothing_and_leaves_no_staging(ray_session, tmp_path):
    def tokenise_or_fail(batch: pa.Table) -> pa.Table:
        if max(batch["id"].to_pylist()) >= 600:
            raise ValueError("tokeniser broke on a late batch")
        return tokenise(batch)

    catalog = Catalog(str(tmp_path / "catalog"))
    ds = ray.data.range(ROWS, override_num_blocks=5).map_batches(tokenise_or_fail, batch_format="pyarrow")
    with pytest.raises(Exception, match="tokeniser broke on a late batch"):
        write_version(ds, catalog, "corpus", write=WRITE, part_rows=PART_ROWS)
    assert list(Path(catalog.root).rglob("*")) == [Path(catalog.root) / "datasets"], "not even the dataset's folder"


@pytest.mark.slow
def test_a_failing_ingest_part_publishes_nothing_and_removes_its_records(ray_session, tmp_path):
    """Phase 2 fails in one part after another part finished (its record written): no version, and
    neither the pieces nor the records stay. Rows 0-299 are tiny; rows 300-599 carry 256 KiB each
    and the last 100 hold `x` as text, which does not fit the first piece's int64."""
    def rows(batch: pa.Table) -> pa.Table:
        ids = batch["id"].to_pylist()
        big = [(b"%06d" % i) * (43691 if i >= 300 else 0) for i in ids]
        x = pa.array([f"x{i}" for i in ids]) if ids[0] >= 500 else pa.array(ids, pa.int64())
        return pa.table({"id": pa.array(ids, pa.int64()), "x": x, "big": pa.array(big, pa.binary())})

    catalog = Catalog(str(tmp_path / "catalog"))
    ds = ray.data.range(600, override_num_blocks=6).map_batches(rows, batch_format="pyarrow", batch_size=None)
    with pytest.raises(UserError, match=r"part 1 .*'x'"):
        write_version(ds, catalog, "mixed", part_rows=PART_ROWS)
    assert not (Path(catalog.root) / "datasets" / "mixed" / "versions").exists()
    assert leftovers(catalog, "mixed") == []


@pytest.mark.slow
def test_a_bad_role_publishes_nothing_and_leaves_no_pieces(ray_session, tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    with pytest.raises(UserError, match="text"):
        write_version(pipeline(blocks=2, workers=2), catalog, "corpus", roles={"text": "tokens"})
    assert not (Path(catalog.root) / "datasets" / "corpus").exists()


@pytest.mark.slow
def test_a_dataset_without_rows_is_a_one_line_error(ray_session, tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    with pytest.raises(UserError, match="the dataset has no rows"):
        write_version(ray.data.range(10).filter(lambda r: False), catalog, "corpus")
    assert not (Path(catalog.root) / "datasets" / "corpus").exists()


@pytest.mark.slow
def test_the_datasink_refuses_a_dataset_that_may_reorder_its_blocks(ray_session, tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    sink = VersionDatasink(catalog, "corpus")
    with pytest.raises(Exception, match="preserve_order"):
        pipeline(blocks=2, workers=2).write_datasink(sink)
    assert sink.version is None and not (Path(catalog.root) / "datasets" / "corpus").exists()


def test_bad_names_and_catalogs_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="bad dataset name"):
        VersionDatasink(str(tmp_path / "c"), "../escape")
    with pytest.raises(UserError, match="bad tag"):
        VersionDatasink(str(tmp_path / "c"), "ok", tags=["a/b"])
    with pytest.raises(UserError, match="this process only"):
        VersionDatasink("memory://catalog", "ok")
    with pytest.raises(UserError, match="part_rows"):
        VersionDatasink(str(tmp_path / "c"), "ok", part_rows=0)
    with pytest.raises(UserError, match="exclude"):
        VersionDatasink(str(tmp_path / "c"), "ok", key="id", no_key=True)
    assert not (tmp_path / "c").exists(), "nothing written before the write starts"


def test_part_rows_makes_parquet_parts_global_row_ranges(tmp_path):
    """The same rows in one file or cut into three files (other row groups) ingest to one id with
    `part_rows`; without it, each file is a part and the id differs."""
    one, three = tmp_path / "one", tmp_path / "three"
    one.mkdir(), three.mkdir()
    pq.write_table(EXPECTED, one / "all.parquet", row_group_size=77)
    for k, (lo, hi) in enumerate([(0, 250), (250, 251), (251, ROWS)]):
        pq.write_table(EXPECTED.slice(lo, hi - lo), three / f"part-{k}.parquet", row_group_size=40)
    ids = {}
    for src in (one, three):
        v = ingest(Catalog(str(tmp_path / f"c-{src.name}")), str(src), "t", write=WRITE, engine="inline",
                   options={"part_rows": PART_ROWS})
        assert [s.rows for s in v.manifest.shards] == SHARD_ROWS
        assert_bit_exact(stored_rows(v), EXPECTED)
        ids[src.name] = v.id
    assert ids["one"] == ids["three"]
    plain = ingest(Catalog(str(tmp_path / "c-plain")), str(three), "t", write=WRITE, engine="inline")
    assert plain.id != ids["three"]


def test_part_rows_is_checked_and_refuses_an_export(tmp_path):
    pq.write_table(EXPECTED, tmp_path / "all.parquet")
    catalog = Catalog(str(tmp_path / "c"))
    with pytest.raises(UserError, match="part_rows"):
        ingest(catalog, str(tmp_path / "all.parquet"), "t", engine="inline", options={"part_rows": "many"})
    version = ingest(catalog, str(tmp_path / "all.parquet"), "t", engine="inline")
    export_version(version, "parquet", str(tmp_path / "export"))
    with pytest.raises(UserError, match="export"):
        ingest(catalog, str(tmp_path / "export"), "t", engine="inline", options={"part_rows": 100})
