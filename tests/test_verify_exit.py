"""`dsinspect verify` exits cleanly: no Arrow thread may need the GIL while the interpreter finalizes.

Issue #14: ~1% of verify runs aborted after a complete report (`terminate called without an active
exception`, exit 134). Two core dumps (benchmarks/stress_verify_exit.py, a busy 2-core machine) showed
the same stack: an Arrow CPU-pool worker destroying the task of a finished `read_row_group` (a
LeafReader of the fixed-size-binary row-hash column) → SerializedPageReader → BufferReader →
`arrow::py::PyBuffer::~PyBuffer` → PyGILState_Ensure while the main thread was in Py_FinalizeEx →
CPython ends the thread with pthread_exit → the forced unwind meets Arrow's noexcept frames →
std::terminate. The PyBuffer was the shard, read into a Python `bytes` and handed to Arrow.

The race itself needs thousands of processes to show (see the stress script); these tests pin the
condition that makes it impossible, deterministically: Arrow's threads only ever hold memory Arrow
owns (verify), or Arrow decodes in the calling thread (export over a Python file object).
"""

import pyarrow as pa
import pyarrow.parquet as pq

import dsinspect
from dsinspect.loaders.ingest.export import export_version
from dsinspect.loaders.store import verify


def test_verify_hands_arrow_threads_only_memory_arrow_owns(monkeypatch):
    version = dsinspect.open_catalog().resolve("demo-images@v2")
    seen = []
    real = verify._check_rows

    def watch(version, shard, data, rep):
        seen.append((data, pa.total_allocated_bytes()))
        return real(version, shard, data, rep)

    monkeypatch.setattr(verify, "_check_rows", watch)
    before = pa.total_allocated_bytes()
    report = verify.verify_version(version)
    assert report.ok and len(seen) == len(version.manifest.shards) >= 2
    for (data, allocated), entry in zip(seen, version.manifest.shards):
        # a Python bytes (or anything Python owns) would be wrapped in a PyBuffer, whose release needs the GIL
        assert isinstance(data, pa.Buffer), type(data)
        assert data.size == entry.bytes and allocated - before >= data.size  # in Arrow's memory pool


def test_verify_in_parts_uses_the_same_arrow_owned_read(monkeypatch):
    """--engine pool runs verify_shard in workers: the same read (and so the same guarantee)."""
    version = dsinspect.open_catalog().resolve("demo-text@v1")
    kinds = []
    real = verify._check_rows
    monkeypatch.setattr(verify, "_check_rows",
                        lambda v, s, data, rep: (kinds.append(type(data)), real(v, s, data, rep)))
    from dsinspect.loaders.store.verify_parts import verify_shards_task
    result = verify_shards_task({"catalog": version.catalog.url, "dataset": version.name, "version": version.id,
                                 "shards": [0, len(version.manifest.shards)]})
    assert all(s["problems"] == [] for s in result["shards"])
    assert kinds and all(issubclass(k, pa.Buffer) for k in kinds)


def test_export_decodes_row_groups_in_the_calling_thread(monkeypatch, tmp_path):
    """Export reads shards through a Python file object (fsspec): Arrow's workers must not hold it."""
    calls = []
    real = pq.ParquetFile.read_row_group

    def watch(self, i, *args, **kwargs):
        calls.append(kwargs.get("use_threads", True))
        return real(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", watch)
    version = dsinspect.open_catalog().resolve("demo-images@v2")
    summary = export_version(version, "parquet", str(tmp_path / "out"))
    assert summary["rows"] == version.num_rows and len(calls) >= len(version.manifest.shards)
    assert not any(calls)


def test_row_reads_give_arrow_threads_no_python_file(monkeypatch, tmp_path):
    """show, diff, replay, the TUI and the web app read rows through DatasetVersion: from a local
    catalog Arrow gets its own file (and may use its pool); from any other (fsspec's Python file
    objects) it decodes in the calling thread."""
    import shutil

    from dsinspect.defaults import BUNDLED
    from dsinspect.loaders.store.catalog import Catalog
    sources, threads = [], []
    real_init, real_read = pq.ParquetFile.__init__, pq.ParquetFile.read_row_group

    def init(self, source, *args, **kwargs):
        sources.append(source)
        real_init(self, source, *args, **kwargs)

    def read(self, i, *args, **kwargs):
        threads.append(kwargs.get("use_threads", True))
        return real_read(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "__init__", init)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", read)
    local = Catalog(str(tmp_path / "catalog"))
    shutil.copytree(BUNDLED / "datasets" / "demo-text", tmp_path / "catalog" / "datasets" / "demo-text")
    row = local.resolve("demo-text@v1").row(3)
    assert sources and all(isinstance(s, pa.NativeFile) and not isinstance(s, pa.PythonFile) for s in sources)
    memory = Catalog(f"memory://verify-exit-{id(tmp_path)}")
    memory.fs.put(str(tmp_path / "catalog"), memory.root, recursive=True)
    threads.clear()
    assert memory.resolve("demo-text@v1").row(3) == row
    assert threads and not any(threads)
    memory.fs.rm(memory.root, recursive=True)


def test_parquet_ingest_decodes_in_the_calling_thread(monkeypatch, tmp_path):
    """A Parquet source is read through a Python file object (fsspec), like export's shards."""
    from dsinspect.loaders.ingest.parquet import ParquetSource
    from dsinspect.loaders.ingest.source import SourceSpec

    pq.write_table(pa.table({"id": list(range(100)), "text": [f"row {i}" for i in range(100)]}),
                   tmp_path / "a.parquet", row_group_size=30)
    calls = []
    real = pq.ParquetFile.iter_batches

    def watch(self, *args, **kwargs):
        calls.append(kwargs.get("use_threads", True))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", watch)
    source = ParquetSource(SourceSpec("parquet", str(tmp_path / "a.parquet")))
    rows = sum(b.num_rows for part in source.parts() for b in source.read(part))
    assert rows == 100 and calls and not any(calls)


def test_query_sidecars_decode_in_the_calling_thread(monkeypatch, tmp_path):
    """`dsinspect query` makes and reads its sidecars from Python bytes (a shard checked against its
    sha256, a sidecar read back): Arrow's workers must not hold them. The concurrency test's watcher
    read shards with a threaded `pq.read_table` over a Python file and died of this at exit (-6)."""
    import shutil

    from dsinspect.defaults import BUNDLED
    from dsinspect.inspect.derived import derivations
    from dsinspect.inspect.sidecars import derived_tables
    from dsinspect.loaders.store.catalog import Catalog
    threaded = []

    def watched(real):
        def call(*args, **kwargs):
            threaded.append(kwargs.get("use_threads", True))
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(pq.ParquetFile, "read", watched(pq.ParquetFile.read))
    monkeypatch.setattr(pq, "read_table", watched(pq.read_table))
    shutil.copytree(BUNDLED / "datasets" / "demo-text", tmp_path / "catalog" / "datasets" / "demo-text")
    version = Catalog(str(tmp_path / "catalog")).resolve("demo-text@v1")
    derived = derivations(version.fields)
    made = derived_tables(version, derived)  # made from the shards
    reads = len(threaded)
    again = derived_tables(version, derived)  # read back from the sidecars
    assert derived and [t.num_rows for t in made] == [s.rows for s in version.manifest.shards]
    assert all(a.equals(b) for a, b in zip(made, again))
    assert reads >= len(made) and len(threaded) >= reads + len(again) and not any(threaded)
