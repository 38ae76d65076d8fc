"""Which fields differ in each changed row pair, for every changed row (not only the listed ones),
so per-field change counts are exact at any --limit.

No per-field hash is stored, only the row hash, so the changed rows' fields are read and compared,
nothing decoded into Python values: pairs walked in blocks sized to hold about BUDGET bytes of
values, the row groups they sit in read with only the needed columns (the last few kept, so a group
spanning two blocks is read once). A pair whose other fields are all equal changed the heaviest
field (images, video, long lists), which is read only for the other pairs. Two values differ
exactly when their canonical encodings (so their field hashes) differ; that is compared vectorised
for numbers, bools, strings, binary and lists of numbers, and encoding by encoding for the rest.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.loaders.format.arrow_indices import int64_array
from dsinspect.loaders.format.arrow_kinds import is_fixed_width, is_var_binary
from dsinspect.loaders.format.canonical import _fixed_rows, encode_column  # the encoding's own bytes (NaNs made one)
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.lru import LRU

__all__ = ["field_changes", "values_differ", "BUDGET"]

BUDGET = 64 << 20    # bytes of values held per side while comparing a block of pairs
_FIRST_BLOCK = 64    # pairs in the first block; later blocks grow (x4 at most) up to the budget
_MAX_BLOCK = 1 << 16
_KEPT_GROUPS = 2     # row groups kept per side


def field_changes(va: DatasetVersion, vb: DatasetVersion, ia: np.ndarray, ib: np.ndarray,
                  names: list[str], key: str | None = None) -> dict[str, np.ndarray]:
    """For each field of `names`, a mask over the pairs (row ia[i] of va, row ib[i] of vb): the
    values differ. The pairs must be changed rows (row hashes over `names` differ); they are read
    in the order given, so pass them in storage order of one side. `key`: the field the pairs were
    matched by, equal in each pair, so not read (unless floats: key matching takes -0.0 for 0.0)."""
    types = {name: va.manifest.schema.field(name).type for name in names}
    masks = {name: np.zeros(len(ia), dtype=bool) for name in names}
    compared = [name for name in names if name != key or pa.types.is_floating(types[name])]
    if not compared:
        return masks
    heavy = max(compared, key=lambda name: _weight(types[name]))
    rest = [name for name in compared if name != heavy]
    masks[heavy][:] = True  # a changed row with every other field equal changed this one
    sides = _Groups(va), _Groups(vb)
    _compare(sides, ia, ib, np.arange(len(ia)), rest, masks)
    unknown = np.flatnonzero(np.any([masks[name] for name in rest], axis=0)) if rest else np.empty(0, np.int64)
    _compare(sides, ia, ib, unknown, [heavy], masks)
    return masks


def _weight(t: pa.DataType) -> int:
    """A guess at the bytes a value of type `t` holds: binary (images, video) > lists > strings > the rest."""
    if is_var_binary(t) and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return 3
    if pa.types.is_nested(t):
        return 2
    return 1 if is_var_binary(t) else 0


def _compare(sides: tuple["_Groups", "_Groups"], ia: np.ndarray, ib: np.ndarray, positions: np.ndarray,
             names: list[str], masks: dict[str, np.ndarray]) -> None:
    """Set masks[name][p] for the pairs p in `positions`, in blocks of about BUDGET bytes per side."""
    if not names:
        return
    start, size = 0, _FIRST_BLOCK
    while start < len(positions):
        block = positions[start:start + size]
        xa, xb = sides[0].rows(ia[block], names), sides[1].rows(ib[block], names)
        for name in names:
            masks[name][block] = values_differ(xa[name], xb[name])
        held = max(sum(x.nbytes for x in xa.values()), sum(x.nbytes for x in xb.values()), 1)
        start += len(block)
        size = max(1, min(size * 4, _MAX_BLOCK, len(block) * BUDGET // held))


class _Groups:
    """Rows of one version read with only the needed columns: the row groups a block needs, each
    shard's in one read (one call per row group cost ~0.14 ms each, more than the decode, on small
    groups); the last few groups kept, as pairs walked in storage order come back to the group just read."""

    def __init__(self, version: DatasetVersion) -> None:
        self.version = version
        self.kept: LRU[tuple, pa.Table] = LRU(_KEPT_GROUPS)

    def rows(self, indices: np.ndarray, names: list[str]) -> dict[str, pa.Array]:
        """Columns `names` of rows `indices`, in that order."""
        shards, groups, rows = self.version.locate_many(indices)
        keys = shards * (1 << 32) + groups
        order = np.argsort(keys, kind="stable")
        bounds = np.flatnonzero(np.diff(keys[order])) + 1
        runs = np.split(order, bounds) if len(order) else []
        tables = self._groups([int(keys[where[0]]) for where in runs], names)
        parts = [tables[int(keys[where[0]])].take(int64_array(rows[where])) for where in runs]
        if not parts:
            return {name: pa.array([], self.version.manifest.schema.field(name).type) for name in names}
        table = pa.concat_tables(parts).take(int64_array(np.argsort(order, kind="stable")))
        return {name: table.column(name).combine_chunks() for name in names}

    def _groups(self, keys: list[int], names: list[str]) -> dict[int, pa.Table]:
        """Row groups `keys` (shard << 32 | group, ascending) with columns `names`."""
        found: dict[int, pa.Table] = {}
        missing: dict[int, list[int]] = {}
        for key in keys:
            kept = self.kept.peek((key, tuple(names)))
            if kept is not None:
                found[key] = kept
            else:
                missing.setdefault(key >> 32, []).append(key & 0xFFFFFFFF)
        for shard, groups in missing.items():
            table = self.version.read_row_groups(shard, groups, names)
            sizes = self.version.row_group_rows(shard)
            offset = 0
            for group in groups:
                found[(shard << 32) | group] = table.slice(offset, sizes[group])
                offset += sizes[group]
        for key in keys[-_KEPT_GROUPS:]:
            self.kept.put((key, tuple(names)), found[key])
        return found


def values_differ(x: pa.Array, y: pa.Array) -> np.ndarray:
    """Per row i, whether x[i] and y[i] (one Arrow type) have different canonical encodings."""
    if pa.types.is_dictionary(x.type):
        x, y = x.dictionary_decode(), y.dictionary_decode()
    vx, vy = _valid(x), _valid(y)
    both = vx & vy
    return (vx != vy) | (both & ~_equal(x, y, both))


def _equal(x: pa.Array, y: pa.Array, both: np.ndarray) -> np.ndarray:
    """Per row, equal encodings where both are valid (anything elsewhere)."""
    t = x.type
    if pa.types.is_null(t):
        return np.ones(len(x), dtype=bool)
    if pa.types.is_boolean(t):
        return _bools(x) == _bools(y)
    if is_fixed_width(t):
        return (_fixed_rows(x) == _fixed_rows(y)).all(axis=1)
    if is_var_binary(t):
        return pc.equal(x, y).fill_null(True).to_numpy(zero_copy_only=False)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        equal = _lists_equal(x, y, both)
        if equal is not None:
            return equal
    return np.fromiter((a == b for a, b in zip(encode_column(x), encode_column(y))), dtype=bool, count=len(x))


def _lists_equal(x: pa.Array, y: pa.Array, both: np.ndarray) -> np.ndarray | None:
    """Lists of numbers without null items, compared without encoding; None for other lists."""
    lx, ly = _lengths(x), _lengths(y)
    rows = np.flatnonzero(both & (lx == ly))
    ix, iy = x.take(int64_array(rows)).flatten(), y.take(int64_array(rows)).flatten()
    if not is_fixed_width(ix.type) or ix.null_count or iy.null_count:
        return None
    bad = ~(_fixed_rows(ix) == _fixed_rows(iy)).all(axis=1)
    ends = np.cumsum(lx[rows])
    per_row = np.concatenate([[0], np.cumsum(bad)])
    equal = np.zeros(len(x), dtype=bool)
    equal[rows] = per_row[ends] == per_row[ends - lx[rows]]
    return equal


def _lengths(arr: pa.Array) -> np.ndarray:
    return pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def _bools(arr: pa.Array) -> np.ndarray:
    return arr.fill_null(False).to_numpy(zero_copy_only=False)


def _valid(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)
