"""The inspection core on whole samples: every role of the sample catalog, raw bytes and hashes,
a catalog of deliberately broken values (never an exception), a forged row, and import hygiene."""

import io
import json
import shutil
import struct
import subprocess
import sys
import zlib

import pyarrow as pa
import pytest
from conftest import forge_rl_version
from PIL import Image

from dsinspect.defaults import BUNDLED
from dsinspect.demo.tokenizer import tokenizer_bytes
from dsinspect.errors import NotFoundError, UserError
from dsinspect.inspect import ErrorView, NullView, Severity, open_address, open_sample
from dsinspect.loaders.format.canonical import encode_column, field_hashes
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog

ROLE_KINDS = {"scalar": "scalar", "text": "text", "tokens": "tokens", "image": "image", "video": "video",
              "trajectory": "trajectory", "json": "json", "bytes": "bytes"}


@pytest.fixture(scope="module")
def bundled():
    return Catalog(str(BUNDLED))


def codes(view):
    return {f.code for f in getattr(view, "findings", [])}


def strict_json(data):
    """JSON as a strict parser wants it: no NaN, no Infinity."""
    return json.loads(json.dumps(data, allow_nan=False))


# -- the sample catalog: every role ------------------------------------------------------------

@pytest.mark.parametrize("address", ["demo-text@v1:0", "demo-text@v2:17", "demo-images@v1:6", "demo-images@v2:13",
                                     "demo-video@v1:0", "demo-video@v2:3", "demo-rl@v1:0", "demo-rl@v2:5"])
def test_every_field_of_the_sample_catalog_decodes_cleanly(bundled, address):
    sample = open_address(bundled, address)
    assert sample.row_hash.ok and not sample.findings
    for info in sample.fields:
        view = sample.view(info.name)
        assert view.kind == ROLE_KINDS[info.role], (info.name, getattr(view, "reason", None))
        assert not view.errors, (info.name, view.errors)
    data = strict_json(sample.to_json(raw=True))
    assert data["row_hash"]["ok"] is True and data["address"] == sample.address
    assert {f["name"] for f in data["fields"]} == {f.name for f in sample.fields}


def test_roles_covered_by_the_sample_catalog(bundled):
    roles = {info.role for name in ("demo-text", "demo-images", "demo-video", "demo-rl")
             for info in open_address(bundled, f"{name}@v1:0").fields}
    assert roles >= {"scalar", "text", "tokens", "image", "video", "trajectory", "json"}


def test_raw_canonical_and_hashes_follow_the_loader_encoding(bundled):
    version = bundled.resolve("demo-images@v1")
    sample = open_sample(version, 3)
    table = version.row_table(3)
    for f in version.fields:
        col = table.column(f.name)
        assert sample.canonical(f.name) == encode_column(col)[0]
        assert sample.field(f.name).hash == field_hashes(col)[0].hex()
    assert sample.raw("image") == version.row(3)["image"]
    assert sample.raw("caption") == version.row(3)["caption"].encode()
    assert sample.raw("width") == sample.canonical("width")  # no byte form of its own
    assert sample.row_hash.recomputed == version.row_hash(3).hex() == sample.row_hash.stored
    page = sample.hex("image", page=1, page_size=64)
    assert page.offset == 64 and page.lines[0].offset == 64 and page.total == len(sample.raw("image"))


def test_nothing_decodes_until_asked(bundled):
    sample = open_address(bundled, "demo-video@v1:1")
    assert sample._views == {}
    first = sample.view("video")
    assert sample.view("video") is first and list(sample._views) == [("video", None)]


def test_user_mistakes_raise_user_errors(bundled):
    with pytest.raises(UserError, match="names no sample"):
        open_address(bundled, "demo-text@v1")
    with pytest.raises(NotFoundError, match="out of range"):
        open_address(bundled, "demo-text@v1:100000")
    with pytest.raises(UserError, match="is not a row number"):
        open_address(bundled, "demo-text@v1:-1")  # the grammar has no negative index
    sample = open_address(bundled, "demo-text@v1:239")
    assert sample.index == 239
    with pytest.raises(NotFoundError, match="no field 'nope'"):
        sample.view("nope")
    with pytest.raises(UserError, match="unknown tokenizer"):
        sample.view("tokens", tokenizer="gpt5")


def test_tokens_field_decodes_to_the_stored_text(bundled):
    for index in (0, 6, 17, 23, 52):
        sample = open_address(bundled, f"demo-text@v1:{index}")
        view = sample.view("tokens")
        text = sample.value("text")
        assert view.text.startswith(text), index
        assert view.text[len(text):].replace("<|endoftext|>", "").replace("<|pad|>", "") == ""
        assert view.stats.decoded_bytes == int(view.ends[-1])


# -- deliberately broken values ------------------------------------------------------------------

def png(width, height, payload=b"\x00" * 100):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(payload)) + chunk(b"IEND", b"")


def good_png():
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(buf, "PNG")
    return buf.getvalue()


BROKEN_FIELDS = lambda blob: [  # noqa: E731
    Field("id", pa.int64(), "scalar", nullable=False),
    Field("tokens", pa.list_(pa.int32()), "tokens", options={"tokenizer": {"kind": "huggingface", "blob": blob}}),
    Field("text", pa.string(), "text"),
    Field("image", pa.binary(), "image"),
    Field("video", pa.binary(), "video"),
    Field("trajectory", pa.struct([("observation", pa.list_(pa.list_(pa.float32()))), ("action", pa.list_(pa.int32())),
                                   ("reward", pa.list_(pa.float32())), ("terminated", pa.list_(pa.bool_())),
                                   ("truncated", pa.list_(pa.bool_()))]), "trajectory"),
    Field("meta", pa.binary(), "json"),
    Field("blob", pa.binary(), "bytes"),
    Field("episode_return", pa.float64(), "scalar"),
]


@pytest.fixture(scope="module")
def broken(tmp_path_factory, bundled):
    """A catalog whose rows hold broken values of every role (row 0, 2), nulls (row 1) and good ones (row 3)."""
    catalog = Catalog(str(tmp_path_factory.mktemp("broken") / "catalog"))
    blob = catalog.put_blob("broken", tokenizer_bytes(), ".json")
    mp4 = bundled.resolve("demo-video@v1").row(0)["video"]
    traj = {"observation": [[0.0, 1.0]] * 4, "action": [1, 2, 3, 0], "reward": [1.0, float("nan"), 0.5, 2.0],
            "terminated": [False, True, False, True], "truncated": [False] * 4}
    good = good_png()
    rows = [
        {"id": 0, "tokens": [36, 99999, -3, 1181], "text": b"ok \xff\xfe bad \xe2\x80\xae",
         "image": good[:len(good) // 2],
         "video": mp4[:len(mp4) // 2], "trajectory": traj, "meta": b'{"a": 1,', "blob": b"\x80\x04\x95junk",
         "episode_return": 3.5},
        {"id": 1, "tokens": None, "text": None, "image": None, "video": None, "trajectory": None, "meta": None,
         "blob": None, "episode_return": None},
        {"id": 2, "tokens": [454], "text": b"\x00\x07", "image": png(100_000, 100_000), "video": b"",
         "trajectory": {"observation": [], "action": [1], "reward": [], "terminated": [False], "truncated": [False]},
         "meta": b'{"k": "\xff"}', "blob": b"", "episode_return": 0.0},
        {"id": 3, "tokens": [36, 1181], "text": b"fine", "image": good, "video": mp4,
         "trajectory": {**traj, "reward": [1.0, 1.0, 1.0, 1.0], "terminated": [False, False, False, True]},
         "meta": b'{"k": [1, 2]}', "blob": b"PK\x03\x04", "episode_return": 4.0},
    ]
    columns = {f.name: [r[f.name] for r in rows] for f in BROKEN_FIELDS(blob)}
    arrays = [pa.array(columns[f.name], f.type if f.name != "text" else pa.binary()) for f in BROKEN_FIELDS(blob)]
    arrays[2] = arrays[2].view(pa.string())  # invalid UTF-8 inside a string column, as a foreign writer may leave it
    table = pa.Table.from_arrays(arrays, schema=pa.schema([pa.field(f.name, f.type) for f in BROKEN_FIELDS(blob)]))
    catalog.write_version("broken", table, BROKEN_FIELDS(blob))
    return catalog


def test_broken_values_become_error_views_or_findings(broken):
    sample = open_address(broken, "broken:0")
    assert sample.row_hash.ok  # hashes run on bytes, broken or not
    tokens = sample.view("tokens")
    assert tokens.kind == "tokens" and "token-unknown-id" in codes(tokens)
    pieces = tokens.page().pieces
    assert [p.unknown for p in pieces] == [False, True, True, False]
    assert tokens.stats.unknown == 2 and tokens.text == "A sim"
    text = sample.view("text")
    assert text.kind == "text" and {"text-invalid-utf8", "text-bidi"} <= codes(text)
    assert [n.byte for n in text.notes if n.category == "invalid-utf8"] == [3, 4]
    image = sample.view("image")
    assert isinstance(image, ErrorView) and "truncated" in image.reason and image.raw == sample.raw("image")
    video = sample.view("video")
    assert isinstance(video, ErrorView) and "truncated" in video.reason and video.raw_size == len(sample.raw("video"))
    traj = sample.view("trajectory")
    assert {"trajectory-nan-reward", "trajectory-step-after-terminated", "trajectory-return-mismatch"} <= codes(traj)
    meta = sample.view("meta")
    assert isinstance(meta, ErrorView) and "line 1 column 9" in meta.reason
    blob = sample.view("blob")
    assert blob.kind == "bytes" and "pickle" in blob.detected
    strict_json(sample.to_json(raw=True))


def test_more_broken_values(broken):
    sample = open_address(broken, "broken:2")
    image = sample.view("image")
    assert isinstance(image, ErrorView) and "decompression-bomb" in image.reason
    video = sample.view("video")
    assert isinstance(video, ErrorView) and "0 bytes" in video.reason and video.raw == b""
    tokens = sample.view("tokens")
    assert "token-invalid-utf8" in codes(tokens) and tokens.page().pieces[0].partial
    assert "text-control" in codes(sample.view("text"))
    assert "trajectory-length-mismatch" in codes(sample.view("trajectory"))
    meta = sample.view("meta")
    assert isinstance(meta, ErrorView) and "not UTF-8" in meta.reason
    assert sample.view("blob").size == 0
    strict_json(sample.to_json(raw=True))


def test_null_values_are_null_views(broken):
    sample = open_address(broken, "broken:1")
    for info in sample.fields[1:]:
        assert info.null and isinstance(sample.view(info.name), NullView), info.name
        assert sample.raw(info.name) == b"" and sample.canonical(info.name) == b"\x00"


def test_the_good_row_of_the_broken_catalog(broken):
    sample = open_address(broken, "broken:3")
    assert sample.view("image").width == 40
    assert sample.view("video").frame_count == 20
    assert sample.view("meta").value == {"k": [1, 2]}
    assert sample.view("blob").detected == "ZIP archive"
    assert not sample.view("trajectory").errors


def test_missing_tokenizer_blob_leaves_the_ids_visible(tmp_path):
    catalog = Catalog(str(tmp_path / "c"))
    fields = [Field("tokens", pa.list_(pa.int32()), "tokens",
                    options={"tokenizer": {"kind": "huggingface", "blob": "0" * 64}}),
              Field("more", pa.list_(pa.int64()), "tokens",
                    options={"tokenizer": {"kind": "tiktoken", "name": "cl100k_base"}})]
    catalog.write_version("t", [{"tokens": [1, 2, 3], "more": [15339, 1917]}], fields)
    sample = open_address(catalog, "t:0")
    view = sample.view("tokens")
    assert view.kind == "tokens" and view.ids == [1, 2, 3] and view.tokenizer is None
    assert "token-tokenizer-unavailable" in codes(view) and "missing" in view.findings[0].message
    assert sample.view("more").text == "hello world"


# -- a forged row: the stored hash no longer matches -------------------------------------------



def test_a_forged_row_shows_the_mismatch(tmp_path):
    shutil.copytree(BUNDLED / "datasets" / "demo-rl", tmp_path / "catalog" / "datasets" / "demo-rl")
    cat = forge_rl_version(tmp_path / "catalog", tmp_path)
    sample = open_address(cat, "demo-rl@forged:3")
    assert not sample.row_hash.ok and sample.row_hash.stored != sample.row_hash.recomputed
    assert [f.code for f in sample.findings] == ["row-hash-mismatch"]
    assert sample.findings[0].severity is Severity.ERROR
    assert "trajectory-return-mismatch" in codes(sample.view("trajectory"))  # the sibling check sees it too
    assert open_address(cat, "demo-rl@forged:2").row_hash.ok


# -- layering ----------------------------------------------------------------------------------

@pytest.mark.parametrize("module", ["dsinspect.inspect", "dsinspect.loaders"])
def test_inspection_and_loaders_import_no_ui_framework(module):
    code = (f"import sys, {module}; from dsinspect.inspect import open_address; "
            "print(','.join(m for m in ('textual', 'streamlit', 'rich', 'click') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "", f"{module} loaded {done.stdout.strip()}"


def test_public_api_is_pinned():
    import dsinspect.inspect as api

    assert {"open_address", "open_sample", "Sample", "ErrorView", "TokensView", "TextView", "ImageView",
            "VideoView", "FrameView", "TrajectoryView", "JsonView", "ScalarView", "BytesView", "NullView",
            "HexPage", "Finding", "Severity"} <= set(api.__all__)
    assert all(hasattr(api, name) for name in api.__all__)


def test_array_fields_show_shape_statistics_and_non_finite_values(tmp_path):
    """The `array` role (embeddings, masks, ndarrays): JSON with one line per innermost list."""
    catalog = Catalog(str(tmp_path / "cat"))
    rows = [{"emb": [0.5, -1.0, float("nan")], "grid": [[1, 2], [3, 4], [5, 6]]}]
    catalog.write_version("arr", rows, [Field("emb", pa.list_(pa.float32()), "array"),
                                        Field("grid", pa.list_(pa.list_(pa.int8())), "array")])
    sample = open_address(catalog, "arr:0")
    emb, grid = sample.view("emb"), sample.view("grid")
    assert sample.row_hash.ok and emb.kind == grid.kind == "json"
    messages = {f.code: f.message for f in emb.findings + grid.findings if f.code != "array-shape"}
    assert messages == {"array-non-finite": "1 values are null, NaN or infinite"}
    shapes = [f.message for f in emb.findings + grid.findings if f.code == "array-shape"]
    assert shapes == ["shape 3, 3 values, min -1, max 0.5, mean -0.25", "shape 3 × 2, 6 values, min 1, max 6, mean 3.5"]
    assert grid.pretty.splitlines() == ["[", "  [1, 2],", "  [3, 4],", "  [5, 6]", "]"]
