"""ingest → export → ingest gives the same version id, for each export format."""

import io
import json
import math
import shutil
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from dsinspect.demo.tokenizer import tokenizer_bytes
from dsinspect.errors import UserError
from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.ingest.export import export_version
from dsinspect.loaders.ingest.restore import SIDECAR
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.writer import WriteOptions

ROWS = 300


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (i % 256, (i * 3) % 256, 7)).save(buf, format="PNG")
    return buf.getvalue()


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    special = [math.nan, -0.0, math.inf, 1e-45]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "text": pa.array([None if i % 11 == 0 else f"line {i} ünïcode ✓" for i in ids], pa.string()),
        "image": pa.array([_png(i) for i in ids], pa.binary()),
        "input_ids": pa.array([[i % 300, (i * 5) % 300] for i in ids], pa.list_(pa.int32())),
        "score": pa.array([special[i % 4] if i % 5 == 0 else i / 3 for i in ids], pa.float32()),
        "ok": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
        "at": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us")),
        "episode": pa.array([{"reward": [float(i), 0.5], "done": [False, i % 3 == 0]} for i in ids]),
    }, schema=pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("text", pa.string()),
                         pa.field("image", pa.binary()), pa.field("input_ids", pa.list_(pa.int32())),
                         pa.field("score", pa.float32()), pa.field("ok", pa.bool_()),
                         pa.field("at", pa.timestamp("us")),
                         pa.field("episode", pa.struct([("reward", pa.list_(pa.float64())),
                                                        ("done", pa.list_(pa.bool_()))]))]))


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A Parquet source written with pyarrow (two files), ingested with a tokenizer and a key."""
    root = tmp_path_factory.mktemp("rt")
    src = root / "src"
    src.mkdir()
    pq.write_table(_table(0, ROWS), src / "a.parquet", row_group_size=70)
    pq.write_table(_table(ROWS, ROWS // 2), src / "b.parquet", row_group_size=64)
    (root / "tokenizer.json").write_bytes(tokenizer_bytes())
    catalog = Catalog(str(root / "catalog"))
    return run_ingest(catalog, str(src), "mixed", engine="inline", key="id", tokenizer=str(root / "tokenizer.json"),
                      roles={"episode": "trajectory"}, write=WriteOptions(shard_rows=128)).version


def test_the_original_has_the_roles_and_options_it_was_given(original):
    roles = {f.name: f.role.value for f in original.fields}
    assert roles == {"id": "scalar", "text": "text", "image": "image", "input_ids": "tokens", "score": "scalar",
                     "ok": "scalar", "at": "scalar", "episode": "trajectory"}
    assert "blob" in original.manifest.field("input_ids").options["tokenizer"]
    assert [s.rows for s in original.manifest.shards] == [128, 128, 44, 128, 22]


def _reingest(dest: Path, tmp_path: Path, **kwargs):
    return run_ingest(Catalog(str(tmp_path / "again")), str(dest), "mixed", engine="inline", **kwargs).version


def _same_rows(a, b) -> None:
    for i in (0, 1, 5, 10, 128, ROWS + 3, a.num_rows - 1):
        assert a.row(i) == b.row(i) or json.dumps(a.row(i), default=repr) == json.dumps(b.row(i), default=repr)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_export_then_ingest_gives_the_same_version_id(original, tmp_path, fmt):
    dest = tmp_path / "export"
    summary = export_version(original, fmt, str(dest))
    assert len(summary["files"]) == len(original.manifest.shards) and (dest / SIDECAR).exists()
    again = _reingest(dest, tmp_path)
    assert again.id == original.id
    assert again.catalog.read_blob("mixed", original.manifest.field("input_ids").options["tokenizer"]["blob"], ".json")


def test_parquet_files_alone_carry_their_fields_in_the_schema_metadata(original, tmp_path):
    export_version(original, "parquet", str(tmp_path / "export"))
    (tmp_path / "bare").mkdir()
    for f in (tmp_path / "export").glob("*.parquet"):
        shutil.copy(f, tmp_path / "bare" / f.name)
    meta = json.loads(pq.read_schema(next((tmp_path / "bare").glob("*.parquet"))).metadata[b"dsinspect"])
    assert [f["role"] for f in meta["fields"]][:3] == ["scalar", "text", "image"] and meta["key"] == "id"
    with pytest.raises(UserError, match=r"_blobs/[0-9a-f]{64}: side file \(tokenizer\) of the export is not readable"):
        _reingest(tmp_path / "bare", tmp_path)  # a fresh catalog lacks the tokenizer the fields name
    again = run_ingest(original.catalog, str(tmp_path / "bare"), "mixed", engine="inline").version
    assert again.id == original.id  # the catalog that has the tokenizer: the same version


def test_jsonl_export_writes_binary_as_base64_and_timestamps_as_integers(original, tmp_path):
    export_version(original, "jsonl", str(tmp_path / "export"))
    first = json.loads((tmp_path / "export" / "part-00000.jsonl").read_text().splitlines()[1])
    import base64

    assert base64.b64decode(first["image"]) == original.row(1)["image"]
    assert first["at"] == 1_700_000_000_000_001 and first["input_ids"] == [1, 5]
    sidecar = json.loads((tmp_path / "export" / SIDECAR).read_text())
    assert sidecar["encodings"] == {"image": "base64"} and sidecar["version_id"] == original.id


def test_webdataset_export_is_tar_members_per_field_keyed_by_row(original, tmp_path):
    dest = tmp_path / "export"
    export_version(original, "webdataset", str(dest))
    with tarfile.open(dest / "part-00001.tar") as tar:
        names = tar.getnames()
        image = tar.extractfile("000000128.image.png").read()
        text = tar.extractfile("000000129.text.txt").read()
    assert names[:8] == [f"000000128.{n}" for n in ("id.json", "text.txt", "image.png", "input_ids.json", "score.json",
                                                     "ok.json", "at.json", "episode.json")]
    assert "000000132.text.txt" not in names  # a null value has no member
    assert image == original.row(128)["image"] and text.decode() == original.row(129)["text"]


def test_webdataset_export_then_ingest_gives_the_same_version_id_when_no_value_is_null(tmp_path):
    pytest.importorskip("dsinspect.loaders.ingest.webdataset")
    src = tmp_path / "src"
    src.mkdir()
    table = _table(1, 200).drop_columns(["text"])  # id 1..200: no nulls in any field
    pq.write_table(table, src / "a.parquet")
    original = run_ingest(Catalog(str(tmp_path / "c1")), str(src), "wds", engine="inline", key="id",
                          roles={"episode": "trajectory"}, write=WriteOptions(shard_rows=64)).version
    export_version(original, "webdataset", str(tmp_path / "export"))
    again = run_ingest(Catalog(str(tmp_path / "c2")), str(tmp_path / "export"), "wds", engine="inline").version
    assert again.id == original.id


def test_export_refuses_a_non_empty_destination_and_an_unknown_format(original, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(UserError, match="not an empty directory"):
        export_version(original, "parquet", str(tmp_path / "full"))
    with pytest.raises(UserError, match="unknown export format 'csv'"):
        export_version(original, "csv", str(tmp_path / "new"))


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_big_rows_cut_by_bytes_round_trip_with_default_options(tmp_path, fmt):
    """Row groups and shards cut by the byte bounds (rows of 10-60 KB) come back the same even when
    the re-ingest uses other (the default) write options: the export records each shard's row groups."""
    import numpy as np

    rng = np.random.default_rng(7)
    blobs = [rng.bytes(int(n)) for n in rng.integers(10_000, 60_000, 400)]
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"id": np.arange(400), "blob": pa.array(blobs, pa.binary())}),
                   tmp_path / "src" / "a.parquet")
    small = WriteOptions(shard_bytes=3 << 20, row_group_bytes=1 << 20)
    original = run_ingest(Catalog(str(tmp_path / "c1")), str(tmp_path / "src"), "big", engine="inline",
                          write=small).version
    assert len(original.manifest.shards) >= 4
    export_version(original, fmt, str(tmp_path / "export"))
    again = run_ingest(Catalog(str(tmp_path / "c2")), str(tmp_path / "export"), "big", engine="inline").version
    assert again.id == original.id
