"""What cold reads (read/cold.py) hold in memory does not grow with the data: a read keeps only the
rows it returns of each row group it decoded (the groups themselves up to the LRU's bound), and
parsed footers of a few shards, however many shards it reads. Structural checks, no timing."""

import numpy as np
import pyarrow as pa

from dsinspect.loaders import HASH_COLUMN, Catalog, Field, WriteOptions
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.cold import _FOOTERS, ColdRows

SHARDS, SHARD_ROWS, GROUP_ROWS = 10, 60, 10
FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("blob", pa.binary(), "bytes"),
          Field("tokens", pa.list_(pa.int32()), "tokens"), Field("score", pa.float64(), "scalar")]
NAMES = [f.name for f in FIELDS]


def rows(n):
    rng = np.random.default_rng(1)
    return [{"id": i, "blob": rng.bytes(i % 50), "tokens": rng.integers(0, 1000, i % 7, dtype=np.int32).tolist(),
             "score": None if i % 5 == 0 else i / 3} for i in range(n)]  # nulls: Arrow's take path too


def test_a_cold_read_of_many_shards_holds_the_rows_it_returns_and_a_few_footers(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    options = WriteOptions(shard_rows=SHARD_ROWS, row_group_rows=GROUP_ROWS)
    version = catalog.write_version("many", rows(SHARDS * SHARD_ROWS), FIELDS, key="id", options=options)
    assert len(version.manifest.shards) == SHARDS
    cold = ColdRows(ShardCache(tmp_path / "cache"), max_bytes=1)  # the LRU keeps one group
    wanted = {s: np.array([SHARD_ROWS - 1, 3, 14, 4, 3]) for s in range(SHARDS)}  # 3 groups, a row twice
    columns = [*NAMES, HASH_COLUMN]
    try:
        got = cold.take([(version, s, version.shard_index(s), r) for s, r in wanted.items()], columns)
        assert len(cold._footers) <= _FOOTERS < SHARDS
        assert len(cold._groups) == 1
        for s, pieces in zip(wanted, got):
            stored = version.read_shard(s).select(columns).to_pylist()
            seen = np.zeros(len(wanted[s]), bool)
            for group, at, where in pieces:
                assert group.batch.num_rows == len(where)  # only the rows read, not the row group
                assert group.batch.slice(int(at[0]), len(at)).to_pylist() == [stored[i] for i in wanted[s][where]]
                seen[where] = True
            assert seen.all()
    finally:
        cold.close()
