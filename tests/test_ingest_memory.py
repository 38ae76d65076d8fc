"""A source larger than the memory the ingesting process may use still converts (streaming, bounded memory).

The limit is RLIMIT_DATA (heap and private writable mappings) in a subprocess. RLIMIT_AS is not
usable: pyarrow's allocators and thread stacks reserve far more address space than they touch.
The subprocess uses the system allocator with two malloc arenas, so reserved-but-unused arenas
do not count against the limit either; what is measured is memory the process really writes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dsinspect.loaders.store.catalog import Catalog

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LIMIT_MB = 600
SOURCE_MB = 1024
ROW_BYTES = 64 << 10
GROUP_ROWS = 128

_LIMITED = """
import resource, sys
limit = int(sys.argv[1]) << 20
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
if sys.argv[2] == "read-all":  # the control: holding the whole source must fail under this limit
    import pyarrow.parquet as pq
    try:
        pq.read_table(sys.argv[3])
    except MemoryError:
        print("MemoryError")
    sys.exit(0)
from dsinspect.cli import main
main(sys.argv[2:])
"""


def _write_source(path: Path) -> int:
    """An uncompressed Parquet file of SOURCE_MB MiB: 64 KiB binary rows, each unique (its id in front)."""
    rows = (SOURCE_MB << 20) // ROW_BYTES
    block = np.tile(np.frombuffer(np.random.default_rng(0).bytes(ROW_BYTES), np.uint8),
                    GROUP_ROWS).reshape(GROUP_ROWS, -1)
    offsets = pa.py_buffer(np.arange(0, (GROUP_ROWS + 1) * ROW_BYTES, ROW_BYTES, dtype=np.int32).tobytes())
    schema = pa.schema([("id", pa.int64()), ("blob", pa.binary())])
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        for start in range(0, rows, GROUP_ROWS):
            ids = np.arange(start, start + GROUP_ROWS, dtype=np.int64)
            block[:, :8] = ids.view(np.uint8).reshape(GROUP_ROWS, 8)
            blob = pa.Array.from_buffers(pa.binary(), GROUP_ROWS, [None, offsets, pa.py_buffer(block)])
            writer.write_table(pa.table({"id": ids, "blob": blob}, schema=schema))
    return rows


def _limited(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "2"}
    return subprocess.run([sys.executable, "-c", _LIMITED, str(LIMIT_MB), *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_source_larger_than_the_memory_limit_ingests(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    rows = _write_source(src / "big.parquet")
    assert (src / "big.parquet").stat().st_size > SOURCE_MB << 20 > LIMIT_MB << 20

    control = _limited("read-all", str(src / "big.parquet"))
    assert control.stdout.strip() == "MemoryError", control.stderr  # the limit bites

    catalog = tmp_path / "catalog"
    done = _limited("--catalog", str(catalog), "ingest", str(src), "big", "--engine", "inline", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["rows"] == rows and result["parts"] >= 4  # > 256 MiB splits into row-group parts
    version = Catalog(str(catalog)).resolve("big")
    assert version.num_rows == rows
    last = version.row(rows - 1)
    assert last["id"] == rows - 1 and int.from_bytes(last["blob"][:8], "little") == rows - 1
    assert len(last["blob"]) == ROW_BYTES
