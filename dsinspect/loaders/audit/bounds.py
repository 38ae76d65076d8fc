"""What a replay holds, known before it reads a row: the decoded size of the row groups its rows come
from plus the rows themselves (each counted as its group's average row), from the shards' Parquet
footers, which locating the rows reads anyway. A face bounds a replay by bytes with it
(`replay(..., max_bytes=)`) and refuses beyond in one line (`BatchTooLarge`) instead of running out of
memory: 256 copies of one 10 MB row are 2.5 GB however few groups they come from.

A footer counts encoded bytes, and a dictionary-encoded column decodes larger: the same sum is charged
again with the decoded groups as they arrive (`ReadBound.charge`), so a read stops at the first group
that takes it past the bound."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["BatchTooLarge", "ReadBound", "group_sizes", "bytes_text", "spans"]


def bytes_text(n: float) -> str:
    """1536 -> '1.5 KiB' (the faces' `inspect.sizes.human_bytes`, which the engine may not import)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class BatchTooLarge(UserError):
    """A replay that would hold more bytes than its bound: what was asked, its size, the bound and
    what to do instead (exit 2)."""

    def __init__(self, what: str, size: int, bound: int, detail: str = "", hint: str = ""):
        self.what, self.size, self.bound, self.detail, self.hint = what, size, bound, detail, hint
        text = f"{what} would hold ~{bytes_text(size)}" + (f" ({detail})" if detail else "")
        super().__init__(f"{text}, more than the bound of {bytes_text(bound)}" + (f": {hint}" if hint else ""))

    def hinted(self, hint: str) -> "BatchTooLarge":
        """The same refusal, saying what to do instead."""
        return BatchTooLarge(self.what, self.size, self.bound, self.detail, hint)


@dataclass
class ReadBound:
    """The bytes one replay may hold: checked against the footers' estimate before any row is read
    (`check`), then charged with each decoded row group and its rows as they arrive (`charge`)."""

    max_bytes: int
    what: str
    used: int = 0

    def check(self, groups: int, rows: int) -> None:
        if groups + rows > self.max_bytes:
            raise BatchTooLarge(self.what, groups + rows, self.max_bytes,
                                f"{bytes_text(rows)} of rows read from {bytes_text(groups)} of row groups")

    def charge(self, group: pa.Table, samples: int) -> None:
        """A decoded row group that `samples` of the batch's rows come from."""
        self.used += group.nbytes + (group.nbytes // max(group.num_rows, 1)) * samples
        if self.used > self.max_bytes:
            raise BatchTooLarge(self.what, self.used, self.max_bytes, "decoded so far; its Parquet footers said less")


def group_sizes(version: DatasetVersion, shard: int, columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per row group of `shard`: the bytes `columns` take decoded, as its footer counts them (the
    uncompressed sizes of their column chunks), and its rows."""
    pf = version.parquet(shard)
    meta = pf.metadata
    leaves = [name for name, count in _leaf_counts(pf.schema_arrow) for _ in range(count)]
    keep = [c for c, name in enumerate(leaves) if name in set(columns)]
    if len(leaves) != meta.num_columns:  # a schema shape not understood: count every column
        keep = list(range(meta.num_columns))
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    return (np.array([sum(group.column(c).total_uncompressed_size for c in keep) for group in groups], np.int64),
            np.array([group.num_rows for group in groups], np.int64))


def spans(groups: np.ndarray, group_bytes: np.ndarray, row_bytes: np.ndarray, max_bytes: int) -> list[tuple[int, int]]:
    """Consecutive samples [a, b) cut so that each part's distinct row groups and rows hold at most
    `max_bytes` (a sample alone may hold more: it is a part of its own); arguments per sample, as
    `RowReader.footprint` gives them."""
    out, start, seen, held = [], 0, set(), 0
    for i, (group, size, row) in enumerate(zip(groups.tolist(), group_bytes.tolist(), row_bytes.tolist())):
        more = row + (0 if group in seen else size)
        if i > start and held + more > max_bytes:
            out.append((start, i))
            start, seen, held, more = i, set(), 0, row + size
        seen.add(group)
        held += more
    return out + [(start, len(groups))] if len(groups) else out


def _leaf_counts(schema: pa.Schema) -> list[tuple[str, int]]:
    """Each top-level field and how many Parquet leaf columns it has (leaves come in field order)."""
    return [(f.name, _leaves(f.type)) for f in schema]


def _leaves(t: pa.DataType) -> int:
    if pa.types.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaves(t.value_type)
    return 1
