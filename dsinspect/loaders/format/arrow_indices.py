"""Arrow index arrays for `take`, built straight from numpy buffers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["int64_array"]


def int64_array(values: np.ndarray) -> pa.Array:
    """Indices as Arrow without `pa.array`, whose input sniffing imports pandas (a slow first batch)."""
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])
