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
@click.option("--catalog", "catalog_url", metavar="URL", default=None, help="The catalog (default $DSINSPECT_CATALOG).")
@json_option
@click.pass_context
def append(ctx: click.Context, source: str, name: str, writer: str, message: str, catalog_url: str | None,
           as_json: bool) -> None:
    """Append the rows of FILE (Parquet, or JSON Lines: any fsspec URL) to dataset NAME's stream as one
    commit, visible to readers whole or not at all. The stream exists (created with its fields by
    `open_stream(catalog, NAME, fields)`); FILE's rows have its fields (others are refused)."""
    from dsinspect.loaders.stream import open_stream

    stream = open_stream(catalog_to_write(ctx, catalog_url), name)
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


def _batches(source: str, fields) -> Iterator["pa.RecordBatch"]:
    """FILE's rows a batch at a time (bounded memory), as the stream's schema: a missing or extra field,
    or a value that does not fit, is one line naming FILE. (pyarrow is imported here: `--help` loads no
    engine.)"""
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE
    from dsinspect.loaders.store.storage import url_to_fs

    schema = pa.schema([pa.field(f.name, f.type, nullable=f.nullable) for f in fields])
    fs, path = url_to_fs(source)
    try:
        with fs.open(path, "rb") as f:
            if path.endswith((".parquet", ".pq")):
                reader = pq.ParquetFile(f)
                have = set(reader.schema_arrow.names)
                if have != set(schema.names):
                    raise UserError(f"{source}: fields {sorted(have)}, the stream's are {sorted(schema.names)}")
                for batch in reader.iter_batches(columns=schema.names):
                    yield batch.cast(schema)
            else:
                options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
                for batch in pj.open_json(f, parse_options=options):
                    yield batch.select(schema.names).cast(schema)
    except FileNotFoundError:
        raise UserError(f"{source}: no such file") from None
    except NOT_CONVERTIBLE as e:
        raise UserError(f"{source}: its rows do not fit the stream's fields ({str(e).splitlines()[0]})") from None


COMMANDS = [append, snapshot]
