"""`dsinspect diff A B`: schema, shard and row level changes between two versions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from dsinspect.cli.output import catalog_from, catalog_option, emit_json, json_option, out, progress
from dsinspect.errors import UserError

if TYPE_CHECKING:
    from dsinspect.loaders.diff.compare import VersionDiff


@click.command("diff")
@click.argument("a", metavar="ADDRESS")
@click.argument("b", metavar="ADDRESS")
@click.option("--limit", type=int, default=20, show_default=True,
              help="Rows listed per kind of change (0: all); counts are always exact.")
@catalog_option
@json_option
@click.pass_context
def diff_cmd(ctx: click.Context, a: str, b: str, limit: int, catalog_url: str | None, as_json: bool) -> None:
    """What changed from version A to version B: fields, shards (manifests only) and rows (added,
    removed, changed with the fields that changed, moved). Reads only the shards they do not share."""
    from dsinspect.loaders.diff.compare import diff, shard_changes

    if limit < 0:
        raise UserError("--limit must be >= 0 (0 lists everything)")
    catalog = catalog_from(ctx, catalog_url)
    va, vb = catalog.resolve(a), catalog.resolve(b)
    _, _, only_a, only_b = shard_changes(va.manifest, vb.manifest)  # manifests only: sizes the bar
    total = sum(va.manifest.shards[i].rows for i in only_a) + sum(vb.manifest.shards[j].rows for j in only_b)
    with progress(f"diff {va.address} {vb.address}", total) as advance:
        result = diff(va, vb, catalog, limit=limit or None, on_rows=advance)
    if as_json:
        return emit_json(result.to_json())
    _print(result)
    if result.rows.changed:
        _print_pictures(va, vb, result.rows.changed)


COMMANDS = [diff_cmd]

PICTURES = 3        # changed rows whose images are drawn (the table lists them all)
PICTURE_SIDE = 32   # cells: a picture's width at most, and twice its height in pixels


def _print_pictures(va: Any, vb: Any, changed: list[dict]) -> None:
    """The first changed rows' images as the viewers draw them: before, after and where they differ
    (upright by their EXIF orientation, half-block cells), under the table; off a terminal, in words."""
    from dsinspect.loaders.format.roles import Role

    in_b = {f.name for f in vb.fields}
    images = [f.name for f in va.fields if f.role is Role.IMAGE and f.name in in_b]
    rows = [r for r in changed if set(r["fields"]) & set(images)][:PICTURES]
    if not rows:
        return
    if not out.is_terminal:  # a file or a pipe: half-block pictures would be lines of bare "▀"
        for row in rows:
            for name in (n for n in row["fields"] if n in images):
                out.print(_picture_in_words(name, row), markup=False, soft_wrap=True)
        return
    from rich.columns import Columns
    from rich.panel import Panel

    from dsinspect.inspect.image_diff import difference_image, open_image, upright
    from dsinspect.inspect.images import fit_pixels
    from dsinspect.term import half_blocks

    names = sorted({n for r in rows for n in r["fields"] if n in images})
    before = va.take([r["index_a"] for r in rows], columns=names)
    after = vb.take([r["index_b"] for r in rows], columns=names)

    def drawn(image: Any, title: str) -> Any:
        return Panel(half_blocks(fit_pixels(image, PICTURE_SIDE, 2 * PICTURE_SIDE)), title=title, expand=False)

    for i, row in enumerate(rows):
        for name in (n for n in row["fields"] if n in images):
            a, b = before.column(name)[i].as_py(), after.column(name)[i].as_py()
            try:
                sides = [drawn(upright(open_image(x))[0], f"{label} {address}:{index}") for x, label, address, index
                         in ((a, "before", va.address, row["index_a"]), (b, "after", vb.address, row["index_b"]))]
            except Exception:  # noqa: BLE001 - an undecodable image: the table's words say what changed
                continue
            figure = difference_image(a, b)
            if figure is not None:
                sides.append(drawn(figure.convert("RGB"), "difference (white: largest)"))
            out.print(f"[bold]{name}[/] of {_ident(row)}")
            out.print(Columns(sides))


def _picture_in_words(name: str, row: dict) -> str:
    """What a drawn picture would show, for output that is not a terminal: the sizes and how many
    pixels differ."""
    detail = row["details"].get(name) or {}
    head = f"{name} of {_ident(row)}: the images differ (drawn only on a terminal)"
    if "size" not in detail:
        return head
    (w0, h0), (w1, h1) = detail["size"]
    sizes = f"{w0}×{h0}" if (w0, h0) == (w1, h1) else f"{w0}×{h0} → {w1}×{h1}"
    if "pixels_changed" not in detail:
        return f"{head}: {sizes}"
    pixels = w0 * h0
    return f"{head}: {sizes}, {round(detail['pixels_changed'] * pixels):,} of {pixels:,} pixels differ"


def _print(d: VersionDiff) -> None:
    out.print(f"[bold]{d.a}[/] -> [bold]{d.b}[/]   rows {d.a_rows:,} -> {d.b_rows:,}")
    if d.empty and not d.shards.added and not d.shards.removed:
        out.print("[green]no changes[/]" + (" (the same version)" if d.a_id == d.b_id else ""))
        return
    _print_schema(d)
    s = d.shards
    moved = f", {len(s.moved)} moved" if s.moved else ""
    out.print(f"shards: {len(s.shared)} shared, {len(s.added)} added, {len(s.removed)} removed{moved}")
    r = d.rows
    how = f"by key {r.key!r}" if r.matched_by == "key" else "by row hash"
    counts = ", ".join(f"{n:,} {kind}" for kind, n in r.counts.items())
    out.print(f"rows (matched {how}): {counts}   [dim]({r.rows_read:,} rows read)[/]")
    for note in r.notes:
        out.print(f"  note: {note}", markup=False)
    if r.fields:
        out.print("  fields changed: " + ", ".join(f"{n} ({c})" for n, c in sorted(r.fields.items())), markup=False)
    _print_changed(d)
    _print_list("added", r.added, r.counts["added"], "index_b", r.matched_by)
    _print_list("removed", r.removed, r.counts["removed"], "index_a", r.matched_by)
    _print_moved(d)
    if d.empty:
        out.print("[green]no row or schema changes[/] (the shards were rewritten with equal rows)")


def _print_schema(d: VersionDiff) -> None:
    from rich.table import Table

    if not d.schema:
        out.print("schema: no changes")
        return
    table = Table(title="schema", title_justify="left")
    for col in ("field", "change", "before", "after"):
        table.add_column(col, overflow="fold")
    for c in d.schema:
        table.add_row(c.field, c.change, _compact(c.before), _compact(c.after))
    out.print(table)


def _print_changed(d: VersionDiff) -> None:
    from rich.table import Table

    from dsinspect.term.changes import what_changed

    r = d.rows
    if not r.changed:
        return
    ident = "key" if r.matched_by == "key" else "row hash"
    out.print(_title("changed", len(r.changed), r.counts["changed"]))
    table = Table()
    for col in (ident, "index a -> b", "fields", "what changed"):
        table.add_column(col, overflow="fold")
    for row in r.changed:
        table.add_row(_ident(row), f"{row['index_a']:,} -> {row['index_b']:,}", ", ".join(row["fields"]),
                      what_changed(row["details"]))
    out.print(table)




def _print_list(kind: str, rows: list[dict], total: int, index: str, matched_by: str) -> None:
    from rich.table import Table

    if not rows:
        return
    out.print(_title(kind, len(rows), total))
    table = Table()
    table.add_column("key" if matched_by == "key" else "row hash")
    table.add_column("index in " + index[-1], justify="right")
    for row in rows:
        table.add_row(_ident(row), f"{row[index]:,}")
    out.print(table)


def _print_moved(d: VersionDiff) -> None:
    from rich.table import Table

    r = d.rows
    for shard in d.shards.moved:
        out.print(f"moved shard {shard['sha256'][:16]} ({shard['rows']:,} rows): "
                  f"#{shard['index_a']} -> #{shard['index_b']}")
    if not r.moved:
        return
    out.print(_title("moved rows", len(r.moved), r.counts["moved"]))
    table = Table()
    table.add_column("key" if r.matched_by == "key" else "row hash")
    table.add_column("index a -> b", justify="right")
    for row in r.moved:
        table.add_row(_ident(row), f"{row['index_a']:,} -> {row['index_b']:,}")
    out.print(table)


def _title(kind: str, shown: int, total: int) -> str:
    more = "" if shown == total else f", the first {shown:,} shown (--limit 0 for all)"
    return f"[bold]{kind}[/] ({total:,}{more})"


def _ident(row: dict) -> str:
    return str(row["key"]) if "key" in row else row["row_hash"][:16]


def _compact(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict) and "role" in value and "type" in value:  # a whole field
        kind = value["type"] if isinstance(value["type"], str) else json.dumps(value["type"], separators=(",", ":"))
        return f"{kind}, role {value['role']}" + ("" if value.get("nullable", True) else ", not null")
    return json.dumps(value, separators=(",", ":"), sort_keys=True) if not isinstance(value, str) else value
