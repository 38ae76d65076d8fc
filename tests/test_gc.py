"""gc: what interrupted writes leave behind is found and removed; versions stay intact."""

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from ingest_helpers import OPENER, write_jsonl_source
from test_cli import assert_one_line_error, run

from dsinspect.errors import UserError
from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.ingest.source import SourceSpec
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.derive import derive_version
from dsinspect.loaders.store.gc import find_garbage, remove_garbage
from dsinspect.loaders.store.verify import verify_version
from dsinspect.loaders.store.writer import WriteOptions

DAY = 24 * 3600


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (then, then))


def _fields():
    from dsinspect.loaders.format.manifest import Field
    return [Field.from_json({"name": "id", "type": "int64", "role": "scalar", "nullable": True, "options": {}}),
            Field.from_json({"name": "text", "type": "string", "role": "text", "nullable": True, "options": {}})]


@pytest.fixture
def litter(tmp_path):
    """A catalog with two versions plus every kind of garbage, all two days old, and one young
    staging directory whose record names an old shard (an ingest that may still resume)."""
    catalog = Catalog(str(tmp_path / "catalog"))
    v1 = catalog.write_version("d", [{"id": i, "text": f"row {i}"} for i in range(30)], _fields(), key="id",
                               options=WriteOptions(shard_rows=10))
    v2 = derive_version(v1, update={0: {"text": "changed"}})  # shares two of v1's three shards
    base = Path(catalog.layout.dataset("d"))
    orphan = b"PAR1 not referenced by any manifest"
    orphan_sha = hashlib.sha256(orphan).hexdigest()
    (base / "shards" / f"{orphan_sha}.parquet").write_bytes(orphan)
    young_shard = b"PAR1 named by a young staging record"
    young_sha = hashlib.sha256(young_shard).hexdigest()
    (base / "shards" / f"{young_sha}.parquet").write_bytes(young_shard)
    (base / "shards" / ".tmp-shard-123.parquet").write_bytes(b"half a shard")
    (base / "ingest" / "oldjob").mkdir(parents=True)
    (base / "ingest" / "oldjob" / "part-00000.json").write_text(json.dumps({"shards": [{"sha256": orphan_sha}]}))
    _age(base, 2 * DAY)
    (base / "ingest" / "youngjob").mkdir()
    (base / "ingest" / "youngjob" / "part-00000.json").write_text(json.dumps({"shards": [{"sha256": young_sha}]}))
    return catalog, base, orphan_sha, young_sha, [v1, v2]


def test_finds_exactly_the_garbage_and_keeps_what_may_still_be_used(litter):
    catalog, base, orphan_sha, young_sha, versions = litter
    found = {(g.kind, Path(g.path).name) for g in find_garbage(catalog)}
    assert found == {("shard", f"{orphan_sha}.parquet"), ("temp", ".tmp-shard-123.parquet"), ("staging", "oldjob")}
    assert find_garbage(catalog, grace_hours=72) == []  # nothing is three days old


def test_apply_removes_it_and_every_version_still_verifies(litter):
    catalog, base, orphan_sha, young_sha, versions = litter
    shards_before = {p.name for p in (base / "shards").glob("[!.]*.parquet")}
    removal = remove_garbage(catalog, find_garbage(catalog))
    assert len(removal.removed) == 3 and removal.busy == []
    assert not (base / "shards" / f"{orphan_sha}.parquet").exists()
    assert not (base / "ingest" / "oldjob").exists()
    assert (base / "shards" / f"{young_sha}.parquet").exists() and (base / "ingest" / "youngjob").exists()
    assert {p.name for p in (base / "shards").glob("[!.]*.parquet")} == shards_before - {f"{orphan_sha}.parquet"}
    for v in versions:
        assert verify_version(catalog.version("d", v.id)).ok


def test_a_shard_referenced_again_before_removal_is_kept(litter):
    catalog, base, *_, versions = litter
    manifest = Path(catalog.layout.manifest("d", versions[-1].id))
    saved = manifest.read_bytes()
    manifest.unlink()  # its own shards now look unreferenced ...
    fresh = Catalog(catalog.url)
    found = find_garbage(fresh, grace_hours=0)
    own = {s.sha256 for s in versions[-1].manifest.shards}
    assert own & {Path(g.path).stem for g in found if g.kind == "shard"}
    manifest.write_bytes(saved)  # ... until the version is published (again) before removal
    remove_garbage(Catalog(catalog.url), found)
    assert all((base / "shards" / f"{sha}.parquet").exists() for sha in own)
    assert verify_version(Catalog(catalog.url).version("d", versions[-1].id)).ok


def test_an_interrupted_ingest_is_collected_and_a_rerun_rebuilds_everything(tmp_path):
    src = write_jsonl_source(tmp_path / "src", files=3, rows=40)
    (tmp_path / "marks").mkdir()
    spec = SourceSpec("jsonl", str(src), {"fail": {"1": "raise"}, "marks": str(tmp_path / "marks")})
    catalog = Catalog(str(tmp_path / "catalog"))
    with pytest.raises(UserError):
        run_ingest(catalog, spec, "text", engine="inline", key="id", opener=OPENER, retries=0)
    found = find_garbage(catalog, grace_hours=0)
    kinds = sorted(g.kind for g in found)
    assert "staging" in kinds and "shard" in kinds  # part 0's record and its unpublished shard
    remove_garbage(catalog, found)
    assert find_garbage(catalog, grace_hours=0) == []
    result = run_ingest(catalog, spec, "text", engine="inline", key="id", opener=OPENER, retries=0)
    assert result.parts_skipped == 0 and result.version.num_rows == 120
    assert verify_version(result.version).ok


def test_memory_catalog(tmp_path):
    catalog = Catalog(f"memory://gc-{os.getpid()}-{time.time_ns()}")
    catalog.write_version("m", [{"id": 1, "text": "a"}], _fields())
    catalog.fs.pipe_file(catalog.layout.shard("m", "0" * 64), b"stray")
    later = time.time() + 2 * DAY
    assert [(g.kind, g.bytes) for g in find_garbage(catalog, now=later)] == [("shard", 5)]
    remove_garbage(catalog, find_garbage(catalog, now=later))
    assert find_garbage(catalog, now=later) == [] and verify_version(catalog.resolve("m")).ok


def test_cli_lists_by_default_and_removes_with_apply(litter):
    catalog, base, orphan_sha, *_ = litter
    listed = run("gc", "--json", catalog=catalog.url)
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert len(data["found"]) == 3 and data["removed"] == [] and data["applied"] is False
    assert (base / "shards" / f"{orphan_sha}.parquet").exists()
    human = run("gc", "d", catalog=catalog.url)
    assert "3 items" in human.stdout and "--apply" in human.stdout and "oldjob" in human.stdout
    applied = run("gc", "--apply", "--json", catalog=catalog.url)
    assert len(json.loads(applied.stdout)["removed"]) == 3
    assert "no garbage" in run("gc", catalog=catalog.url).stdout


@pytest.mark.parametrize("args, fragment", [(["nosuch"], "no dataset 'nosuch'"),
                                            (["--older-than", "-1"], "--older-than")])
def test_cli_mistakes_are_one_line(litter, args, fragment):
    assert_one_line_error(run("gc", *args, catalog=litter[0].url), 2, fragment)
