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
# dsinspect.inspect.rollout_view.COLOR_BY (a test keeps them equal), for the same reason.
COLOR_BY = ("logprob_gap", "sampler_logprobs", "learner_logprobs", "ref_logprobs", "advantage", "loss_mask")


@click.command()
@click.argument("address")
@click.option("--field", "fields", multiple=True, metavar="NAME", help="Show only this field (repeatable).")
@click.option("--raw", is_flag=True, help="Add hex dumps of each field's raw and canonical bytes.")
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True,
              help="Page of tokens, trajectory steps and hex dumps.")
@click.option("--tokenizer", type=click.Choice(TOKENIZERS), default=None,
              help="Decode token ids with this tokenizer instead of the one stored for the field.")
@click.option("--frame", type=int, default=None, metavar="N", help="Also show video frame N (from 0) at full size.")
@click.option("--color-by", type=click.Choice(COLOR_BY), default=None,
              help="LLM rollouts: colour each token by this value [default: logprob_gap, else the first the "
                   "rollout has].")
@click.option("--group", default=None, metavar="G",
              help="LLM rollouts (ADDRESS without :INDEX): the responses of group G side by side.")
@click.option("--rollout-id", default=None, metavar="ID",
              help="LLM rollouts (ADDRESS without :INDEX): the rollout whose key is ID.")
@catalog_option
@json_option
@click.pass_context
def show(ctx: click.Context, address: str, fields: tuple[str, ...], raw: bool, page: int, tokenizer: str | None,
         frame: int | None, color_by: str | None, group: str | None, rollout_id: str | None,
         catalog_url: str | None, as_json: bool) -> None:
    """One sample (ADDRESS is NAME[@REF]:INDEX): every field decoded next to its bytes and hashes,
    and the row hash recomputed and compared with the stored one (exit 1 when they differ).

    A sample of LLM RL rollouts is first shown as one rollout: prompt and response tokens coloured by
    --color-by, turns set apart, reward, advantage and the findings with their token positions.
    `--rollout-id ID` finds a rollout by its key, `--group G` shows a group's responses side by side."""
    Image = require("PIL.Image", "media", "dsinspect show")  # the inspection core decodes with Pillow and PyAV
    require("av", "media", "dsinspect show")
    from dsinspect.inspect import open_address

    catalog = catalog_from(ctx, catalog_url)
    if group is not None or rollout_id is not None:
        version, addr = _version_without_index(catalog, address, group, rollout_id)
        if group is not None:
            return _show_group(version, group, color_by, as_json)
        from dsinspect.inspect.rollout_view import find_rollout

        address = f"{addr.name}@{version.id}:{find_rollout(version, rollout_id)}"
    sample = open_address(catalog, address)
    for name in fields:
        sample.field(name)  # an unknown name is a one-line error before any output
    if frame is not None:
        _check_frame(sample, fields, frame)
    rollout = _rollout_of(sample, not fields or color_by is not None, color_by)
    with warnings.catch_warnings():  # the bomb guard answers in the view; Pillow's warning would only add noise
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        _print_sample(sample, rollout, fields, raw, page, tokenizer, frame, color_by, as_json)
    if not sample.row_hash.ok:
        fail(f"{sample.address}: stored row hash {sample.row_hash.stored} does not match "
             f"{sample.row_hash.recomputed} recomputed from the data", 1)


def _print_sample(sample: Any, rollout: Any, fields: tuple[str, ...], raw: bool, page: int, tokenizer: str | None,
                  frame: int | None, color_by: str | None, as_json: bool) -> None:
    from dsinspect.term import Options, render_sample

    if as_json:
        data = sample.to_json(fields=list(fields) or None, raw=raw, page=page - 1, tokenizer=tokenizer)
        if rollout is not None:
            data["rollout"] = rollout if isinstance(rollout, dict) else rollout.to_json()
        emit_json(data)
        return
    color = out.color_system is not None
    if rollout is not None:
        out.print(_rollout_renderable(rollout, color_by, color, page - 1))
    opts = Options(list(fields), raw, page - 1, tokenizer, frame, min(out.width, 160), color)
    out.print(render_sample(sample, opts))


def _version_without_index(catalog: Any, address: str, group: str | None, rollout_id: str | None) -> tuple[Any, Any]:
    """The version `--group` or `--rollout-id` look in: ADDRESS names a version, not a row."""
    from dsinspect.loaders.store.address import parse_address

    flag = "--group" if group is not None else "--rollout-id"
    if group is not None and rollout_id is not None:
        raise UserError("--group and --rollout-id each pick what to show: give one")
    addr = parse_address(address)
    if addr.index is not None:
        raise UserError(f"{flag} picks the rollout(s): give ADDRESS without :INDEX (e.g. {addr.name}@{addr.ref} "
                        f"{flag} {group if group is not None else rollout_id})")
    return catalog.resolve(addr), addr


def _show_group(version: Any, group: str, color_by: str | None, as_json: bool) -> None:
    from dsinspect.inspect.rollout_view import group_view
    from dsinspect.term.rollout import render_group

    view = group_view(version, group)
    if as_json:
        emit_json(view.to_json())
    else:
        out.print(render_group(view, color_by, min(out.width, 160), out.color_system is not None))


def _rollout_of(sample: Any, wanted: bool, color_by: str | None) -> Any:
    """The rollout view of the sample (None unless its version is LLM rollouts and it is wanted); a view
    that cannot be built is its reason as a dict, shown where the view would be."""
    from dsinspect.inspect.rollout_dataset import is_rollouts
    from dsinspect.inspect.views import reason_of

    if not is_rollouts(sample.version):
        if color_by is not None:
            raise UserError(f"--color-by colours the tokens of LLM rollouts: {sample.dataset} is not rollouts")
        return None
    if not wanted:
        return None
    from dsinspect.inspect.rollout_view import rollout_view

    try:
        return rollout_view(sample.version, sample.index)
    except Exception as e:  # noqa: BLE001 - broken data: the fields below still show what is there
        return {"kind": "error", "reason": f"the rollout view could not be built: {reason_of(e)}"}


def _rollout_renderable(rollout: Any, color_by: str | None, color: bool, page: int) -> Any:
    from rich.console import Group
    from rich.rule import Rule
    from rich.text import Text

    from dsinspect.term.rollout import render_rollout

    body = (Text(rollout["reason"], "bold red") if isinstance(rollout, dict)
            else render_rollout(rollout, color_by, color, page))
    return Group(Rule(Text("rollout", "bold"), align="left"), body)


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
