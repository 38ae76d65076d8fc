"""Parquet -> one-batch Arrow IPC for the shard cache (read/convert.py): the same schema and values as
reading the whole file and concatenating it, for every type a dataset can hold, with nulls and row
groups of awkward sizes; one record batch; scratch files never left behind; two runs decoding at once
(also in a forked child); and memory bounded by a row group, measured in a fresh process on a file a
hundred row groups long."""

import datetime as dt
import decimal
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dsinspect.loaders.read import convert as convert_module
from dsinspect.loaders.read.convert import parquet_to_ipc

TRAJECTORY = pa.struct([pa.field("obs", pa.list_(pa.float32())), pa.field("action", pa.list_(pa.int32())),
                        pa.field("reward", pa.float64(), nullable=False)])
TYPES = {
    "i8": pa.int8(), "i16": pa.int16(), "i32": pa.int32(), "i64": pa.int64(),
    "u8": pa.uint8(), "u16": pa.uint16(), "u32": pa.uint32(), "u64": pa.uint64(),
    "f16": pa.float16(), "f32": pa.float32(), "f64": pa.float64(), "flag": pa.bool_(),
    "text": pa.string(), "big_text": pa.large_string(), "blob": pa.binary(), "big_blob": pa.large_binary(),
    "row_hash": pa.binary(16),
    "day": pa.date32(), "day64": pa.date64(), "ts": pa.timestamp("us", tz="UTC"), "ts_ns": pa.timestamp("ns"),
    "t32": pa.time32("ms"), "t64": pa.time64("us"), "took": pa.duration("s"),
    "price": pa.decimal128(10, 3), "huge": pa.decimal256(40, 5),
    "tokens": pa.list_(pa.int32()), "big_tokens": pa.large_list(pa.float32()),
    "xyz": pa.list_(pa.int16(), 3), "mask": pa.list_(pa.bool_()),
    "grid": pa.list_(pa.list_(pa.int64())), "pairs": pa.list_(pa.list_(pa.float32(), 2)),
    "words": pa.list_(pa.string()), "trajectory": TRAJECTORY,
    "steps": pa.list_(pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])),
    "deep": pa.struct([pa.field("inner", pa.struct([pa.field("ok", pa.bool_())])), pa.field("n", pa.uint16())]),
    "nothing": pa.null(),
}


def value(t, rng, null_rate):
    """A random Python value of type `t`; None at `null_rate` wherever a null is allowed."""
    if pa.types.is_null(t) or rng.random() < null_rate:
        return None
    if pa.types.is_boolean(t):
        return bool(rng.integers(2))
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        return int(rng.integers(info.min, info.max, endpoint=True, dtype=np.int64 if info.min < 0 else np.uint64))
    if pa.types.is_floating(t):
        return float(np.float16(rng.normal())) if t == pa.float16() else float(rng.normal())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "ab\u00e9"[: int(rng.integers(4))] * int(rng.integers(3))
    if pa.types.is_fixed_size_binary(t):
        return rng.bytes(t.byte_width)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return rng.bytes(int(rng.integers(0, 9)))
    if pa.types.is_date(t):
        return dt.date(2000, 1, 1) + dt.timedelta(days=int(rng.integers(20000)))
    if pa.types.is_timestamp(t):
        return dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc if t.tz else None) + dt.timedelta(
            microseconds=int(rng.integers(1 << 40)))
    if pa.types.is_time(t):
        return dt.time(int(rng.integers(24)), int(rng.integers(60)), microsecond=int(rng.integers(1000)) * 1000)
    if pa.types.is_duration(t):
        return dt.timedelta(seconds=int(rng.integers(1 << 20)))
    if pa.types.is_decimal(t):
        return decimal.Decimal(int(rng.integers(-(10 ** 9), 10 ** 9))).scaleb(-t.scale)
    if pa.types.is_fixed_size_list(t):
        return [value(t.value_type, rng, null_rate) for _ in range(t.list_size)]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [value(t.value_type, rng, null_rate) for _ in range(int(rng.integers(0, 5)))]  # empty lists too
    if pa.types.is_struct(t):
        return {f.name: value(f.type, rng, null_rate if f.nullable else 0.0) for f in t}
    raise AssertionError(f"no generator for {t}")


def table_of(rows, null_rate=0.2, seed=0):
    rng = np.random.default_rng(seed)
    columns = {name: pa.array([value(t, rng, null_rate) for _ in range(rows)], t) for name, t in TYPES.items()}
    # nulls that first appear in a late row group (the validity bitmap is started mid-column), and none at all
    columns["late_nulls"] = pa.array([None if i > rows * 2 // 3 and i % 3 else i for i in range(rows)], pa.int32())
    columns["dense"] = pa.array(np.arange(rows, dtype=np.int64))
    return pa.table(columns)


def old_path(path):
    """What the shard cache held before: the whole file read and concatenated."""
    return pq.ParquetFile(path).read().combine_chunks()


def convert(tmp_path, path):
    """parquet_to_ipc into tmp_path; (rows, the IPC reader); the scratch directory is left empty."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    dest = str(tmp_path / "out.arrow")
    rows = parquet_to_ipc(str(path), dest, str(scratch))
    assert list(scratch.iterdir()) == []
    return rows, pa.ipc.open_file(pa.memory_map(dest).read_buffer())


def assert_same_as_old(tmp_path, path):
    expected = old_path(path)
    rows, reader = convert(tmp_path, path)
    assert rows == expected.num_rows
    assert reader.num_record_batches == 1
    assert reader.schema.equals(expected.schema, check_metadata=True)
    got = reader.get_batch(0)
    assert got.num_rows == expected.num_rows
    if expected.num_rows:
        (batch,) = expected.to_batches()
        assert got.equals(batch)
        for name in got.schema.names:  # `equals` compares values; say which column differs if one does
            assert got.column(name).equals(batch.column(name)), name
    got.validate(full=True)


@pytest.mark.parametrize("row_group_rows", [1, 7, 13, 64])
def test_every_type_equals_the_old_path(tmp_path, row_group_rows):
    """Row groups of 1, 7, 13 rows put every append at a bit offset that is not a multiple of 8."""
    path = tmp_path / "shard.parquet"
    pq.write_table(table_of(100, seed=row_group_rows), path, row_group_size=row_group_rows, compression="zstd")
    assert pq.ParquetFile(path).num_row_groups == -(-100 // row_group_rows)
    assert_same_as_old(tmp_path, path)


def test_sliced_input(tmp_path):
    """Arrays that start inside their buffers (the reader may hand a row group over in slices): the
    builders honour every offset, also of children (Parquet reads alone always start at 0)."""
    table = table_of(100, seed=5)
    for name in table.column_names:
        whole = table.column(name).combine_chunks()
        column = convert_module._column(whole.type, convert_module._ScratchFiles(str(tmp_path)))
        for start, stop in ((0, 5), (5, 18), (18, 19), (19, 19), (19, 61), (61, 100)):
            column.append(whole.slice(start, stop - start))
        got = column.finish()
        got.validate(full=True)
        assert got.equals(whole), name


def test_nulls_everywhere_and_nowhere(tmp_path):
    for null_rate, name in ((0.0, "none.parquet"), (0.9, "most.parquet")):
        pq.write_table(table_of(50, null_rate=null_rate, seed=3), tmp_path / name, row_group_size=9)
        assert_same_as_old(tmp_path, tmp_path / name)


def test_empty_files(tmp_path):
    """A file with one empty row group and one with none: one batch of 0 rows, the same schema."""
    empty = table_of(0)
    pq.write_table(empty, tmp_path / "one_empty_group.parquet")
    pq.ParquetWriter(tmp_path / "no_groups.parquet", empty.schema).close()
    assert pq.ParquetFile(tmp_path / "no_groups.parquet").num_row_groups == 0
    for name in ("one_empty_group.parquet", "no_groups.parquet"):
        assert_same_as_old(tmp_path, tmp_path / name)


def test_schema_metadata_kept(tmp_path):
    table = table_of(20).replace_schema_metadata({"source": "test"})
    table = table.set_column(0, pa.field("i8", pa.int8(), metadata={"unit": "m"}), table.column(0))
    pq.write_table(table, tmp_path / "meta.parquet", row_group_size=6)
    assert_same_as_old(tmp_path, tmp_path / "meta.parquet")


def test_dictionary_columns_are_decoded(tmp_path):
    """A foreign writer's dictionary-typed column: stored as its value type, same values. (Dictionaries
    nested in lists are not readable from Parquet by pyarrow at all: "Nested data conversions not
    implemented for chunked array outputs".)"""
    words = pa.array(["x", None, "yy", "x", "zzz", None, "yy"] * 5).dictionary_encode()
    pq.write_table(pa.table({"word": words, "n": pa.array(range(35))}), tmp_path / "dict.parquet", row_group_size=4)
    expected = old_path(tmp_path / "dict.parquet")
    assert pa.types.is_dictionary(expected.schema.field("word").type)  # what the old path held
    rows, reader = convert(tmp_path, tmp_path / "dict.parquet")
    got = reader.get_batch(0)
    assert rows == 35 and reader.num_record_batches == 1
    assert got.schema.field("word").type == pa.string()
    assert got.column("word").to_pylist() == expected.column("word").to_pylist()
    assert got.column("n").equals(expected.column("n").chunk(0))


def test_errors_propagate_and_scratch_is_removed(tmp_path):
    pq.write_table(table_of(30), tmp_path / "good.parquet", row_group_size=8)
    data = (tmp_path / "good.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(pa.ArrowException):
        parquet_to_ipc(str(tmp_path / "cut.parquet"), str(tmp_path / "out.arrow"), str(scratch))
    assert list(scratch.iterdir()) == []
    pq.write_table(pa.table({"m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int32()))}), tmp_path / "map.parquet")
    with pytest.raises(pa.ArrowNotImplementedError, match="map"):
        parquet_to_ipc(str(tmp_path / "map.parquet"), str(tmp_path / "out.arrow"), str(scratch))
    assert list(scratch.iterdir()) == []


GROUPS, GROUP_ROWS, TOKENS = 100, 512, 1024  # 100 row groups of 2 MiB decoded: a 200 MiB shard
GROUP_BYTES = GROUP_ROWS * TOKENS * 4

MEASURE = """
import json, sys
import pyarrow as pa
from dsinspect.loaders.read import convert as convert_module
from dsinspect.loaders.read.convert import parquet_to_ipc
rows = parquet_to_ipc(sys.argv[1], sys.argv[2], sys.argv[3])
print(json.dumps({"rows": rows, "peak": pa.default_memory_pool().max_memory()}))
"""


def test_memory_is_bounded_by_a_row_group(tmp_path):
    """The whole-file path peaks above twice the decoded file (read + concatenate); this one must stay
    within a few units (a run of row groups up to 1 MiB, or one larger group) for each of the two runs
    decoding at once (measured 2.6 units each, 5.2 together), in a fresh process so nothing else has
    touched the pool."""
    path = tmp_path / "big.parquet"
    offsets = pa.array(np.arange(0, (GROUP_ROWS + 1) * TOKENS, TOKENS, dtype=np.int32))
    with pq.ParquetWriter(path, pa.schema([pa.field("tokens", pa.list_(pa.int32()))]), compression="snappy") as w:
        for g in range(GROUPS):
            items = pa.array((np.arange(GROUP_ROWS * TOKENS, dtype=np.int32) + g) % 50_000)
            w.write_table(pa.table({"tokens": pa.ListArray.from_arrays(offsets, items)}))
    assert pq.ParquetFile(path).num_row_groups == GROUPS
    (tmp_path / "scratch").mkdir()
    dest = tmp_path / "out.arrow"
    run = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(dest), str(tmp_path / "scratch")],
                         capture_output=True, text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["rows"] == GROUPS * GROUP_ROWS
    unit = max(GROUP_BYTES, convert_module._RUN_BYTES)
    assert got["peak"] < 2 * 3.5 * unit, f"peak {got['peak']:,} bytes for runs of {unit:,}"
    assert got["peak"] < GROUPS * GROUP_BYTES // 10
    reader = pa.ipc.open_file(pa.memory_map(str(dest)).read_buffer())
    assert reader.num_record_batches == 1
    tokens = reader.get_batch(0).column("tokens")
    assert len(tokens) == GROUPS * GROUP_ROWS and tokens.offsets[-1].as_py() == GROUPS * GROUP_ROWS * TOKENS
    assert tokens[-1].values.to_numpy()[:3].tolist() == [(GROUP_ROWS * TOKENS - TOKENS + k + GROUPS - 1) % 50_000
                                                          for k in range(3)]


def _tokens_file(path, groups: int, rows: int = 64) -> None:
    offsets = pa.array(np.arange(0, (rows + 1) * 16, 16, dtype=np.int32))
    with pq.ParquetWriter(path, pa.schema([pa.field("tokens", pa.list_(pa.int32()))])) as w:
        for g in range(groups):
            w.write_table(pa.table({"tokens": pa.ListArray.from_arrays(offsets, pa.array(
                np.arange(rows * 16, dtype=np.int32) + g))}))


def test_a_conversion_decodes_two_runs_at_once(tmp_path, monkeypatch):
    """A shard converted alone keeps two cores decoding (its last shard on a node's first epoch used
    one of two): the first two runs are in a decoder at the same time, or the barrier breaks."""
    _tokens_file(tmp_path / "t.parquet", groups=6)
    monkeypatch.setattr(convert_module, "_RUN_BYTES", 1)  # a row group per run
    together = threading.Barrier(2, timeout=20)
    real = convert_module._decode_run

    def decode(data, metadata, groups):
        if groups[0] < 2:
            together.wait()  # returns only once the other of the first two runs is decoding too
        return real(data, metadata, groups)

    monkeypatch.setattr(convert_module, "_decode_run", decode)
    (tmp_path / "scratch").mkdir()
    assert parquet_to_ipc(str(tmp_path / "t.parquet"), str(tmp_path / "t.arrow"), str(tmp_path / "scratch")) == 6 * 64
    got = pa.ipc.open_file(pa.memory_map(str(tmp_path / "t.arrow")).read_buffer()).get_batch(0)
    assert got.column("tokens").equals(pq.read_table(tmp_path / "t.parquet").column("tokens").combine_chunks())


FORKED = """
import os, signal, sys
from dsinspect.loaders.read.convert import parquet_to_ipc
src, scratch = sys.argv[1], sys.argv[2]
parquet_to_ipc(src, os.path.join(scratch, "parent.arrow"), scratch)  # the decoder threads exist now
pid = os.fork()
if pid == 0:  # a DataLoader worker's fork: its parent's decoder threads are not in it
    signal.alarm(30)  # a child left waiting dies (the parent prints -14), not left behind
    rows = parquet_to_ipc(src, os.path.join(scratch, "child.arrow"), scratch)
    os._exit(0 if rows == 6 * 64 else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_converts_with_decoders_of_its_own(tmp_path):
    """A process forked after a conversion (DataLoader workers) converts too: decoder threads shared
    across conversions would be its parent's, not in the child, and it would wait forever."""
    _tokens_file(tmp_path / "t.parquet", groups=6)
    run = subprocess.run([sys.executable, "-c", FORKED, str(tmp_path / "t.parquet"), str(tmp_path)],
                         capture_output=True, text=True, timeout=90, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "0"
    assert (tmp_path / "child.arrow").read_bytes() == (tmp_path / "parent.arrow").read_bytes()
