"""`dsinspect append FILE NAME` and `dsinspect snapshot NAME`: rows (rollouts) into a dataset's append
stream as one commit, and a prefix of the stream as an ordinary version (docs/RL.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import click

from dsinspect.cli.output import catalog_to_write, emit_json, json_option, out
from dsinspect.errors import UserError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["COMMANDS"]


@click.command()
@click.argument("source", metavar="FILE")
@click.argument("name")
@click.option("--writer", default="", metavar="NAME", help="Who appends (a sampler's name), kept in the commit.")
@click.option("--message", "-m", default="", help="A note kept in the commit.")
@click.option("--create", is_flag=True,
              help="Create NAME's stream when it has none, its fields inferred from FILE as ingest infers them.")
@click.option("--key", default=None, metavar="FIELD", help="With --create: the stream's key (a rollout id).")
@click.option("--role", "roles", multiple=True, metavar="FIELD=ROLE", help="With --create: a field's role.")
@click.option("--meaning", "meanings", multiple=True, metavar="FIELD=MEANING|none",
              help="With --create: a field's rollout meaning (docs/RL.md).")
@click.option("--tokenizer", default=None, metavar="FILE|ENCODING",
              help="With --create: a tokenizer.json, or cl100k_base / o200k_base, stored to decode tokens fields.")
@click.option("--catalog", "catalog_url", metavar="URL", default=None, help="The catalog (default $DSINSPECT_CATALOG).")
@json_option
@click.pass_context
def append(ctx: click.Context, source: str, name: str, writer: str, message: str, create: bool, key: str | None,
           roles: tuple[str, ...], meanings: tuple[str, ...], tokenizer: str | None, catalog_url: str | None,
           as_json: bool) -> None:
    """Append the rows of FILE (Parquet, or JSON Lines: any fsspec URL) to dataset NAME's stream as one
    commit, visible to readers whole or not at all. FILE's rows have the stream's fields (others are
    refused); a nested field the stream keeps as JSON text (chat messages) may come nested. With
    --create, a dataset without a stream gets one, its fields inferred from FILE (roles, tokenizer,
    rollout meanings: as `dsinspect ingest` infers them)."""
    from dsinspect.errors import NotFoundError
    from dsinspect.loaders.stream import open_stream

    catalog = catalog_to_write(ctx, catalog_url)
    if not create and (key or roles or meanings or tokenizer):
        raise UserError("--key, --role, --meaning and --tokenizer describe a new stream: add --create")
    try:
        stream = open_stream(catalog, name)
    except NotFoundError:
        if not create:
            raise UserError(f"dataset {name!r} has no stream: add --create to make one with FILE's fields") from None
        stream = _create(catalog, source, name, key, roles, meanings, tokenizer)
    commit = stream.append(_batches(source, stream.spec.fields), writer=writer, message=message)
    if as_json:
        return emit_json({"dataset": name, "seq": commit.seq, "rows": commit.rows, "writer": commit.writer,
                          "created_at": commit.created_at, "shards": [s.sha256 for s in commit.shards]})
    out.print(f"{name}: commit {commit.seq} ({commit.rows:,} rows) from {source}", markup=False)


@click.command()
@click.argument("name")
@click.option("--until", type=int, default=None, metavar="N", help="Commits 0..N-1 [default: every commit now].")
@click.option("--tag", "tags", multiple=True, help="Tag the version (repeatable).")
@click.option("--message", "-m", default="", help="Version message [default: the commits it holds].")
@click.option("--catalog", "catalog_url", metavar="URL", default=None, help="The catalog (default $DSINSPECT_CATALOG).")
@json_option
@click.pass_context
def snapshot(ctx: click.Context, name: str, until: int | None, tags: tuple[str, ...], message: str,
             catalog_url: str | None, as_json: bool) -> None:
    """Dataset NAME's stream, commits 0..N-1, as an ordinary immutable version (diff, query, verify,
    replay work on it); the same commits always give the same version id."""
    from dsinspect.loaders.stream import open_stream
    from dsinspect.loaders.stream import snapshot as take

    if until is not None and until < 1:
        raise UserError(f"--until {until}: a snapshot holds at least commit 0 (--until 1)")
    version = take(open_stream(catalog_to_write(ctx, catalog_url), name), until, tags=tags, message=message)
    if as_json:
        return emit_json({"address": version.address, "id": version.id, "rows": version.num_rows})
    out.print(f"{version.address}: {version.num_rows:,} rows, version {version.id}", markup=False)


def _create(catalog, source: str, name: str, key: str | None, roles: tuple[str, ...], meanings: tuple[str, ...],
            tokenizer: str | None):
    """NAME's stream, created with the fields ingest would infer from FILE."""
    from dsinspect.cli.ingest_cmd import parse_roles
    from dsinspect.cli.rollout_options import parse_meanings
    from dsinspect.loaders.ingest.pipeline import source_fields
    from dsinspect.loaders.stream import open_stream

    fields = source_fields(catalog, source, name, roles=parse_roles(roles), key=key, tokenizer=tokenizer,
                           meanings=parse_meanings(meanings))
    return open_stream(catalog, name, fields, key=key)


def _batches(source: str, fields) -> Iterator["pa.RecordBatch"]:
    """FILE's rows a batch at a time (bounded memory), as the stream's schema: a missing or extra field,
    or a value that does not fit, is one line naming FILE. (pyarrow is imported here: `--help` loads no
    engine.)"""
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE
    from dsinspect.loaders.format.roles import Role
    from dsinspect.loaders.ingest.json_text import json_batches
    from dsinspect.loaders.store.storage import url_to_fs

    schema = pa.schema([pa.field(f.name, f.type, nullable=f.nullable) for f in fields])
    as_text = {f.name for f in fields if f.role is Role.JSON and pa.types.is_string(f.type)}  # may come nested
    fs, path = url_to_fs(source)
    try:
        with fs.open(path, "rb") as f:
            if path.endswith((".parquet", ".pq")):
                reader = pq.ParquetFile(f)
                _same_fields(source, set(reader.schema_arrow.names), schema)
                batches = reader.iter_batches(columns=schema.names)
            else:
                explicit = pa.schema([field for field in schema if field.name not in as_text])
                options = pj.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="infer")
                batches = pj.open_json(f, parse_options=options)
            for batch in json_batches(batches, fields):
                _same_fields(source, set(batch.schema.names), schema)
                yield batch.select(schema.names).cast(schema)
    except FileNotFoundError:
        raise UserError(f"{source}: no such file") from None
    except NOT_CONVERTIBLE as e:
        raise UserError(f"{source}: its rows do not fit the stream's fields ({str(e).splitlines()[0]})") from None


def _same_fields(source: str, have: set[str], schema: "pa.Schema") -> None:
    if have != set(schema.names):
        raise UserError(f"{source}: fields {sorted(have)}, the stream's are {sorted(schema.names)}")


COMMANDS = [append, snapshot]
