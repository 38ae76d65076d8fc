"""`dsinspect query ADDRESS`: find samples with SQL (DuckDB over the version; dsinspect/inspect/query.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from dsinspect.cli.output import (
    catalog_from,
    catalog_option,
    emit_json,
    json_option,
    out,
    print_whole,
    progress,
)
from dsinspect.cli.rollout_options import check_option, meaning_option, parse_checks, parse_meanings
from dsinspect.errors import UserError

if TYPE_CHECKING:
    from dsinspect.inspect.query import QueryResult

CELL = 60  # characters of a value shown in a table cell (--json gives them whole)


@click.command("query")
@click.argument("address", metavar="ADDRESS")
@click.option("--where", "condition", metavar="SQL", default=None,
              help="An SQL condition over the version's columns, e.g. \"tokens_len > 2000 AND lang = 'ja'\".")
@click.option("--order-by", metavar="SQL", default=None, help="An SQL ordering, e.g. 'image_width DESC'.")
@click.option("--limit", type=int, default=20, show_default=True, help="Rows shown.")
@click.option("--offset", type=int, default=0, show_default=True, help="Rows skipped first (paging).")
@click.option("--columns", metavar="A,B,...", default=None,
              help="Columns shown beside the sample's address (default: derived values and stored scalars).")
@click.option("--sql", "sql", metavar="SELECT", default=None,
              help="One SELECT over the view v instead (GROUP BY, joins of v with itself, anything).")
@click.option("--schema", is_flag=True, help="List the columns a query can use, with their types, and stop.")
@meaning_option
@check_option
@catalog_option
@json_option
@click.pass_context
def query_cmd(ctx: click.Context, address: str, condition: str | None, order_by: str | None, limit: int,
              offset: int, columns: str | None, sql: str | None, schema: bool, meanings: tuple[str, ...],
              checks: tuple[str, ...], catalog_url: str | None, as_json: bool) -> None:
    """Find samples of a version with SQL, run by DuckDB over its shards. The version is the view v:
    _index (the sample's index), every stored field, and derived values computed once per shard and
    kept beside it (tokens_len, <text>_chars, image_width/height/format/orientation, video
    frames/seconds, trajectory steps/return). LLM rollouts add rollout_* columns (response length,
    log-prob gaps, finding codes...) and the table rollout_findings (a row per finding and rollout: code,
    severity, _index, key, positions), made when a query names them. Reads nothing but the version;
    writes nothing but the derived values' sidecars."""
    from dsinspect.inspect.query import VersionQuery
    from dsinspect.inspect.query_errors import UnknownColumnError

    if sql is not None and (condition or order_by or columns or offset):
        raise UserError("--sql is a whole query: it takes no --where, --order-by, --columns or --offset")
    if limit < 0 or offset < 0:
        raise UserError("--limit and --offset must be >= 0")
    given = {"meanings": parse_meanings(meanings), "checks": parse_checks(checks)}
    catalog = catalog_from(ctx, catalog_url)
    version = catalog.resolve(address)
    if version.address != address and ":" in address:
        raise UserError(f"bad address {address!r}: query takes a version (NAME[@REF]), not a sample")
    with progress(f"derived values of {version.address}", len(version.manifest.shards)) as advance:
        query = VersionQuery(version, on_shard=lambda _: advance(1), **given)
    if (meanings or checks) and not query.rollout_names:
        query.close()
        raise UserError(f"{version.address}: not LLM rollouts: --meaning and --check are about rollouts "
                        "(--meaning FIELD=MEANING says what a column is)")
    with query:
        if schema:
            names = query.columns()
            return emit_json([{"name": n, "type": t} for n, t in names]) if as_json else _print_schema(names, query)
        wanted = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
        try:
            result = (query.sql(sql, limit) if sql is not None else
                      query.where(condition, order_by=order_by, limit=limit, offset=offset, columns=wanted,
                                  count=True))
        except UnknownColumnError as e:
            raise UserError(f"{e}; `dsinspect query {address} --schema` lists the columns") from None
    if as_json:
        return emit_json(_json(result))
    _print(result)


COMMANDS = [query_cmd]


def _json(result: QueryResult) -> dict[str, Any]:
    addresses = result.addresses()
    rows = [{c: _plain(v) for c, v in zip(result.columns, row)} for row in result.rows]
    if addresses is not None:
        rows = [{"address": a, **r} for a, r in zip(addresses, rows)]
    return {"version": result.address, "sql": result.sql, "columns": result.columns, "rows": rows,
            "truncated": result.truncated, "matches": result.total}


def _plain(value: Any) -> Any:
    """A value as JSON: bytes as their size (the sample's page shows them)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": len(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    from dsinspect.inspect.views import jsonable

    return jsonable(value)  # NaN and infinities as strings (json.dumps would write bare NaN), dates...


def _cell(value: Any, kind: Any = None) -> str:
    """A value in a table cell; `kind` (its Arrow type) lets float32 numbers show their own digits."""
    from dsinspect.inspect.floats import narrow
    from dsinspect.inspect.sizes import human_bytes

    if kind is not None:
        value = narrow(value[:8], kind) + value[8:] if isinstance(value, list) else narrow(value, kind)
    if value is None:
        return "∅"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{human_bytes(len(value))}>"
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"[{', '.join(map(repr, value[:8]))}, … {len(value):,} items]"
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value).replace("\n", "⏎")
    return text if len(text) <= CELL else text[:CELL - 1] + "…"


def _print(result: QueryResult) -> None:
    from rich.table import Table

    addresses = result.addresses()
    table = Table(title_justify="left", show_lines=False)
    if addresses is not None:
        table.add_column("sample", no_wrap=True)
    for name in result.columns:
        if name != "_index" or addresses is None:
            table.add_column(name, overflow="fold", style="cyan" if name in result.derived else None)
    skip = result.columns.index("_index") if addresses is not None else -1
    for k, row in enumerate(result.rows):
        cells = [_cell(v, kind) for i, (v, kind) in enumerate(zip(row, result.types or [None] * len(row)))
                 if i != skip]
        table.add_row(*([addresses[k]] if addresses is not None else []), *cells)
    print_whole(table, markup=False)
    shown = f"{len(result.rows):,} row{'s' if len(result.rows) != 1 else ''}"
    if result.total is not None:
        shown += f" of {result.total:,} matching"
    elif result.truncated:
        shown += " (more matched)"
    if set(result.columns) & set(result.derived):
        shown += "; cyan: derived values"
    out.print(f"[dim]{shown}[/]")


def _print_schema(names: list[tuple[str, str]], query: Any) -> None:
    from rich.table import Table

    about = {d.name: f"derived from {d.field}: {d.about}" for d in query.derived}
    if query.rollout_names:
        from dsinspect.inspect.rollout_query import FINDINGS_TABLE, ROW_COLUMNS

        about.update({name: f"rollout: {what}" for name, _, what in ROW_COLUMNS})
    table = Table("column", "type", "what")
    for name, kind in names:
        table.add_row(name, kind, "the sample's index" if name == "_index" else about.get(name, "stored"))
    out.print(table, markup=False)
    if query.rollout_names:
        out.print(f"and the table {FINDINGS_TABLE}: a row per finding and rollout (code, severity, _index, key, "
                  "positions, axis, column, message); docs/RL.md", markup=False)
