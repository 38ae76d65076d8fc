"""The ingest engine: same version id on every engine, resume after SIGKILL (a real process killed, the
re-run in this process: tests/cli_inprocess.py), retried parts, one publish."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from cli_inprocess import run_cli
from ingest_helpers import OPENER, attempts, write_jsonl_source

from dsinspect.errors import UserError
from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.ingest.engine import fixed_chunks, staging_dir
from dsinspect.loaders.ingest.source import SourceSpec
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.verify import verify_version
from dsinspect.loaders.store.verify_parts import shard_ranges, verify_parallel

REPO = Path(__file__).resolve().parents[1]


def _manifests(catalog: Catalog, name: str) -> list[str]:
    directory = Path(catalog.root) / "datasets" / name / "versions"
    return sorted(p.name for p in directory.glob("*.json")) if directory.exists() else []


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_jsonl_source(tmp_path_factory.mktemp("src"), files=5, rows=700)


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    """The source ingested inline: the version id every other way must reproduce."""
    catalog = Catalog(str(tmp_path_factory.mktemp("ref") / "catalog"))
    return run_ingest(catalog, str(source), "text", engine="inline", key="id")


# -- pure pieces -------------------------------------------------------------------------------

@pytest.mark.parametrize("sizes", [[5, 3, 9, 1], [16], [1] * 20, [0, 7, 0, 13]])
def test_fixed_chunks_cut_at_fixed_row_counts_whatever_the_input_batches(sizes):
    batches, start = [], 0
    for n in sizes:
        batches.append(pa.record_batch({"x": list(range(start, start + n))}))
        start += n
    out = list(fixed_chunks(iter(batches), 4))
    assert [b.num_rows for b in out] == [4] * (start // 4) + ([start % 4] if start % 4 else [])
    assert [v for b in out for v in b.column(0).to_pylist()] == list(range(start))


def test_shard_ranges_cover_every_shard_once():
    for count in (1, 5, 17):
        for ranges in (1, 3, 40):
            got = shard_ranges(count, ranges)
            assert [i for a, b in got for i in range(a, b)] == list(range(count))
            assert len(got) == min(count, ranges)


# -- engines agree -----------------------------------------------------------------------------

def test_inline_ingest_has_one_version_per_part_order_and_cleans_staging(reference):
    v = reference.version
    assert v.num_rows == 5 * 700 and reference.parts == 5 and reference.parts_converted == 5
    assert len(v.manifest.shards) == 5  # every part starts its own shard
    assert v.manifest.key == "id" and v.row(0)["id"] == 0 and v.row(3499)["id"] == 3499
    assert not (Path(v.catalog.root) / "datasets" / "text" / "ingest").exists()
    assert verify_version(v).ok


def test_inline_progress_reports_rows_within_parts(source, tmp_path):
    seen = []
    run_ingest(Catalog(str(tmp_path / "catalog")), str(source), "text", engine="inline", on_progress=seen.append)
    rows = [p.rows for p in seen]
    assert rows == sorted(rows) and rows[-1] == 3500
    assert len(seen) > 5 + 1  # more than one event per part: rows are reported as row groups are written
    assert any(p.rows > 700 * p.parts_done for p in seen)


@pytest.mark.slow
def test_pool_gives_the_same_version_id_as_inline(source, reference, tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    seen = []
    result = run_ingest(catalog, str(source), "text", engine="pool", workers=2, key="id", on_progress=seen.append)
    assert result.version.id == reference.version.id
    assert seen[-1].parts_done == 5 and seen[-1].rows == 3500 and seen[-1].bytes == seen[-1].bytes_total
    assert [p.parts_done for p in seen] == sorted(p.parts_done for p in seen)


def test_different_write_options_give_a_different_id_and_same_rows(source, reference, tmp_path):
    from dsinspect.loaders.store.writer import WriteOptions

    catalog = Catalog(str(tmp_path / "catalog"))
    v = run_ingest(catalog, str(source), "text", engine="inline", key="id", write=WriteOptions(shard_rows=300)).version
    assert v.id != reference.version.id
    assert [s.rows for s in v.manifest.shards] == [300, 300, 100] * 5
    assert [v.row(i)["text"] for i in (0, 1234, 3499)] == [reference.version.row(i)["text"] for i in (0, 1234, 3499)]


# -- failures ----------------------------------------------------------------------------------

def _failing_spec(source: Path, marks: Path, fail: dict) -> SourceSpec:
    marks.mkdir()
    return SourceSpec("jsonl", str(source), {"fail": fail, "marks": str(marks)})


def test_a_part_that_raises_is_retried_inline(source, reference, tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    spec = _failing_spec(source, tmp_path / "marks", {"2": "raise"})
    result = run_ingest(catalog, spec, "text", engine="inline", key="id", opener=OPENER)
    assert attempts(tmp_path / "marks", 2) == 2
    assert result.version.id == reference.version.id
    assert _manifests(catalog, "text") == [f"{reference.version.id}.json"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_a_pool_part_that_raises_or_whose_worker_is_killed_is_retried(source, reference, tmp_path, mode):
    catalog = Catalog(str(tmp_path / "catalog"))
    spec = _failing_spec(source, tmp_path / "marks", {"1": mode, "3": mode})
    result = run_ingest(catalog, spec, "text", engine="pool", workers=2, key="id", opener=OPENER)
    if mode == "raise":
        assert attempts(tmp_path / "marks", 1) == 2 and attempts(tmp_path / "marks", 3) == 2
    else:  # a killed worker takes the pool down: a retry running beside the other killer dies with it
        assert 2 <= attempts(tmp_path / "marks", 1) <= 3 and 2 <= attempts(tmp_path / "marks", 3) <= 3
    assert result.version.id == reference.version.id
    assert _manifests(catalog, "text") == [f"{reference.version.id}.json"]
    assert catalog.tags("text") == {"latest": reference.version.id}


@pytest.mark.slow
def test_a_killed_worker_charges_only_the_part_it_was_running(source, reference, tmp_path):
    """One worker, two parts that each kill it once, one retry each: the parts queued behind a
    killer were never started, so its death must not use up their retry (before start markers,
    part 3 was charged for part 1's kill and then failed on its own)."""
    catalog = Catalog(str(tmp_path / "catalog"))
    marks = tmp_path / "marks"
    spec = _failing_spec(source, marks, {"1": "kill", "3": "kill"})
    result = run_ingest(catalog, spec, "text", engine="pool", workers=1, key="id", opener=OPENER, retries=1)
    assert attempts(marks, 1) == 2 and attempts(marks, 3) == 2
    assert result.version.id == reference.version.id


def test_a_source_file_rewritten_at_the_same_size_is_read_again_on_rerun(tmp_path):
    """An interrupted ingest keeps the records of finished parts for a re-run; a file rewritten
    since (same size, other bytes) must not be taken from those records."""
    src = write_jsonl_source(tmp_path / "src", files=3, rows=50)
    catalog = Catalog(str(tmp_path / "catalog"))
    spec = _failing_spec(src, tmp_path / "marks", {"1": "raise"})
    with pytest.raises(UserError, match="part 1"):
        run_ingest(catalog, spec, "text", engine="inline", key="id", opener=OPENER, retries=0)
    first = src / "part-000.jsonl"  # converted and recorded before part 1 failed
    text = first.read_text()
    before = os.stat(first).st_mtime_ns
    first.write_text(text.replace('"row 0 "', '"ROW 0 "', 1))
    os.utime(first, ns=(before + 1_000_000_000, before + 1_000_000_000))  # a coarse clock still sees it
    result = run_ingest(catalog, spec, "text", engine="inline", key="id", opener=OPENER, retries=0)
    assert result.parts_skipped == 0
    assert result.version.row(0)["text"] == "ROW 0 "


def test_retries_are_bounded_and_nothing_is_published(source, tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    marks = tmp_path / "marks"
    spec = _failing_spec(source, marks, {"1": "always"})
    with pytest.raises(UserError, match=r"part 1 \(file://.*part-001.jsonl\)"):
        run_ingest(catalog, spec, "text", engine="inline", opener=OPENER, retries=2)
    assert attempts(marks, 1) == 3
    assert _manifests(catalog, "text") == []


def test_a_bad_line_fails_at_once_naming_file_and_line_and_publishes_nothing(tmp_path):
    src = write_jsonl_source(tmp_path / "src", files=3, rows=1200)  # the bad line lies past schema inference
    with open(src / "part-002.jsonl", "a") as f:
        f.write("{not json\n")
    catalog = Catalog(str(tmp_path / "catalog"))
    with pytest.raises(UserError, match=r"part-002\.jsonl:1201") as e:
        run_ingest(catalog, str(src), "text", engine="inline")
    assert "\n" not in str(e.value)
    assert _manifests(catalog, "text") == []
    # parts 0 and 1 converted and were kept for a re-run once the file is fixed
    staged = list((Path(catalog.root) / "datasets" / "text" / "ingest").glob("*/part-*.json"))
    assert sorted(p.name for p in staged) == ["part-00000.json", "part-00001.json"]


# -- resume after SIGKILL ----------------------------------------------------------------------

@pytest.mark.slow
def test_an_ingest_killed_midway_resumes_and_gives_the_uninterrupted_version_id(tmp_path):
    src = write_jsonl_source(tmp_path / "src", files=24, rows=1500)
    fresh = run_ingest(Catalog(str(tmp_path / "fresh")), str(src), "text", engine="inline")
    catalog = Catalog(str(tmp_path / "catalog"))
    cmd = [sys.executable, "-m", "dsinspect", "--catalog", catalog.url, "ingest", str(src), "text",
           "--engine", "inline", "--json"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    staging = Path(catalog.root) / "datasets" / "text" / "ingest"
    deadline = time.monotonic() + 120
    while len(list(staging.glob("*/part-*.json"))) < 3:
        assert proc.poll() is None, "the ingest finished before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(list(staging.glob("*/part-*.json")))
    assert 3 <= done_before < 24
    assert _manifests(catalog, "text") == []  # nothing half-published
    second = run_cli(*cmd[3:], unset=())  # the re-run: in this process (tests/cli_inprocess.py)
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout)
    assert result["parts_skipped"] == done_before and result["parts_converted"] == 24 - done_before
    assert result["id"] == fresh.version.id
    assert not staging.exists()
    assert verify_version(catalog.resolve("text")).ok


def test_staging_is_keyed_by_the_job(source, reference, tmp_path):
    """A changed option is another job: earlier part records are not reused for it."""
    catalog = Catalog(str(tmp_path / "catalog"))
    with pytest.raises(UserError):
        run_ingest(catalog, str(source), "text", engine="inline", roles={"id": "image"})
    first = run_ingest(catalog, str(source), "text", engine="inline", key="id")
    second = run_ingest(catalog, str(source), "text", engine="inline", no_key=True)  # no key: another job
    assert first.version.id == reference.version.id != second.version.id
    assert second.parts_converted == 5
    assert not Path(staging_dir(catalog, "text", "x")).parent.exists()


# -- parallel verify ---------------------------------------------------------------------------

@pytest.mark.slow
def test_pool_verify_reports_exactly_what_serial_verify_reports(reference, tmp_path):
    import shutil

    root = tmp_path / "catalog"
    shutil.copytree(reference.version.catalog.root, root)
    catalog = Catalog(str(root))
    v = catalog.resolve("text")
    assert verify_parallel(v, "pool", 2).to_json() == verify_version(v).to_json()
    shard = root / "datasets" / "text" / "shards" / f"{v.manifest.shards[3].sha256}.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    serial, parallel = verify_version(v), verify_parallel(v, "pool", 2)
    assert not serial.ok and parallel.to_json() == serial.to_json()


# -- object storage ----------------------------------------------------------------------------

@pytest.mark.slow
def test_pool_ingest_from_and_to_s3_and_export_there(source, reference, tmp_path):
    """Source, catalog and export on moto's S3 (loopback); pool workers find it through FSSPEC_S3."""
    import fsspec
    from s3_server import s3_server

    from dsinspect.loaders.ingest.export import export_version

    with s3_server() as (server, url, _):
        fs = fsspec.filesystem("s3")
        for f in sorted(source.glob("*.jsonl")):
            fs.put_file(str(f), f"{server.bucket}/src/{f.name}")
        catalog = Catalog(url)
        result = run_ingest(catalog, f"s3://{server.bucket}/src", "text", engine="pool", workers=2, key="id")
        assert result.version.id == reference.version.id
        assert not fs.exists(staging_dir(catalog, "text", Path("x").name).rsplit("/", 1)[0])
        export_version(result.version, "parquet", f"s3://{server.bucket}/export")
        again = run_ingest(Catalog(str(tmp_path / "local")), f"s3://{server.bucket}/export", "text", engine="inline")
        assert again.version.id == reference.version.id
