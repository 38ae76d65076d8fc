"""A stream learner's record in the web app: the rollouts a (step, rank) consumed, read back from the commits its
line names (`loaders/stream/learner_record.py`), one consumed rollout as a rollout view, and the check of the
record against its stream. Plain, picklable data and strings; no Streamlit (ui/cache.py caches these).

What a link names (`replay?run=NAME&step=N&rank=R|all&slot=S`) is checked here before anything is read: a step
in ASCII digits within the record, a rank inside the step's world size (or all), a slot inside the rank's
batch; at most MAX_REPLAY_SAMPLES rollouts a page and MAX_REPLAY_BYTES of the commits they sit in (a commit is
read whole, as the learner read it). Every stored text reaching HTML (keys, responses) is escaped."""

from __future__ import annotations

import html
import re
from dataclasses import asdict
from typing import Any, Sequence
from urllib.parse import urlencode

from dsinspect.errors import NotFoundError, UserError
from dsinspect.inspect.learner_view import BEYOND, NEWER, PREVIEW, commit_bytes, consumed_rollouts
from dsinspect.inspect.rollout_view import RolloutView, rollout_view
from dsinspect.inspect.runs import RunView
from dsinspect.loaders.audit.logcheck import parse_steps
from dsinspect.loaders.format.rollout_fields import rollout_columns
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.stream import check_learner_run, consumed_step
from dsinspect.loaders.stream.learner_record import ConsumedStep, LearnerRun
from dsinspect.web.models.replay import MAX_REPLAY_BYTES, MAX_REPLAY_SAMPLES
from dsinspect.web.models.run import MAX_CHECK_SAMPLES

__all__ = ["learner_run", "parse_step", "parse_ranks", "parse_slot", "step_model", "consumed_rollout", "check_model",
           "step_html", "TABLE_CLASS", "PREVIEW"]

TABLE_CLASS = "dsi-learner-step"
_DIGITS = re.compile(r"[0-9]{1,15}")
_STYLE = (f"<style>.{TABLE_CLASS}{{border-collapse:collapse;font-size:0.85rem;margin-bottom:1rem}}"
          f".{TABLE_CLASS} th,.{TABLE_CLASS} td{{padding:0.15rem 0.6rem;border-bottom:1px solid rgba(128,128,144,0.25);"
          f"text-align:left;white-space:pre}}.{TABLE_CLASS} td.num{{text-align:right}}"
          f".{TABLE_CLASS} td.resp{{font-family:'Source Code Pro',monospace}}"
          f".{TABLE_CLASS} td.beyond{{background:#fde0dc;color:#b71c1c;font-weight:600}}"
          f".{TABLE_CLASS} td.newer{{background:#fff4d6;color:#8a5a00;font-weight:600}}"
          f".{TABLE_CLASS} tr.picked{{background:rgba(38,84,160,0.12)}}</style>")


def learner_run(view: RunView) -> LearnerRun:
    """The learner record a (cached) run view already holds: its record and specs, not read again."""
    if view.learner is None:
        raise UserError(f"{view.name}: not a stream learner's record")
    return LearnerRun(view.path, view.record, view.learner)


# -- what a link may ask for -------------------------------------------------------------------------

def parse_step(value: str | None) -> int:
    """A learner step as a URL gives it (`?step=`, 0 when absent): ASCII digits only."""
    if value is None or value == "":
        return 0
    if not _DIGITS.fullmatch(value):
        raise UserError(f"no step {_shown(value)}: a step is a number (ASCII digits)")
    return int(value)


def parse_ranks(value: str | None, world: int, step: int) -> list[int]:
    """The ranks `?rank=` names (0 when absent): one rank inside the step's world size, or all of them."""
    value = (value or "0").strip()
    if value.lower() == "all":
        return list(range(world))
    if not _DIGITS.fullmatch(value):
        raise UserError(f"no rank {_shown(value)}: a rank is a number below step {step}'s world size {world}, or all")
    if int(value) >= world:
        raise UserError(f"rank {int(value)} is outside step {step}'s world size {world}")
    return [int(value)]


def parse_slot(value: str | None, count: int) -> int | None:
    """A rollout's place in its rank's batch (`?slot=`; None when absent), one of `count`."""
    if value is None or value == "":
        return None
    if not _DIGITS.fullmatch(value) or int(value) >= count:
        raise UserError(f"no slot {_shown(value)}: this rank consumed {count} rollouts (slots 0..{count - 1})")
    return int(value)


def _shown(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:60] + "…")


# -- a step's rollouts -------------------------------------------------------------------------------

def _check_end(run: LearnerRun, step: int) -> None:
    """A step past the record's end is one line naming the end (there is no world size to hold a rank to)."""
    end = run.record.end
    if end is None:
        raise UserError(f"{run.directory}: the record holds no step yet")
    if step > end:
        raise UserError(f"step {step:,} is past the record's end: it ends at step {end:,}")


def _check_size(catalog: Catalog, run: LearnerRun, step: int, ranks: Sequence[int]) -> None:
    """Refuse, before a row is read, more than MAX_REPLAY_SAMPLES rollouts, or commits (each read whole) of
    more than MAX_REPLAY_BYTES."""
    spec = run.spec_at(step)
    if spec.batch_size * len(ranks) > MAX_REPLAY_SAMPLES:
        raise UserError(f"step {step} holds {spec.batch_size * len(ranks):,} rollouts ({spec.batch_size:,} a rank × "
                        f"{len(ranks):,} rank(s)); a page shows at most {MAX_REPLAY_SAMPLES:,}: pick one rank, or use "
                        f"`dsinspect replay --spec RUN --step {step} --rank all`")
    size = commit_bytes(catalog, run, step, list(ranks))
    if size > MAX_REPLAY_BYTES:
        raise UserError(f"step {step}'s rollouts sit in commits of {size:,} bytes; a page reads at most "
                        f"{MAX_REPLAY_BYTES:,}: use `dsinspect replay --spec RUN --step {step}`")


def step_model(catalog: Catalog, run: LearnerRun, step: int, rank: str) -> dict[str, Any]:
    """What `rank` (a number, or "all") consumed at `step`: the step's header and, per rank, its rollouts
    (slot, commit, row, key, policy version, staleness, reward, response preview, row hash) and the
    fingerprint recorded beside the one its rows give now."""
    _check_end(run, step)
    spec = run.spec_at(step)
    ranks = parse_ranks(rank, spec.world_size, step)
    _check_size(catalog, run, step, ranks)
    consumed = [consumed_step(catalog, run, step, r) for r in ranks]
    first = consumed[0]
    return {"step": step, "ranks": ranks, "world_size": spec.world_size, "batch_size": spec.batch_size,
            "dataset": spec.dataset, "order": spec.order, "learner_version": first.learner_version,
            "staleness_bound": spec.staleness_bound, "dropped": len(first.dropped), "end": run.record.end,
            "batches": [{"rank": c.rank, "fingerprint": c.fingerprint, "recomputed": c.recomputed, "ok": c.ok,
                         "key": c.key, "rows": _rows(c)} for c in consumed]}


def _rows(consumed: ConsumedStep) -> list[dict[str, Any]]:
    """Each consumed rollout as the table shows it (inspect/learner_view.py: what every face shows)."""
    return [asdict(r) for r in consumed_rollouts(consumed)]


def consumed_rollout(catalog: Catalog, run: LearnerRun, step: int, rank: int, slot: int) -> dict[str, Any]:
    """Slot `slot` of what `rank` consumed at `step` as a rollout view (None when the stream is not rollouts),
    over the stream up to the last commit the step read (an unpublished version in memory), checked at the
    learner's policy version and bound; `published` is that version's address when the catalog holds it."""
    _check_end(run, step)
    _check_size(catalog, run, step, [rank])
    consumed = consumed_step(catalog, run, step, rank)
    slot = parse_slot(str(slot), len(consumed.positions))
    version, indices = consumed.version(catalog)
    overrides = {k: v for k, v in (("learner_version", consumed.learner_version),
                                   ("staleness_bound", consumed.staleness_bound)) if v is not None}
    view: RolloutView | None = None
    if rollout_columns(version.fields) is not None:
        view = rollout_view(version, indices[slot], overrides=overrides)
    try:
        published = f"{version.name}@{catalog.resolve(f'{version.name}@{version.id}').id[:12]}"
    except (NotFoundError, UserError):
        published = None
    seq, offset = consumed.positions[slot]
    return {"view": view, "dataset": version.name, "version_id": version.id, "index": indices[slot],
            "commits": max(s for s, _ in consumed.positions) + 1, "commit": seq, "row": offset,
            "published": published, "staleness": consumed.staleness[slot]}


# -- the check -----------------------------------------------------------------------------------------

def check_model(catalog: Catalog, run: LearnerRun, steps: str | None = None) -> dict[str, Any]:
    """The record's kept lines in `steps` (A:B; default all) checked against the stream (`check_learner_run`:
    the selection run again from the record's first step); refused when the lines from the first step to
    the last checked name more than MAX_CHECK_SAMPLES rollouts. `divergence` is the first divergence's
    (step, rank) when its line names one, for the grid to mark."""
    wanted = parse_steps(steps)
    first = run.record.chain[-1].start if run.record.chain else 0
    upto = range(first, wanted.stop) if wanted is not None else None
    samples = sum(int(line.get("n") or 0) for line in run.record.kept(upto))
    if samples > MAX_CHECK_SAMPLES:
        raise UserError(f"checking these steps reads the {samples:,} rollouts consumed from the record's first step; "
                        f"a page checks at most {MAX_CHECK_SAMPLES:,}: run `dsinspect replay --check-log RUN` "
                        "on the command line")
    result = check_learner_run(catalog, run, wanted)
    out = result.to_json()
    first = result.first
    out["divergence"] = {"step": first[0], "rank": first[1]} if first and first[1] is not None else None
    return out


# -- HTML ----------------------------------------------------------------------------------------------

def step_html(batch: dict[str, Any], run_name: str, step: int, color: str | None, picked: int | None) -> str:
    """One rank's consumed rollouts as one line of HTML: a row per slot, the slot a link to that rollout
    (`replay?run=&step=&rank=&slot=[&color=]`), a staleness beyond the bound or negative marked. Every
    text escaped; every URL built by urlencode from numbers, the listed run name and a checked colour."""
    head = "".join(f"<th>{_escaped(h)}</th>" for h in ("slot", "commit", "row", batch["key"] or "key",
                                                       "policy version", "staleness", "reward", "response",
                                                       "row hash"))
    rows = []
    for r in batch["rows"]:
        query = {"run": run_name, "step": step, "rank": batch["rank"], "slot": r["slot"]}
        if color:
            query["color"] = color
        href = html.escape("replay?" + urlencode(query))
        mark = r["mark"]
        stale = _number(r["staleness"]) + {BEYOND: " ⚠ beyond the bound", NEWER: " ⚠ newer than the learner"
                                           }.get(mark, "")
        cells = [f'<td class="num slot"><a href="{href}" target="_self" title="open this rollout">{r["slot"]}</a></td>',
                 f'<td class="num">{r["commit"]}</td>', f'<td class="num">{r["row"]}</td>',
                 f'<td class="key">{_escaped(_number(r["key"]))}</td>',
                 f'<td class="num policy">{_escaped(_number(r["policy_version"]))}</td>',
                 f'<td class="num staleness{" " + mark if mark else ""}">{_escaped(stale)}</td>',
                 f'<td class="num">{_escaped(_number(r["reward"]))}</td>',
                 f'<td class="resp">{_escaped(r["response"])}</td>', f'<td class="hash">{r["row_hash"][:16]}</td>']
        picked_class = ' class="picked"' if r["slot"] == picked else ""
        rows.append(f'<tr data-slot="{r["slot"]}"{picked_class}>{"".join(cells)}</tr>')
    return (f'{_STYLE}<table class="{TABLE_CLASS}" data-rank="{batch["rank"]}"><tr>{head}</tr>'
            f'{"".join(rows)}</table>')


def _number(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else "" if value is None else str(value)


def _escaped(text: object) -> str:
    """Text for HTML: tags and attribute characters escaped, no raw line break (a blank line would end the
    HTML block Streamlit's Markdown renders it in, and let Markdown in)."""
    return html.escape(str(text), quote=True).replace("\r", "&#13;").replace("\n", "&#10;")
