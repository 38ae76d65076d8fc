"""`dsinspect stats ADDRESS [ADDRESS_B]`: a version's statistics per column, or two side by side."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from dsinspect.cli.output import catalog_from, catalog_option, emit_json, fail, json_option, out, progress
from dsinspect.cli.rollout_options import check_option, meaning_option, parse_checks, parse_meanings
from dsinspect.cli.stats_rollouts import SEVERITIES, at_least, print_rollouts
from dsinspect.errors import UserError

if TYPE_CHECKING:
    from dsinspect.inspect.stats import ColumnStats, VersionStats

BARS = " ▁▂▃▄▅▆▇█"
UNCOUNTED = "?"  # nulls of a list or struct field kept in the shards (as the web page shows them)
UNCOUNTED_NOTE = (f"nulls {UNCOUNTED}: unknown for a list or struct field kept in the shards (its Parquet "
                  "statistics count elements, not rows)")


@click.command("stats")
@click.argument("address", metavar="ADDRESS")
@click.argument("other", metavar="[ADDRESS_B]", required=False)
@click.option("--bins", type=int, default=20, show_default=True, help="Histogram bins of numeric columns.")
@meaning_option
@check_option
@click.option("--fail-on", type=click.Choice(SEVERITIES), default=None, metavar="SEVERITY",
              help="Exit 1 when LLM rollouts have a finding this severe or worse (error, warning or info).")
@catalog_option
@json_option
@click.pass_context
def stats_cmd(ctx: click.Context, address: str, other: str | None, bins: int, meanings: tuple[str, ...],
              checks: tuple[str, ...], fail_on: str | None, catalog_url: str | None, as_json: bool) -> None:
    """Per column: rows, nulls, distinct values (each with its count when few), min / mean / max and a
    histogram of numbers, the derived ones included (token counts, text lengths, image sizes, episode
    returns: see `dsinspect query --schema`). With ADDRESS_B, both versions on the same bins. For LLM
    rollouts also the findings that name RL data bugs (rows, keys and token positions), the checks not
    run and why, reward by policy version, response lengths, the log-prob gap and zero-advantage groups."""
    from dsinspect.inspect.query import VersionQuery
    from dsinspect.inspect.stats import compare_stats, version_stats

    if not 1 <= bins <= 200:
        raise UserError(f"--bins must be between 1 and 200, not {bins}")
    given = {"meanings": parse_meanings(meanings), "checks": parse_checks(checks)}
    catalog = catalog_from(ctx, catalog_url)
    versions = [catalog.resolve(a) for a in ([address, other] if other else [address])]
    queries = []
    for version in versions:
        with progress(f"derived values of {version.address}", len(version.manifest.shards)) as advance:
            queries.append(VersionQuery(version, on_shard=lambda _: advance(1), **given))
    try:
        found = compare_stats(*queries, bins) if other else (version_stats(queries[0], bins),)
    finally:
        for query in queries:
            query.close()
    rollouts = [_rollouts(query, given, bins, meanings or checks) for query in queries]
    if as_json:
        shown = [{**s.to_json(), **({"rollouts": r.to_json()} if r else {})} for s, r in zip(found, rollouts)]
        emit_json(shown[0] if len(shown) == 1 else {"a": shown[0], "b": shown[1]})
    else:
        _print(found[0]) if len(found) == 1 else _print_both(*found)
        for summary in filter(None, rollouts):
            print_rollouts(summary)
    failed = [f"{r.address}: {len(worse)} finding(s) of severity {fail_on} or worse"
              for r in filter(None, rollouts) if fail_on and (worse := at_least(r, fail_on))]
    if failed:
        fail(f"{'; '.join(failed)} (--fail-on {fail_on})", 1)


def _rollouts(query: Any, given: dict, bins: int, asked: Any) -> Any:
    """The version's rollout summary when it is LLM rollouts (`query.rollout_names`); asked for rollouts
    (--meaning, --check) of a version that is not, a UserError."""
    from dsinspect.inspect.rollout_summary import summarize

    if not query.rollout_names and not asked:
        return None
    return summarize(query.version, bins=bins, **given)


COMMANDS = [stats_cmd]


def sparkline(histogram: list[tuple[float, float, int]] | None) -> str:
    """A histogram as one line of block characters (the tallest bin a full block)."""
    if not histogram:
        return ""
    top = max(n for _, _, n in histogram) or 1
    return "".join(BARS[0] if n == 0 else BARS[max(1, round(n / top * (len(BARS) - 1)))] for _, _, n in histogram)


def _summary(c: ColumnStats) -> str:
    if c.values is not None:
        shown = ", ".join(f"{_value(v)} ×{n:,}" for v, n in c.values[:6])
        return shown + (f", … ({len(c.values)} values)" if len(c.values) > 6 else "")
    odd = f", {c.nonfinite:,} NaN/inf" if c.nonfinite else ""
    if c.mean is not None:
        return f"{_number(c.min)} … {_number(c.max)}, mean {_number(c.mean)}{odd}"
    return odd[2:]


def _value(v: Any) -> str:
    text = repr(v) if isinstance(v, str) else str(v)
    return text if len(text) <= 24 else text[:23] + "…"


def _number(x: float | None) -> str:
    if x is None:
        return "∅"
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:,.4g}"


def _nulls(c: ColumnStats) -> str:
    return UNCOUNTED if c.nulls is None else f"{c.nulls:,}"


def _print(s: VersionStats) -> None:
    from rich.table import Table

    table = Table(title=f"{s.address}: {s.rows:,} rows", title_justify="left")
    for name in ("column", "from", "nulls", "distinct", "values ×count / range", "histogram"):
        table.add_column(name, overflow="fold")
    for c in s.columns:
        table.add_row(c.name, c.source, _nulls(c), "" if c.distinct is None else f"{c.distinct:,}", _summary(c),
                      sparkline(c.histogram))
    out.print(table, markup=False)
    if any(c.nulls is None for c in s.columns):
        out.print(f"[dim]{UNCOUNTED_NOTE}[/]")


def _print_both(a: VersionStats, b: VersionStats) -> None:
    from rich.table import Table

    table = Table(title=f"{a.address} ({a.rows:,} rows) -> {b.address} ({b.rows:,} rows)", title_justify="left")
    for name in ("column", "nulls", "values ×count / range (A)", "values ×count / range (B)", "histogram A",
                 "histogram B"):
        table.add_column(name, overflow="fold")
    names = [c.name for c in a.columns] + [c.name for c in b.columns if a.column(c.name) is None]
    for name in names:
        x, y = a.column(name), b.column(name)
        nulls = f"{_nulls(x) if x else '-'} -> {_nulls(y) if y else '-'}"
        moved = x and y and (_summary(x) != _summary(y) or x.histogram != y.histogram or x.nulls != y.nulls)
        table.add_row(("* " if moved else "  ") + name, nulls, _summary(x) if x else "(absent)",
                      _summary(y) if y else "(absent)", sparkline(x.histogram if x else None),
                      sparkline(y.histogram if y else None))
    out.print(table, markup=False)
    out.print("[dim]*: moved between the versions; histograms of a column share their bins[/]")
    if any(c.nulls is None for c in (*a.columns, *b.columns)):
        out.print(f"[dim]{UNCOUNTED_NOTE}[/]")
