"""The Hugging Face `datasets` adapter (`dsinspect.loaders.hf`): a version as a `datasets.Dataset` over
the node's verified shard cache (its buffers are the cache's memory-mapped files: no copy; a byte
flipped in a cached file is refused before anything is handed out), and one rank's rows in
dsinspect's order as a `datasets.IterableDataset`, started anywhere by a LoaderState."""

from pathlib import Path

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")

from token_catalog import token_catalog  # noqa: E402

from dsinspect.errors import IntegrityError, UserError  # noqa: E402
from dsinspect.loaders import LoaderState, RunSpec, batch_indices  # noqa: E402
from dsinspect.loaders.hf import as_dataset, as_iterable  # noqa: E402
from dsinspect.loaders.read.cache import ShardCache  # noqa: E402

ROWS, WIDTH = 90, 6


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return token_catalog(tmp_path_factory.mktemp("hf") / "catalog", "h", ROWS, WIDTH, 3, shard_rows=30,
                         row_group_rows=10)


def mapped_file(address: int) -> str | None:
    """The file mapped at `address` in this process (/proc/self/maps), or None (anonymous memory)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= address < hi:
            return parts[5] if len(parts) == 6 else None
    return None


def test_a_version_as_a_dataset_holds_its_rows_in_the_caches_mapped_files(catalog, tmp_path):
    root = tmp_path / "cache"
    ds = as_dataset(catalog.written, cache=ShardCache(root))
    assert isinstance(ds, datasets.Dataset) and len(ds) == ROWS
    assert ds.column_names == ["id", "tokens", "text"]
    assert ds[:] == {k: [r[k] for r in catalog.rows] for k in ("id", "tokens", "text")}
    for name in ("tokens", "text"):  # no copy: every chunk's data buffer lies in a cached .arrow file
        for chunk in ds.data.table.column(name).chunks:
            values = chunk.values if name == "tokens" else chunk
            where = mapped_file(values.buffers()[-1].address)
            assert where is not None and where.startswith(str(root)) and where.endswith(".arrow"), where
    assert as_dataset(catalog.written, columns=["text"], cache=ShardCache(root)).column_names == ["text"]
    with pytest.raises(UserError, match=r"no field\(s\) \['nope'\]"):
        as_dataset(catalog.written, columns=["nope"], cache=ShardCache(root))


def test_a_byte_flipped_in_a_cached_file_is_refused_before_the_dataset_exists(catalog, tmp_path):
    root = tmp_path / "cache"
    ShardCache(root).open(catalog.written, 1).release()  # cached, checked by that process only
    [arrow] = [p for p in root.iterdir() if p.suffix == ".arrow"]
    data = bytearray(arrow.read_bytes())
    data[len(data) // 2] ^= 0x40
    arrow.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="do not match the hash taken when it was cached"):
        as_dataset(catalog.written, cache=ShardCache(root))  # a fresh process's view of the node cache


def test_a_ranks_rows_as_an_iterable_dataset_in_dsinspects_order_and_from_a_state(catalog):
    two = RunSpec.create(catalog, "h", seed=4, batch_size=5, world_size=2, shuffle="global")
    rows = list(as_iterable(two, catalog, rank=1))
    steps = ROWS // 10
    assert [r["_index"] for r in rows] == np.concatenate([batch_indices(two, s, 1) for s in range(steps)]).tolist()
    assert [r["_step"] for r in rows] == [s for s in range(steps) for _ in range(5)]
    assert all(r["text"] == catalog.rows[r["_index"]]["text"] for r in rows)
    # from a state saved by a 2-rank job at step 3, into one rank of twice the batch
    one = RunSpec.create(catalog, "h", seed=4, batch_size=10, world_size=1, shuffle="global")
    resumed = list(as_iterable(one, catalog, start_state=LoaderState.at(two, 3, 0).to_json()))
    both = np.concatenate([batch_indices(two, 3, r) for r in range(2)])
    assert sorted(r["_index"] for r in resumed[:10]) == sorted(both.tolist())
    assert len(resumed) == ROWS - 3 * 10


def test_a_ranks_rows_are_one_shard_to_datasets_whatever_the_columns(catalog, tmp_path):
    """`datasets` splits every list among a generator's arguments over DataLoader workers: columns
    passed as a list of two were two "shards", each worker reading one column."""
    torch_data = pytest.importorskip("torch.utils.data")
    spec = RunSpec.create(catalog, "h", seed=4, batch_size=5, world_size=1, shuffle="global")
    iterable = as_iterable(spec, catalog, columns=["id", "text"], record_dir=str(tmp_path / "run"))
    assert iterable.num_shards == 1
    rows = [r for batch in torch_data.DataLoader(iterable, batch_size=None, num_workers=2) for r in [batch]]
    assert len(rows) == ROWS and all(set(r) == {"id", "text", "_step", "_index"} for r in rows)
    assert [r["_index"] for r in rows] == np.concatenate([batch_indices(spec, s, 0) for s in range(ROWS // 5)]).tolist()


def pushed_rows(n: int) -> dict:
    return {"input_ids": [list(range(i, i + 1 + i % 5)) for i in range(n)],
            "text": [f"sample {i} " + "é" * (i % 4) for i in range(n)],
            "label": [i % 3 for i in range(n)]}


def test_a_dataset_pushed_as_a_version_is_the_version_its_save_to_disk_files_ingest_to(tmp_path, monkeypatch):
    import tempfile

    from dsinspect.loaders import Catalog
    from dsinspect.loaders.hf import push_dataset
    from dsinspect.loaders.ingest import ingest
    features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int32")),
                                  "text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["a", "b", "c"])})
    data = pushed_rows(300)
    ds = datasets.Dataset.from_dict(data, features=features).shuffle(seed=3)  # an indices mapping over its table
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    pushed = push_dataset(ds, Catalog(str(tmp_path / "a")), "p", num_shards=3, no_key=True)
    assert list((tmp_path / "tmp").iterdir()) == [], "the scratch copy is removed"
    ds.save_to_disk(str(tmp_path / "saved"), num_shards=3)
    ingested = ingest(Catalog(str(tmp_path / "b")), str(tmp_path / "saved"), "p", no_key=True)
    assert pushed.id == ingested.id
    assert len(pushed.manifest.shards) >= 3, "one part (and so at least one shard) per saved file"
    # read back: the dataset's rows in its (shuffled) order, bit-exact, also as a Dataset again
    back = as_dataset(pushed, cache=ShardCache(tmp_path / "cache"))
    assert back.to_dict() == ds.to_dict()


def test_pushing_something_that_is_not_a_dataset_or_to_a_bad_name_writes_nothing(tmp_path):
    from dsinspect.loaders import Catalog
    from dsinspect.loaders.hf import push_dataset
    ds = datasets.Dataset.from_dict(pushed_rows(10))
    with pytest.raises(UserError, match=r"push one split: dataset_dict\['train'\]"):
        push_dataset(datasets.DatasetDict({"train": ds}), Catalog(str(tmp_path / "c")), "p")
    with pytest.raises(UserError, match="name"):
        push_dataset(ds, Catalog(str(tmp_path / "c")), "../escape")
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*.json"))
