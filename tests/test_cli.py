"""The CLI as a person and a script use it: real exit codes, one-line errors. Most commands run in
this process (tests/cli_inprocess.py); real processes where the process is the subject: a failed
verify's exit code as a shell sees it, DSINSPECT_CATALOG from the environment, `--version`."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from cli_inprocess import run_cli
from conftest import forge_rl_version

from dsinspect.defaults import BUNDLED
from dsinspect.demo.build import DATASETS


def run(*args, catalog=None):
    """`dsinspect ARGS`, run in this process with no DSINSPECT_CATALOG: a CompletedProcess."""
    return run_cli(*(["--catalog", str(catalog)] if catalog else []), *args)


def run_process(*args, catalog=None, env_catalog=None):
    """`dsinspect ARGS` in a real process, with DSINSPECT_CATALOG=`env_catalog` if given."""
    env = {k: v for k, v in os.environ.items() if k != "DSINSPECT_CATALOG"}
    if env_catalog:
        env["DSINSPECT_CATALOG"] = env_catalog
    cmd = [sys.executable, "-m", "dsinspect", *(["--catalog", str(catalog)] if catalog else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def catalog_copy(tmp_path):
    target = tmp_path / "catalog"
    shutil.copytree(BUNDLED, target)
    return target


def assert_one_line_error(done, code, *fragments):
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsinspect: error: "), done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_ls_json_lists_the_four_datasets_with_versions_and_tags():
    done = run("ls", "--json")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert [d["name"] for d in listing["datasets"]] == sorted(DATASETS)
    for d in listing["datasets"]:
        assert len(d["versions"]) == 2 and set(d["tags"]) == {"v1", "v2", "latest"}
        assert {t for v in d["versions"] for t in v["tags"]} == {"v1", "v2", "latest"}


def test_info_json_shows_schema_roles_shards_and_id():
    info = json.loads(run("info", "demo-text@v1", "--json").stdout)
    roles = {f["name"]: f["role"] for f in info["schema"]}
    assert roles == {"doc_id": "scalar", "lang": "scalar", "text": "text", "tokens": "tokens"}
    assert info["rows"] == sum(s["rows"] for s in info["shards"]) == 240
    assert all(len(s["sha256"]) == 64 and s["bytes"] > 0 for s in info["shards"])
    manifest = BUNDLED / "datasets" / "demo-text" / "versions" / f"{info['id']}.json"
    assert manifest.exists() and info["tags"] == ["v1"] and info["key"] == "doc_id"


def test_human_output_names_what_matters():
    done = run("info", "demo-images@v2")
    assert done.returncode == 0 and "image" in done.stdout and "sha256" in done.stdout
    assert "demo-text" in run().stdout  # no command: the catalog overview


def test_verify_passes_on_the_sample_catalog():
    done = run("verify", "demo-images@v2")
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout


def test_verify_names_the_shard_with_a_flipped_byte(catalog_copy):
    info = json.loads(run("info", "demo-images@v2", "--json", catalog=catalog_copy).stdout)
    v1_shards = {s["sha256"]
                 for s in json.loads(run("info", "demo-images@v1", "--json", catalog=catalog_copy).stdout)["shards"]}
    victim = next(s for s in info["shards"] if s["sha256"] in v1_shards and s["index"] > 0)
    path = catalog_copy / "datasets" / "demo-images" / "shards" / f"{victim['sha256']}.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    done = run_process("verify", "demo-images@v2", "--json", catalog=catalog_copy)  # exit 1 as a shell sees it
    assert done.returncode == 1
    report = json.loads(done.stdout)
    bad = [s for s in report["shards"] if not s["ok"]]
    assert [s["sha256"] for s in bad] == [victim["sha256"]]
    assert any("sha256 mismatch" in p for p in bad[0]["problems"])
    assert f"shard {victim['index']} {path}" in done.stderr and "sha256 mismatch" in done.stderr
    assert "Traceback" not in done.stderr
    # the shard is shared copy-on-write, so v1 is damaged too; the check says so
    assert run("verify", "demo-images@v1", catalog=catalog_copy).returncode == 1


def test_verify_reports_rows_whose_hash_does_not_match(catalog_copy, tmp_path):
    """A shard rewritten with one changed value and a fixed-up manifest: the row hash still catches it."""
    forge_rl_version(catalog_copy, tmp_path)
    done = run("verify", "demo-rl@forged", catalog=catalog_copy)
    assert done.returncode == 1
    assert "1 row(s) do not match their stored row hash (rows 3)" in done.stderr


def test_tag_moves_and_resolves(catalog_copy):
    done = run("tag", "demo-text@v1", "stable", catalog=catalog_copy)
    assert done.returncode == 0, done.stderr
    info = json.loads(run("info", "demo-text@stable", "--json", catalog=catalog_copy).stdout)
    assert "stable" in info["tags"] and "v1" in info["tags"]


@pytest.mark.parametrize("args, fragments", [
    (("info", "demo-text@v9"), ("no tag 'v9'",)),
    (("info", "no-such-set"), ("no dataset 'no-such-set'",)),
    (("info", "../../etc/passwd"), ("bad dataset name",)),
    (("verify", "demo@x@y"), ("bad address",)),
])
def test_user_mistakes_are_one_line_exit_2(args, fragments):
    assert_one_line_error(run(*args), 2, *fragments)


def test_a_bad_tag_is_one_line_exit_2(catalog_copy):
    assert_one_line_error(run("tag", "demo-text@v1", "bad/tag", catalog=catalog_copy), 2, "bad tag")


def test_malformed_manifest_is_one_line_naming_the_file(catalog_copy):
    info = json.loads(run("info", "demo-video@v1", "--json", catalog=catalog_copy).stdout)
    path = catalog_copy / "datasets" / "demo-video" / "versions" / f"{info['id']}.json"
    path.write_text('{"format": "dsinspect.manifest/1", "hash": 1')
    # a stored manifest that does not parse is a stored object failing its check: exit 1
    assert_one_line_error(run("info", "demo-video@v1", catalog=catalog_copy), 1, str(path), "not valid JSON")


def test_catalog_from_environment_and_flag(tmp_path):
    assert "has no datasets" in run_process("ls", env_catalog=str(tmp_path)).stdout
    assert "has no datasets" in run("ls", "--catalog", str(tmp_path)).stdout


def test_sample_data_command_writes_a_usable_catalog(tmp_path):
    done = run("sample-data", str(tmp_path / "demo"), "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert sorted(record["datasets"]) == sorted(DATASETS)
    listing = json.loads(run("ls", "--json", catalog=tmp_path / "demo").stdout)
    assert ({d["name"]: d["tags"]["v2"] for d in listing["datasets"]}
            == {n: r["v2"] for n, r in record["datasets"].items()})


def test_version_and_help():
    assert run_process("--version").returncode == 0
    done = run("--help")
    assert done.returncode == 0 and all(c in done.stdout for c in ("ls", "info", "tag", "verify", "sample-data"))
