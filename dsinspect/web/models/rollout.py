"""The rollout and group views of the web app: LLM RL rollouts (`inspect/rollout_view.py`) opened from what a
URL names, checked against bounds first, and their token cells as HTML coloured by `shade`, so a token has
the colour the TUI and CLI give it. Plain, picklable data and strings; no Streamlit (ui/cache.py caches these).

Every value from a URL (a rollout id, a group, a colour, a page) is checked here before any data is read:
too long, unknown or out of range is a UserError naming it. Every stored text (token pieces, turn texts,
roles, finding codes) is escaped (html.escape, newlines as character references) before it reaches HTML."""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.errors import NotFoundError, UserError
from dsinspect.inspect.rollout_dataset import is_rollouts, rollout_columns
from dsinspect.inspect.rollout_view import (
    COLOR_BY,
    DIVERGING,
    LABELS,
    MAX_GROUP_ROWS,
    GroupView,
    RolloutView,
    TokenCell,
    Turn,
    find_rollout,
    group_view,
    legend,
    rollout_view,
    shade,
)
from dsinspect.inspect.rollouts import Meaning
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["COLOR_BY", "LABELS", "DEFAULT_COLOR", "TOKEN_PAGE", "GROUP_PAGE", "MAX_GROUP", "MAX_VALUE",
           "parse_color", "parse_value", "parse_page", "rollout_at", "rollout_index", "group_at", "colour",
           "part_html", "legend_html", "cell_title", "group_where", "pages", "MAX_GROUP_ROWS"]

DEFAULT_COLOR = "logprob_gap"
TOKEN_PAGE = 512        # token cells of one part drawn at a time
GROUP_PAGE = 8          # rollouts of a group side by side on one page (of the MAX_GROUP_ROWS the view builds)
MAX_GROUP = 4096        # a larger "group" is refused before it is read: it is no GRPO group (rollout_view's limit)
MAX_VALUE = 200         # characters of a rollout id or group a URL may name

# what a shade of 1 mixes into the base, a light grey a shade of 0 is (a diverging scale: its middle, 0.5)
_BASE = (246, 246, 246)
_HIGH = (230, 85, 13)          # log-probs: the least likely token; the gap: at the scale's top
_NEGATIVE, _POSITIVE = (214, 39, 40), (49, 130, 189)
_IN_LOSS, _NOT_IN_LOSS = (116, 196, 118), (236, 236, 236)
_CSS = ("<style>.dsi-rollout{line-height:2}.dsi-rc{border-radius:3px;padding:0 2px;margin:0 1px;"
        "white-space:pre-wrap;font-family:'Source Code Pro',monospace;font-size:0.85rem;border:1px solid transparent}"
        ".dsi-rc.none{border:1px dashed #bbb}.dsi-rc.pad{opacity:0.45}.dsi-rc.spec{font-style:italic}"
        ".dsi-rc.find{outline:2px solid #d00000;outline-offset:1px}"
        ".dsi-turn{border-left:4px solid #9aa5b1;padding:0.1rem 0 0.1rem 0.6rem;margin:0.35rem 0}"
        ".dsi-turn[data-role=user]{border-color:#4c78a8}.dsi-turn[data-role=assistant]{border-color:#54a24b}"
        ".dsi-turn[data-role=system]{border-color:#b279a2}.dsi-turn[data-role=tool]{border-color:#f58518}"
        ".dsi-turn.tool{background:rgba(245,133,24,0.08)}"
        ".dsi-role{font-size:0.75rem;font-weight:600;color:#555;margin-right:0.5rem;font-family:sans-serif}"
        ".dsi-toolmark{font-size:0.7rem;font-weight:600;color:#fff;background:#f58518;border-radius:3px;"
        "padding:0 4px;margin-right:0.4rem;font-family:sans-serif}"
        ".dsi-legend{font-size:0.75rem;font-family:sans-serif;color:#555}</style>")


# -- what a URL may ask for -------------------------------------------------------------------------

def parse_color(value: str | None) -> str:
    """The colour a URL names (`?color=`), DEFAULT_COLOR when it names none."""
    if value is None or value == "":
        return DEFAULT_COLOR
    if value not in COLOR_BY:
        raise UserError(f"no colour {_shown(value)}: color is one of {', '.join(COLOR_BY)}")
    return value


def parse_value(what: str, value: str) -> str:
    """A rollout id or group as a URL gives it: not empty, at most MAX_VALUE characters, no control characters."""
    if not value or len(value) > MAX_VALUE or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UserError(f"bad {what} {_shown(value)}: expected a value of at most {MAX_VALUE} printable characters")
    return value


def parse_page(value: str | None, count: int) -> int:
    """A 1-based page number of `count` pages (`?page=`, 1 when absent), as a 0-based index."""
    if value is None or value == "":
        return 0
    if not (value.isascii() and value.isdigit() and len(value) <= 9) or not 1 <= int(value) <= count:
        raise UserError(f"no page {_shown(value)}: the group has {count} page(s) of {GROUP_PAGE} rollouts")
    return int(value) - 1


def pages(n: int, size: int) -> int:
    return max(1, -(-n // size))


def _shown(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:60] + "…")


# -- opening ----------------------------------------------------------------------------------------

def rollout_at(catalog: Catalog, version_address: str, index: int) -> RolloutView | None:
    """Row `index` of the version as a rollout, or None when the version is not LLM rollouts."""
    version = catalog.resolve(version_address)
    return rollout_view(version, index) if is_rollouts(version) else None


def rollout_index(catalog: Catalog, version_address: str, rollout_id: str) -> int:
    """The row of the rollout whose key (the dataset's key field) is `rollout_id`."""
    version = _rollouts(catalog, version_address)
    return find_rollout(version, parse_value("rollout id", rollout_id))


def group_at(catalog: Catalog, version_address: str, group: str) -> GroupView:
    """The rollouts of group `group`, refused before they are read when there are more than MAX_GROUP."""
    version = _rollouts(catalog, version_address)
    group = parse_value("group", group)
    name = rollout_columns(version.fields).get(Meaning.GROUP)
    if name is not None:
        size = _group_size(version, name, group)
        if size == 0:
            raise NotFoundError(f"{version.address}: no rollout in group {_shown(group)} ({name})")
        if size > MAX_GROUP:
            raise UserError(f"group {_shown(group)} of {version.address} holds {size:,} rollouts: the web shows "
                            f"groups of at most {MAX_GROUP:,} (a larger one is no GRPO group); filter the dataset "
                            f"by {name} instead")
    return group_view(version, group)


def _rollouts(catalog: Catalog, version_address: str) -> DatasetVersion:
    version = catalog.resolve(version_address)
    if not is_rollouts(version):
        raise UserError(f"{version.address}: not LLM rollouts (no response column with rewards, advantages, "
                        "log-probs or groups beside it)")
    return version


def _group_size(version: DatasetVersion, name: str, group: str) -> int:
    """How many rows' group column equals `group` ("3" an integer 3, as rollout_view reads it): one column read."""
    count = 0
    for _, table in version.iter_tables([name]):
        column = table.column(0)
        try:
            wanted = pa.scalar(group).cast(column.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError, OverflowError):
            return 0
        count += pc.sum(pc.fill_null(pc.equal(column, wanted), False)).as_py() or 0
    return count


def group_where(view: GroupView, column: str) -> str:
    """The Dataset page's filter (`dsinspect query --where`) that lists every rollout of the group."""
    quoted = '"' + column.replace('"', '""') + '"'
    value = view.group
    if isinstance(value, str):
        return f"{quoted} = '" + value.replace("'", "''") + "'"
    return f"{quoted} = {value!r}"


# -- colour and HTML --------------------------------------------------------------------------------

def colour(value: float | None, color_by: str) -> str | None:
    """The CSS colour of shade `value` (from rollout_view.shade) on `color_by`'s scale; None for no value."""
    fill = _fill(value, color_by)
    return None if fill is None else "rgb({}, {}, {})".format(*fill)


def _fill(value: float | None, color_by: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if color_by == "loss_mask":
        return _mix(_IN_LOSS if value >= 0.5 else _NOT_IN_LOSS, 1.0)
    if color_by in DIVERGING:
        return _mix(_POSITIVE, (value - 0.5) * 2) if value >= 0.5 else _mix(_NEGATIVE, (0.5 - value) * 2)
    return _mix(_HIGH, value)


def _mix(target: tuple[int, int, int], amount: float) -> tuple[int, ...]:
    return tuple(round(base + (t - base) * amount) for base, t in zip(_BASE, target))


def _style(value: float | None, color_by: str) -> str:
    """A cell's inline style: its colour, and white text on a dark one."""
    fill = _fill(value, color_by)
    if fill is None:
        return ""
    dark = 0.299 * fill[0] + 0.587 * fill[1] + 0.114 * fill[2] < 140
    return ' style="background:rgb({}, {}, {}){}"'.format(*fill, ";color:#fff" if dark else "")


def cell_title(cell: TokenCell, part: str) -> str:
    """What hovering a token shows: its position, id, piece, every value and finding (plain text)."""
    flags = [name for name, on in (("special", cell.special), ("padding", cell.padding)) if on]
    if cell.in_loss is not None:
        flags.append("in the loss" if cell.in_loss else "not in the loss")
    lines = [f"{part} #{cell.position} · id {cell.id} · {cell.piece!r}" + (" · " + ", ".join(flags) if flags else "")]
    lines += [f"{LABELS.get(name, name)}: {_number(value)}" for name, value in cell.values.items()]
    lines += [f"finding: {code}" for code in cell.findings]
    return "\n".join(lines)


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return str(value) if not math.isfinite(value) else f"{value:.6g}"


def _cell(cell: TokenCell, part: str, color_by: str, lo: float, hi: float) -> str:
    s = shade(cell.values.get(color_by), color_by, lo, hi)
    classes = ["dsi-rc"] + [c for c, on in (("none", s is None), ("pad", cell.padding), ("spec", cell.special),
                                               ("find", bool(cell.findings))) if on]
    style = _style(s, color_by)
    shade_attr = "" if s is None else f' data-shade="{s:.4f}"'
    return (f'<span class="{" ".join(classes)}" data-part="{part}" data-pos="{cell.position}"{shade_attr}{style} '
            f'title="{_escaped(cell_title(cell, part))}">{_escaped(cell.piece) or "∅"}</span>')


def part_html(cells: Sequence[TokenCell], part: str, turns: Sequence[Turn], color_by: str, lo: float, hi: float,
              start: int = 0, stop: int | None = None) -> str:
    """Cells [start, stop) of one part (prompt or response) coloured by `color_by` on the scale (lo, hi),
    each turn on this part set apart with its role (a tool call marked). One line of HTML, all text escaped."""
    stop = len(cells) if stop is None else min(stop, len(cells))
    blocks = []
    for lo_pos, hi_pos, turn in _segments(part, turns, start, stop):
        body = "".join(_cell(c, part, color_by, lo, hi) for c in cells[lo_pos:hi_pos])
        if turn is None:
            blocks.append(f'<div class="dsi-plain">{body}</div>')
            continue
        mark = '<span class="dsi-toolmark">tool call</span>' if turn.tool_call else ""
        blocks.append(f'<div class="dsi-turn{" tool" if turn.tool_call else ""}" data-role="{_escaped(turn.role)}">'
                      f'<span class="dsi-role">{_escaped(turn.role)}</span>{mark}{body}</div>')
    return _CSS + f'<div class="dsi-rollout" data-part="{part}">' + "".join(blocks) + "</div>"


def _segments(part: str, turns: Sequence[Turn], start: int, stop: int) -> list[tuple[int, int, Turn | None]]:
    """[start, stop) cut into runs of positions: each turn on `part` (in order, overlaps dropped), the gaps between."""
    placed = sorted((t for t in turns if t.part == part and 0 <= t.start < t.end), key=lambda t: t.start)
    out, at = [], start
    for t in placed:
        lo, hi = max(t.start, at), min(t.end, stop)
        if lo >= hi:
            continue
        if lo > at:
            out.append((at, lo, None))
        out.append((lo, hi, t))
        at = hi
    if at < stop:
        out.append((at, stop, None))
    return out


def legend_html(color_by: str, lo: float, hi: float) -> str:
    """A key to the colours: values across the scale, each in its colour."""
    items = "".join(f'<span class="dsi-rc"{_style(s, color_by)}>{_number(value)}</span>'
                    for value, s in legend(color_by, lo, hi))
    return (_CSS + f'<div class="dsi-legend">{_escaped(LABELS[color_by])}: {items} '
            '<span class="dsi-rc none">no value</span> <span class="dsi-rc find">finding</span></div>')


def _escaped(text: Any) -> str:
    """Text for HTML: every tag and attribute character escaped, and no raw line break (a blank line would
    end the HTML block Streamlit's Markdown renders it in, and let Markdown in)."""
    return html.escape(str(text), quote=True).replace("\r", "&#13;").replace("\n", "&#10;")

