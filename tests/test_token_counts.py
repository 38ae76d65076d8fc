"""Each shard's manifest entry counts the tokens of each `tokens` field (docs/FORMAT.md): what
packing documents into sequences locates by without reading the documents. Written by the writer,
parsed strictly, checked by verify; absent (and ids unchanged) for versions without tokens fields."""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pytest

from dsinspect.errors import ManifestError
from dsinspect.loaders.format.manifest import Field, Manifest
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.verify import verify_version
from dsinspect.loaders.store.writer import WriteOptions

FIELDS = [Field("doc", pa.int64(), "scalar", False), Field("ids", pa.list_(pa.uint16()), "tokens", True),
          Field("more", pa.list_(pa.int32()), "tokens", True)]


def rows(n: int) -> list[dict]:
    return [{"doc": i, "ids": None if i % 7 == 3 else list(range(i % 13)), "more": [i] * (i % 3)} for i in range(n)]


@pytest.fixture
def version(tmp_path):
    return Catalog(str(tmp_path / "cat")).write_version("docs", rows(100), FIELDS,
                                                        options=WriteOptions(shard_rows=30, row_group_rows=8))


def test_each_shard_counts_the_tokens_of_each_tokens_field(version):
    data = rows(100)
    starts = [0, 30, 60, 90, 100]
    assert len(version.manifest.shards) == 4
    for s, shard in enumerate(version.manifest.shards):
        part = data[starts[s]:starts[s + 1]]
        assert shard.token_count("ids") == sum(len(r["ids"] or []) for r in part)
        assert shard.token_count("more") == sum(len(r["more"]) for r in part)
        assert shard.token_count("doc") is None
    stored = json.loads(version.catalog.fs.cat_file(version.catalog.layout.manifest("docs", version.id)))
    assert stored["shards"][0]["tokens"] == {"ids": sum(len(r["ids"] or []) for r in data[:30]),
                                             "more": sum(len(r["more"]) for r in data[:30])}
    assert Manifest.from_json(stored).id == version.id
    assert verify_version(version).ok


def test_a_version_without_tokens_fields_has_no_counts_and_keeps_its_id(tmp_path):
    fields = [Field("doc", pa.int64(), "scalar", False)]
    version = Catalog(str(tmp_path / "cat")).write_version("plain", [{"doc": 1}], fields)
    assert "tokens" not in version.manifest.content()["shards"][0]
    # the id is the hash of the content as before this format change: no key was added
    assert set(version.manifest.content()["shards"][0]) == {"sha256", "bytes", "rows", "index_sha256"}


def test_verify_finds_a_token_count_that_disagrees_with_the_shard(version):
    catalog = version.catalog
    writer = catalog.writer("docs", FIELDS, parent=version.id)
    for s, shard in enumerate(version.manifest.shards):
        wrong = dict(shard.tokens, ids=shard.token_count("ids") + (5 if s == 2 else 0))
        writer.add_shard(dataclasses.replace(shard, tokens=tuple(wrong.items())))
    forged = writer.commit()
    assert forged.id != version.id
    report = verify_version(forged)
    assert not report.ok
    problems = [(r.index, p) for r in report.shards for p in r.problems]
    want = version.manifest.shards[2].token_count("ids")
    assert problems == [(2, f"token count mismatch: field 'ids' has {want:,} tokens, the manifest says {want + 5:,}")]


@pytest.mark.parametrize("tokens, says", [
    ([1, 2], "'tokens' must be an object of field name -> token count"),
    ({"ids": -1}, "shard tokens must map field names to counts >= 0"),
    ({"ids": 1.5}, "shard tokens must map field names to counts >= 0"),
    ({"ids": True}, "shard tokens must map field names to counts >= 0"),
    ({"doc": 3}, "counts tokens of 'doc', which is not a tokens field"),
    ({"nope": 3}, "counts tokens of 'nope', which is not a tokens field"),
])
def test_a_malformed_token_count_is_a_manifest_error_naming_the_shard(version, tokens, says):
    data = version.manifest.to_json()
    data["shards"][1]["tokens"] = tokens
    with pytest.raises(ManifestError, match=f"shards\\[1\\].*{says}" if "tokens field" in says else says) as e:
        Manifest.from_json(data, "docs manifest")
    assert str(e.value).startswith("docs manifest: ")


def test_a_count_on_some_shards_only_is_refused(version):
    data = version.manifest.to_json()
    del data["shards"][3]["tokens"]
    with pytest.raises(ManifestError, match="the token count of 'ids' is on some shards and not on others"):
        Manifest.from_json(data)
