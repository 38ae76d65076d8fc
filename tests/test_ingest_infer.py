"""Role inference: magic bytes, names and types, the source's hints, and overrides that always win."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from ingest_fixtures import image_bytes, mp4_bytes, webm_bytes

from dsinspect.errors import UserError
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.ingest.infer import describe_fields, infer_fields, role_for_extension, sniff_media

TOKENIZER = {"kind": "huggingface", "blob": "ab" * 32}


def batch(**columns) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()})


def roles(b: pa.RecordBatch, hints=None, **kw) -> dict[str, str]:
    return {f.name: f.role.value for f in infer_fields(b.schema, b, hints or {}, **kw)}


@pytest.mark.parametrize("data, role", [
    (lambda: image_bytes("JPEG"), Role.IMAGE), (lambda: image_bytes("PNG"), Role.IMAGE),
    (lambda: image_bytes("WEBP"), Role.IMAGE), (lambda: image_bytes("GIF"), Role.IMAGE),
    (mp4_bytes, Role.VIDEO), (webm_bytes, Role.VIDEO),
    (lambda: b"\x00\x01 just some bytes", None), (lambda: b"RIFF\x00\x00\x00\x00WAVEfmt ", None),
])
def test_sniff_media_from_real_encoders(data, role):
    assert sniff_media(data()) is role


def test_binary_roles_follow_magic_bytes_of_every_sampled_value():
    b = batch(jpg=pa.array([None, image_bytes("JPEG")], pa.binary()),
              clip=pa.array([mp4_bytes(), webm_bytes()], pa.binary()),
              mixed=pa.array([image_bytes("PNG"), mp4_bytes()], pa.binary()),
              raw=pa.array([b"abc", b"def"], pa.binary()),
              empty=pa.array([None, None], pa.binary()))
    assert roles(b) == {"jpg": "image", "clip": "video", "mixed": "bytes", "raw": "bytes", "empty": "bytes"}


def test_names_and_types():
    b = batch(input_ids=pa.array([[1, 2], [3]], pa.list_(pa.int32())),
              caption=["a", "b"], label=["cat", "dog"],
              body_long=["word " * 20, "more words " * 10],
              meta=['{"a": 1}', "[1, 2]"], meta_plain=["x", "y"],
              score=[0.5, 1.5], done=[True, False],
              episode=[{"reward": [1.0], "action": [2]}, {"reward": [], "action": []}])
    b = b.rename_columns([c if c != "meta_plain" else "info" for c in b.schema.names])
    assert roles(b) == {"input_ids": "tokens", "caption": "text", "label": "scalar", "body_long": "text",
                        "meta": "json", "info": "scalar", "score": "scalar", "done": "scalar",
                        "episode": "trajectory"}


def test_source_hints_come_before_guessing_and_overrides_win():
    b = batch(json=['{"k": 1}'], jpg=pa.array([b"not really a jpeg"], pa.binary()), cls=[3])
    hints = {"roles": {"json": "json", "jpg": "image", "cls": "scalar"}}
    assert roles(b, hints) == {"json": "json", "jpg": "image", "cls": "scalar"}
    assert roles(b, hints, roles={"jpg": "bytes", "json": "text"}) == {"json": "text", "jpg": "bytes", "cls": "scalar"}


def test_tokenizer_attaches_to_every_integer_list():
    b = batch(ids=pa.array([[1, 2]], pa.list_(pa.int64())), labels=pa.array([[0]], pa.list_(pa.int16())), text=["hi"])
    fields = infer_fields(b.schema, b, {}, tokenizer=TOKENIZER)
    assert [(f.name, f.role, dict(f.options)) for f in fields] == [
        ("ids", Role.TOKENS, {"tokenizer": TOKENIZER}), ("labels", Role.TOKENS, {"tokenizer": TOKENIZER}),
        ("text", Role.TEXT, {})]
    assert json.dumps([f.to_json() for f in fields])  # manifest-ready
    with pytest.raises(UserError, match="a tokenizer was given but no field holds token ids"):
        infer_fields(b.select(["text"]).schema, b.select(["text"]), {}, tokenizer=TOKENIZER)


def test_override_errors_are_one_clear_line():
    b = batch(text=["hi"], n=[1])
    with pytest.raises(UserError, match=r"no field 'nope' in the source \(fields: text, n\)"):
        infer_fields(b.schema, b, {}, roles={"nope": "text"})
    with pytest.raises(UserError, match=r"field 'n' has role 'image', which needs binary .* but its type is int64"):
        infer_fields(b.schema, b, {}, roles={"n": "image"})
    with pytest.raises(UserError, match=r"field 'n': unknown role 'picture'"):
        infer_fields(b.schema, b, {}, roles={"n": "picture"})
    with pytest.raises(UserError, match=r"no field 'id'"):
        infer_fields(b.schema, b, {}, key="id")


def test_without_a_sample_types_and_names_still_decide():
    schema = pa.schema([("text", pa.string()), ("blob", pa.binary()), ("x", pa.float32())])
    assert [f.role.value for f in infer_fields(schema, None, {})] == ["text", "bytes", "scalar"]


def test_number_lists_are_arrays_and_maps_fit_no_role():
    b = batch(embedding=pa.array([[0.5, 1.0]], pa.list_(pa.float32())),
              mask=pa.array([[[True, False]]], pa.list_(pa.list_(pa.bool_()))))
    assert [f.role.value for f in infer_fields(b.schema, b, {})] == ["array", "array"]
    m = batch(attrs=pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())))
    with pytest.raises(UserError, match=r"field 'attrs' of type map<string, int64> fits no role"):
        infer_fields(m.schema, m, {})


def test_extension_roles_and_description():
    assert role_for_extension("jpg") is Role.IMAGE and role_for_extension("seg.PNG") is Role.IMAGE
    assert role_for_extension("webm") is Role.VIDEO and role_for_extension("txt") is Role.TEXT
    assert role_for_extension("json") is Role.JSON and role_for_extension("cls") is Role.SCALAR
    assert role_for_extension("npy") is None
    b = batch(tokens=pa.array([[1]], pa.list_(pa.int32())), caption=["x"])
    text = describe_fields(infer_fields(b.schema, b, {}, tokenizer=TOKENIZER))
    assert text.splitlines() == ["tokens   tokens      list<item: int32>  (tokenizer attached)",
                                 "caption  text        string"]
