"""Mistakes and damage around a catalog, through the real CLI: a missing directory, an unknown
protocol, a lenient address, a truncated manifest or tags file among intact ones."""

import json
import shutil

import pytest
from test_cli import assert_one_line_error, run

from dsinspect.defaults import BUNDLED
from dsinspect.demo.build import DATASETS
from dsinspect.errors import IntegrityError, ManifestError
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.describe import catalog_listing


@pytest.mark.parametrize("index", ["-1", "+3", " 3", "\uff13", "1_0"])
def test_show_refuses_an_index_that_is_not_plain_digits(index):
    """`show NAME:-1` showed the last row (exit 0), `: 3` and full-width digits were read as 3."""
    assert_one_line_error(run("show", f"demo-text@v1:{index}"), 2, "bad address", "not a row number")


def test_show_refuses_spaces_around_an_address():
    assert_one_line_error(run("show", " demo-text@v1:3"), 2, "bad address", "spaces")


def test_ls_of_a_missing_directory_is_one_line_exit_2(tmp_path):
    missing = tmp_path / "no-such-catalog"
    assert_one_line_error(run("ls", catalog=missing), 2, str(missing), "does not exist")
    assert_one_line_error(run("info", "demo-text", catalog=missing), 2, str(missing), "does not exist")
    assert not missing.exists()
    assert run("ls", catalog=tmp_path).returncode == 0  # an existing, empty directory is an empty catalog


def test_writing_commands_still_create_a_new_catalog(tmp_path):
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": f"row {i}"}) + "\n" for i in range(5)))
    new = tmp_path / "new" / "catalog"
    done = run("ingest", str(source), "toy", "--engine", "inline", catalog=new)
    assert done.returncode == 0, done.stderr
    listing = json.loads(run("ls", "--json", catalog=new).stdout)
    assert [d["name"] for d in listing["datasets"]] == ["toy"] and listing["broken"] == 0


def test_an_unknown_protocol_is_one_line_naming_it_and_the_known_ones():
    done = run("ls", catalog="nosuch://x")
    assert_one_line_error(done, 2, "nosuch://x", "unknown protocol 'nosuch'", "memory", "s3", "file")


def test_a_truncated_manifest_is_listed_as_broken_and_the_rest_lists(damaged):
    catalog_dir, path, vid = damaged
    done = run("ls", catalog=catalog_dir)
    assert done.returncode == 1, done.stderr  # a stored file failing its check is a failed check
    for name in DATASETS:
        assert name in done.stdout
    assert "BROKEN" in done.stdout and vid[:12] in done.stdout
    errors = done.stderr.strip().splitlines()
    assert errors[-1].startswith("dsinspect: error: ") and "1 stored file cannot be read" in errors[-1]
    assert any(str(path) in line and "not valid JSON" in line for line in errors[:-1])

    listing = json.loads(run("ls", "--json", catalog=catalog_dir).stdout)
    by_name = {d["name"]: d for d in listing["datasets"]}
    assert sorted(by_name) == sorted(DATASETS) and listing["broken"] == 1
    assert all(len(d["versions"]) == 2 and d["broken"] == [] for n, d in by_name.items() if n != "demo-video")
    video = by_name["demo-video"]
    assert [v["tags"] for v in video["versions"]] == [["latest", "v2"]]
    assert video["broken"] == [{"id": vid, "short_id": vid[:12], "path": str(path), "tags": ["v1"],
                                "reason": video["broken"][0]["reason"]}]
    assert video["broken"][0]["reason"].startswith("not valid JSON")


def test_a_damaged_stored_manifest_fails_verify_and_info_with_exit_1(damaged):
    catalog_dir, path, _ = damaged
    for args in (("verify", "demo-video@v1"), ("info", "demo-video@v1")):
        assert_one_line_error(run(*args, catalog=catalog_dir), 1, str(path), "not valid JSON")
    assert run("verify", "demo-video@v2", catalog=catalog_dir).returncode == 0


def test_a_damaged_stored_manifest_is_a_damaged_error(damaged):
    from dsinspect.errors import DamagedError

    catalog_dir, path, _ = damaged
    with pytest.raises(DamagedError) as e:
        Catalog(str(catalog_dir)).resolve("demo-video@v1")
    assert isinstance(e.value, IntegrityError) and isinstance(e.value, ManifestError) and e.value.exit_code == 1


def test_a_damaged_tags_file_is_listed_as_broken(tmp_path):
    target = tmp_path / "catalog"
    shutil.copytree(BUNDLED, target)
    tags = target / "datasets" / "demo-rl" / "tags.json"
    tags.write_text('{"v1": "nope"}')
    listing = catalog_listing(Catalog(str(target)))
    rl = next(d for d in listing["datasets"] if d["name"] == "demo-rl")
    assert len(rl["versions"]) == 2 and rl["tags"] == {}
    assert [(b["id"], b["path"]) for b in rl["broken"]] == [(None, str(tags))]
    assert "64-hex" in rl["broken"][0]["reason"] and listing["broken"] == 1
    assert run("ls", catalog=target).returncode == 1
