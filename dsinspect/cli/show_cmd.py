"""`dsinspect show ADDRESS:INDEX`: one sample's decoded views, raw bytes and hashes."""

from __future__ import annotations

import warnings
from typing import Any

import click

from dsinspect.cli.output import catalog_from, catalog_option, emit_json, fail, json_option, out
from dsinspect.errors import UserError
from dsinspect.extras import require

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
    Image = require("PIL.Image", "media", "dsinspect show")  # the inspection core decodes with Pillow and PyAV
    require("av", "media", "dsinspect show")
    from dsinspect.inspect import open_address
    from dsinspect.term import Options, render_sample

    sample = open_address(catalog_from(ctx, catalog_url), address)
    for name in fields:
        sample.field(name)  # an unknown name is a one-line error before any output
    if frame is not None:
        _check_frame(sample, fields, frame)
    with warnings.catch_warnings():  # the bomb guard answers in the view; Pillow's warning would only add noise
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        if as_json:
            emit_json(sample.to_json(fields=list(fields) or None, raw=raw, page=page - 1, tokenizer=tokenizer))
        else:
            color = out.color_system is not None
            opts = Options(list(fields), raw, page - 1, tokenizer, frame, min(out.width, 160), color)
            out.print(render_sample(sample, opts))
    if not sample.row_hash.ok:
        fail(f"{sample.address}: stored row hash {sample.row_hash.stored} does not match "
             f"{sample.row_hash.recomputed} recomputed from the data", 1)


def _check_frame(sample: Any, fields: tuple[str, ...], frame: int) -> None:
    """--frame N must name a frame that decodes in every video field shown: else one line, exit 2,
    before any output (naming the field and how many frames it has)."""
    from dsinspect.inspect import ErrorView, FrameView, VideoView
    from dsinspect.inspect.video import decodable_frames

    videos = [f.name for f in sample.fields if f.role == "video"]
    shown = [n for n in (fields or videos) if n in videos]
    if not shown:
        which = f"field(s) {', '.join(fields)}" if fields else sample.dataset
        raise UserError(f"{sample.address}: --frame {frame} needs a video field; {which} has none"
                        + (f" (video fields: {', '.join(videos)})" if videos else ""))
    for name in shown:
        view, where = sample.view(name), f"{sample.address} field {name!r}"
        video = view if isinstance(view, VideoView) else getattr(view, "partial", None)
        if not isinstance(video, VideoView):
            why = view.reason if isinstance(view, ErrorView) else "it is null"
            raise UserError(f"{where}: no frame {frame}: no frame decodes ({why})")
        listed = video.frame_count
        if 0 <= frame < listed and isinstance(video.frame(frame), FrameView):
            continue
        if not listed:
            raise UserError(f"{where}: no frame {frame}: it has none")
        decodable = decodable_frames(video)  # only on this error path: it decodes the whole clip
        if decodable >= listed:
            raise UserError(f"{where}: no frame {frame}: it has {listed} frames (--frame 0 to {listed - 1})")
        which = f"--frame 0 to {decodable - 1}" if decodable else "none of them"
        said = f"frame {frame} does not decode" if 0 <= frame < listed else f"no frame {frame}"
        raise UserError(f"{where}: {said}: {decodable} of its {listed} frames do ({which}; the file is "
                        "damaged or truncated)")


COMMANDS = [show]
