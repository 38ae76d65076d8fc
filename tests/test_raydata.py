"""The Ray Data adapter (`dsinspect.loaders.raydata`): a version read by Ray's read tasks on a real
local Ray instance: every row of every shard, in stored order within a shard, the requested columns
only; a shard changed on storage is refused by the task that fetched it, naming its sha256."""

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from token_catalog import token_catalog  # noqa: E402

from dsinspect.errors import UserError  # noqa: E402
from dsinspect.loaders.raydata import read_version  # noqa: E402

ROWS, WIDTH = 120, 4


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return token_catalog(tmp_path_factory.mktemp("ray") / "catalog", "r", ROWS, WIDTH, 13, shard_rows=25,
                         row_group_rows=5)


@pytest.mark.slow
def test_a_version_reads_whole_in_parallel_with_its_columns(ray_session, catalog):
    version = catalog.written
    ds = read_version(version, override_num_blocks=3)
    rows = sorted(ds.take_all(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(ROWS))
    assert all(r["text"] == catalog.rows[r["id"]]["text"] for r in rows)
    assert all(list(r["tokens"]) == catalog.rows[r["id"]]["tokens"] for r in rows)
    blocks = [t["id"].to_pylist() for t in ray.get(ds.to_arrow_refs())]
    assert [i for b in blocks for i in b] == list(range(ROWS)), "shards in order, rows in stored order"
    assert read_version(version, columns=["text"]).columns() == ["text"]
    with pytest.raises(UserError, match=r"no field\(s\) \['nope'\]"):
        read_version(version, columns=["nope"])


@pytest.mark.slow
def test_a_shard_changed_on_storage_is_refused_by_its_read_task(ray_session, catalog, tmp_path):
    changed = token_catalog(tmp_path / "catalog", "r", ROWS, WIDTH, 13, shard_rows=25, row_group_rows=5)
    version = changed.written
    path = Path(version.shard_path(2))
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(Exception, match=version.manifest.shards[2].sha256) as e:
        read_version(version).take_all()
    assert "IntegrityError" in repr(e.value) or "does not match" in str(e.value)
