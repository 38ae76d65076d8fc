"""`dsinspect replay`: the exact batch of (step, rank), its check against a job's fingerprint log,
and its export for a bug report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from dsinspect.cli.output import catalog_from, catalog_option, count_progress, emit_json, fail, json_option, out
from dsinspect.errors import UserError

if TYPE_CHECKING:  # the engine and rich load when the command runs, not for `dsinspect --help`
    from rich.table import Table

    from dsinspect.loaders.audit.export import Exported
    from dsinspect.loaders.audit.logcheck import Divergence, LogCheck
    from dsinspect.loaders.audit.replay import Replay, SpecSource
    from dsinspect.loaders.store.catalog import Catalog

# What `dsinspect replay` holds of a batch to show it (row groups read and rows, as the shards' footers
# count them, loaders/audit/bounds.py): a batch beyond it is refused in one line, or with --export
# written a part at a time (64 MiB parts).
SHOWN_BYTES = 512 << 20

_SPEC_FLAGS = ("seed", "batch_size", "world_size", "shuffle", "window_shards", "last_batch", "epoch_size",
               "mixture_block")


@click.command("replay")
@click.option("--spec", "spec_path", metavar="RUN.json|DIR|NAME",
              help="Run spec file, a run record directory, or the name of one in CATALOG/runs.")
@click.option("--address", "addresses", multiple=True, metavar="NAME@REF[=WEIGHT]",
              help="Instead of --spec: the version(s) read; repeat for a mixture.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--batch-size", type=int, default=1, show_default=True, help="Per-rank batch size.")
@click.option("--world-size", type=int, default=1, show_default=True)
@click.option("--shuffle", type=click.Choice(["none", "global", "window", "sliding"]), default="global",
              show_default=True)
@click.option("--window-shards", type=int, default=4, show_default=True,
              help="Shards per window (window), or resident at once (sliding).")
@click.option("--last-batch", type=click.Choice(["drop", "pad"]), default="drop", show_default=True)
@click.option("--epoch-size", type=int, default=None, help="Mixture epoch length (default: all rows).")
@click.option("--mixture-block", type=int, default=1024, show_default=True)
@click.option("--step", type=int, default=None, help="The step to replay.")
@click.option("--rank", default=None, metavar="R|all", help="The rank, or all for the global batch [default: 0].")
@click.option("--check-log", "log", metavar="FILE|DIR|NAME",
              help="Compare with a fingerprint log (file, or run record: directory or name in CATALOG/runs; "
                   "a run record needs no --spec).")
@click.option("--steps", metavar="A:B", help="With --check-log: the steps to compare (B excluded).")
@click.option("--trust-stored-hashes", is_flag=True,
              help="With --check-log: read only the stored row-hash column instead of re-hashing the rows.")
@click.option("--allow-gaps", is_flag=True,
              help="With --check-log: steps with no kept line (gaps) are reported but do not fail the check.")
@click.option("--columns", metavar="A,B", help="The columns the job's Loader read (default: every field).")
@click.option("--transform", metavar="package.module:function", help="The job's batch transform, re-run seeded.")
@click.option("--export", "export_dir", metavar="DIR", help="Write the batch as Parquet plus a JSON receipt.")
@catalog_option
@json_option
@click.pass_context
def replay_cmd(ctx: click.Context, spec_path: str | None, addresses: tuple[str, ...], step: int | None,
               rank: str | None, log: str | None, steps: str | None, trust_stored_hashes: bool, allow_gaps: bool,
               columns: str | None, transform: str | None, export_dir: str | None, catalog_url: str | None,
               as_json: bool, **spec_flags: Any) -> None:
    """The exact batch a rank read at a step, computed from the run spec (no iteration): per sample
    its position, global index, source version, shard and row, row hash and seed, a preview of each
    field, then the batch fingerprint. Exit 1 when a row's bytes no longer hash to its stored row
    hash (the batch is still shown). With --check-log: exit 1 at a divergence, or at a gap unless
    --allow-gaps."""
    # Only what this run needs is imported: the CLI answers one step from the shell in well under a second.
    from dsinspect.cli.runs_cmd import run_path
    from dsinspect.inspect.runs import default_runs_dir, path_exists
    from dsinspect.loaders.audit.bounds import BatchTooLarge
    from dsinspect.loaders.audit.replay import replay, resolve
    from dsinspect.loaders.records.run import is_run_dir
    from dsinspect.loaders.records.transforms import guarded
    from dsinspect.loaders.stream.learner_record import is_learner_run

    catalog = catalog_from(ctx, catalog_url)
    spec_path, log = (run_path(catalog, p) if p else None for p in (spec_path, log))
    if log and not path_exists(log):  # before "name the run": what was typed is what is missing
        raise UserError(f"--check-log {log}: no such fingerprint log or run record (a name is looked up in "
                        f"{default_runs_dir(catalog.url)})")
    learner = next((p for p in (log, spec_path) if p and is_learner_run(p)), None)
    if learner is not None:  # a stream learner's record: its steps are rollouts consumed from commits
        return _replay_learner(catalog, learner, log is not None, step, steps, rank, allow_gaps,
                               bool(transform or export_dir or columns or addresses), as_json)
    if log and not spec_path and not addresses:
        spec_path = log if is_run_dir(log) else None  # a run record holds its own specs
    specs = _specs(ctx, catalog, spec_path, addresses, spec_flags)
    fn = _job_transform(transform)
    picked = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    if log:
        if export_dir:
            raise UserError("--export replays one step; run it without --check-log")
        return _check(catalog, specs, log, step, steps, rank, fn, transform, picked, not trust_stored_hashes,
                      allow_gaps, as_json)
    if step is None:
        raise UserError("give --step N (or --check-log FILE to compare a range of steps)")
    if steps:
        raise UserError("--steps goes with --check-log")
    if allow_gaps:
        raise UserError("--allow-gaps goes with --check-log")
    rank = rank if rank is not None else "0"
    if resolve(specs, step)[0].sequences is not None:  # a packed run: its batch is sequences of documents
        from dsinspect.cli.replay_packed import replay_packed_cmd

        if fn or export_dir or picked:
            raise UserError("--transform, --export and --columns replay rows; a packed run's batch is its sequences")
        return replay_packed_cmd(catalog, specs, step, rank, as_json, SHOWN_BYTES)
    try:
        result = guarded(lambda: replay(specs, step, rank, catalog, fn, columns=picked, max_bytes=SHOWN_BYTES),
                         transform)
    except BatchTooLarge as e:
        if export_dir and not fn:
            return _export_streamed(catalog, specs, step, rank, picked, export_dir, as_json)
        raise e.hinted("--transform needs the whole batch in memory: export it without --transform" if export_dir
                       else "add --export DIR to write it as Parquet, a part at a time") from None
    receipt = _export(result, export_dir) if export_dir else None
    if as_json:
        emit_json({**result.to_json(), "fields": _field_previews(result),
                   "transformed": _transformed_previews(result) if fn else None, "export": _export_json(receipt)})
    else:
        _print_replay(result, fn is not None)
        if receipt:
            out.print(f"exported to {receipt['directory']}: {receipt['parquet']['file']}, {receipt['receipt_file']}")
    if result.unverified:
        fail(_damaged(result), 1)


def _replay_learner(catalog: Catalog, directory: str, checking: bool, step: int | None, steps: str | None,
                    rank: str | None, allow_gaps: bool, row_flags: bool, as_json: bool) -> None:
    from dsinspect.cli.replay_learner import check_learner_cmd, replay_learner_cmd
    from dsinspect.loaders.audit.logcheck import parse_steps

    if row_flags:
        raise UserError(f"{directory} is a stream learner's record: --address, --transform, --export and --columns "
                        "replay rows of a version")
    if checking:
        if step is not None and steps:
            raise UserError("give --step or --steps, not both")
        wanted = parse_steps(steps if steps else (str(step) if step is not None else None))
        return check_learner_cmd(catalog, directory, wanted, allow_gaps, as_json)
    if step is None:
        raise UserError("give --step N (or --check-log RUN to check the whole record)")
    if steps or allow_gaps:
        raise UserError("--steps and --allow-gaps go with --check-log")
    return replay_learner_cmd(catalog, directory, step, rank if rank is not None else "0", as_json)


def _export_streamed(catalog: Catalog, specs: SpecSource, step: int, rank: str, columns: list[str] | None,
                     directory: str, as_json: bool) -> None:
    """A batch beyond SHOWN_BYTES: written a part at a time, its provenance shown (not its fields)."""
    from dsinspect.loaders.audit.export import export_step

    done = export_step(specs, step, rank, catalog, directory, columns=columns)
    if as_json:
        emit_json({**done.to_json(), "fields": None, "transformed": None, "export": _export_json(done.receipt)})
    else:
        spec = done.spec
        out.print(f"[bold]step {done.step}[/] (epoch {done.epoch}) · {_ranks_text(done.ranks)} of {spec.world_size} "
                  f"· batch {spec.batch_size} · spec {spec.hash[:12]}")
        out.print(_provenance_table(done, len(done.ranks) > 1))
        out.print(f"fields: not shown, the batch is beyond the {SHOWN_BYTES >> 20} MiB `dsinspect replay` shows; "
                  "they are in the export", markup=False)
        for r, fp in done.fingerprints.items():
            out.print(f"fingerprint (stored)       rank {r}: [bold]{fp}[/]")
        out.print(f"exported to {directory}: {done.receipt['parquet']['file']}, {done.receipt['receipt_file']}")
    if done.unverified:
        fail(_damaged(done), 1)


def _ranks_text(ranks: list[int]) -> str:
    return "all ranks" if len(ranks) > 1 else f"rank {ranks[0]}"


def _job_transform(transform: str | None):
    if not transform:
        return None
    from dsinspect.loaders.records.transforms import load_job_transform

    return load_job_transform(transform)


def _export(result: Replay, directory: str) -> dict:
    from dsinspect.loaders.audit.export import export_replay  # pyarrow.parquet's writer: only for --export

    return export_replay(result, directory)


def _damaged(result: Replay | Exported) -> str:
    """The one error line for a batch holding rows whose bytes no longer hash to their stored row hash."""
    bad = result.unverified
    first = bad[0]
    where = f"rank {first.rank} position {first.position} (index {first.index}, shard {first.shard} row " \
            f"{first.shard_row})"
    if len(bad) == 1:
        return f"step {result.step}: {where}: its bytes no longer hash to the stored row hash"
    return f"step {result.step}: {len(bad)} rows no longer hash to their stored row hash, the first at {where}"


COMMANDS = [replay_cmd]


# -- the spec ------------------------------------------------------------------------------------

def _specs(ctx: click.Context, catalog: Catalog, spec_path: str | None, addresses: tuple[str, ...],
           flags: dict[str, Any]) -> SpecSource:
    """The run's specs; a run record directory stays a path (checked to hold specs), so replay and the
    check take each step's spec from the segment the job kept for it, and know where the record ends."""
    from dsinspect.loaders.audit.replay import load_specs
    from dsinspect.loaders.order.spec import RunSpec
    from dsinspect.loaders.records.run import is_run_dir

    given = [name for name in _SPEC_FLAGS
             if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]
    if spec_path and (addresses or given):
        raise UserError("give either --spec or the spec flags (--address, --seed, ...), not both")
    if spec_path:
        specs = load_specs(spec_path)
        return spec_path if is_run_dir(spec_path) else specs
    if not addresses:
        raise UserError("name the run: --spec RUN.json (or a run record directory), or --address with the spec flags")
    return [RunSpec.create(catalog, dict(_weighted(a) for a in addresses), **flags)]


def _weighted(address: str) -> tuple[str, float]:
    name, sep, weight = address.rpartition("=")
    if not sep:
        return address, 1.0
    try:
        return name, float(weight)
    except ValueError:
        raise UserError(f"--address {address!r}: the weight after '=' must be a number") from None


# -- the log check -------------------------------------------------------------------------------

def _check(catalog: Catalog, specs: SpecSource, log: str, step: int | None, steps: str | None, rank: str | None,
           fn, transform: str | None, columns: list[str] | None, rehash: bool, allow_gaps: bool, as_json: bool) -> None:
    from dsinspect.loaders.audit.logcheck import check_log, parse_steps
    from dsinspect.loaders.audit.replay import parse_rank
    from dsinspect.loaders.records.transforms import guarded

    if step is not None and steps:
        raise UserError("give --step or --steps, not both")
    wanted = parse_steps(steps if steps else (str(step) if step is not None else None))
    ranks = None if rank in (None, "all") else parse_rank(rank)  # a filter: any rank the log may hold
    with count_progress("checking log", "lines") as update:
        result = guarded(lambda: check_log(specs, log, wanted, catalog, fn, ranks=ranks, columns=columns,
                                            rehash=rehash, allow_gaps=allow_gaps, on_progress=update), transform)
    if as_json:
        emit_json(result.to_json())
    else:
        _print_check(result)
    if result.divergence is not None:
        fail(_divergence_line(result.divergence), 1)
    if result.gaps and not allow_gaps:
        fail(f"{log}: {_gap_count(result)} with no kept line ({result.gaps[0]}"
             f"{', …' if len(result.gaps) > 1 else ''}); --allow-gaps to accept them", 1)
    if result.checked == 0:
        fail(f"{log}: no fingerprint lines in the steps asked for", 2)


def _divergence_line(d: Divergence) -> str:
    """Where the first divergence is: (step, rank) and, when known, the position and index of the first
    sample that differs."""
    text = f"first divergence at step {d.step}, rank {d.rank}"
    if d.samples:
        s = d.samples[0]
        text += f", position {s.position} (index {s.index})"
    elif d.positions:
        text += f", position {d.positions[0]}"
    return text


def _gap_count(result: LogCheck) -> str:
    pairs = sum((g.last - g.first + 1) * len(g.ranks) for g in result.gaps)
    return f"{len(result.gaps):,} gap{'s' if len(result.gaps) != 1 else ''} ({pairs:,} (step, rank) pairs)"


_GAPS_SHOWN = 20


def _print_check(result: LogCheck) -> None:
    sides = ", ".join(f"{n:,} {side}" for side, n in sorted(result.sides.items()))
    span = f"steps {result.steps[0]}..{result.steps[1]}" if result.steps else "no steps"
    d = result.divergence
    if d is None and result.checked:
        verdict = "[green]ok[/]" if not result.gaps else "[yellow]lines ok[/]"
        out.print(f"{verdict}: {result.checked:,} log lines ({span}; {sides}) match the data")
    _print_record(result)
    if d is None:
        return
    out.print(f"[red]first divergence[/] at step {d.step}, rank {d.rank} (epoch {d.epoch}, of={d.of}) "
              f"after {result.checked - 1:,} matching lines")
    out.print(f"  logged    {d.logged}\n  replayed  {d.replayed}", markup=False)
    out.print(f"  {d.reason}", markup=False)
    if d.samples:
        from rich.table import Table

        table = Table(title="positions that differ", title_justify="left")
        for col in ("pos", "index", "source", "shard:row", "stored row hash"):
            table.add_column(col, justify="right" if col in ("pos", "index") else "left")
        for s in d.samples:
            table.add_row(str(s.position), str(s.index), f"{s.source}@{s.version[:12]}", f"{s.shard}:{s.shard_row}",
                          s.row_hash.hex())
        out.print(table)
    if d.rows is not None and d.rows.num_columns:
        from dsinspect.term.preview import preview

        rows = [([str(p)], [preview(d.rows.column(c)[i].as_py()) for c in d.rows.column_names])
                for i, p in enumerate(d.positions)]
        out.print(preview_table("those rows as the catalog holds them now", ["pos"], d.rows.column_names, rows))


def _print_record(result: LogCheck) -> None:
    """What the record holds besides the checked lines: where it ends, superseded lines, gaps."""
    if result.record_end is not None:
        segments = f" in {result.segments:,} segment{'s' if result.segments != 1 else ''}" if result.segments else ""
        out.print(f"record: ends at step {result.record_end:,}{segments}; {result.superseded:,} superseded "
                  "line" + ("s" if result.superseded != 1 else "") + " (of steps a later segment re-ran: not evidence)")
    if not result.gaps:
        return
    allowed = " (allowed by --allow-gaps)" if result.allow_gaps else ""
    out.print(f"[{'yellow' if result.allow_gaps else 'red'}]gaps[/]: {_gap_count(result)} with no kept line{allowed}")
    for gap in result.gaps[:_GAPS_SHOWN]:
        out.print(f"  {gap}", markup=False)
    if len(result.gaps) > _GAPS_SHOWN:
        out.print(f"  … and {len(result.gaps) - _GAPS_SHOWN:,} more (--json lists them all)")


# -- replay output -------------------------------------------------------------------------------

def _field_previews(result: Replay) -> list[dict[str, str]]:
    from dsinspect.term.preview import preview

    fields = {f.name: f for f in result.fields}
    return [{c: preview(batch.table.column(c)[i].as_py(), fields.get(c)) for c in batch.table.column_names}
            for batch in result.batches for i in range(batch.table.num_rows)]


def _transformed_previews(result: Replay) -> dict[str, Any]:
    from dsinspect.inspect.cells import repr_line
    from dsinspect.loaders.records.transforms import as_table
    from dsinspect.term.preview import preview

    data: dict[str, Any] = {}
    for batch in result.batches:
        try:
            table = as_table(batch.transformed)
            rows = [{c: preview(table.column(c)[i].as_py()) for c in table.column_names} for i in range(table.num_rows)]
            data[str(batch.rank)] = {"rows": rows}
        except UserError:
            data[str(batch.rank)] = {"repr": repr_line(batch.transformed)}
    return {"fingerprints": {str(r): fp for r, fp in result.transformed_fingerprints.items()},
            "error": result.transform_error, "ranks": data}


def _export_json(receipt: dict | None) -> dict | None:
    if receipt is None:
        return None
    return {"directory": receipt["directory"], "parquet": receipt["parquet"], "receipt": receipt["receipt_file"]}


def _print_replay(result: Replay, transformed: bool) -> None:
    spec = result.spec
    ranks = _ranks_text(result.ranks)
    sources = ", ".join(f"{s.name}@{s.version[:12]}" + (f" ×{s.weight:g}" if spec.is_mixture else "")
                        for s in spec.sources)
    out.print(f"[bold]step {result.step}[/] (epoch {result.epoch}) · {ranks} of {spec.world_size} · "
              f"batch {spec.batch_size} · {sources} · spec {spec.hash[:12]}")
    many = len(result.ranks) > 1
    out.print(_provenance_table(result, many))
    out.print(_fields_table(result, many))
    for s in result.unverified:
        out.print(f"[red]damaged[/]: rank {s.rank} position {s.position} (index {s.index}, shard {s.shard} row "
                  f"{s.shard_row}): its bytes no longer hash to the stored row hash")
    if transformed:
        _print_transformed(result, many)
    for rank, fp in result.fingerprints.items():
        out.print(f"fingerprint (stored)       rank {rank}: [bold]{fp}[/]")
    for rank, fp in result.transformed_fingerprints.items():
        out.print(f"fingerprint (transformed)  rank {rank}: [bold]{fp}[/]")
    if result.beyond_record:
        out.print(f"[yellow]note[/]: the run's record ends at step {result.record_end}; step {result.step} is past it: "
                  "this batch is its spec's, no logged line vouches for it")


def _provenance_table(result: Replay | Exported, many: bool) -> Table:
    from rich.table import Table

    table = Table(title="samples", title_justify="left")
    columns = (["rank"] if many else []) + ["pos", "index"] + (["source"] if result.spec.is_mixture else []) \
        + ["shard:row", "row hash", "pad", "seed"]
    for col in columns:
        table.add_column(col, justify="right" if col in ("rank", "pos", "index", "seed") else "left", no_wrap=True)
    for s in result.samples:
        cells = ([str(s.rank)] if many else []) + [str(s.position), f"{s.index:,}"] \
            + ([f"{s.source}@{s.version[:8]}"] if result.spec.is_mixture else []) \
            + [f"{s.shard}:{s.shard_row}", s.row_hash.hex()[:16] + ("" if s.verified is not False else " [red]![/]"),
               "yes" if s.padding else "", f"{s.seed:016x}"]
        table.add_row(*cells)
    return table


def _fields_table(result: Replay, many: bool) -> Table | str:
    from dsinspect.term.preview import preview

    roles = {f.name: f for f in result.fields}
    names = result.batches[0].table.column_names
    if not names:
        return "fields: the mixture's sources share no field with one type (pass --columns)"
    rows = [(([str(batch.rank)] if many else []) + [str(i)],
             [preview(batch.table.column(c)[i].as_py(), roles.get(c)) for c in names])
            for batch in result.batches for i in range(batch.table.num_rows)]
    return preview_table("fields", (["rank"] if many else []) + ["pos"], names, rows)


def preview_table(title: str, labels: list[str], names: list[str], rows: list[tuple[list[str], list[str]]]) -> Table:
    """One row per sample and a column per field when that fits the terminal, else one row per
    (sample, field) so no preview is squeezed out of sight."""
    from rich.cells import cell_len
    from rich.table import Table

    widths = [max([cell_len(n)] + [cell_len(cells[j]) for _, cells in rows]) for j, n in enumerate(names)]
    label_width = sum(max([len(h)] + [len(lab[j]) for lab, _ in rows]) for j, h in enumerate(labels))
    wide = label_width + sum(widths) + 3 * (len(names) + len(labels)) + 1 <= (out.width or 132)
    table = Table(title=title, title_justify="left")
    for label in labels:
        table.add_column(label, justify="right", no_wrap=True)
    if wide:
        for name in names:
            table.add_column(name, no_wrap=True)
        for label, cells in rows:
            table.add_row(*label, *cells)
        return table
    table.add_column("field", no_wrap=True)
    table.add_column("preview", overflow="ellipsis", no_wrap=True)
    for label, cells in rows:
        for j, (name, cell) in enumerate(zip(names, cells)):
            table.add_row(*(label if j == 0 else [""] * len(label)), name, cell)
        table.add_section()
    return table


def _print_transformed(result: Replay, many: bool) -> None:
    from dsinspect.inspect.cells import repr_line
    from dsinspect.loaders.records.transforms import as_table
    from dsinspect.term.preview import preview

    for batch in result.batches:
        try:
            table = as_table(batch.transformed)
        except UserError:
            out.print(f"as transformed (rank {batch.rank}): {repr_line(batch.transformed)}", markup=False)
            continue
        rows = [([str(i)], [preview(table.column(c)[i].as_py()) for c in table.column_names])
                for i in range(table.num_rows)]
        out.print(preview_table(f"as transformed (rank {batch.rank})", ["pos"], table.column_names, rows))
    if result.transform_error:
        out.print(f"no transformed fingerprint: {result.transform_error}", markup=False)
