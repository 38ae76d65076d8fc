"""--engine ray on a local Ray instance: the pool's version id, retried parts, the same verify report."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ingest_helpers import OPENER, attempts, write_jsonl_source

from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.ingest.source import SourceSpec
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.verify import verify_version
from dsinspect.loaders.store.verify_parts import verify_parallel

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_jsonl_source(tmp_path_factory.mktemp("src"), files=4, rows=600)


@pytest.fixture(scope="module")
def pooled(source, tmp_path_factory):
    catalog = Catalog(str(tmp_path_factory.mktemp("pool") / "catalog"))
    return run_ingest(catalog, str(source), "text", engine="pool", workers=2, key="id")


def test_ray_gives_the_same_version_id_as_the_pool(ray_session, source, pooled, tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    result = run_ingest(catalog, str(source), "text", engine="ray", key="id")
    assert result.engine == "ray" and result.parts_converted == 4
    assert result.version.id == pooled.version.id
    assert verify_version(result.version).ok


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_a_ray_task_that_raises_or_dies_is_retried_and_published_once(ray_session, source, pooled, tmp_path, mode):
    catalog = Catalog(str(tmp_path / "catalog"))
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = SourceSpec("jsonl", str(source), {"fail": {"2": mode}, "marks": str(marks)})
    result = run_ingest(catalog, spec, "text", engine="ray", key="id", opener=OPENER)
    assert attempts(marks, 2) == 2
    assert result.version.id == pooled.version.id
    versions = list((Path(catalog.root) / "datasets" / "text" / "versions").glob("*.json"))
    assert [p.stem for p in versions] == [pooled.version.id]


def test_ray_verify_reports_exactly_what_serial_verify_reports(ray_session, pooled):
    v = pooled.version
    assert verify_parallel(v, "ray", 2).to_json() == verify_version(v).to_json()


def test_without_ray_the_engine_is_a_clear_error(source, tmp_path):
    code = ("import sys; sys.modules['ray'] = None\n"
            "from dsinspect.cli import main\n"
            f"main(['--catalog', {str(tmp_path / 'c')!r}, 'ingest', {str(source)!r}, 'text', '--engine', 'ray'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    assert done.stderr.strip() == "dsinspect: error: --engine ray needs the 'ray' extra: pip install 'dsinspect[ray]'"
