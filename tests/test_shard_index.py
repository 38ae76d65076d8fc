"""A shard's index (docs/FORMAT.md): written beside every shard, its sha256 in the manifest, its parts
cutting the file at row groups with a sha256 each; refused when it disagrees; optional (old catalogs
keep their ids); checked by verify, collected by gc with its orphan shard, and a missing one only
makes a reader fetch the shard whole."""

import hashlib
import json
import os
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import TOY_FIELDS, toy_rows

from dsinspect.errors import IntegrityError, ManifestError, NotFoundError
from dsinspect.loaders import Catalog, Loader, RunSpec, WriteOptions
from dsinspect.loaders.format.manifest import Manifest, canonical_json, sha256_hex
from dsinspect.loaders.format.shard_index import ShardIndex
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.store.gc import find_garbage, remove_garbage
from dsinspect.loaders.store.verify import verify_version

OPTIONS = WriteOptions(shard_rows=60, row_group_rows=16)


@pytest.fixture
def version(tmp_path):
    return Catalog(str(tmp_path / "cat")).write_version("toy", toy_rows(150), TOY_FIELDS, key="id", options=OPTIONS)


def index_path(version, shard):
    return version.catalog.layout.shard_index(version.name, version.manifest.shards[shard].sha256)


def test_every_shard_has_an_index_whose_parts_cut_it_at_its_row_groups(version):
    for s, entry in enumerate(version.manifest.shards):
        raw = open(index_path(version, s), "rb").read()
        assert sha256_hex(raw) == entry.index_sha256
        assert raw == canonical_json(json.loads(raw))  # canonical: one index per shard, whoever wrote it
        index = version.shard_index(s)
        data = open(version.shard_path(s), "rb").read()
        meta = pq.ParquetFile(version.shard_path(s)).metadata
        assert index.parts == meta.num_row_groups + 1 and index.offsets[0] == 0 and index.offsets[-1] == len(data)
        for part in range(index.parts):
            start, end = index.span(part)
            assert hashlib.sha256(data[start:end]).hexdigest() == index.sha256[part]
        for g in range(meta.num_row_groups):  # part g holds every byte of row group g
            start, end = index.span(g)
            group = meta.row_group(g)
            assert index.row_starts[g + 1] - index.row_starts[g] == group.num_rows
            for c in range(group.num_columns):
                col = group.column(c)
                first = min(x for x in (col.dictionary_page_offset, col.data_page_offset) if x)
                assert start <= first and first + col.total_compressed_size <= end
        assert index.row_starts[-1] == entry.rows and index.span(index.footer)[1] == len(data)


def test_without_an_index_a_version_keeps_the_id_it_had_before_indexes(tmp_path, version):
    old = Catalog(str(tmp_path / "old")).write_version("toy", toy_rows(150), TOY_FIELDS, key="id",
                                                       options=WriteOptions(shard_rows=60, row_group_rows=16,
                                                                            shard_index=False))
    assert all(s.index_sha256 is None for s in old.manifest.shards)
    assert "index_sha256" not in json.dumps(old.manifest.to_json())
    assert [s.sha256 for s in old.manifest.shards] == [s.sha256 for s in version.manifest.shards]
    without = version.manifest.content()
    for s in without["shards"]:
        del s["index_sha256"]
    assert sha256_hex(canonical_json(without)) == old.id != version.id
    assert not [p for p in os.listdir(old.catalog.layout.shards("toy")) if p.endswith(".index.json")]


@pytest.mark.parametrize("edit, why", [
    (lambda d: d.update(shard="0" * 64), "not a shard index"),
    (lambda d: d.update(bytes=d["bytes"] + 1), "not a shard index"),
    (lambda d: d["parts"]["sha256"].__setitem__(0, "A" * 64), "not a shard index"),
    (lambda d: d["parts"]["offset"].__setitem__(0, 4), "do not cut"),
    (lambda d: d["parts"]["offset"].__setitem__(2, d["parts"]["offset"][1]), "do not cut"),
    (lambda d: d["parts"]["rows"].__setitem__(0, d["parts"]["rows"][0] + 1), "do not cut"),
    (lambda d: d["parts"]["rows"].__setitem__(-1, 1), "do not cut"),
    (lambda d: d["parts"].pop("rows"), "not a shard index"),
])
def test_an_index_that_disagrees_with_its_shard_is_refused(version, edit, why):
    entry = version.manifest.shards[0]
    doc = json.loads(open(index_path(version, 0), "rb").read())
    edit(doc)
    with pytest.raises(ManifestError, match=why):
        ShardIndex.from_bytes(canonical_json(doc), "x.index.json", entry.sha256, entry.bytes, entry.rows)


def test_a_damaged_index_is_an_integrity_error_and_a_missing_one_reads_the_shard_whole(tmp_path, version):
    path = index_path(version, 1)
    raw = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(raw.replace(b'"rows"', b'"rowz"', 1))
    with pytest.raises(IntegrityError, match=r"index\.json: content hashes to"):
        version.catalog.version("toy", version.id).shard_index(1)
    report = verify_version(version.catalog.version("toy", version.id))
    assert not report.ok and any("index" in p for p in report.shards[1].problems)

    os.unlink(path)
    fresh = version.catalog.version("toy", version.id)
    with pytest.raises(NotFoundError, match="the index of shard 1 of toy@"):
        fresh.shard_index(1)
    spec = RunSpec.create(version.catalog, "toy", seed=4, batch_size=10, shuffle="global")
    cache = ShardCache(tmp_path / "cache")
    with Loader(spec, catalog=version.catalog, cache=cache) as loader:
        got = [b.table.column("id").to_pylist() for b in loader]
    assert sorted(np.concatenate(got).tolist()) == list(range(150))  # ids equal their index
    stats = loader.stats()
    assert stats["shards_fetched"] >= 1 and cache.holds(version.manifest.shards[1].sha256)


def test_verify_checks_each_part_of_a_shard_against_its_index(version):
    assert verify_version(version).ok
    entry = version.manifest.shards[0]
    doc = json.loads(open(index_path(version, 0), "rb").read())
    doc["parts"]["sha256"][1] = "0" * 64  # a consistent manifest naming a wrong index: re-published
    raw = canonical_json(doc)
    with open(index_path(version, 0), "wb") as f:
        f.write(raw)
    content = version.manifest.to_json()
    content["shards"][0]["index_sha256"] = sha256_hex(raw)
    forged = Manifest.from_json(content)
    from dsinspect.loaders.store.version import DatasetVersion
    report = verify_version(DatasetVersion(version.catalog, "toy", forged.id, forged))
    assert not report.ok and any("part 1" in p and entry.sha256 not in p for p in report.shards[0].problems), \
        report.shards[0].problems


def test_gc_collects_an_orphan_shards_index_with_it_and_keeps_the_rest(tmp_path, version):
    shards = version.catalog.layout.shards("toy")
    orphan = Catalog(version.catalog.url).writer("toy", TOY_FIELDS, key="id", options=OPTIONS)
    orphan.write(toy_rows(20, start=5000))
    [shard] = orphan.finish_shards()  # published, never referenced: what a killed writer leaves
    old = time.time() - 48 * 3600
    for name in os.listdir(shards):
        os.utime(os.path.join(shards, name), (old, old))
    found = {os.path.basename(g.path) for g in find_garbage(version.catalog)}
    assert found == {f"{shard.sha256}.parquet", f"{shard.sha256}.index.json"}
    remove_garbage(version.catalog, find_garbage(version.catalog))
    left = set(os.listdir(shards))
    for s in version.manifest.shards:
        assert {f"{s.sha256}.parquet", f"{s.sha256}.index.json"} <= left
    assert not [n for n in left if n.startswith(shard.sha256)]
    assert verify_version(version).ok
