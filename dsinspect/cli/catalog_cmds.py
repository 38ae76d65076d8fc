"""Catalog commands: ls, info, tag, verify, gc, sample-data."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dsinspect.cli.output import (
    catalog_from,
    catalog_option,
    catalog_to_write,
    emit_json,
    err,
    fail,
    json_option,
    out,
    progress,
)

if TYPE_CHECKING:
    from rich.table import Table


@click.command()
@catalog_option
@json_option
@click.pass_context
def ls(ctx: click.Context, catalog_url: str | None, as_json: bool) -> None:
    """Datasets, their versions and tags.

    A stored manifest or tags file that cannot be read is listed as BROKEN (its file and the
    reason, also on stderr) beside everything else, and the command exits 1 (a failed check)."""
    from dsinspect.loaders.store.describe import catalog_listing

    catalog = catalog_from(ctx, catalog_url)
    listing = catalog_listing(catalog)
    if as_json:
        emit_json(listing)
    else:
        out.print(_listing_table(listing) if listing["datasets"] else f"catalog {catalog.url} has no datasets")
    broken = [b for ds in listing["datasets"] for b in ds["broken"]]
    for b in broken:
        err.print(f"dsinspect: ls: broken: {b['path']}: {b['reason']}", markup=False, soft_wrap=True)
    if broken:
        fail(f"catalog {catalog.url}: {len(broken)} stored file{'s' * (len(broken) > 1)} cannot be read", 1)


def _listing_table(listing: dict) -> Table:
    from rich.table import Table
    from rich.text import Text

    from dsinspect.inspect.sizes import human_bytes

    table = Table(title=f"catalog {listing['catalog']}", title_justify="left")
    for col in ("dataset", "version", "tags", "rows", "bytes", "shards", "created", "message"):
        table.add_column(col, justify="right" if col in ("rows", "bytes", "shards") else "left",
                         no_wrap=col != "message")
    for ds in listing["datasets"]:
        first = True
        for v in reversed(ds["versions"]):
            table.add_row(ds["name"] if first else "", v["short_id"], ", ".join(v["tags"]), f"{v['rows']:,}",
                          human_bytes(v["bytes"]), str(v["shards"]), (v["created_at"] or "")[:10], v["message"])
            first = False
        for b in ds["broken"]:
            what = b["short_id"] or "tags.json"
            table.add_row(ds["name"] if first else "", Text(what, style="red"), ", ".join(b["tags"]), "", "", "", "",
                          Text(f"BROKEN: {b['path']}: {b['reason']}", style="bold red"))
            first = False
        table.add_section()
    return table


_INFO_SHARDS = 20  # shards `info` shows on a terminal (--json lists every one; rich draws ~1 ms a row)


@click.command()
@click.argument("address")
@catalog_option
@json_option
@click.pass_context
def info(ctx: click.Context, address: str, catalog_url: str | None, as_json: bool) -> None:
    """Schema with roles, shards, rows, bytes and ids of one version."""
    from rich.table import Table

    from dsinspect.inspect.sizes import human_bytes
    from dsinspect.loaders.store.describe import version_info

    version = catalog_from(ctx, catalog_url).resolve(address)
    data = version_info(version, None if as_json else _INFO_SHARDS)
    if as_json:
        return emit_json(data)
    out.print(f"[bold]{version.name}[/] version [bold]{version.id}[/]")
    out.print(f"tags: {', '.join(data['tags']) or '-'}   parent: {data['parent'] or '-'}   "
              f"created: {data['created_at']}")
    out.print(f"rows: {data['rows']:,}   bytes: {human_bytes(data['bytes'])}   "
              f"shards: {len(version.manifest.shards):,}   key: {data['key'] or '-'}   "
              f"message: {data['message'] or '-'}")
    schema = Table(title="schema", title_justify="left")
    for col in ("field", "type", "role", "nullable", "options"):
        schema.add_column(col)
    for f in version.fields:
        schema.add_row(f.name, str(f.type), f.role.value, "yes" if f.nullable else "no",
                       ", ".join(f"{k}={v}" for k, v in f.options.items()))
    out.print(schema)
    shards = Table(title="shards", title_justify="left")
    for col in ("#", "sha256", "rows", "first row", "bytes"):
        shards.add_column(col, justify="left" if col == "sha256" else "right")
    for s in data["shards"]:
        shards.add_row(str(s["index"]), s["sha256"], f"{s['rows']:,}", f"{s['first_row']:,}", human_bytes(s["bytes"]))
    out.print(shards)
    if data.get("shards_omitted"):
        out.print(f"... and {data['shards_omitted']:,} more shards (all of them: dsinspect info {address} --json)")


@click.command()
@click.argument("address")
@click.argument("tag")
@catalog_option
@json_option
@click.pass_context
def tag(ctx: click.Context, address: str, tag: str, catalog_url: str | None, as_json: bool) -> None:
    """Point TAG at the version ADDRESS names (in a named catalog: the sample catalog is for reading)."""
    catalog = catalog_to_write(ctx, catalog_url)
    version = catalog.resolve(address)
    catalog.set_tag(version.name, tag, version.id)
    if as_json:
        return emit_json({"name": version.name, "tag": tag, "id": version.id})
    out.print(f"{version.name}@{tag} -> {version.id}")


@click.command()
@click.argument("address")
@click.option("--engine", type=click.Choice(["inline", "pool", "ray"]), default="inline", show_default=True,
              help="Where shards are re-hashed: this process, a local process pool, or Ray.")
@click.option("--workers", type=int, default=None, help="Parallel workers for --engine pool/ray.")
@catalog_option
@json_option
@click.pass_context
def verify(ctx: click.Context, address: str, engine: str, workers: int | None, catalog_url: str | None,
           as_json: bool) -> None:
    """Re-hash every shard (sha256) and every row; exit 1 naming each mismatch."""
    from rich.table import Table

    from dsinspect.loaders.store.verify_parts import verify_parallel

    version = catalog_from(ctx, catalog_url).resolve(address)
    with progress(f"verify {version.address}", version.manifest.num_bytes, unit_bytes=True) as advance:
        report = verify_parallel(version, engine, workers, on_bytes=advance)
    if as_json:
        emit_json(report.to_json())
    else:
        table = Table(title=f"verify {version.address}", title_justify="left")
        for col in ("#", "sha256", "rows", "result"):
            table.add_column(col)
        shown = [s for i, s in enumerate(report.shards) if not s.ok or i < _INFO_SHARDS]  # every failed one
        for s in shown:
            table.add_row(str(s.index), s.sha256[:16], f"{s.rows:,}", "[green]ok[/]" if s.ok else "[red]FAILED[/]")
        out.print(table)
        if len(shown) < len(report.shards):
            out.print(f"... and {len(report.shards) - len(shown):,} more shards, all ok (each one: --json)")
    for problem in report.problems:
        err.print(f"dsinspect: verify: {version.address}: {problem}", markup=False)
    for s in report.shards:
        for problem in s.problems:
            more = "…" if s.bad_row_count > 10 else ""
            rows = f" (rows {', '.join(map(str, s.bad_rows[:10]))}{more})" if s.bad_rows else ""
            err.print(f"dsinspect: verify: shard {s.index} {s.url}: {problem}{rows}", markup=False, soft_wrap=True)
    if not report.ok:
        fail(f"{version.address}: verification failed", 1)
    if not as_json:
        out.print(f"[green]ok[/]: {len(report.shards)} shards, {version.num_rows:,} rows verified")


@click.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--older-than", "grace_hours", type=float, default=24.0, show_default=True, metavar="HOURS",
              help="Only what is older: a live writer publishes shards before its manifest.")
@click.option("--apply", "apply", is_flag=True, help="Remove what is found (default: list it only).")
@catalog_option
@json_option
@click.pass_context
def gc(ctx: click.Context, names: tuple[str, ...], grace_hours: float, apply: bool, catalog_url: str | None,
       as_json: bool) -> None:
    """Unreferenced shards, abandoned ingest staging and temp files left by interrupted writes.

    Lists them (all datasets, or the NAMEs); --apply removes them. Versions are never touched."""
    from rich.table import Table

    from dsinspect.errors import UserError
    from dsinspect.inspect.sizes import human_bytes
    from dsinspect.loaders.store.gc import dataset_names, find_garbage, remove_garbage

    catalog = catalog_from(ctx, catalog_url)
    if apply:
        catalog.check_writable()
    if grace_hours < 0:
        raise UserError(f"--older-than must be 0 or more hours, not {grace_hours}")
    unknown = sorted(set(names) - set(dataset_names(catalog)))
    if unknown:
        raise UserError(f"no dataset {unknown[0]!r} in catalog {catalog.url}")
    found = find_garbage(catalog, names or None, grace_hours=grace_hours)
    removal = remove_garbage(catalog, found) if apply else None
    removed, busy = (removal.removed, removal.busy) if removal else ([], [])
    if as_json:
        return emit_json({"catalog": catalog.url, "older_than_hours": grace_hours, "applied": apply,
                          "found": [g.to_json() for g in found], "removed": [g.to_json() for g in removed],
                          "busy": busy})
    if not found:
        return out.print(f"no garbage older than {grace_hours:g} h in {catalog.url}")
    table = Table(title=f"gc {catalog.url} (older than {grace_hours:g} h)", title_justify="left")
    for col in ("dataset", "kind", "path in the dataset", "bytes", "age"):
        table.add_column(col, justify="right" if col in ("bytes", "age") else "left")
    for g in found:
        where = g.path[len(catalog.layout.dataset(g.dataset)):].lstrip("/")  # full paths are in --json
        table.add_row(g.dataset, g.kind, where, human_bytes(g.bytes), f"{g.age_hours:.1f} h")
    out.print(table)
    total = human_bytes(sum(g.bytes for g in found))
    if apply:
        skipped = [g for g in found if g.dataset in busy]
        kept = len(found) - len(removed) - len(skipped)
        out.print(f"removed {len(removed)} items ({human_bytes(sum(g.bytes for g in removed))})"
                  + (f"; kept {kept} shards that a version published meanwhile references" if kept else ""))
        if busy:
            out.print(f"left {len(skipped)} items alone: a write is in flight on {', '.join(busy)} "
                      "(run gc again when it has ended)")
    else:
        out.print(f"{len(found)} items, {total}: a dry run; add --apply to remove them")


@click.command("sample-data")
@click.argument("directory", metavar="DIR")
@json_option
def sample_data(directory: str, as_json: bool) -> None:
    """Write the deterministic demo catalog (text tokens, images, video, RL; two versions each) to DIR."""
    from dsinspect.demo.build import write_sample_catalog

    with progress("writing sample catalog", None) as advance:
        record = write_sample_catalog(directory, on_rows=advance)
    if as_json:
        return emit_json(record)
    out.print(f"wrote the sample catalog to {directory}:")
    for name, ds in record["datasets"].items():
        out.print(f"  {name}: v1 {ds['v1'][:12]}  v2 {ds['v2'][:12]}")


COMMANDS = [ls, info, tag, verify, gc, sample_data]
