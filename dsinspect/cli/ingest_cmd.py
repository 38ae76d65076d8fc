"""`dsinspect ingest SOURCE NAME` and `dsinspect export ADDRESS --format F DEST`."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import click

from dsinspect.cli.output import (
    catalog_from,
    catalog_option,
    catalog_to_write,
    emit_json,
    err,
    json_option,
    out,
    progress,
)
from dsinspect.cli.rollout_options import meaning_option, parse_meanings
from dsinspect.errors import UserError

__all__ = ["COMMANDS", "parse_roles", "ENGINE_CHOICES"]

# `dsinspect.loaders.ingest.engine_choice.AUTO` and `dsinspect.loaders.compute.engines.ENGINES` (a test keeps
# them equal): spelled here so that `dsinspect --help` starts without the engine.
ENGINE_CHOICES = ("auto", "inline", "pool", "ray")


def parse_roles(values: tuple[str, ...]) -> dict[str, str]:
    """`field=role` pairs as a dict; a malformed one is a UserError naming it."""
    roles = {}
    for value in values:
        name, sep, role = value.partition("=")
        if not sep or not name or not role:
            raise UserError(f"--role {value!r}: expected FIELD=ROLE, e.g. --role input_ids=tokens")
        roles[name] = role
    return roles


def parse_options(values: tuple[str, ...]) -> dict[str, object]:
    """`key=value` source options as a dict, each value read as JSON when it is JSON (numbers, true,
    lists) and as text otherwise; a malformed pair is a UserError naming it."""
    options: dict[str, object] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name:
            raise UserError(f"--option {value!r}: expected KEY=VALUE, e.g. --option dtype=uint32")
        try:
            options[name] = json.loads(text)
        except ValueError:
            options[name] = text
    return options


@contextmanager
def ingest_progress(description: str) -> Iterator[Callable]:
    """A bar over the source's bytes with rows/s and bytes/s, on stderr when it is a terminal."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    from dsinspect.inspect.sizes import human_bytes

    columns = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
               TextColumn("{task.fields[parts]}"), TextColumn("{task.fields[rate]}"), TimeElapsedColumn()]
    started = time.monotonic()
    with Progress(*columns, console=err.console, disable=not err.is_terminal, transient=True) as bar:
        task = bar.add_task(description, total=None, parts="", rate="")

        def update(p) -> None:
            seconds = max(time.monotonic() - started, 1e-6)
            bar.update(task, total=p.bytes_total or None, completed=p.bytes,
                       parts=f"parts {p.parts_done}/{p.parts_total}",
                       rate=f"{p.rows / seconds:,.0f} rows/s  {human_bytes(int(p.bytes / seconds))}/s")
        yield update


@click.command(short_help="Import jsonl, parquet, hf, webdataset, mds, files, megatron, olmo, nanogpt, litdata or "
                          "datatrove as a version.")
@click.argument("source")
@click.argument("name")
@click.option("--kind", default=None,
              help="Source kind: jsonl, parquet, hf, webdataset, mds, files, megatron, olmo, nanogpt, litdata, "
                   "datatrove (default: guessed).")
@click.option("--role", "roles", multiple=True, metavar="FIELD=ROLE", help="Override an inferred role (repeatable).")
@meaning_option
@click.option("--key", default=None, metavar="FIELD",
              help="The row key diff matches rows by. Default: the key of NAME's latest version; else a files "
                   "folder's name, an `id` field, or the one `*_id` field, if no value repeats; else none.")
@click.option("--no-key", is_flag=True,
              help="Declare no key (rows matched by row hash), even if the latest version has one.")
@click.option("--tokenizer", default=None, metavar="FILE|ENCODING",
              help="A tokenizer.json, or cl100k_base / o200k_base, stored with the data to decode its tokens fields.")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE",
              help="A source option (repeatable; the value read as JSON when it is), e.g. an OLMo token file "
                   "without its metadata: --option dtype=uint32 --option eos=50279 (docs/INGEST.md).")
@click.option("--engine", type=click.Choice(ENGINE_CHOICES), default="auto", show_default=True,
              help="Where parts convert: this process, a local process pool, or Ray; auto: the pool only for "
                   "inputs large enough that it is faster.")
@click.option("--workers", type=int, default=None, help="Parallel parts (default: CPU count, at most 8).")
@click.option("--message", "-m", default="", help="Version message.")
@click.option("--tag", "tags", multiple=True, help="Tag the new version (repeatable).")
@catalog_option
@json_option
@click.pass_context
def ingest(ctx: click.Context, source: str, name: str, kind: str | None, roles: tuple[str, ...],
           meanings: tuple[str, ...], key: str | None,
           no_key: bool, tokenizer: str | None, options: tuple[str, ...], engine: str, workers: int | None,
           message: str, tags: tuple[str, ...],
           catalog_url: str | None, as_json: bool) -> None:
    """Import SOURCE (JSONL, Parquet, HF save_to_disk, WebDataset tars, MDS, a folder of images or
    videos: files; a tokenized pretraining corpus: Megatron .bin/.idx, OLMo token memmaps, nanoGPT .bin,
    LitData token chunks, datatrove .ds; any fsspec URL) as a new version of NAME (parent: its current
    latest) in a named catalog (--catalog or DSINSPECT_CATALOG). Re-running an interrupted ingest resumes it."""
    from dsinspect.inspect.sizes import human_bytes
    from dsinspect.loaders.ingest import run_ingest

    catalog = catalog_to_write(ctx, catalog_url)
    with ingest_progress(f"ingest {name}") as update:
        result = run_ingest(catalog, source, name, kind=kind, roles=parse_roles(roles), key=key, no_key=no_key,
                            tokenizer=tokenizer, meanings=parse_meanings(meanings), options=parse_options(options),
                            engine=engine, workers=workers, message=message, tags=tags, on_progress=update)
    if as_json:
        return emit_json(result.to_json())
    v = result.version
    out.print(f"{v.name} version [bold]{v.id}[/]: {result.rows:,} rows, {len(v.manifest.shards)} shards, "
              f"{human_bytes(v.manifest.num_bytes)} from {human_bytes(result.bytes)} of source in "
              f"{result.seconds:.1f} s ({result.engine}: {result.parts_converted} parts converted, "
              f"{result.parts_skipped} resumed)")
    for f in v.fields:
        tok = f.options.get("tokenizer") or {}
        note = f"  tokenizer {tok.get('name') or tok.get('kind')}" if tok else ""
        note += f"  rollout: {f.options['rollout']}" if f.options.get("rollout") else ""
        out.print(f"  {f.name}: {f.role.value} ({f.type})" + ("  key" if f.name == v.manifest.key else "") + note,
                  markup=False)


@click.command()
@click.argument("address")
@click.argument("dest")
@click.option("--format", "fmt", type=click.Choice(["parquet", "jsonl", "webdataset", "megatron", "olmo", "nanogpt"]),
              required=True, help="Output format: parquet, jsonl, webdataset (one file per shard), or a "
              "tokens field as Megatron .bin/.idx, OLMo token memmaps or nanoGPT .bin (docs/INGEST.md).")
@catalog_option
@json_option
@click.pass_context
def export(ctx: click.Context, address: str, dest: str, fmt: str, catalog_url: str | None, as_json: bool) -> None:
    """Write version ADDRESS to the directory DEST (any fsspec URL) as Parquet, JSON Lines or WebDataset
    tars, with a sidecar that lets `dsinspect ingest DEST` restore the same version."""
    from dsinspect.loaders.ingest.export import export_version

    version = catalog_from(ctx, catalog_url).resolve(address)
    with progress(f"export {version.address}", version.num_rows) as advance:
        summary = export_version(version, fmt, dest, on_rows=advance)
    if as_json:
        return emit_json(summary)
    out.print(f"exported {version.address} ({summary['rows']:,} rows) as {fmt} to {dest}: "
              f"{len(summary['files'])} files")


COMMANDS = [ingest, export]
