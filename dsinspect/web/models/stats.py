"""The Statistics page's data: `dsinspect stats` of one version, or of two side by side on the same
bins, with what moved between them named. No Streamlit here; values come back as plain data.

Bounded whatever the link: a column lists at most FEW values (stats.FEW) and BINS histogram bins, so
a chart holds at most that many bars; the statistics run on the version's shared query view
(`query.SharedQuery`, its time limit and lock-down)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from dsinspect.inspect.stats import ColumnStats, VersionStats, compare_stats, moved, number, version_stats
from dsinspect.web.models.query import SharedQuery

__all__ = ["stats_model", "moved", "bin_labels", "number", "IN_SHARDS", "UNKNOWN"]

IN_SHARDS = "in the shards"  # a field kept in the shards (text, tokens, media): only its rows and nulls are counted
UNKNOWN = "unknown"


def stats_model(a: SharedQuery, b: SharedQuery | None = None) -> dict[str, Any]:
    """Per column of the view (in `a`'s order, then `b`'s own): its statistics in each version, a
    chart's data (value counts when few, else the histogram; both versions on the same bins) and, with
    two versions, what moved."""
    with ExitStack() as held:
        for q in sorted({id(q): q for q in (a, b) if q is not None}.values(), key=id):  # one lock order
            held.enter_context(q.query.lock)
        sa, sb = (version_stats(a.query), None) if b is None else compare_stats(a.query, b.query)
    names = [c.name for c in sa.columns] + [c.name for c in (sb.columns if sb else []) if sa.column(c.name) is None]
    columns = []
    for name in names:
        ca, cb = sa.column(name), sb.column(name) if sb else None
        some = ca or cb
        assert some is not None
        columns.append({"name": name, "type": some.type, "source": some.source,
                        "a": ca.to_json() if ca else None, "b": cb.to_json() if cb else None,
                        "table": _table(ca, cb, sb is not None), "chart": _chart(ca, cb),
                        "moved": moved(ca, cb) if sb else [], "compared": some.source != IN_SHARDS})
    return {"a": _version(a, sa), "b": _version(b, sb) if b and sb else None, "columns": columns}


def _version(q: SharedQuery, s: VersionStats) -> dict[str, Any]:
    v = q.version
    return {"name": f"{v.name}@{v.id[:12]}", "id": v.id, "rows": s.rows}


def _table(a: ColumnStats | None, b: ColumnStats | None, two: bool) -> list[dict[str, str]]:
    """Rows, nulls, distinct, min, mean, max: one column per version. Rows and nulls always; nulls the
    shards' statistics do not give (a list's count its elements') are "unknown", not left out."""
    rows = []
    for stat in ("rows", "nulls", "distinct", "min", "mean", "max"):
        values = [getattr(c, stat) if c else None for c in ((a, b) if two else (a,))]
        if all(v is None for v in values) and stat not in ("rows", "nulls"):
            continue
        shown = [UNKNOWN if v is None and stat == "nulls" else number(v) for v in values]
        row = {"statistic": stat}
        if two:
            row.update({"A": shown[0] if a else "(no such column)", "B": shown[1] if b else "(no such column)"})
        else:
            row["value"] = shown[0]
        rows.append(row)
    return rows


def bin_labels(histogram: list[tuple[float, float, int]]) -> list[str]:
    """Each bin as "lo–hi" (the last one closed), distinct even where rounding would merge two."""
    labels = []
    for i, (lo, hi, _) in enumerate(histogram):
        label = f"{number(lo)}–{number(hi)}"
        labels.append(label if label not in labels else f"{label} (#{i})")
    return labels


def _chart(a: ColumnStats | None, b: ColumnStats | None) -> dict[str, Any] | None:
    """A bar chart's data: {"kind": "values" | "histogram", "x": labels, "A": counts[, "B": counts]}."""
    sides = [c for c in (a, b) if c is not None]
    if any(c.values is not None for c in sides) and all(c.values is not None or c.histogram is None for c in sides):
        counts = [{str(v): n for v, n in c.values} if c and c.values is not None else {} for c in (a, b)]
        order = list(dict.fromkeys([*counts[0], *counts[1]]))
        out = {"kind": "values", "x": order, "A": [counts[0].get(v, 0) for v in order]}
        if b is not None:
            out["B"] = [counts[1].get(v, 0) for v in order]
        return out
    histograms = [c.histogram if c else None for c in (a, b)]
    base = next((h for h in histograms if h), None)
    if base is None:
        return None
    out = {"kind": "histogram", "x": bin_labels(base)}
    for side, h, c in (("A", histograms[0], a), ("B", histograms[1], b)):
        if c is not None or side == "A":
            out[side] = [n for _, _, n in h] if h and len(h) == len(base) else [0] * len(base)
    return out
