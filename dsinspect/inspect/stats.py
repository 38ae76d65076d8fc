"""A version's statistics, per column of its query view (`query.py`): rows, nulls, distinct values
(the values themselves where few), min / mean / max and a histogram of numbers (the derived token
counts, text lengths, image sizes, episode returns among them); and two versions side by side.
All computed by DuckDB over the in-memory columns, so a version's statistics cost about what a
query costs; the fields kept in the shards (text, tokens, media) are described by their derived
values, and their nulls counted from the Parquet footers' statistics.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow.parquet as pq

from dsinspect.inspect.query import VersionQuery
from dsinspect.inspect.views import jsonable

__all__ = ["ColumnStats", "VersionStats", "version_stats", "compare_stats", "moved", "number", "FEW"]

FEW = 20      # distinct values listed with their counts when there are at most this many
BINS = 20


@dataclass
class ColumnStats:
    name: str
    type: str
    source: str                                      # "stored", "derived from <field>", "in the shards"
    rows: int
    nulls: int | None
    distinct: int | None = None
    values: list[tuple[Any, int]] | None = None      # each value and its count, when few
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    histogram: list[tuple[float, float, int]] | None = None   # [lo, hi) bins, the last one closed
    nonfinite: int | None = None                     # NaN and infinities of a float column (outside the range)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["values"] = [[_plain(v), n] for v, n in self.values] if self.values is not None else None
        data["histogram"] = [list(b) for b in self.histogram] if self.histogram is not None else None
        return jsonable(data)  # a NaN min or mean as "nan": JSON has no NaN


@dataclass
class VersionStats:
    address: str
    rows: int
    columns: list[ColumnStats] = field(default_factory=list)

    def column(self, name: str) -> ColumnStats | None:
        return next((c for c in self.columns if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.address, "rows": self.rows, "columns": [c.to_json() for c in self.columns]}


def version_stats(query: VersionQuery, bins: int = BINS,
                  ranges: dict[str, tuple[float, float]] | None = None) -> VersionStats:
    """Statistics of every column of `query`'s view; `ranges`: the histogram's [lo, hi] of a
    column (two versions' histograms on the same bins), else its own min and max."""
    with query.lock:  # its connections, to itself while this runs
        return _version_stats(query, bins, ranges)


def _version_stats(query: VersionQuery, bins: int, ranges: dict[str, tuple[float, float]] | None) -> VersionStats:
    con = query.con  # the in-memory view: scalars, derived values, _index
    rows = con.execute("SELECT count(*) FROM v").fetchone()[0]
    about = {d.name: f"derived from {d.field}" for d in query.derived}
    out = VersionStats(query.version.address, rows)
    types = dict(query.columns())
    shard_nulls = _footer_nulls(query)
    for name, kind in types.items():
        if name == "_index" or name in query.rollout_names:  # rollouts have their own statistics (rollout_summary)
            continue
        if name in query.big:
            out.columns.append(ColumnStats(name, kind, "in the shards", rows, shard_nulls.get(name)))
            continue
        out.columns.append(_column(con, name, kind, about.get(name, "stored"), rows, bins, (ranges or {}).get(name)))
    return out


def compare_stats(a: VersionQuery, b: VersionQuery, bins: int = BINS) -> tuple[VersionStats, VersionStats]:
    """Both versions' statistics, each numeric column's histograms over the same bins (what moved)."""
    first, second = version_stats(a, bins), version_stats(b, bins)
    ranges = {}
    for x in first.columns:
        y = second.column(x.name)
        if y is not None and x.min is not None and y.min is not None:
            ranges[x.name] = (min(x.min, y.min), max(x.max, y.max))
    return version_stats(a, bins, ranges), version_stats(b, bins, ranges)


def number(value: float | None) -> str:
    """A statistic as text: integers with thousands separators, others to 6 significant digits."""
    if value is None:
        return "—"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.6g}"


def moved(a: ColumnStats | None, b: ColumnStats | None) -> list[str]:
    """What differs between a column's statistics in two versions, in words; its row count too (a
    column kept in the shards has no other statistic that could tell)."""
    if a is None:
        return ["only in B"]
    if b is None:
        return ["only in A"]
    out = []
    for stat in ("rows", "nulls", "distinct", "min", "mean", "max"):
        x, y = getattr(a, stat), getattr(b, stat)
        if x != y and not (isinstance(x, float) and isinstance(y, float) and math.isclose(x, y, rel_tol=1e-9)):
            out.append(f"{stat} {number(x)} → {number(y)}")
    if a.values is not None and b.values is not None:
        ca, cb = dict(a.values), dict(b.values)
        changed = [f"{number(v) if isinstance(v, float) else v}: {ca.get(v, 0):,} → {cb.get(v, 0):,}"
                   for v in dict.fromkeys([*ca, *cb]) if ca.get(v, 0) != cb.get(v, 0)]
        if changed:
            out.append("counts " + ", ".join(changed))
    elif a.histogram and b.histogram and [n for *_, n in a.histogram] != [n for *_, n in b.histogram]:
        out.append("histogram")
    return out


def _column(con: Any, name: str, kind: str, source: str, rows: int, bins: int,
            span: tuple[float, float] | None) -> ColumnStats:
    q = _quote(name)
    nulls, distinct = con.execute(f"SELECT count(*) - count({q}), count(DISTINCT {q}) FROM v").fetchone()
    stats = ColumnStats(name, kind, source, rows, nulls, distinct)
    if distinct <= FEW:
        found = con.execute(f"SELECT {q}, count(*) FROM v WHERE {q} IS NOT NULL GROUP BY {q} "
                            f"ORDER BY count(*) DESC, {q} LIMIT {FEW + 1}").fetchall()
        if len(found) <= FEW:
            stats.values, stats.distinct = [(v, n) for v, n in found], len(found)
    if _numeric(kind) and rows > nulls:
        finite = f"isfinite({q})" if _floating(kind) else "true"  # NaN and inf: counted apart, not ranged
        lo, hi, mean, odd = con.execute(f"SELECT min({q}) FILTER ({finite}), max({q}) FILTER ({finite}), "
                                        f"avg({q}) FILTER ({finite}), count({q}) FILTER (NOT {finite}) "
                                        "FROM v").fetchone()
        stats.nonfinite = odd if _floating(kind) else None
        if lo is not None:
            stats.min, stats.max, stats.mean = float(lo), float(hi), float(mean)
            stats.histogram = _histogram(con, q, *(span or (stats.min, stats.max)), bins, finite)
    return stats


def _histogram(con: Any, q: str, lo: float, hi: float, bins: int,
               finite: str = "true") -> list[tuple[float, float, int]]:
    """`bins` equal-width bins over [lo, hi] (one bin when every value is the same) of the values
    `finite` holds for."""
    if hi == lo:
        return [(lo, hi, con.execute(f"SELECT count({q}) FILTER ({finite}) FROM v").fetchone()[0])]
    width = (hi - lo) / bins
    counts = dict(con.execute(
        f"SELECT least(floor(({q} - {lo!r}) / {width!r})::BIGINT, {bins - 1}) AS b, count(*) FROM v "
        f"WHERE {q} IS NOT NULL AND {finite} GROUP BY b").fetchall())
    return [(lo + k * width, lo + (k + 1) * width, int(counts.get(k, 0))) for k in range(bins)]


def _footer_nulls(query: VersionQuery) -> dict[str, int]:
    """Nulls of the fields kept in the shards, from each row group's statistics (footers only).
    Only a field stored as one Parquet column has them (a list's or struct's leaves count their
    elements' nulls, not the rows'); one whose statistics are missing anywhere is left out: unknown,
    not zero."""
    version = query.version
    total: dict[str, int] = {}
    unknown: set[str] = set()
    for s in range(len(version.manifest.shards)):
        with version.catalog.fs.open(version.shard_path(s), "rb") as f:
            meta = pq.ParquetFile(f).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                column = group.column(c)
                name = column.path_in_schema
                if name not in query.big:
                    continue
                st = column.statistics
                if st is None or not st.has_null_count:
                    unknown.add(name)
                else:
                    total[name] = total.get(name, 0) + st.null_count
    return {name: n for name, n in total.items() if name not in unknown}


def _numeric(kind: str) -> bool:
    return kind.split("(")[0] in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                                  "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "DECIMAL")


def _floating(kind: str) -> bool:
    return kind.split("(")[0] in ("FLOAT", "DOUBLE")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return jsonable(value)
