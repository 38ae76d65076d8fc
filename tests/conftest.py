import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from dsinspect.defaults import BUNDLED
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog


@pytest.fixture(params=["local", "memory"])
def catalog(request, tmp_path):
    """An empty catalog on a local directory and on fsspec's memory:// filesystem."""
    if request.param == "local":
        yield Catalog(str(tmp_path / "catalog"))
        return
    cat = Catalog(f"memory://dsinspect-test-{uuid.uuid4().hex}")
    yield cat
    if cat.fs.exists(cat.root):
        cat.fs.rm(cat.root, recursive=True)


@pytest.fixture
def cli(capsys):
    """Run the `dsinspect` command in this process: (exit code, stdout, stderr)."""
    from dsinspect.cli import main

    def run(*args):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code or 0
        done = capsys.readouterr()
        return code, done.out, done.err
    return run


@pytest.fixture(scope="module")
def sample_copy(tmp_path_factory):
    """A module's own copy of the sample catalog (queries write derived values into it)."""
    target = tmp_path_factory.mktemp("sample") / "catalog"
    shutil.copytree(BUNDLED, target)
    return Catalog(str(target))


@pytest.fixture
def damaged(tmp_path):
    """A copy of the sample catalog whose demo-video@v1 manifest is cut to 300 bytes: (dir, path, id)."""
    target = tmp_path / "catalog"
    shutil.copytree(BUNDLED, target)
    vid = Catalog(str(target)).resolve("demo-video@v1").id
    path = target / "datasets" / "demo-video" / "versions" / f"{vid}.json"
    path.write_bytes(path.read_bytes()[:300])
    return target, path, vid


TOY_FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens"),
              Field("blob", pa.binary(), "bytes")]


def toy_rows(n, start=0):
    return [{"id": i, "tokens": list(range(i % 5)), "blob": bytes([i % 251]) * (i % 7)}
            for i in range(start, start + n)]


def forge_rl_version(catalog_dir, tmp_path):
    """demo-rl@forged in a copied catalog: shard 0 rewritten with row 3's episode_return changed,
    its stored row hashes kept, under a manifest that is consistent again (only row hashes can tell)."""
    import hashlib

    import pyarrow.parquet as pq

    from dsinspect.loaders.format.manifest import Manifest, Shard
    from dsinspect.loaders.store.publish import publish

    cat = Catalog(str(catalog_dir))
    v = cat.resolve("demo-rl@v1")
    table = pq.read_table(v.shard_path(0))
    ret = table.column("episode_return").to_pylist()
    ret[3] += 1.0
    table = table.set_column(table.schema.get_field_index("episode_return"), "episode_return", pa.array(ret))
    pq.write_table(table, tmp_path / "forged.parquet")
    raw = (tmp_path / "forged.parquet").read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    (catalog_dir / "datasets" / "demo-rl" / "shards" / f"{sha}.parquet").write_bytes(raw)
    shards = (Shard(sha, len(raw), v.manifest.shards[0].rows), *v.manifest.shards[1:])
    publish(cat.fs, cat.layout, "demo-rl", Manifest(v.fields, shards, v.manifest.key, {"message": "forged"}),
            ["forged"])
    return cat


@pytest.fixture(scope="module")
def ray_instance():
    """One small local Ray instance for a module (tests/test_ingest_ray.py, test_raydata.py); its
    workers import the test helpers from tests/."""
    ray = pytest.importorskip("ray")
    tests = Path(__file__).resolve().parent
    path = os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "DSINSPECT_CACHE": os.environ["DSINSPECT_CACHE"]}})
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def _fresh_node(tmp_path_factory, monkeypatch):
    """Each test starts on a fresh node: its own shard cache and copies of remote metadata (a test
    counting requests must not find what an earlier test fetched)."""
    monkeypatch.setenv("DSINSPECT_CACHE", str(tmp_path_factory.mktemp("node-cache")))


def pytest_configure(config):
    """Tests (and the processes they start) use a private shard cache, never the user's; and print at
    a pipe's width, whatever COLUMNS the runner exports (pytest-xdist's workers have COLUMNS=80, which
    the CLI honours for piped output): a test that wants a width sets it."""
    if "DSINSPECT_CACHE" not in os.environ or not os.environ["DSINSPECT_CACHE"].startswith(tempfile.gettempdir()):
        os.environ["DSINSPECT_CACHE"] = tempfile.mkdtemp(prefix="dsinspect-test-cache-")
    os.environ.pop("COLUMNS", None)
