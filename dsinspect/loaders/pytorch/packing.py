"""A batch's metadata (step, epoch, positions, indices, sources, padding, seeds, row hashes) as one
byte array for the trip from a TorchLoader worker to the main process, and back as the same arrays.

Every array crossing costs Python work on both sides (the worker lays it into its ring, the main
process copies it out and wraps it as a tensor), more than copying its few hundred bytes: measured
~90 us of a token batch's ~270 us of CPU over both sides for the eight metadata arrays, ~20 us as
one. The unpacked arrays are views of the one array: disjoint, so each still reads as its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dsinspect.loaders.order.plan import BatchPlan

__all__ = ["PACKED", "pack_metadata", "unpack_metadata"]

PACKED = "_dsinspect_metadata"  # the key the packed array travels under, where the metadata keys stand
_HASH = 16  # bytes per stored row hash
_ROW_BYTES = 4 * 8 + 1 + _HASH  # positions, indices, sources, seeds (int64), padding (bool), row hash


def pack_metadata(plan: BatchPlan, hashes: np.ndarray) -> np.ndarray:
    """The metadata of `batch_arrays` as one uint8 array: step and epoch, then per field all rows."""
    n = len(plan.indices)
    if hashes.shape != (n, _HASH) or hashes.dtype != np.uint8:
        raise ValueError(f"row hashes of shape {hashes.shape} ({hashes.dtype}), not ({n}, {_HASH}) uint8")
    out = np.empty(16 + n * _ROW_BYTES, np.uint8)
    ints = out[:16 + 32 * n].view(np.int64)
    ints[0], ints[1] = plan.step, plan.epoch
    for k, values in enumerate((plan.positions, plan.indices, plan.sources, plan.seeds.view(np.int64))):
        ints[2 + k * n:2 + (k + 1) * n] = values
    out[16 + 32 * n:16 + 33 * n] = plan.padding
    out[16 + 33 * n:].reshape(n, _HASH)[:] = hashes
    return out


def unpack_metadata(packed: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays `pack_metadata` packed, in `batch_arrays`' order and types, as views of `packed`."""
    n, rest = divmod(len(packed) - 16, _ROW_BYTES)
    if rest or n < 0 or packed.dtype != np.uint8:
        raise ValueError(f"not packed batch metadata: {packed.dtype} array of {len(packed)} bytes")
    ints = packed[:16 + 32 * n].view(np.int64)
    out: dict[str, Any] = {"step": ints[0:1].reshape(()), "epoch": ints[1:2].reshape(())}
    for k, name in enumerate(("positions", "indices", "sources")):
        out[name] = ints[2 + k * n:2 + (k + 1) * n]
    out["padding"] = packed[16 + 32 * n:16 + 33 * n].view(np.bool_)
    out["seeds"] = ints[2 + 3 * n:2 + 4 * n]
    out["row_hashes"] = packed[16 + 33 * n:].reshape(n, _HASH)
    return out
