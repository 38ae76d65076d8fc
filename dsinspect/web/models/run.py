"""The Run page's data: a run record of the runs directory (by name only, see `runs_dir`) as a summary
and a steps × ranks grid rendered as an HTML table whose cells link to that batch's replay, and the
record checked against the catalog when the person asks. No Streamlit here.

What one link can make the server do is bounded: the record is read once (and cached), the grid is
at most MAX_COLUMNS step buckets × MAX_ROWS ranks whatever the run's length or world size, and the
check never runs on page load; asked for, it checks at most MAX_CHECK_SAMPLES samples (the lines of
the chosen steps times their batch size), else it is refused before a row is read.
"""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import urlencode

from dsinspect.errors import UserError
from dsinspect.inspect.runs import GLYPHS, MAX_COLUMNS, MAX_ROWS, RunGrid, RunView
from dsinspect.loaders.audit.logcheck import check_log, parse_steps
from dsinspect.loaders.records.transforms import guarded, load_job_transform
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["run_model", "rank_pages", "grid_html", "check_run", "MAX_CHECK_SAMPLES", "GRID_CLASS"]

MAX_CHECK_SAMPLES = 200_000  # a page's check: ~10 s of reading at the check's measured speed on 2 cores
GRID_CLASS = "dsi-run-grid"
COLOURS = {"kept": "#2e7d32", "gap": "#c62828", "superseded": "#b28704", "none": "#9e9e9e", "diverged": "#ffffff"}
_STYLE = (f"<style>.{GRID_CLASS}{{border-collapse:collapse;font-family:'Source Code Pro',monospace;font-size:1rem;"
          f"line-height:1}}.{GRID_CLASS} td,.{GRID_CLASS} th{{padding:0 1px;border:0;text-align:center}}"
          f".{GRID_CLASS} th{{font-weight:normal;color:#888;text-align:right;padding-right:0.5rem;white-space:nowrap}}"
          f".{GRID_CLASS} a{{text-decoration:none}}.{GRID_CLASS} td.diverged{{background:#c62828}}</style>")


def run_model(view: RunView, steps: str | None = None, rank_page: int = 0, check: dict | None = None) -> dict[str, Any]:
    """The summary and the grid of `view` over `steps` (A:B; default the whole run), ranks
    `rank_page` × MAX_ROWS onwards; `check` (a check_run result) marks its divergence."""
    wanted = parse_steps(steps)
    pages = rank_pages(view)
    page = min(max(0, int(rank_page)), pages - 1)
    ranks = range(page * MAX_ROWS, min(view.rank_count(), (page + 1) * MAX_ROWS))
    grid = view.grid(wanted, ranks, MAX_COLUMNS, check=check)
    span = view.span()
    return {"summary": view.summary().to_json(), "grid": grid, "pages": pages, "page": page,
            "span": [span.start, span.stop - 1] if len(span) else None,
            "samples": _samples(view, wanted)}


def rank_pages(view: RunView) -> int:
    """Pages of MAX_ROWS ranks the grid of `view` takes."""
    return max(1, -(-view.rank_count() // MAX_ROWS))


def grid_html(grid: RunGrid, name: str, learner: bool = False) -> str:
    """The grid as one line of HTML: a row per rank, a cell per step bucket, each cell a link to the
    replay of its step (a bucket: its first gap or divergence, else its first logged step), checked
    against the record (a learner's record: the rollouts the rank consumed, whose fingerprint the
    page checks itself); the header row links zoom into a bucket. Every text is escaped and every
    URL built by urlencode from numbers and the run's listed name: nothing from the record is markup."""
    if not grid.columns:
        return ""
    head = ['<tr><th></th>']
    for first, last in grid.columns:
        label = f"steps {first:,}..{last:,}" if first != last else f"step {first:,}"
        if grid.bucket > 1:
            href = "?" + urlencode({"run": name, "steps": f"{first}:{last + 1}"})
            head.append(f'<th style="padding:0 1px"><a href="{html.escape(href)}" target="_self" '
                        f'title="zoom into {label}">+</a></th>')
        else:
            head.append(f'<th style="padding:0 1px" title="{label}">·</th>')
    rows = ["".join(head) + "</tr>"]
    for rank, cells, targets in zip(grid.ranks, grid.cells, grid.targets):
        out = [f"<tr><th>rank {rank}</th>"]
        for (first, last), status, step in zip(grid.columns, cells, targets):
            steps_text = f"step {first:,}" if first == last else f"steps {first:,}..{last:,}"
            glyph = html.escape(GLYPHS[status]) if status != "none" else "&nbsp;"
            style = f"color:{COLOURS[status]}"
            if step is None:
                out.append(f'<td class="{status}" style="{style}" title="rank {rank}, {steps_text}: {status}">'
                           f'{glyph}</td>')
                continue
            query = {"run": name, "step": step, "rank": rank} if learner else \
                {"run": name, "log": name, "step": step, "rank": rank}
            href = "replay?" + urlencode(query)
            out.append(f'<td class="{status}"><a href="{html.escape(href)}" target="_self" style="{style}" '
                       f'title="rank {rank}, {steps_text}: {status}; open step {step:,}">{glyph}</a></td>')
        rows.append("".join(out) + "</tr>")
    return f'{_STYLE}<table class="{GRID_CLASS}">{"".join(rows)}</table>'


def check_run(catalog: Catalog, view: RunView, steps: str | None = None, transform: str | None = None
              ) -> dict[str, Any]:
    """The record's kept lines in `steps` (default all) checked against the catalog, each against
    its segment's spec; refused when they hold more than MAX_CHECK_SAMPLES samples."""
    wanted = parse_steps(steps)
    samples = _samples(view, wanted)
    if samples > MAX_CHECK_SAMPLES:
        raise UserError(f"these steps' kept lines hold {samples:,} samples; a page checks at most "
                        f"{MAX_CHECK_SAMPLES:,}: zoom into fewer steps, or run `dsinspect replay --spec RUN "
                        "--check-log RUN` on the command line")
    fn = load_job_transform(transform) if transform else None
    result = guarded(lambda: check_log(view.path, view.path, wanted, catalog, fn), transform)
    return result.to_json()


def _samples(view: RunView, steps: range | None) -> int:
    """Samples the kept lines of `steps` name (what a check of them reads)."""
    return sum(int(line.get("n") or 0) for line in view.record.kept(steps))
