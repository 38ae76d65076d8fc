"""Per-field change detection for diff counts: vectorised comparisons agree with the field hashes."""

import decimal

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.loaders.diff.counts import values_differ
from dsinspect.loaders.format.canonical import field_hashes

NAN = float("nan")

# (before, after) columns of one type: equal rows, changed rows, nulls on either side, NaN = NaN, -0.0 != 0.0
CASES = {
    "int32": ([1, 2, None, 4, None], [1, 3, None, None, 5], pa.int32()),
    "float32": ([0.0, NAN, 1.5, -0.0, 2.0], [-0.0, NAN, 1.5, -0.0, float("inf")], pa.float32()),
    "bool": ([True, False, None, True], [True, True, None, None], pa.bool_()),
    "string": (["a", "", None, "é", "x"], ["a", "b", None, "é", None], pa.string()),
    "large_binary": ([b"\x00", b"", b"ab", None], [b"\x00", b"\x00", b"ab", b""], pa.large_binary()),
    "fixed_binary": ([b"ab", b"cd", None], [b"ab", b"ce", None], pa.binary(2)),
    "timestamp": ([1, 2, 3], [1, 2, 4], pa.timestamp("ms")),
    "decimal": ([decimal.Decimal("1.10"), decimal.Decimal("2.00")], [decimal.Decimal("1.10"), decimal.Decimal("2.01")],
                pa.decimal128(5, 2)),
    "list_int": ([[1, 2], [], None, [3], [1, 2, 3], [4, 5]], [[1, 2], [], [], [3, 0], [1, 2, 4], [4, 5]],
                 pa.list_(pa.int32())),
    "list_null_items": ([[1, None], [None], [2]], [[1, None], [0], [2]], pa.list_(pa.int64())),
    "fixed_list_float": ([[0.0, 1.0], [NAN, 2.0], [1.0, 1.0], None, [3.0, 4.0]],
                         [[-0.0, 1.0], [NAN, 2.0], [1.0, 1.0], [5.0, 5.0], None], pa.list_(pa.float32(), 2)),
    "nested_list": ([[[1, 2]], [[1], [2, 3]], []], [[[1, 2]], [[1], [2, 4]], [[]]], pa.list_(pa.list_(pa.int16()))),
    "large_list_string": ([["a"], ["b", "c"]], [["a"], ["b", "d"]], pa.large_list(pa.string())),
    "struct": ([{"a": 1, "b": "x"}, {"a": 2, "b": None}, None], [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, None],
               pa.struct([("a", pa.int8()), ("b", pa.string())])),
    "null": ([None, None], [None, None], pa.null()),
}


@pytest.mark.parametrize("name", CASES)
def test_values_differ_exactly_where_the_field_hashes_do(name):
    before, after, t = CASES[name]
    x, y = pa.array(before, t), pa.array(after, t)
    want = np.array([p != q for p, q in zip(field_hashes(x), field_hashes(y))])
    assert values_differ(x, y).tolist() == want.tolist()
    # sliced arrays (offsets into shared buffers), as a row group's take can hand over
    assert values_differ(x.slice(1), y.slice(1)).tolist() == want[1:].tolist()


def test_dictionary_columns_compare_as_their_values():
    x = pa.array(["a", "b", "a", None]).dictionary_encode()
    y = pa.DictionaryArray.from_arrays(pa.array([1, 1, 0, None], pa.int32()), pa.array(["a", "b"]))
    want = [p != q for p, q in zip(field_hashes(x), field_hashes(y))]
    assert values_differ(x, y).tolist() == want == [True, False, False, False]


def test_random_lists_of_numbers_agree_with_the_field_hashes():
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(0, 40))
        def draw():
            return None if rng.random() < 0.15 else rng.integers(0, 3, int(rng.integers(0, 5))).tolist()

        rows = [draw() for _ in range(n)]
        other = [r if rng.random() < 0.6 else draw() for r in rows]
        x, y = pa.array(rows, pa.list_(pa.int16())), pa.array(other, pa.list_(pa.int16()))
        want = [p != q for p, q in zip(field_hashes(x), field_hashes(y))]
        assert values_differ(x, y).tolist() == want
