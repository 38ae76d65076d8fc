"""`dsinspect where`: every (step, rank, slot) at which a run read a sample, or for a run of packed
sequences every sequence that held a document and which of its tokens: the order run backwards."""

from __future__ import annotations

import click

from dsinspect.cli.output import catalog_from, catalog_option, emit_json, json_option, out


@click.command("where")
@click.argument("address", metavar="NAME@REF:INDEX")
@click.option("--spec", "spec_path", required=True, metavar="RUN.json|DIR|NAME",
              help="Run spec file, a run record directory, or the name of one in CATALOG/runs.")
@click.option("--until-step", type=int, default=None,
              help="Look up to this step (excluded) [default: the end of the epoch the run starts in].")
@catalog_option
@json_option
@click.pass_context
def where_cmd(ctx: click.Context, address: str, spec_path: str, until_step: int | None, catalog_url: str | None,
              as_json: bool) -> None:
    """Where the run read sample ADDRESS (for packed sequences: document ADDRESS), computed from the
    run spec without reading the run's batches: each reading's step, rank, slot and epoch; for
    packed sequences also the sequence and the document's tokens [start, stop) at their offset in it.
    Nothing found is an answer (exit 0)."""
    from dsinspect.cli.runs_cmd import run_path
    from dsinspect.loaders.audit.where import where

    catalog = catalog_from(ctx, catalog_url)
    found, until = where(run_path(catalog, spec_path), address, catalog, until_step)
    if as_json:
        emit_json({"address": address, "until_step": until, "readings": [f.to_json() for f in found]})
        return
    if not found:
        out.print(f"{address}: not read before step {until:,}", markup=False)
        return
    packed = found[0].sequence is not None
    out.print(f"{address}: read {len(found)} time(s) before step {until:,}", markup=False)
    header = "step\trank\tslot\tepoch" + ("\tsequence\ttokens\toffset" if packed else "")
    out.print(header, markup=False)
    for f in found:
        row = f"{f.step}\t{f.rank}\t{f.slot}\t{f.epoch}"
        if packed:
            row += f"\t{f.sequence}\t{f.start}..{f.stop}\t{f.offset}"
        out.print(row, markup=False)


COMMANDS = [where_cmd]
