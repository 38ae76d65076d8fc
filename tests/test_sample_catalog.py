"""The bundled sample catalog: what it holds, that it is intact, and that the generator reproduces it."""

import hashlib
import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from dsinspect.defaults import BUNDLED, open_catalog
from dsinspect.demo.build import DATASETS, EDITED, ROLLOUT_V1_COMMITS, STREAMED, write_sample_catalog
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.verify import verify_version

RECORD = json.loads((BUNDLED / "sample-data.json").read_text())


@pytest.fixture(scope="module")
def bundled():
    return Catalog(str(BUNDLED))


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    url = str(tmp_path_factory.mktemp("regen") / "catalog")
    return Catalog(url), write_sample_catalog(url)


def test_default_catalog_is_a_copy_of_the_bundled_one(monkeypatch, bundled):
    monkeypatch.delenv("DSINSPECT_CATALOG", raising=False)
    default = open_catalog()
    assert Path(default.root) != BUNDLED  # a copy in the user's cache (tests/test_cli_defaults.py)
    assert {n: default.version_ids(n) for n in DATASETS} == {n: bundled.version_ids(n) for n in DATASETS}
    monkeypatch.setenv("DSINSPECT_CATALOG", "memory://elsewhere")
    assert open_catalog().url == "memory://elsewhere"


def test_five_datasets_two_versions_and_tags(bundled):
    assert sorted(bundled.datasets()) == sorted(DATASETS)
    for name in DATASETS:
        tags = bundled.tags(name)
        assert set(tags) == {"v1", "v2", "latest"} and tags["latest"] == tags["v2"] != tags["v1"]
        v1, v2 = bundled.resolve(f"{name}@v1"), bundled.resolve(f"{name}@v2")
        assert v2.manifest.meta["parent"] == v1.id and v1.manifest.key
        shared = {s.sha256 for s in v1.manifest.shards} & {s.sha256 for s in v2.manifest.shards}
        if name in EDITED:
            assert shared and len(shared) < len(v1.manifest.shards), "copy-on-write: some shards shared, not all"
        else:  # a stream's snapshots: v1's shards are the first of v2's, nothing rewritten
            assert v2.manifest.shards[:len(v1.manifest.shards)] == v1.manifest.shards


@pytest.mark.parametrize("name", STREAMED)
def test_a_streamed_dataset_is_its_commits(bundled, name):
    from dsinspect.loaders.stream import open_stream

    stream = open_stream(bundled, name)
    commits = list(stream.commits())
    assert len(commits) == RECORD["datasets"][name]["commits"] == stream.head()
    assert len({c.writer for c in commits}) > 1, "appended by several samplers"
    shards = [s for c in commits for s in c.shards]
    assert tuple(shards) == bundled.resolve(f"{name}@v2").manifest.shards
    assert bundled.resolve(f"{name}@v1").manifest.meta["created_at"] == commits[ROLLOUT_V1_COMMITS - 1].created_at


def test_under_size_budget():
    total = sum(p.stat().st_size for p in BUNDLED.rglob("*") if p.is_file())
    assert total < 20 * 2**20


@pytest.mark.parametrize("name", EDITED)
def test_v2_differs_from_v1_exactly_as_recorded(bundled, name):
    rec = RECORD["datasets"][name]
    key = rec["key"]
    v1, v2 = bundled.resolve(f"{name}@v1"), bundled.resolve(f"{name}@v2")
    rows1 = {r[key]: r for r in (v1.row(i) for i in range(v1.num_rows))}
    rows2 = {r[key]: r for r in (v2.row(i) for i in range(v2.num_rows))}
    assert sorted(rows1.keys() - rows2.keys()) == sorted(rec["removed"])
    assert sorted(rows2.keys() - rows1.keys()) == sorted(rec["added"])
    changed = {str(k): sorted(f for f in rows1[k] if rows1[k][f] != rows2[k][f])
               for k in rows1.keys() & rows2.keys() if rows1[k] != rows2[k]}
    assert changed == rec["updated"] and changed


@pytest.mark.parametrize("name", DATASETS)
def test_every_version_verifies(bundled, name):
    for v in bundled.versions(name):
        report = verify_version(v)
        assert report.ok, report.to_json()


def test_shards_check_by_hand_with_sha256sum(bundled):
    for name in DATASETS:
        v = bundled.resolve(name)
        paths = [v.shard_path(i) for i in range(len(v.manifest.shards))]
        out = subprocess.run(["sha256sum", *paths], capture_output=True, text=True, check=True).stdout
        assert [line.split()[0] for line in out.splitlines()] == [s.sha256 for s in v.manifest.shards]


def test_version_id_recomputes_from_the_manifest_file(bundled):
    for name in DATASETS:
        for vid in bundled.version_ids(name):
            data = json.loads(Path(bundled.layout.manifest(name, vid)).read_text())
            del data["meta"]
            canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
            assert hashlib.sha256(canonical).hexdigest() == vid


def test_generator_reproduces_the_bundled_catalog(bundled, regenerated):
    catalog, record = regenerated

    def hashes(v):
        return pa.concat_tables([t for _, t in v.iter_tables(["__dsinspect_row_hash"])]).column(0)

    for name in DATASETS:
        for tag in ("v1", "v2"):
            a, b = bundled.resolve(f"{name}@{tag}"), catalog.resolve(f"{name}@{tag}")
            assert hashes(a).equals(hashes(b)), f"{name}@{tag}: row content differs from the bundled copy"
            if a.manifest.meta["writer"]["pyarrow"] == pa.__version__:
                assert a.id == b.id, f"{name}@{tag}: same writer library, so the same bytes and id"
    if all(bundled.resolve(n).manifest.meta["writer"]["pyarrow"] == pa.__version__ for n in DATASETS):
        assert record == RECORD


def test_tokenizer_is_stored_in_the_catalog_by_hash(bundled):
    v = bundled.resolve("demo-text@v1")
    option = v.manifest.field("tokens").options["tokenizer"]
    raw = bundled.read_blob("demo-text", option["blob"], ".json")
    assert hashlib.sha256(raw).hexdigest() == option["blob"] and b'"<|endoftext|>"' in raw


def test_an_install_without_the_bundled_folder_generates_the_same_catalog(monkeypatch, tmp_path, bundled):
    import dsinspect.defaults as defaults

    monkeypatch.setattr(defaults, "BUNDLED", tmp_path / "not-shipped")
    monkeypatch.setenv("DSINSPECT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DSINSPECT_CATALOG", raising=False)
    generated = defaults.open_catalog()
    assert generated.root.startswith(str(tmp_path / "cache"))
    for name in DATASETS:
        assert generated.resolve(f"{name}@v2").num_rows == bundled.resolve(f"{name}@v2").num_rows
    assert defaults.open_catalog().root == generated.root  # generated once, then reused
