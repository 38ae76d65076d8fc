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


@pytest.fixture(scope="session")
def web_catalog_server(tmp_path_factory):
    """`dsinspect web --allow-typed-transforms` on the web catalog with its recorded run job1 (web_fixtures.
    write_web_run_catalog), the job's transform module importable: (base URL, catalog path). One per pytest
    process, shared by the browser tests that only read it (test_web_browser, test_web_polish, test_web_query)."""
    from web_fixtures import write_web_run_catalog
    from web_server import artifact_log, running_web

    root = tmp_path_factory.mktemp("webcat")
    catalog = write_web_run_catalog(root)
    with running_web(catalog, artifact_log("web-server"), env={"PYTHONPATH": str(root)},
                     args=("--allow-typed-transforms",)) as base:
        yield base, catalog


@pytest.fixture(scope="session")
def demo_web_server():
    """`dsinspect web` on the sample catalog (web_fixtures.DEMO): its base URL.
    One per pytest process, shared by test_web_navigation, test_web_polish and test_web_stats."""
    from web_fixtures import DEMO
    from web_server import artifact_log, running_web

    with running_web(DEMO, artifact_log("web-server-demo")) as base:
        yield base


@pytest.fixture(scope="session")
def ray_session(request):
    """One small local Ray instance for the Ray tests of a pytest process (an xdist worker); its workers
    import the test helpers from tests/. ray.init takes ~10 s of a 2-core machine, so consecutive Ray
    test files share one. It is stopped as soon as the next test
    to run is in a file without Ray tests (an idle Ray costs ~1 s of CPU every 30 s), and started
    again for the next test that asks for it."""
    ray = pytest.importorskip("ray")
    tests = Path(__file__).resolve().parent
    path = os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cache = os.environ["DSINSPECT_CACHE"]  # the session's (a session fixture is made before _fresh_node)
    with_ray = {item.module for item in request.session.items if "ray_session" in item.fixturenames}

    class OnDemand:
        started = False

        def start(self) -> None:
            """ray.init with PYTHONPATH and DSINSPECT_CACHE in the environment Ray's processes inherit, rather
            than a runtime_env: its workers are then the ones Ray starts with the instance (a runtime_env
            makes it start more, ~4 s before the first task runs); this process's environment is put back."""
            if self.started:
                return
            saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "DSINSPECT_CACHE")}
            os.environ.update(PYTHONPATH=path, DSINSPECT_CACHE=cache)
            try:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            self.started = True

        def stop(self) -> None:
            if self.started:
                ray.shutdown()
                self.started = False

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_setup(self, item):
            if "ray_session" in item.fixturenames:
                self.start()

        @pytest.hookimpl(trylast=True)
        def pytest_runtest_teardown(self, item, nextitem):
            if nextitem is None or nextitem.module not in with_ray:
                self.stop()

    on_demand = OnDemand()
    on_demand.start()
    request.config.pluginmanager.register(on_demand, "dsinspect-ray-session")
    yield ray
    request.config.pluginmanager.unregister(on_demand)
    on_demand.stop()


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
