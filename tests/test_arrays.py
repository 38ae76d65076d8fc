import numpy as np
import pytest

from dsinspect.arrays import distinct


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_distinct_is_np_unique_for_integer_arrays(n):
    rng = np.random.default_rng(n)
    for dtype in (np.int64, np.int32, np.uint64):
        values = rng.integers(0, max(1, n // 3), n).astype(dtype)
        got = distinct(values)
        assert got.dtype == values.dtype
        assert np.array_equal(got, np.unique(values))
