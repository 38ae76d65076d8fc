"""Diff reports exactly what changed between versions, reading only the shards they do not share."""

import io
import json

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from dsinspect.defaults import BUNDLED
from dsinspect.demo.build import DATASETS
from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.derive import derive_version
from dsinspect.loaders.diff import diff
from dsinspect.loaders.diff_fields import first_difference, image_detail
from dsinspect.loaders.diff_rows import moved_items
from dsinspect.loaders.manifest import HASH_COLUMN, Field
from dsinspect.loaders.version import DatasetVersion
from dsinspect.loaders.writer import WriteOptions
from conftest import TOY_FIELDS, toy_rows

RECORD = json.loads((BUNDLED / "sample-data.json").read_text())


def changes(d):
    """The row changes as plain sets: what the sample-data record holds."""
    r = d.rows
    return {"added": sorted(x["key"] for x in r.added), "removed": sorted(x["key"] for x in r.removed),
            "updated": {str(x["key"]): sorted(x["fields"]) for x in r.changed}, "moved": r.counts["moved"]}


@pytest.fixture
def reads(monkeypatch):
    """Every shard read and every row taken, by version id."""
    log = {"shards": [], "take": []}
    read_shard, take = DatasetVersion.read_shard, DatasetVersion.take

    def spy_read(self, shard, columns=None):
        log["shards"].append((self.id, shard, tuple(columns or ())))
        return read_shard(self, shard, columns)

    def spy_take(self, indices, columns=None, read_group=None):
        log["take"].append((self.id, [int(i) for i in indices]))
        return take(self, indices, columns, read_group)

    monkeypatch.setattr(DatasetVersion, "read_shard", spy_read)
    monkeypatch.setattr(DatasetVersion, "take", spy_take)
    return log


@pytest.mark.parametrize("name", DATASETS)
def test_sample_catalog_diffs_match_what_the_generator_changed(name, reads):
    want = RECORD["datasets"][name]
    cat = Catalog(str(BUNDLED))
    d = diff(f"{name}@v1", f"{name}@v2", cat)
    assert (d.a_id, d.b_id) == (want["v1"], want["v2"])
    assert d.schema == [] and d.rows.matched_by == "key" and d.rows.key == want["key"]
    assert changes(d) == {"added": sorted(want["added"]), "removed": sorted(want["removed"]),
                          "updated": want["updated"], "moved": 0}
    assert d.rows.counts == {"added": len(want["added"]), "removed": len(want["removed"]),
                             "changed": len(want["updated"]), "moved": 0}
    # only the shards the versions do not share are read, and of those only key and hash
    v1, v2 = cat.resolve(f"{name}@v1"), cat.resolve(f"{name}@v2")
    shared = {s["sha256"] for s in d.shards.shared}
    assert shared and d.shards.added and d.shards.removed
    for vid, shard, columns in reads["shards"]:
        version = v1 if vid == v1.id else v2
        assert version.manifest.shards[shard].sha256 not in shared
        assert set(columns) == {want["key"], HASH_COLUMN}
    assert d.rows.rows_read == sum(s["rows"] for s in d.shards.added + d.shards.removed)
    assert sorted(len(i) for _, i in reads["take"]) == [len(want["updated"])] * 2  # full rows: changed ones only


@pytest.mark.parametrize("name", DATASETS)
def test_a_version_against_itself_is_empty_and_reads_nothing(name, reads):
    d = diff(f"{name}@v2", f"{name}@v2", Catalog(str(BUNDLED)))
    assert d.empty and not d.schema and not d.shards.added and not d.shards.removed and not d.shards.moved
    assert d.rows.rows_read == 0 and reads == {"shards": [], "take": []}
    assert json.loads(json.dumps(d.to_json()))["empty"] is True


def test_sample_details_name_the_token_and_pixel_changes():
    cat = Catalog(str(BUNDLED))
    text = diff("demo-text@v1", "demo-text@v2", cat)
    v1, v2 = cat.resolve("demo-text@v1"), cat.resolve("demo-text@v2")
    for row in text.rows.changed:
        before, after = v1.row(row["index_a"])["tokens"], v2.row(row["index_b"])["tokens"]
        first = row["details"]["tokens"]["first_diff"]
        assert before[:first] == after[:first]
        assert first == min(len(before), len(after)) or before[first] != after[first]
    images = diff("demo-images@v1", "demo-images@v2", cat)
    for row in images.rows.changed:
        detail = row["details"]["image"]
        assert {"size", "mode", "format", "pixel_mean_abs_diff", "pixels_changed"} <= set(detail)
        assert detail["pixel_mean_abs_diff"] > 0


@pytest.fixture
def cat(tmp_path):
    return Catalog(str(tmp_path / "cat"))


def test_without_a_key_rows_match_by_hash_and_changes_show_as_removed_plus_added(cat):
    a = cat.write_version("toy", toy_rows(100), TOY_FIELDS, options=WriteOptions(shard_rows=10))
    b = derive_version(a, update={5: {"blob": b"new"}}, remove=[50], add=toy_rows(2, start=500))
    d = diff(a, b)
    assert d.rows.matched_by == "row_hash" and d.rows.key is None
    assert d.rows.counts == {"added": 3, "removed": 2, "changed": 0, "moved": 0}
    assert sorted(x["index_a"] for x in d.rows.removed) == [5, 50]
    assert sorted(x["index_b"] for x in d.rows.added) == [5, 99, 100]
    assert any("one removed and one added" in n for n in d.rows.notes)
    assert all(len(x["row_hash"]) == 32 for x in d.rows.added)


def test_duplicate_rows_match_as_a_multiset(cat):
    rows = toy_rows(10) + toy_rows(10)  # every row twice, no key
    a = cat.write_version("dup", rows, TOY_FIELDS, options=WriteOptions(shard_rows=5))
    b = derive_version(a, remove=[3], add=[toy_rows(10)[7]])
    d = diff(a, b)
    assert d.rows.counts["removed"] == 1 and d.rows.counts["added"] == 1  # a 3rd copy of row 7 is one more
    c = derive_version(a, remove=[3], add=[toy_rows(10)[3]])  # a copy of row 3 went to the end
    assert diff(a, c).rows.counts["removed"] == diff(a, c).rows.counts["added"] == 0
    a2 = cat.write_version("dupkey", rows, TOY_FIELDS, key="id", options=WriteOptions(shard_rows=5))
    b2 = cat.write_version("dupkey", rows[1:], TOY_FIELDS, key="id", options=WriteOptions(shard_rows=5))
    d2 = diff(a2, b2)
    assert d2.rows.matched_by == "row_hash" and any("repeats" in n for n in d2.rows.notes)
    assert d2.rows.counts["removed"] == 1


def test_moved_rows_are_those_that_changed_place_not_those_shifted(cat):
    rows = toy_rows(100)
    a = cat.write_version("m", rows, TOY_FIELDS, key="id", options=WriteOptions(shard_rows=10))
    b = cat.write_version("m", rows[:20] + rows[25:] + rows[20:25], TOY_FIELDS, key="id",
                          options=WriteOptions(shard_rows=10))
    d = diff(a, b)
    assert d.rows.counts == {"added": 0, "removed": 0, "changed": 0, "moved": 5}
    assert sorted(x["key"] for x in d.rows.moved) == [20, 21, 22, 23, 24]
    assert [x["index_b"] for x in d.rows.moved] == [95, 96, 97, 98, 99]
    assert len(d.shards.shared) == 2  # rows 0-19: nothing after them is read as moved
    c = derive_version(a, remove=[0])  # every later index shifts by one: not a move
    assert diff(a, c).rows.counts == {"added": 0, "removed": 1, "changed": 0, "moved": 0}


def test_a_shard_moved_as_a_whole_is_found_from_manifests_alone(cat, reads):
    rows = toy_rows(60)
    a = cat.write_version("s", rows, TOY_FIELDS, key="id", options=WriteOptions(shard_rows=10))
    b = cat.write_version("s", rows[30:40] + rows[:30] + rows[40:], TOY_FIELDS, key="id",
                          options=WriteOptions(shard_rows=10))
    d = diff(a, b)
    assert len(d.shards.shared) == 6 and not d.shards.added and not d.shards.removed
    assert [(s["index_a"], s["index_b"]) for s in d.shards.moved] == [(3, 0)]
    assert d.rows.counts["moved"] == 10 and d.rows.rows_read == 0 and reads["shards"] == []
    assert not d.empty


def test_schema_changes_are_named(cat):
    rows = toy_rows(30)
    a = cat.write_version("sc", rows, TOY_FIELDS, key="id", options=WriteOptions(shard_rows=10))
    tok = {"tokenizer": {"kind": "huggingface", "blob": "0" * 64}}
    fields = [Field("id", pa.int64(), "scalar", nullable=False),
              Field("tokens", pa.list_(pa.int32()), "tokens", options=tok),
              Field("blob", pa.binary(), "image"), Field("quality", pa.float32(), "scalar")]
    b = cat.write_version("sc", [{**r, "quality": 1.0} for r in rows], fields, key="id",
                          options=WriteOptions(shard_rows=10))
    d = diff(a, b)
    kinds = {(c.field, c.change) for c in d.schema}
    assert kinds == {("quality", "added"), ("tokens", "options"), ("blob", "role")}
    assert next(c for c in d.schema if c.change == "options").after == tok
    # rows are compared over the fields both share: the new column alone changes no row
    assert d.rows.counts == {"added": 0, "removed": 0, "changed": 0, "moved": 0}
    assert any("schemas differ" in n for n in d.rows.notes)
    narrower = [Field("id", pa.int32(), "scalar", nullable=False), TOY_FIELDS[1], TOY_FIELDS[2]]
    c = cat.write_version("sc", rows, narrower, key="id", options=WriteOptions(shard_rows=10))
    d2 = diff(a, c)
    assert ("id", "type") in {(x.field, x.change) for x in d2.schema} and d2.rows.matched_by == "row_hash"
    d3 = diff(a, c, limit=None)
    assert d3.rows.counts["changed"] == 0 and d3.rows.counts["added"] == 0  # tokens and blob are unchanged


def test_field_details_and_limits(cat):
    a = cat.write_version("f", toy_rows(40), TOY_FIELDS, key="id", options=WriteOptions(shard_rows=10))
    b = derive_version(a, update={k: {"tokens": [0, 1, 9, 3, 4]} for k in (4, 14, 24)},
                       remove=[30, 31], add=toy_rows(3, start=100))
    d = diff(a, b, limit=1)
    assert d.rows.counts == {"added": 3, "removed": 2, "changed": 3, "moved": 0}
    assert [len(d.rows.added), len(d.rows.removed), len(d.rows.changed)] == [1, 1, 1]
    row = d.rows.changed[0]
    assert row["key"] == 4 and row["fields"] == ["tokens"]
    assert row["details"]["tokens"] == {"tokens": [4, 5], "first_diff": 2}
    assert d.rows.fields == {"tokens": 1}
    assert len(diff(a, b, limit=None).rows.changed) == 3


def png(size, color, mode="RGB"):
    buf = io.BytesIO()
    Image.new(mode, size, color).save(buf, "PNG")
    return buf.getvalue()


def test_image_details():
    same = image_detail(png((8, 8), (0, 0, 0)), png((8, 8), (255, 0, 0)))
    assert same["size"] == [[8, 8], [8, 8]] and same["pixels_changed"] == 1.0
    assert same["pixel_mean_abs_diff"] == pytest.approx(255 / 4)  # one of four RGBA channels
    resized = image_detail(png((8, 8), (0, 0, 0)), png((4, 2), 0, "L"))
    assert resized["size"] == [[8, 8], [4, 2]] and resized["mode"] == ["RGB", "L"]
    assert "pixel_mean_abs_diff" not in resized
    broken = image_detail(png((8, 8), (0, 0, 0)), b"\x89PNG not really")
    assert "not decodable" in broken["error"]


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference("abc", "abc") is None
    assert first_difference(b"\x00\x01", b"\x00\x02") == 1


def test_moved_items_keep_the_heaviest_order():
    a = np.array([0, 10, 20, 30])
    w = np.array([10, 10, 10, 1])
    # the one-row item went first: moving it is cheaper than moving the three blocks
    assert moved_items(a, np.array([1, 11, 21, 0]), w).tolist() == [False, False, False, True]
    # the first block went to the end: the other three stay in order as one run
    assert moved_items(a, np.array([30, 0, 10, 20]), np.array([10, 10, 10, 10])).tolist() == [True, False, False, False]
    assert not moved_items(a, a + 5, w).any()
    assert moved_items(np.array([5]), np.array([0]), np.array([1])).tolist() == [False]
