"""Ingest sources read what each ecosystem's own writer wrote, bit for bit, and fail in one clear line."""

from __future__ import annotations

import gzip
import json
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ingest_fixtures import assert_rows_identical, image_bytes, mp4_bytes, odd_floats, webm_bytes

from dsinspect.errors import UserError
from dsinspect.loaders.ingest.infer import infer_fields
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_ROWS
from dsinspect.loaders.ingest.sources import detect_source, open_source


def read_all(spec: SourceSpec) -> tuple[list[dict], list[pa.RecordBatch]]:
    """Every row, each part re-opened from JSON the way an engine in another process does."""
    source = open_source(spec)
    batches = []
    for part in source.parts():
        worker = open_source(SourceSpec.from_json(json.loads(json.dumps(spec.to_json()))))
        batches += list(worker.read(Part.from_json(json.loads(json.dumps(part.to_json())))))
    for b in batches:
        assert b.schema == source.schema()
        assert b.num_rows <= BATCH_ROWS
    return [r for b in batches for r in b.to_pylist()], batches


def roles_of(spec: SourceSpec, **kw) -> dict[str, str]:
    source = open_source(spec)
    first = next(source.read(source.parts()[0]))
    return {f.name: f.role.value for f in infer_fields(source.schema(), first, source.hints(), **kw)}


@pytest.fixture(params=["local", "memory"])
def where(request, tmp_path):
    if request.param == "local":
        yield str(tmp_path / "src")
        return
    root = f"memory://ingest-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def put(url: str, data: bytes) -> None:
    with fsspec.open(url, "wb", auto_mkdir=True) as f:
        f.write(data)


# -- JSONL ------------------------------------------------------------------------------------

def jsonl_rows(n: int, start: int = 0) -> list[dict]:
    floats = odd_floats()
    return [{"id": i, "text": f"line {i} ünïcode ✓", "input_ids": list(range(i % 7)),
             "score": floats[i % len(floats)], "ok": i % 2 == 0, "note": None if i % 3 else "x",
             "meta": {"a": i, "tags": ["p", "q"][: i % 3]}} for i in range(start, start + n)]


def jsonl_text(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def test_jsonl_rows_bit_identical_across_files_and_compressions(where):
    import zstandard

    rows = jsonl_rows(2500)
    put(f"{where}/a.jsonl", jsonl_text(rows[:1100]))
    put(f"{where}/b.jsonl.gz", gzip.compress(jsonl_text(rows[1100:2000]), mtime=0))
    put(f"{where}/c.jsonl.zst", zstandard.ZstdCompressor().compress(jsonl_text(rows[2000:])))
    spec = detect_source(where)
    assert spec.kind == "jsonl"
    got, batches = read_all(spec)
    assert_rows_identical(got, rows)
    assert len(batches) >= 4  # 1,100 rows of one file do not come out as one batch
    assert [p.url.rsplit("/", 1)[1] for p in open_source(spec).parts()] == ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst"]
    assert roles_of(spec) == {"id": "scalar", "text": "text", "input_ids": "tokens", "score": "scalar",
                              "ok": "scalar", "note": "scalar", "meta": "trajectory"}


def test_jsonl_missing_keys_are_nulls_and_int_float_widen(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"x": 1, "y": "a"}\n\n{"x": 2.5}\n{"y": "b", "x": 3}\n')
    got, _ = read_all(detect_source(str(tmp_path / "a.jsonl")))
    assert got == [{"x": 1.0, "y": "a"}, {"x": 2.5, "y": None}, {"x": 3.0, "y": "b"}]


def test_jsonl_streams_batches_before_reading_the_rest(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl_text(jsonl_rows(3000)) + b"this is not json\n")
    source = open_source(detect_source(str(path)))
    batches = source.read(source.parts()[0])
    assert next(batches).num_rows == BATCH_ROWS  # yielded long before the broken last line is read
    with pytest.raises(UserError, match=r"big\.jsonl:3001: not valid JSON"):
        list(batches)


def test_jsonl_line_not_json_names_file_and_line(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n{"x": 2}\n{"x": 3,}\n')
    with pytest.raises(UserError, match=r"a\.jsonl:3: not valid JSON"):
        open_source(detect_source(str(tmp_path / "a.jsonl"))).schema()


def test_jsonl_mixed_types_name_both_lines(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"x": null}\n{"x": 1}\n{"x": 2}\n{"x": 3}\n{"x": "five"}\n')
    with pytest.raises(UserError) as e:
        open_source(detect_source(str(tmp_path / "a.jsonl"))).schema()
    assert "mixed types in field 'x': int at " in str(e.value)
    assert "a.jsonl:2, str at " in str(e.value) and str(e.value).endswith("a.jsonl:5")


def test_jsonl_mismatch_after_the_inference_window(tmp_path):
    rows = jsonl_rows(5) + [{"id": "six"}]
    (tmp_path / "a.jsonl").write_bytes(jsonl_text(rows))
    source = open_source(detect_source(str(tmp_path / "a.jsonl"), infer_lines=5))
    with pytest.raises(UserError, match=r"mixed types in field 'id': int in the first 5 lines, str at .*a\.jsonl:6"):
        list(source.read(source.parts()[0]))
    (tmp_path / "a.jsonl").write_bytes(jsonl_text(jsonl_rows(5) + [{"extra": 1}]))
    source = open_source(detect_source(str(tmp_path / "a.jsonl"), infer_lines=5))
    with pytest.raises(UserError, match=r"a\.jsonl:6: field 'extra' is not in the schema"):
        list(source.read(source.parts()[0]))


def test_jsonl_non_object_line_and_unreadable_file(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n[1, 2]\n')
    with pytest.raises(UserError, match=r"a\.jsonl:2: expected a JSON object, got list"):
        open_source(detect_source(str(tmp_path / "a.jsonl"))).schema()
    (tmp_path / "b.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(UserError, match=r"cannot read .*b\.jsonl\.gz"):
        open_source(detect_source(str(tmp_path / "b.jsonl.gz"))).schema()


# -- Parquet ----------------------------------------------------------------------------------

def parquet_table(n: int, start: int = 0) -> pa.Table:
    floats = odd_floats()
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "f32": pa.array([floats[i % len(floats)] for i in range(n)], pa.float32()),
        "f64": pa.array([floats[i % len(floats)] for i in range(n)], pa.float64()),
        "tokens": pa.array([list(range(i % 9)) for i in range(n)], pa.list_(pa.int32())),
        "image": pa.array([image_bytes("PNG", i % 3) if i % 4 else None for i in range(n)], pa.binary()),
        "label": pa.array([["cat", "dog"][i % 2] for i in range(n)]).dictionary_encode(),
        "caption": pa.array([f"a picture number {i}" for i in range(n)], pa.large_string()),
        "ep": pa.array([{"reward": [0.5] * (i % 3), "done": [False] * (i % 3)} for i in range(n)]),
    })


def test_parquet_directory_glob_and_row_group_parts_bit_identical(where):
    tables = [parquet_table(700, 0), parquet_table(900, 700)]
    fs, root = fsspec.core.url_to_fs(where)
    fs.makedirs(root, exist_ok=True)
    for i, t in enumerate(tables):
        with fsspec.open(f"{where}/part-{i}.parquet", "wb") as f:
            pq.write_table(t, f, row_group_size=300)
    want = pa.concat_tables(tables).to_pylist()
    want = [{**r} for r in want]
    for spec in (detect_source(where), detect_source(f"{where}/part-*.parquet"),
                 detect_source(where, part_bytes=1)):
        got, batches = read_all(spec)
        assert_rows_identical(got, want)
    parts = open_source(detect_source(where, part_bytes=1)).parts()
    assert [p.options["row_groups"] for p in parts] == [[0, 1], [1, 2], [2, 3], [0, 1], [1, 2], [2, 3]]
    schema = open_source(detect_source(where)).schema()
    assert schema.field("label").type == pa.string()  # dictionary encoding is storage, not content
    assert schema.metadata is None
    assert roles_of(detect_source(where)) == {"id": "scalar", "f32": "scalar", "f64": "scalar", "tokens": "tokens",
                                              "image": "image", "label": "scalar", "caption": "text",
                                              "ep": "trajectory"}


def test_parquet_file_with_other_columns_names_it(tmp_path):
    pq.write_table(pa.table({"a": [1]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"b": [1]}), tmp_path / "b.parquet")
    source = open_source(detect_source(str(tmp_path)))
    with pytest.raises(UserError, match=r"b\.parquet: columns \['b'\] differ"):
        [list(source.read(p)) for p in source.parts()]


def test_parquet_not_parquet_is_one_line(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(UserError, match=r"cannot read .*a\.parquet as Parquet"):
        open_source(detect_source(str(tmp_path / "a.parquet"))).schema()


# -- kinds ------------------------------------------------------------------------------------

def test_detect_source_by_name_markers_and_content(tmp_path):
    assert detect_source("memory://x/a.jsonl.zst").kind == "jsonl"
    assert detect_source("s3://b/shard-*.tar").kind == "webdataset"
    assert detect_source("x/*.parquet").kind == "parquet"
    assert detect_source("x/data.arrow").kind == "hf"
    assert detect_source("whatever", kind="mds", split="train") == SourceSpec("mds", "whatever", {"split": "train"})
    for marker, kind in [("index.json", "mds"), ("dataset_info.json", "hf"), ("state.json", "hf")]:
        d = tmp_path / f"dir-{kind}-{marker[:5]}"
        d.mkdir()
        (d / marker).write_text("{}")
        assert detect_source(str(d)).kind == kind
    (tmp_path / "tars").mkdir()
    (tmp_path / "tars" / "000.tar").write_bytes(b"")
    assert detect_source(str(tmp_path / "tars")).kind == "webdataset"
    with pytest.raises(UserError, match="no such file or directory"):
        detect_source(str(tmp_path / "missing"))
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.tar").write_bytes(b"")
    (tmp_path / "mixed" / "b.parquet").write_bytes(b"")
    with pytest.raises(UserError, match="several kinds"):
        detect_source(str(tmp_path / "mixed"))
    with pytest.raises(UserError, match="unknown source kind 'csv'"):
        open_source(SourceSpec("csv", "x"))
    with pytest.raises(UserError, match="no Parquet files"):
        open_source(SourceSpec("parquet", str(tmp_path / "tars"))).parts()


# -- Hugging Face datasets (save_to_disk) and Arrow files ------------------------------------

def hf_rows(n: int) -> dict:
    fmts = ["JPEG", "PNG", "WEBP"]
    return {"image": [{"bytes": image_bytes(fmts[i % 3], i % 5), "path": None} for i in range(n)],
            "input_ids": [list(range(i, i + i % 6)) for i in range(n)],
            "caption": [f"picture {i}" for i in range(n)],
            "score": [odd_floats()[i % 8] for i in range(n)],
            "label": [i % 3 for i in range(n)]}


def hf_features():
    import datasets

    return datasets.Features({"image": datasets.Image(), "input_ids": datasets.List(datasets.Value("int32")),
                              "caption": datasets.Value("string"), "score": datasets.Value("float64"),
                              "label": datasets.ClassLabel(names=["a", "b", "c"])})


def test_hf_save_to_disk_bit_identical_with_media_roles(tmp_path):
    import datasets

    data = hf_rows(1500)
    datasets.Dataset.from_dict(data, features=hf_features()).save_to_disk(str(tmp_path / "ds"), num_shards=2)
    spec = detect_source(str(tmp_path / "ds"))
    assert spec.kind == "hf"
    got, _ = read_all(spec)
    want = [{**{k: data[k][i] for k in data}, "image": data["image"][i]["bytes"]} for i in range(1500)]
    assert_rows_identical(got, want)
    assert len(open_source(spec).parts()) == 2
    assert open_source(spec).schema().field("image").type == pa.binary()
    assert roles_of(spec) == {"image": "image", "input_ids": "tokens", "caption": "text", "score": "scalar",
                              "label": "scalar"}


def test_hf_dataset_dict_split_and_loose_arrow_files(tmp_path):
    import datasets

    data = hf_rows(10)
    ds = datasets.Dataset.from_dict(data, features=hf_features())
    datasets.DatasetDict({"train": ds, "test": ds.select(range(3))}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(UserError, match="splits .*choose one with the split option"):
        open_source(detect_source(str(tmp_path / "dd"))).parts()
    got, _ = read_all(detect_source(str(tmp_path / "dd"), split="test"))
    assert [r["caption"] for r in got] == data["caption"][:3]
    table = pa.table({"x": [1, 2, 3], "b": pa.array([b"a", None, b"c"], pa.binary())})
    with pa.OSFile(str(tmp_path / "a.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)  # the IPC file format, next to save_to_disk's stream format
    got, _ = read_all(detect_source(str(tmp_path / "a.arrow")))
    assert got == table.to_pylist()


def test_hf_path_only_image_is_refused_naming_the_row(tmp_path):
    import datasets
    from datasets.arrow_writer import ArrowWriter

    # save_to_disk embeds files it can open; datasets' own cache files (written by ArrowWriter) keep
    # an image given as a path as that path only.
    features = datasets.Features({"image": datasets.Image(), "n": datasets.Value("int64")})
    writer = ArrowWriter(features=features, path=str(tmp_path / "cache-0.arrow"))
    writer.write({"image": {"bytes": image_bytes("PNG"), "path": None}, "n": 0})
    writer.write({"image": {"bytes": None, "path": str(tmp_path / "cat.png")}, "n": 1})
    writer.finalize()
    writer.close()
    source = open_source(detect_source(str(tmp_path / "cache-0.arrow")))
    assert source.hints()["roles"] == {"image": "image"}  # features read from the Arrow schema metadata
    with pytest.raises(UserError, match=r"cache-0\.arrow: field 'image' row 1 holds only a path \('.*cat\.png'\)"):
        read_all(source.spec)


# -- WebDataset -------------------------------------------------------------------------------

def wds_samples(n: int, start: int = 0) -> list[dict]:
    return [{"__key__": f"s{i:05d}", "jpg": image_bytes("JPEG", i % 4), "webp": image_bytes("WEBP", i % 2),
             "seg.png": image_bytes("PNG", i % 3), "mp4": mp4_bytes(), "webm": webm_bytes(),
             "txt": f"caption {i} ✓", "json": {"i": i, "x": odd_floats()[i % 8]}, "cls": i % 10 - 3,
             "bin": bytes(range(i % 256))} for i in range(start, start + n)]


def write_tar(path, samples: list[dict]) -> None:
    import webdataset

    with fsspec.open(str(path), "wb", auto_mkdir=True) as f:
        writer = webdataset.TarWriter(f, mtime=0)
        for s in samples:
            writer.write(s)
        writer.close()


def test_webdataset_tar_writer_bit_identical(where):
    import tarfile

    samples = wds_samples(240)
    write_tar(f"{where}/shard-000000.tar", samples[:150])
    write_tar(f"{where}/shard-000001.tar", samples[150:])
    spec = detect_source(f"{where}/shard-*.tar")
    assert spec.kind == "webdataset"
    got, _ = read_all(spec)
    with fsspec.open(f"{where}/shard-000000.tar", "rb") as f, tarfile.open(fileobj=f) as tar:
        stored_json = tar.extractfile("s00007.json").read()  # what TarWriter's encoder wrote
    assert got[7]["json"].encode() == stored_json
    assert [json.loads(r.pop("json")) for r in got] == [s["json"] for s in samples]
    assert_rows_identical(got, [{k: v for k, v in s.items() if k != "json"} for s in samples])
    assert roles_of(spec) == {"__key__": "scalar", "cls": "scalar", "jpg": "image", "json": "json",
                              "mp4": "video", "bin": "bytes", "seg.png": "image", "txt": "text", "webm": "video",
                              "webp": "image"}


def test_webdataset_sample_missing_a_part_names_tar_and_key(tmp_path):
    samples = wds_samples(5)
    del samples[3]["txt"]
    write_tar(tmp_path / "shard-0.tar", samples)
    source = open_source(detect_source(str(tmp_path)))
    with pytest.raises(UserError, match=r"shard-0\.tar: sample 's00003' has no 'txt' part"):
        list(source.read(source.parts()[0]))


def test_webdataset_broken_tar_is_one_line(tmp_path):
    (tmp_path / "a.tar").write_bytes(b"\x01" * 700)
    with pytest.raises(UserError, match=r"cannot read .*a\.tar as a tar file"):
        open_source(detect_source(str(tmp_path / "a.tar"))).schema()


# -- MosaicML MDS -----------------------------------------------------------------------------

MDS_COLUMNS = {"text": "str", "n": "int", "i8": "int8", "u64": "uint64", "h": "float16", "f": "float32",
               "d": "float64", "clip": "bytes", "photo": "jpeg", "meta": "json", "num": "str_int",
               "input_ids": "ndarray:int32", "grid": "ndarray:uint8:2,3"}


def mds_samples(n: int, photo_path) -> list[dict]:
    import numpy as np
    from PIL import Image

    floats = odd_floats()
    return [{"text": f"doc {i} ✓", "n": i - 50, "i8": np.int8(i % 256 - 128), "u64": np.uint64(2**64 - 1 - i),
             "h": np.float16((-1) ** i * i / 7), "f": np.float32(floats[i % 8] if i % 8 != 3 else 3e38),
             "d": floats[i % 8],
             "clip": mp4_bytes(), "photo": Image.open(photo_path), "meta": {"i": i},
             "num": i * 7, "input_ids": np.arange(i % 5 + 1, dtype=np.int32) + i,
             "grid": np.full((2, 3), i % 256, np.uint8)} for i in range(n)]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_mds_writer_bit_identical(tmp_path, compression):
    import numpy as np
    from ingest_fixtures import mds_writer_class

    photo = tmp_path / "photo.jpg"
    photo.write_bytes(image_bytes("JPEG", 4))
    samples = mds_samples(300, photo)
    with mds_writer_class()(out=str(tmp_path / "mds"), columns=MDS_COLUMNS, size_limit=1 << 15,
                            compression=compression) as writer:
        for s in samples:
            writer.write(s)
    spec = detect_source(str(tmp_path / "mds"))
    assert spec.kind == "mds"
    assert len(open_source(spec).parts()) > 1
    got, _ = read_all(spec)
    want = [{**s, "i8": int(s["i8"]), "u64": int(s["u64"]), "f": float(s["f"]), "h": float(s["h"]),
             "photo": photo.read_bytes(), "meta": json.dumps(s["meta"], sort_keys=True),
             "input_ids": s["input_ids"].tolist(), "grid": s["grid"].tolist()} for s in samples]
    for r in got:
        r["meta"] = json.dumps(json.loads(r["meta"]), sort_keys=True)
    assert_rows_identical(got, want)
    assert np.float16(got[5]["h"]).tobytes() == samples[5]["h"].tobytes()
    source = open_source(spec)
    first = next(source.read(source.parts()[0]))
    roles = {f.name: f.role.value for f in infer_fields(source.schema(), first, source.hints())}
    assert roles == {"text": "text", "n": "scalar", "i8": "scalar", "u64": "scalar", "h": "scalar", "f": "scalar",
                     "d": "scalar", "clip": "video", "photo": "image", "meta": "json", "num": "scalar",
                     "input_ids": "tokens", "grid": "array"}


def test_mds_pickled_column_is_refused(tmp_path):
    from ingest_fixtures import mds_writer_class

    with mds_writer_class()(out=str(tmp_path / "mds"), columns={"x": "int", "obj": "pkl"}) as writer:
        writer.write({"x": 1, "obj": {"a": 1}})
    with pytest.raises(UserError, match=r"index\.json: column 'obj' uses the 'pkl' encoding"):
        open_source(detect_source(str(tmp_path / "mds"))).schema()
