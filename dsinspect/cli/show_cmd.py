"""`dsinspect show ADDRESS:INDEX`: one sample's decoded views, raw bytes and hashes."""

from __future__ import annotations

import warnings

import click

from dsinspect.cli.output import catalog_from, catalog_option, emit_json, fail, json_option, out

# dsinspect.inspect.TOKENIZER_CHOICES (a test keeps them equal); the inspection core, Pillow and PyAV
# load only when `show` runs, so other commands start without them.
TOKENIZERS = ("stored", "cl100k_base", "o200k_base")


@click.command()
@click.argument("address")
@click.option("--field", "fields", multiple=True, metavar="NAME", help="Show only this field (repeatable).")
@click.option("--raw", is_flag=True, help="Add hex dumps of each field's raw and canonical bytes.")
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True,
              help="Page of tokens, trajectory steps and hex dumps.")
@click.option("--tokenizer", type=click.Choice(TOKENIZERS), default=None,
              help="Decode token ids with this tokenizer instead of the one stored for the field.")
@click.option("--frame", type=int, default=None, metavar="N", help="Also show video frame N (from 0) at full size.")
@catalog_option
@json_option
@click.pass_context
def show(ctx: click.Context, address: str, fields: tuple[str, ...], raw: bool, page: int, tokenizer: str | None,
         frame: int | None, catalog_url: str | None, as_json: bool) -> None:
    """One sample (ADDRESS is NAME[@REF]:INDEX): every field decoded next to its bytes and hashes,
    and the row hash recomputed and compared with the stored one (exit 1 when they differ)."""
    from PIL import Image

    from dsinspect.term import Options, render_sample
    from dsinspect.inspect import open_address

    sample = open_address(catalog_from(ctx, catalog_url), address)
    for name in fields:
        sample.field(name)  # an unknown name is a one-line error before any output
    with warnings.catch_warnings():  # the bomb guard answers in the view; Pillow's warning would only add noise
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        if as_json:
            emit_json(sample.to_json(fields=list(fields) or None, raw=raw, page=page - 1, tokenizer=tokenizer))
        else:
            opts = Options(list(fields), raw, page - 1, tokenizer, frame, min(out.width, 160), out.color_system is not None)
            out.print(render_sample(sample, opts))
    if not sample.row_hash.ok:
        fail(f"{sample.address}: stored row hash {sample.row_hash.stored} does not match "
             f"{sample.row_hash.recomputed} recomputed from the data", 1)


COMMANDS = [show]
