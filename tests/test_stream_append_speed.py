"""What makes a stream append fast must change no hash and leave valid, durable shards. Lists of
fixed-width items (token ids, log-probs) are hashed without encoding each row apart
(canonical._fixed_list_hashes): every such hash equals the digest of `encode_column`'s bytes, the
encoding's reference path. Rows are hashed a batch at a time (writer.py). An append's shards store
floats plain and no statistics of list items (stream/log.py APPEND_OPTIONS), pass verify, and are on
disk before their commit. Speed itself is measured in benchmarks/bench_stream.py, not here."""

import hashlib
import io
import os
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from dsinspect.loaders import Catalog, Field
from dsinspect.loaders.format.canonical import (
    _fixed_list_hashes,
    combine_row_hash,
    encode_column,
    field_hashes,
    row_hashes,
)
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.store.verify import verify_version
from dsinspect.loaders.store.writer import WriteOptions, _leaf_columns
from dsinspect.loaders.stream import open_stream, snapshot


def _reference(arr: pa.Array | pa.ChunkedArray) -> list[bytes]:
    return [xxhash.xxh3_128_digest(e) for e in encode_column(arr)]


def _rollouts() -> pa.Table:
    """Five rollouts (0 to 1,024 tokens) of deterministic token ids and log-probs, one of them NaN."""
    counts = [0, 1, 7, 1024, 3]
    n = sum(counts)
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    tokens = ((np.arange(n, dtype=np.int64) * 2654435761) % 151_643).astype(np.int32)
    logprobs = (-(np.arange(n, dtype=np.float32) % 97) / np.float32(7.0)).astype(np.float32)
    logprobs[5] = np.nan
    return pa.table({"rollout_id": [f"r{i}" for i in range(len(counts))],
                     "response": pa.ListArray.from_arrays(offsets, pa.array(tokens)),
                     "sampler_logprobs": pa.ListArray.from_arrays(offsets, pa.array(logprobs))})


# Computed by the implementation before the fast path (c2e8613, every row encoded apart), on _rollouts().
ROLLOUT_ROW_HASHES = ["60583fe586ac2d861eb322d27f6e8328", "a64c91840b27176e29537896db999ccd",
                      "e1f028a88218b33339ae315502ea2029", "f54310162d02d9ed1cf7ea6555190a50",
                      "9e72d4dd2b7acb3e7139d4d54b1b647d"]


def test_rollout_row_hashes_are_the_ones_the_old_implementation_gave():
    table = _rollouts()
    assert [h.hex() for h in row_hashes(table, table.column_names)] == ROLLOUT_ROW_HASHES
    by_reference = [combine_row_hash([(n, _reference(table.column(n))[r]) for n in table.column_names])
                    for r in range(table.num_rows)]
    assert [h.hex() for h in by_reference] == ROLLOUT_ROW_HASHES


LISTS = {
    "int32": pa.array([[1, 2, 3], [], None, [70000], [-1] * 1030], pa.list_(pa.int32())),
    "float32 nan and -0": pa.array([[1.5, float("nan")], [-0.0, 0.0], None, [float("-inf")]], pa.list_(pa.float32())),
    "float64 nan payload": pa.ListArray.from_arrays(
        pa.array([0, 2, 3], pa.int32()),
        pa.array(np.array([0x7FF8000000000001, 0x3FF0000000000000, 0xFFF0000000000001],
                          np.uint64).view(np.float64))),
    "float16": pa.array([[np.float16(1.5), np.float16("nan")], []], pa.list_(pa.float16())),
    "int8": pa.array([[1, -2], [127]], pa.list_(pa.int8())),
    "uint64": pa.array([[2**64 - 1], [0, 1]], pa.list_(pa.uint64())),
    "large_list int64": pa.array([[2**40, -1], None, []], pa.large_list(pa.int64())),
    "fixed_size_list float32": pa.array([[1.0, 2.0], None, [3.0, float("nan")]], pa.list_(pa.float32(), 2)),
    "timestamp": pa.array([[0, 10**12], None], pa.list_(pa.timestamp("us"))),
    "decimal": pa.array([[Decimal("1.25"), Decimal("-3")], []], pa.list_(pa.decimal128(10, 2))),
    "fixed binary": pa.array([[b"abcd"], [b"\x00" * 4, b"\xff" * 4]], pa.list_(pa.binary(4))),
    "all null": pa.array([None, None], pa.list_(pa.int32())),
    "empty": pa.array([], pa.list_(pa.int32())),
    "null item (general path)": pa.array([[1, None], [2]], pa.list_(pa.int32())),
    "bool items (general path)": pa.array([[True, False], None], pa.list_(pa.bool_())),
    "list of lists (general path)": pa.array([[[1], [2, 3]], []], pa.list_(pa.list_(pa.int32()))),
}


@pytest.mark.parametrize("name", sorted(LISTS))
def test_list_field_hashes_equal_the_encodings_digests(name):
    arr = LISTS[name]
    assert field_hashes(arr) == _reference(arr)
    assert (_fixed_list_hashes(arr) is None) == ("general path" in name)  # the fast path is what was compared


@pytest.mark.parametrize("name", ["int32", "float32 nan and -0", "large_list int64", "fixed_size_list float32"])
def test_sliced_and_chunked_lists_hash_as_their_values(name):
    arr = LISTS[name]
    for start in range(len(arr)):
        part = arr.slice(start, len(arr) - start - 1 if start else len(arr))
        assert field_hashes(part) == _reference(part)
    chunked = pa.chunked_array([arr.slice(0, 1), arr.slice(1)])
    assert field_hashes(chunked) == _reference(arr)


def test_null_slots_over_items_hash_as_nulls():
    """A null list whose offsets still span items (Arrow allows it): null, and its items skipped."""
    arr = pa.ListArray.from_arrays(pa.array([0, 2, 4, 5], pa.int32()), pa.array([1, 2, 3, 4, 5], pa.int32()),
                                   mask=pa.array([False, True, False]))
    assert field_hashes(arr) == _reference(arr)
    assert field_hashes(arr)[1] == xxhash.xxh3_128_digest(b"\x00")


# -- how an append writes its shards ----------------------------------------------------------------

ROLLOUT_FIELDS = [Field("rollout_id", pa.string(), "scalar", False), Field("prompt", pa.list_(pa.int32()), "tokens"),
                  Field("response", pa.list_(pa.int32()), "tokens"), Field("reward", pa.float32(), "scalar"),
                  Field("sampler_logprobs", pa.list_(pa.float32()), "array")]


def _rollout_rows(prefix: str, n: int) -> list[dict]:
    return [{"rollout_id": f"{prefix}-{i}", "prompt": [i, 7], "response": list(range(i, i + 1024)),
             "reward": i / 4, "sampler_logprobs": [-(k % 13) / 3 for k in range(1024)]} for i in range(n)]


def _stored_hashes(version) -> list[bytes]:
    return [h for s in range(len(version.manifest.shards))
            for h in version.read_shard(s).column(HASH_COLUMN).to_pylist()]


def test_leaf_columns_are_the_parquet_columns_pyarrow_writes():
    schema = pa.schema([("a", pa.list_(pa.int32())),
                        ("b", pa.struct([("x", pa.list_(pa.float32())), ("y", pa.int64())])),
                        ("c", pa.large_list(pa.float64())), ("d", pa.list_(pa.float32(), 3)), ("e", pa.string()),
                        ("m", pa.map_(pa.string(), pa.float64())), ("ll", pa.list_(pa.list_(pa.int8()))),
                        ("dict", pa.dictionary(pa.int8(), pa.string())), ("h", pa.float16()), ("i", pa.binary(16))])
    sink = io.BytesIO()
    pq.write_table(schema.empty_table(), sink)
    written = pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.schema
    assert [path for path, _ in _leaf_columns(schema)] == [written.column(i).path for i in range(len(written))]


def test_an_appended_shard_is_a_valid_shard_with_the_rows_hashes(tmp_path):
    """Floats stored plain, no statistics of list items, zstd elsewhere; verify passes; every row hash
    is the one a version written with the defaults stores for the same rows."""
    catalog = Catalog(str(tmp_path / "catalog"))
    stream = open_stream(catalog, "rollouts", ROLLOUT_FIELDS, key="rollout_id")
    rows = _rollout_rows("a", 50)  # 8 KiB a row: two row groups at the 256 KiB bound
    stream.append(rows[:40], writer="s0")
    stream.append(rows[40:], writer="s1")
    version = snapshot(stream)
    assert verify_version(version).ok
    meta = pq.ParquetFile(version.catalog.fs.open(version.shard_path(0), "rb")).metadata
    assert meta.num_row_groups == 2
    columns = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i)
               for i in range(meta.num_columns)}
    assert columns["sampler_logprobs.list.element"].compression == "UNCOMPRESSED"
    assert columns["reward"].compression == "UNCOMPRESSED"
    assert columns["response.list.element"].compression == "ZSTD"
    assert not columns["response.list.element"].is_stats_set and columns["rollout_id"].is_stats_set
    plain = Catalog(str(tmp_path / "plain")).write_version("rollouts", rows, ROLLOUT_FIELDS, key="rollout_id")
    assert _stored_hashes(version) == _stored_hashes(plain)


def test_rows_hashed_a_batch_at_a_time_keep_their_hashes_across_row_groups(tmp_path):
    """Batches of odd sizes cut into row groups of 16: each stored hash is its own row's."""
    rows = _rollout_rows("b", 90)
    table = pa.Table.from_pylist(rows, schema=pa.schema([(f.name, f.type) for f in ROLLOUT_FIELDS]))
    version = Catalog(str(tmp_path / "catalog")).write_version(
        "rollouts", [table.slice(a, b - a).to_batches()[0] for a, b in zip([0, 7, 37, 38], [7, 37, 38, 90])],
        ROLLOUT_FIELDS, key="rollout_id", options=WriteOptions(row_group_rows=16, shard_rows=40))
    assert _stored_hashes(version) == row_hashes(table, table.column_names)
    assert verify_version(version).ok


def test_a_commit_names_only_files_already_on_disk(tmp_path, monkeypatch):
    """Each shard and its index are fsynced before the commit file is linked: a commit that survives a
    crash names shards that did."""
    events: list[tuple[str, str]] = []
    fsync, link = os.fsync, os.link

    def recording_fsync(fd):
        fsync(fd)
        with open(f"/proc/self/fd/{fd}", "rb") as f:  # what is on disk now, by content
            events.append(("synced", hashlib.sha256(f.read()).hexdigest()))

    def recording_link(src, dst, **kwargs):
        link(src, dst, **kwargs)
        events.append(("linked", os.path.basename(dst)))

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "link", recording_link)
    catalog = Catalog(str(tmp_path / "catalog"))
    stream = open_stream(catalog, "rollouts", ROLLOUT_FIELDS, key="rollout_id")
    events.clear()
    commit = stream.append(_rollout_rows("c", 90), options=WriteOptions(shard_rows=50))  # two shards
    linked = events.index(("linked", f"{commit.seq:016d}.json"))
    synced = {sha for what, sha in events[:linked] if what == "synced"}
    assert len(commit.shards) == 2
    for shard in commit.shards:
        assert {shard.sha256, shard.index_sha256} <= synced


def test_a_writer_behind_skips_taken_numbers_before_creating(tmp_path, monkeypatch):
    """A writer whose last commit is several behind checks which numbers exist and creates its commit
    file once, at the next free one (each failed create costs a temp file and an fsync)."""
    import dsinspect.loaders.stream.log as log

    catalog = Catalog(str(tmp_path / "catalog"))
    behind = open_stream(catalog, "rollouts", ROLLOUT_FIELDS, key="rollout_id")
    ahead = open_stream(catalog, "rollouts")
    behind.append(_rollout_rows("a", 1))
    for k in range(3):
        ahead.append(_rollout_rows(f"b{k}", 1))
    tried = []
    create = log.create_exclusive
    monkeypatch.setattr(log, "create_exclusive", lambda fs, path, data: tried.append(path) or create(fs, path, data))
    assert behind.append(_rollout_rows("c", 1)).seq == 4
    assert [os.path.basename(p) for p in tried] == [f"{4:016d}.json"]
