"""A catalog served read-only over HTTP by a plain static file server on 127.0.0.1 (directory index
pages like `python -m http.server`, Range requests answered with 206): ls, info, verify, show,
replay and a Loader epoch read it exactly as the local copy; every write is refused in one line.
Every claim about I/O is checked on the server's own request counts. The commands run in this process
(tests/cli_inprocess.py) except where the process is the subject: `ls --json` over HTTP and a refused
`tag` (exit 2 as a shell sees it) from real processes, and a process started without aiohttp."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from cli_inprocess import run_cli
from http_range_server import RangeHandler, serving

from dsinspect.defaults import BUNDLED
from dsinspect.errors import StorageError
from dsinspect.loaders import Catalog, Loader, RunSpec
from dsinspect.loaders.audit.replay import replay
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.store.describe import catalog_listing


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    target = tmp_path_factory.mktemp("http") / "catalog"
    shutil.copytree(BUNDLED, target)
    return str(target)


@pytest.fixture(scope="module")
def served(local):
    """(catalog URL, request counts) of the copy, served with index pages and ranges."""
    with serving(os.path.dirname(local)) as (base, counts):
        yield f"{base}/catalog", counts


def cli(*args, catalog):
    """`dsinspect --catalog CATALOG ARGS`, run in this process with no DSINSPECT_CATALOG: a CompletedProcess."""
    return run_cli("--catalog", catalog, *args)


def cli_process(*args, catalog):
    """`dsinspect --catalog CATALOG ARGS` in a real process."""
    env = {k: v for k, v in os.environ.items() if k != "DSINSPECT_CATALOG"}
    return subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", catalog, *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_ls_over_http_lists_what_the_local_copy_lists(served, local):
    url, _ = served
    done = cli_process("ls", "--json", catalog=url)  # a real process reading over HTTP
    assert done.returncode == 0, done.stderr
    remote = json.loads(done.stdout)
    assert remote["catalog"] == url and remote["broken"] == 0
    assert remote["datasets"] == catalog_listing(Catalog(local))["datasets"]
    text = cli("ls", catalog=url)
    assert text.returncode == 0 and all(name in text.stdout for name in ("demo-text", "demo-video"))


def test_info_verify_and_show_over_http(served, local):
    url, counts = served
    info = json.loads(cli("info", "demo-images@v1", "--json", catalog=url).stdout)
    mine = json.loads(cli("info", "demo-images@v1", "--json", catalog=local).stdout)
    assert [s["url"] for s in info["shards"]] == [s["url"].replace(local, url) for s in mine["shards"]]
    for s in info["shards"] + mine["shards"]:
        del s["url"]
    del info["address"], mine["address"]
    assert info == mine
    done = cli("verify", "demo-text@v1", catalog=url)
    assert done.returncode == 0 and "4 shards, 240 rows verified" in done.stdout, done.stderr
    ranged = counts[("GET", 206)]
    shown = json.loads(cli("show", "demo-images@v1:3", "--json", catalog=url).stdout)
    assert shown == json.loads(cli("show", "demo-images@v1:3", "--json", catalog=local).stdout.replace(local, url))
    assert counts[("GET", 206)] > ranged  # one row is read by ranges (footer, one row group), not whole shards


def test_a_loader_epoch_and_a_replay_over_http_match_the_local_copy(served, local, tmp_path):
    url, counts = served
    remote, mine = Catalog(url), Catalog(local)
    spec = RunSpec.create(remote, "demo-text@v1", seed=3, batch_size=8, world_size=2, shuffle="global")
    assert spec.order_hash == RunSpec.create(mine, "demo-text@v1", seed=3, batch_size=8, world_size=2,
                                             shuffle="global").order_hash
    for rank in (0, 1):
        with Loader(spec, rank=rank, catalog=remote, cache=ShardCache(str(tmp_path / "remote"))) as loader:
            got = [(b.indices.tolist(), b.row_hashes) for b in loader]
        with Loader(spec, rank=rank, catalog=mine, cache=ShardCache(str(tmp_path / "local"))) as loader:
            want = [(b.indices.tolist(), b.row_hashes) for b in loader]
        assert got == want and len(got) == 15
    assert replay(spec, 5, "all", catalog=remote).fingerprints == replay(spec, 5, "all", catalog=mine).fingerprints
    assert counts[("GET", 206)] > 0


@pytest.mark.parametrize("args", [("tag", "demo-text@v1", "stable"), ("sample-data", "{url}/new"),
                                  ("gc", "--apply"), ("ingest", "{source}", "toy", "--engine", "inline")])
def test_writes_to_an_http_catalog_are_refused_in_one_line(served, tmp_path, args):
    url, counts = served
    source = tmp_path / "rows.jsonl"
    source.write_text('{"id": 1}\n')
    writes = sum(n for (method, _), n in counts.items() if method not in ("GET", "HEAD"))
    args = [a.format(url=url, source=source) for a in args]
    run = cli_process if args[0] == "tag" else cli  # `tag`: exit 2 as a shell sees it
    done = run(*args, catalog=url) if args[0] != "sample-data" else run(*args, catalog="unused")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "read-only" in lines[0] and "http://127.0.0.1" in lines[0], done.stderr
    assert sum(n for (method, _), n in counts.items() if method not in ("GET", "HEAD")) == writes == 0


def test_the_write_boundary_refuses_http_whatever_calls_it(served):
    from dsinspect.loaders.store.storage import publish_file, write_atomic

    url, counts = served
    fs = Catalog(url).fs
    with pytest.raises(StorageError, match="read-only"):
        write_atomic(fs, f"{url}/datasets/x/tags.json", b"{}")
    with pytest.raises(StorageError, match="read-only"):
        publish_file(fs, __file__ + ".nonexistent", f"{url}/datasets/x/shards/y")
    assert not any(method not in ("GET", "HEAD") for method, _ in counts)



@pytest.mark.parametrize("args", [("export", "demo-text@v1", "{url}/exported", "--format", "jsonl"),
                                  ("replay", "--address", "demo-text@v1", "--step", "0", "--export", "{url}/batch")])
def test_exports_to_an_http_destination_are_refused_in_one_line(served, local, args):
    """A destination on the server is refused before any request (the old code sent PUT/POST)."""
    url, counts = served
    done = cli(*[a.format(url=url) for a in args], catalog=local)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "read-only" in lines[0] and "http://127.0.0.1" in lines[0], done.stderr
    assert not any(method not in ("GET", "HEAD") for method, _ in counts)


def test_a_run_record_on_an_http_store_is_refused(served, local):
    url, counts = served
    spec = RunSpec.create(Catalog(local), "demo-text@v1", seed=0, batch_size=4, world_size=1)
    with pytest.raises(StorageError, match="read-only"):
        Loader(spec, rank=0, catalog=Catalog(local), record_dir=f"{url}/runs/exp1")
    assert not any(method not in ("GET", "HEAD") for method, _ in counts)


class NoIndexHandler(RangeHandler):
    """A static server without directory index pages (S3 website hosting, most CDNs, nginx by default)."""

    def list_directory(self, path):
        self.send_error(404, "No index")
        return None


def test_without_index_pages_tags_and_whole_ids_still_resolve_and_ls_says_why_it_cannot_list(local):
    vid = Catalog(local).resolve("demo-rl@v1").id
    with serving(os.path.dirname(local), NoIndexHandler) as (base, _):
        url = f"{base}/catalog"
        done = cli("ls", catalog=url)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert url in done.stderr and "index page" in done.stderr
        for address in ("demo-rl@v1", f"demo-rl@{vid}"):
            done = cli("verify", address, catalog=url)
            assert done.returncode == 0 and "40 rows verified" in done.stdout, done.stderr


def test_the_http_client_is_a_dependency_and_its_absence_is_one_line():
    """On a fresh machine (no s3fs to pull it in) http catalogs failed: fsspec's HTTP filesystem
    needs aiohttp, which nothing installed."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert any(d.split(">")[0].split("=")[0].strip() == "aiohttp" for d in project["dependencies"])
    code = ("import sys; sys.modules['aiohttp'] = None\n"  # as if it were not installed
            "from dsinspect.cli import main; main(['--catalog', 'http://127.0.0.1:9/x', 'ls'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "protocol 'http' needs a package that is not installed" in done.stderr
