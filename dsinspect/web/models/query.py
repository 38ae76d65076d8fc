"""The Dataset page's filter: `dsinspect query --where` over one version, a page of matching rows at a time.
No Streamlit here (ui/cache.py holds one SharedQuery per version id).

A condition comes from the URL (`?address=NAME@REF&where=SQL`), so what it can make the server do is
bounded: its length (MAX_WHERE characters), its time (WEB_TIMEOUT seconds, then DuckDB is interrupted),
and DuckDB's lock-down in `VersionQuery` (no file, network or settings; one SELECT over the view v).
A bad condition is one line (`UserError`), shown as such.
"""

from __future__ import annotations

from typing import Any

from dsinspect.errors import UserError
from dsinspect.inspect.cells import cell
from dsinspect.inspect.query import VersionQuery
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.web.models.catalog import thumbnails

__all__ = ["MAX_WHERE", "WEB_TIMEOUT", "SharedQuery", "check_condition"]

MAX_WHERE = 2_000       # characters of one condition
WEB_TIMEOUT = 10.0      # seconds one query of a page may run


def check_condition(condition: str) -> str:
    """The condition stripped, or one line refusing it."""
    text = condition.strip()
    if len(text) > MAX_WHERE:
        raise UserError(f"the condition is {len(text):,} characters; a page takes at most {MAX_WHERE:,} "
                        "(use `dsinspect query --where` on the command line)")
    return text


class SharedQuery:
    """One version's query view, shared by every session (a DuckDB connection answers one query at a
    time: the view's own lock takes turns, held over a page's two queries)."""

    def __init__(self, version: DatasetVersion, timeout: float | None = None):
        self.version = version
        self.query = VersionQuery(version, timeout=WEB_TIMEOUT if timeout is None else timeout, threads=1)

    def page(self, condition: str, page: int, page_size: int) -> dict[str, Any]:
        """Rows matching `condition`, page `page` (clamped) of `page_size`: columns, rows (each with its
        `index` and sample `address`), the total matching and the page count."""
        condition = check_condition(condition)
        with self.query.lock:
            first = self.query.where(condition or None, limit=page_size, offset=max(0, page) * page_size,
                                     count=True)
            total = int(first.total or 0)
            pages = max(1, -(-total // page_size))
            if page >= pages:  # past the end: the last page
                page = pages - 1
                first = self.query.where(condition or None, limit=page_size, offset=page * page_size)
        name = f"{self.version.name}@{self.version.id[:12]}"
        columns = [c for c in first.columns if c != "_index"]
        at = first.columns.index("_index")
        indices = [int(row[at]) for row in first.rows]
        media = thumbnails(self.version, indices)  # each row's pictures, as the full table shows them
        rows = []
        for i, row in enumerate(first.rows):
            out: dict[str, Any] = {"index": indices[i], **{n: media[n][i] for n in media}}
            for c, value in zip(first.columns, row):
                if c != "_index":
                    out[c] = value if isinstance(value, (int, float, bool)) or value is None else cell(value)
            out["address"] = f"{name}:{indices[i]}"
            rows.append(out)
        return {"columns": ["index", *media, *columns, "address"], "rows": rows, "total": total,
                "page": max(0, page), "pages": pages, "media": list(media)}

    def close(self) -> None:
        self.query.close()
