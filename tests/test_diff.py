"""Diff reports exactly what changed between versions, reading only the shards they do not share."""

import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import numpy as np
import pyarrow as pa
import pytest
from conftest import TOY_FIELDS, toy_rows
from PIL import Image
from replay_diff_fixtures import STEP_FIELDS, step_updates, steps

from dsinspect.cli import main
from dsinspect.defaults import BUNDLED
from dsinspect.demo.build import DATASETS, STREAMED
from dsinspect.errors import UserError
from dsinspect.loaders.diff.compare import diff
from dsinspect.loaders.diff.fields import first_difference, image_detail
from dsinspect.loaders.diff.rows import moved_items
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.derive import derive_version
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.loaders.store.writer import WriteOptions

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
    assert shared and d.shards.added and (d.shards.removed or name in STREAMED)  # a stream only grows
    for vid, shard, columns in reads["shards"]:
        version = v1 if vid == v1.id else v2
        assert version.manifest.shards[shard].sha256 not in shared
        assert set(columns) == {want["key"], HASH_COLUMN}
    assert d.rows.rows_read == sum(s["rows"] for s in d.shards.added + d.shards.removed)
    taken = [len(want["updated"])] * 2 if want["updated"] else []  # full rows: changed ones only
    assert sorted(len(i) for _, i in reads["take"]) == taken


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


def test_addresses_need_a_catalog_versions_do_not(cat, monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", cat.url)  # the faces' default, never the engine's
    a = cat.write_version("toy", toy_rows(10), TOY_FIELDS)
    with pytest.raises(UserError, match="^diff of addresses needs a catalog"):
        diff("toy@" + a.id, a)
    assert diff(a, a).empty and diff("toy@" + a.id, a, cat).empty


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
    assert row["details"]["tokens"] == {"tokens": [4, 5], "first_diff": 2, "change": {
        "span": [2, 4, 5], "before": [0, 1], "removed": [2, 3], "added": [9, 3, 4], "after": [], "cut": False}}
    assert d.rows.fields == {"tokens": 3}  # counted over every changed row, not the one listed
    assert len(diff(a, b, limit=None).rows.changed) == 3


def test_a_changed_text_and_token_stretch_is_named_in_its_context_and_marked_on_the_cli(cat, capsys):
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text"),
              Field("tokens", pa.list_(pa.int32()), "tokens")]
    long = "x" * 300
    a = cat.write_version("ch", [{"id": 0, "text": "the quick brown fox jumps", "tokens": list(range(40))},
                                 {"id": 1, "text": "a" + long + "b", "tokens": [1, 2]}], fields, key="id")
    b = derive_version(a, update={0: {"text": "the quick red fox jumps", "tokens": list(range(20)) + [7] + list(
        range(30, 40))}, 1: {"text": "a" + long.upper() + "b"}})
    first, second = (row["details"] for row in diff(a, b).rows.changed)
    assert first["text"]["change"] == {"span": [10, 15, 13], "before": "the quick ", "removed": "brown",
                                       "added": "red", "after": " fox jumps", "cut": False}
    assert first["tokens"]["change"] == {"span": [20, 30, 21], "before": list(range(0, 20)),
                                         "removed": list(range(20, 30)), "added": [7], "after": list(range(30, 40)),
                                         "cut": False}
    cut = second["text"]["change"]
    assert cut["span"] == [1, 301, 301] and cut["cut"] and len(cut["removed"]) == len(cut["added"]) == 160
    main(["--catalog", cat.url, "diff", f"ch@{a.id}", f"ch@{b.id}"])
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the table's cells, unwrapped
    assert "the quick [-brown-]{+red+} fox jumps" in text
    assert "… 16 17 18 19 [-20 21 22 23 24 25 26 27 28 29-] {+7+} 30 31 32 33 …" in text


def test_field_counts_are_exact_at_any_limit(cat):
    a = cat.write_version("st", steps(900), STEP_FIELDS, key="id",
                          options=WriteOptions(shard_rows=200, row_group_rows=50))
    update, truth = step_updates(900)
    b = derive_version(a, update=update, options=WriteOptions(shard_rows=200, row_group_rows=50))
    for limit in (1, 20, None):
        d = diff(a, b, limit=limit)
        assert d.rows.counts["changed"] == len(update) and d.rows.fields == truth, limit
        assert all(sorted(r["fields"]) == sorted(update[r["key"]]) for r in d.rows.changed)
    assert {r["key"] for r in d.rows.changed} == set(update)
    # schemas that differ: rows compared (and fields counted) over the fields both share
    extra = Field("extra", pa.int8(), "scalar")
    wider = cat.write_version("st", [{**r, "extra": 1} for r in steps(900)], STEP_FIELDS + [extra],
                              key="id", options=WriteOptions(shard_rows=200, row_group_rows=50))
    changed = derive_version(wider, update=update, options=WriteOptions(shard_rows=200, row_group_rows=50))
    d = diff(a, changed, limit=3)
    assert any("schemas differ" in n for n in d.rows.notes) and d.rows.fields == truth


def spy_row_group_reads(monkeypatch) -> list[tuple]:
    """(version id, shard, group, columns) of every row group read, one by one or several at once."""
    reads = []
    one, several = DatasetVersion.read_row_group, DatasetVersion.read_row_groups
    monkeypatch.setattr(DatasetVersion, "read_row_group", lambda self, shard, group, columns=None: (
        reads.append((self.id, shard, group, tuple(columns or ()))) or one(self, shard, group, columns)))
    monkeypatch.setattr(DatasetVersion, "read_row_groups", lambda self, shard, groups, columns=None: (
        reads.extend((self.id, shard, g, tuple(columns or ())) for g in groups)
        or several(self, shard, groups, columns)))
    return reads


def test_field_counts_read_only_the_row_groups_of_changed_rows_and_infer_the_heaviest_field(cat, monkeypatch):
    fields = STEP_FIELDS + [Field("frame", pa.binary(), "bytes")]
    a = cat.write_version("st", [{**r, "frame": bytes([r["id"] % 251]) * 1000} for r in steps(400)], fields, key="id",
                          options=WriteOptions(shard_rows=200, row_group_rows=50))
    update = {k: {"action": 7} for k in range(120, 130)} | {130: {"reward": 2.0, "frame": b"x"}}
    update |= {k: {"frame": b"y"} for k in (131, 132, 133)}
    b = derive_version(a, update=update, options=WriteOptions(shard_rows=200, row_group_rows=50))
    groups = spy_row_group_reads(monkeypatch)
    d = diff(a, b, limit=1)
    assert d.rows.fields == {"action": 10, "reward": 1, "frame": 4}
    # per side: the one row group holding the changed rows, without the frames (rows 131-133 changed
    # nothing else, so their frames did); the frames for row 130, which changed a field besides; and
    # the listed row's changed field for its details
    light = tuple(f.name for f in STEP_FIELDS if f.name != "id")  # the key: equal in every pair matched by it
    want = [(v.id, 0, 2, columns) for v in (a, b) for columns in (light, ("frame",), ("action",))]
    assert sorted(groups) == sorted(want)


def test_field_counts_in_small_blocks_read_each_row_group_once(cat, monkeypatch):
    from dsinspect.loaders.diff import counts as diff_counts

    options = WriteOptions(shard_rows=300, row_group_rows=50)
    a = cat.write_version("st", steps(900), STEP_FIELDS, key="id", options=options)
    update, truth = step_updates(900)
    b = derive_version(a, update=update, options=options)
    monkeypatch.setattr(diff_counts, "BUDGET", 500)  # a few pairs per block: blocks end inside row groups
    reads = spy_row_group_reads(monkeypatch)
    d = diff(a, b, limit=1)
    assert d.rows.fields == truth
    light = [r for r in reads if r[3] == ("action", "reward", "note")]  # obs, a list, is read last; id is the key
    assert len(light) == len(set(light)) == 2 * 18  # every row group of both versions holds changes


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


def png16(values):
    buf = io.BytesIO()
    Image.fromarray(np.asarray(values, dtype=np.uint16)).save(buf, "PNG")
    return buf.getvalue()


GREY16 = np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000 + 1000  # 1000 .. 64000: nearly all above 8 bits


def test_16_bit_image_details_are_computed_on_the_stored_values():
    brighter = GREY16.copy()
    brighter[:2] += 300  # 16 of the 64 pixels
    a, b = png16(GREY16), png16(brighter)
    assert Image.open(io.BytesIO(a)).mode == "I;16"  # Pillow's mode for a 16-bit greyscale PNG
    d = image_detail(a, b)
    assert d["bits"] == [16, 16] and d["full_scale"] == 65535
    assert d["value_range"] == [[1000, 64000], [1300, 64000]]
    assert d["pixel_mean_abs_diff"] == 75.0 and d["pixel_max_abs_diff"] == 300 and d["pixels_changed"] == 0.25
    # 8 bits against 16: no comparison of values on different scales
    mixed = image_detail(png((8, 8), 0, "L"), b)
    assert mixed["bits"] == [8, 16] and "pixel_mean_abs_diff" not in mixed and "bit depths differ" in mixed["note"]
    # 32-bit integer images (Pillow mode I, e.g. from TIFF): stored values too, with no fixed scale
    tiffs = []
    for values in (GREY16, brighter):
        buf = io.BytesIO()
        Image.fromarray(values.astype(np.int32) * 100).save(buf, "TIFF")
        tiffs.append(buf.getvalue())
    deep = image_detail(*tiffs)
    assert deep["mode"] == ["I", "I"] and deep["bits"] == [32, 32] and deep["full_scale"] is None
    assert deep["pixel_max_abs_diff"] == 30000 and deep["value_range"][1] == [130000, 6400000]


def test_16_bit_images_in_a_diff_and_its_cli_text(cat, capsys):
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("depth", pa.binary(), "image")]
    a = cat.write_version("depth", [{"id": i, "depth": png16(GREY16 + i)} for i in range(4)], fields, key="id")
    brighter = GREY16 + 2
    brighter[:2] += 300
    b = derive_version(a, update={2: {"depth": png16(brighter)}})
    detail = diff(a, b).rows.changed[0]["details"]["depth"]
    assert detail["pixel_mean_abs_diff"] == 75.0 and detail["value_range"][0] == [1002, 64002]
    main(["--catalog", cat.url, "diff", f"depth@{a.id}", f"depth@{b.id}"])
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the table's cell, unwrapped
    assert "depth: 8×8 I;16, PNG, " in text  # then the PNGs' sizes: zlib's output, not asserted
    assert "bytes, 16-bit values 1,002–64,002 → 1,302–64,002, " \
           "mean pixel difference 75 of 65,535 (largest 300), 25.0% of pixels differ" in text


def test_changed_array_fields_name_shape_elements_and_the_first_difference(cat, capsys):
    a = cat.write_version("st", steps(40), STEP_FIELDS, key="id", options=WriteOptions(shard_rows=10))
    nested = [Field("id", pa.int64(), "scalar", nullable=False), Field("grid", pa.list_(pa.list_(pa.int16())), "array")]
    g = cat.write_version("grid", [{"id": 0, "grid": [[1, 2], [3, 4]]}, {"id": 1, "grid": [[1, 2]]}], nested, key="id")
    b = derive_version(a, update={17: {"obs": [17, 17.5, 1.0]}})
    detail = diff(a, b).rows.changed[0]["details"]["obs"]
    assert detail == {"dtype": "float32", "shape": [[3], [3]], "elements": [3, 3], "elements_changed": 1,
                      "first_diff": [2], "values": [-17.0, 1.0], "max_abs_diff": 18.0}
    h = derive_version(g, update={0: {"grid": [[1, 2], [3, -7]]}, 1: {"grid": [[1, 2], [3, 4]]}})
    details = {r["key"]: r["details"]["grid"] for r in diff(g, h).rows.changed}
    assert details[0]["first_diff"] == [1, 1] and details[0]["values"] == [4, -7] and details[0]["max_abs_diff"] == 11
    assert details[1] == {"dtype": "int16", "shape": [[1, 2], [2, 2]], "elements": [2, 4]}
    main(["--catalog", cat.url, "diff", f"grid@{g.id}", f"grid@{h.id}"])
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the table's cells, unwrapped
    assert "grid: int16 2×2, 1 of 4 elements differ, the first at [1, 1]: 4 → -7, largest difference 11" in text
    assert "grid: int16 1×2 → 2×2" in text


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


def on_a_terminal(*argv: str) -> str:
    """What `python -m dsinspect ARGV` prints with stdout on a pseudo-terminal 160 columns wide, its
    colours taken out."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 160, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("DSINSPECT_CATALOG", "NO_COLOR")}
    proc = subprocess.Popen([sys.executable, "-m", "dsinspect", *argv], stdout=terminal, stderr=subprocess.PIPE,
                            env=env)
    os.close(terminal)
    seen = b""
    while True:  # read until the child's side closes (EIO on Linux): no timing involved
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    os.close(controller)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode()).replace("\r\n", "\n")


def test_the_cli_draws_changed_images_upright_with_their_difference():
    """demo-images row 14 is stored 64×48 with EXIF orientation 8: drawn upright (taller than wide)
    before, after and where they differ, as the viewers draw it; row 13 (128×96, no EXIF) wide."""
    text = on_a_terminal("--catalog", str(BUNDLED), "diff", "demo-images@v1", "demo-images@v2")
    assert "difference (white: largest)" in text

    def picture_rows(key: str) -> int:  # half-block rows of the first picture under "image of KEY"
        block = text.split(f"image of {key}\n", 1)[1].splitlines()
        return next(i for i, line in enumerate(block[1:]) if line.startswith("╰"))

    assert picture_rows("14") == 22  # 48×64 upright, fitted to 32 cells: 32×43 pixels, 22 rows of ▀
    assert picture_rows("13") == 12  # 128×96: 32×24 pixels


def test_the_cli_off_a_terminal_says_in_words_that_images_differ(capsys):
    """Into a file or a pipe, no half-block art (lines of bare ▀): the sizes and pixels that differ."""
    main(["--catalog", str(BUNDLED), "diff", "demo-images@v1", "demo-images@v2"])
    text = capsys.readouterr().out
    assert "▀" not in text and "▄" not in text and "difference (white: largest)" not in text
    assert "image of 13: the images differ (drawn only on a terminal): 128×96, 12,288 of 12,288 pixels differ" in text
    assert "image of 14: the images differ (drawn only on a terminal): 64×48, 3,072 of 3,072 pixels differ" in text
