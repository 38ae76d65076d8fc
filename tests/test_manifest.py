import copy
import hashlib
import json

import pyarrow as pa
import pytest
from conftest import TOY_FIELDS, toy_rows

from dsinspect.errors import IntegrityError, ManifestError
from dsinspect.loaders.format.manifest import Field, Manifest, canonical_json
from dsinspect.loaders.store.verify import verify_version


@pytest.fixture
def good(catalog):
    v = catalog.write_version("toy", toy_rows(20), TOY_FIELDS, key="id", message="first")
    return json.loads(catalog.fs.cat_file(catalog.layout.manifest("toy", v.id))), v


def test_version_id_is_sha256_of_canonical_manifest_without_meta(good):
    data, v = good
    content = {k: val for k, val in data.items() if k != "meta"}
    raw = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert hashlib.sha256(raw).hexdigest() == v.id
    assert data["meta"]["message"] == "first" and "created_at" in data["meta"] and data["meta"]["parent"] is None


def test_equal_content_gives_equal_id_and_second_write_is_a_noop(catalog):
    a = catalog.write_version("toy", toy_rows(20), TOY_FIELDS, key="id", message="one",
                              created_at="2020-01-01T00:00:00Z")
    b = catalog.write_version("toy", toy_rows(20), TOY_FIELDS, key="id", message="two")
    assert a.id == b.id and b.manifest.meta["message"] == "one"
    assert len(catalog.version_ids("toy")) == 1


def test_meta_does_not_change_the_id(good):
    data, v = good
    data["meta"] = {"message": "rewritten", "anything": [1, 2]}
    assert Manifest.from_json(data).id == v.id


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("shards"), "missing 'shards'"),
    (lambda d: d.pop("format"), "missing 'format'"),
    (lambda d: d.update(format="other/9"), "unsupported format"),
    (lambda d: d["schema"]["fields"][0].update(role="audio"), "unknown role 'audio'"),
    (lambda d: d["schema"]["fields"][0].update(role=3), "'role' has the wrong type"),
    (lambda d: d["schema"]["fields"][1].update(role="image"), "role 'image', which needs binary"),
    (lambda d: d["schema"]["fields"][0].update(type="int33"), "unknown type 'int33'"),
    (lambda d: d["schema"]["fields"][0].update(type={"type": "list"}), "missing key 'item'"),
    (lambda d: d["schema"]["fields"][0].pop("name"), "missing 'name'"),
    (lambda d: d["schema"]["fields"].append(d["schema"]["fields"][0]), "duplicate field names"),
    (lambda d: d.update(key="nope"), "key field 'nope' is not one of the fields"),
    (lambda d: d["shards"][0].update(sha256="xyz"), "is not 64 lowercase hex"),
    (lambda d: d["shards"][0].update(rows="10"), "'rows' has the wrong type"),
    (lambda d: d["shards"][0].update(rows=True), "'rows' has the wrong type"),
    (lambda d: d["shards"][0].update(bytes=-1), "must not be negative"),
    (lambda d: d.update(num_rows=999), "not the sum of shard rows"),
    (lambda d: d["hash"].update(algorithm="md5"), "unsupported row hash"),
    (lambda d: d.update(meta=[]), "'meta' must be an object"),
])
def test_bad_manifests_are_rejected_with_clear_errors(good, mutate, message):
    data, _ = good
    bad = copy.deepcopy(data)
    mutate(bad)
    with pytest.raises(ManifestError, match=message) as e:
        Manifest.from_json(bad, where="s3://bucket/x.json")
    assert str(e.value).startswith("s3://bucket/x.json") and "\n" not in str(e.value)


def test_not_json_and_not_an_object():
    with pytest.raises(ManifestError, match="m.json: not valid JSON"):
        Manifest.from_bytes(b"{nope", "m.json")
    with pytest.raises(ManifestError, match="must be a JSON object"):
        Manifest.from_bytes(b"[1]", "m.json")


def fresh_node(monkeypatch, tmp_path):
    """A node that has read nothing yet: no copies of remote metadata (loaders/store/node_copies.py)."""
    monkeypatch.setenv("DSINSPECT_CACHE", str(tmp_path / "another-node"))


def test_catalog_refuses_a_manifest_whose_content_does_not_match_its_id(good, catalog, monkeypatch, tmp_path):
    fresh_node(monkeypatch, tmp_path)
    data, v = good
    data["num_rows"] += 0
    data["shards"][0]["rows"] += 1
    data["num_rows"] += 1
    catalog.fs.pipe_file(catalog.layout.manifest("toy", v.id), canonical_json(data))
    fresh = type(catalog)(catalog.url)
    with pytest.raises(IntegrityError, match="content hashes to .* not the version id"):
        fresh.resolve("toy")


def test_tampered_manifest_is_a_clear_error_from_the_catalog(good, catalog, monkeypatch, tmp_path):
    fresh_node(monkeypatch, tmp_path)
    _, v = good
    catalog.fs.pipe_file(catalog.layout.manifest("toy", v.id), b'{"format": "dsinspect.manifest/1"}')
    with pytest.raises(ManifestError, match=rf"{v.id}\.json: missing 'hash'"):
        type(catalog)(catalog.url).resolve("toy")


def test_a_node_copy_serves_reads_but_never_hides_damage_in_the_store_from_verify(good, catalog):
    """A node's copy of a remote manifest is checked on use, like a cached shard: a reader keeps
    reading the version as it was published. `verify` checks the store itself."""
    data, v = good
    data["shards"][0]["rows"] += 1
    data["num_rows"] += 1  # well formed, but not the content the id names
    catalog.fs.pipe_file(catalog.layout.manifest("toy", v.id), canonical_json(data))
    reader = type(catalog)(catalog.url)
    if reader.copies is not None:  # object storage (here memory://): the node's copy serves the read
        assert reader.resolve(f"toy@{v.id}").manifest == v.manifest
    with pytest.raises(IntegrityError, match="content hashes to .* not the version id"):
        verify_version(reader.resolve(f"toy@{v.id}"))


def test_field_rejects_reserved_names_and_wrong_types():
    with pytest.raises(ManifestError, match="reserved"):
        Field("__dsinspect_x", pa.int64(), "scalar")
    with pytest.raises(ManifestError, match="needs a list of integers"):
        Field("t", pa.list_(pa.string()), "tokens")
    with pytest.raises(ManifestError, match="unknown role"):
        Field("t", pa.string(), "audio")
