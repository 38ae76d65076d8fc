"""The canonical encoding and hashes are a format contract: these golden values must never change."""

import struct

import pyarrow as pa
import pytest
import xxhash

from dsinspect.loaders.format.canonical import ROW_DOMAIN, encode_column, field_hashes, row_hashes

u64 = struct.Struct("<Q").pack

COLUMNS = {
    "i64": pa.array([0, -1, 2**40, None], pa.int64()),
    "f32": pa.array([1.5, float("nan"), -0.0, None], pa.float32()),
    "str": pa.array(["", "héllo", "日本", None]),
    "bin": pa.array([b"", b"\x00\xff", b"abc", None]),
    "toks": pa.array([[], [1, 2, 3], [70000], None], pa.list_(pa.int32())),
    "traj": pa.array([{"a": [1], "r": [0.5]}, {"a": [], "r": []}, None, {"a": None, "r": [float("inf")]}],
                     pa.struct([("a", pa.list_(pa.int32())), ("r", pa.list_(pa.float32()))])),
    "b": pa.array([True, False, None, True]),
}

GOLDEN_FIELD = {
    "i64": ["fa3f5392c40387fb428516d12156e7b6", "c8376ffe4131faf5893fd9db86b0c612",
            "5f0bdd6c1b36dcd02a370b8550ac5fb3", "a6cd5e9392000f6ac44bdff4074eecdb"],
    "f32": ["7c3dad5a6d9694df47eb5f2081a7eabb", "782f92bd1d097ff6c59d0c70b5e3fc26",
            "4e26c6a95ed0d111efcf40a10dc96d01", "a6cd5e9392000f6ac44bdff4074eecdb"],
    "str": ["fa3f5392c40387fb428516d12156e7b6", "5c85d856cbd24db4ea20aac8d62036e2",
            "dac1eb08166c94fb1ba36514d5840c15", "a6cd5e9392000f6ac44bdff4074eecdb"],
    "toks": ["fa3f5392c40387fb428516d12156e7b6", "ca523a7c092930b61cc4bfbce0a122c3",
             "07711c9ee810379f5cd1751668652bbf", "a6cd5e9392000f6ac44bdff4074eecdb"],
    "traj": ["8c6a79a497dbf3efb502b17ea30789f4", "c90b69196ed8fe129d6ab640323ff1c8",
             "a6cd5e9392000f6ac44bdff4074eecdb", "0f6579b0a750bfe6e3f2da36622fafa0"],
}
GOLDEN_ROWS = ["e7ce37877c5c0d1eb36485e3a975baac", "e2e33f0775c21700775813e821f17594",
               "7dd8a464455bb0dbfa0ee010bae3d504", "10931682df61e70efccf92456fc5f55a"]


@pytest.mark.parametrize("name", sorted(GOLDEN_FIELD))
def test_field_hash_golden_values(name):
    assert [h.hex() for h in field_hashes(COLUMNS[name])] == GOLDEN_FIELD[name]


def test_row_hash_golden_values():
    table = pa.table(COLUMNS)
    assert [h.hex() for h in row_hashes(table, list(COLUMNS))] == GOLDEN_ROWS


def test_encoding_follows_the_documented_layout():
    """Bytes built by hand from the spec in canonical.py's docstring (and docs/FORMAT.md)."""
    P = b"\x01"
    assert encode_column(pa.array([5, None], pa.int32())) == [P + (5).to_bytes(4, "little"), b"\x00"]
    assert encode_column(pa.array(["hé"])) == [P + u64(3) + "hé".encode()]
    assert encode_column(pa.array([[7, 8]], pa.list_(pa.int16()))) == [P + u64(2) + P + b"\x07\x00" + P + b"\x08\x00"]
    assert encode_column(pa.array([[None, 1]], pa.list_(pa.int8()))) == [P + u64(2) + b"\x00" + P + b"\x01"]
    assert encode_column(pa.array([{"x": True}], pa.struct([("x", pa.bool_())]))) == [P + u64(1) + b"x" + P + b"\x01"]
    assert encode_column(pa.array([b"\x00\x01"], pa.binary(2))) == [P + b"\x00\x01"]
    nan32 = struct.pack("<I", 0x7FC00000)
    assert encode_column(pa.array([float("nan")], pa.float32())) == [P + nan32]
    row = pa.table({"a": pa.array([1], pa.int8())})
    expected = xxhash.xxh3_128_digest(ROW_DOMAIN + u64(1) + b"a" + xxhash.xxh3_128_digest(P + b"\x01"))
    assert row_hashes(row, ["a"]) == [expected]


def test_nan_payloads_hash_alike_and_signed_zero_differs():
    odd_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000123))[0]
    a = field_hashes(pa.array([float("nan"), odd_nan, 0.0, -0.0], pa.float64()))
    assert a[0] == a[1] and a[2] != a[3]


def test_hash_independent_of_storage_layout():
    """Slices, chunking and dictionary encoding are storage details: equal values hash equal."""
    base = pa.array(["a", "bb", None, "a", "ccc"])
    whole = field_hashes(base)
    assert field_hashes(base.slice(2)) == whole[2:]
    assert field_hashes(pa.chunked_array([base.slice(0, 2), base.slice(2)])) == whole
    assert field_hashes(base.dictionary_encode()) == whole
    lists = pa.array([[1], [2, 3], None, [4]], pa.list_(pa.int64()))
    assert field_hashes(lists.slice(1)) == field_hashes(lists)[1:]
    fixed = pa.FixedSizeListArray.from_arrays(pa.array([1, 2, 3, 4, 5, 6], pa.int32()), 2)
    assert field_hashes(fixed.slice(1)) == field_hashes(pa.array([[3, 4], [5, 6]], pa.list_(pa.int32(), 2)))


def test_every_field_and_its_name_count():
    t = pa.table({"a": [1, 1], "b": [1, 2]})
    h = row_hashes(t, ["a", "b"])
    assert h[0] != h[1]
    assert row_hashes(pa.table({"x": [1]}), ["x"]) != row_hashes(pa.table({"y": [1]}), ["y"])
    assert row_hashes(t, ["a", "b"]) != row_hashes(t, ["b", "a"])
