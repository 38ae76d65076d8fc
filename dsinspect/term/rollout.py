"""Rich renderings of a rollout and of a group of rollouts: token cells coloured by the value picked
(`rollout_view.shade`, so the terminal agrees with the web), turns set apart, a legend, the findings with
their positions, and a table of every token's values. Shared by `dsinspect show` and the TUI.

Every piece of data goes into a `Text` as plain text (never markup) through `clean`, so a token that reads
`[bold]` shows exactly that and a control character can never reach the terminal.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
from rich.color import Color
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from dsinspect.inspect.rollout_view import (
    COLOR_BY,
    DIVERGING,
    LABELS,
    GroupView,
    RolloutView,
    TokenCell,
    Turn,
    legend,
    scale,
    shade,
)
from dsinspect.inspect.views import Finding, Severity
from dsinspect.term.render import clean

__all__ = ["pick_color_by", "shade_color", "cell_text", "tokens_text", "legend_text", "summary_text",
           "findings_lines", "cell_detail", "texts_text", "values_table", "render_rollout", "render_group", "number",
           "TABLE_PAGE"]

TABLE_PAGE = 256   # tokens a values table lists a page
_COLD, _HOT = (40, 44, 52), (214, 48, 49)            # a sequential value from nothing of note to its extreme
_NEG, _ZERO, _POS = (200, 60, 50), (58, 58, 58), (40, 140, 70)   # advantage: below, at and above zero
_MASK_OFF, _MASK_ON = (50, 50, 50), (31, 95, 168)
_FINDING = Style(bold=True, underline=True, color="#ffd75f")
_CURSOR = Style(color="black", bgcolor="#ffd75f", bold=True)
_ROLE_STYLE = {"system": "bold cyan", "user": "bold green", "assistant": "bold blue", "tool": "bold magenta"}
_SHORT = {"logprob_gap": "gap", "sampler_logprobs": "sampler", "learner_logprobs": "learner",
          "ref_logprobs": "ref", "advantage": "advantage", "loss_mask": "loss"}
_SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def pick_color_by(shown: RolloutView | GroupView, wanted: str | None) -> tuple[str | None, str | None]:
    """The value to colour by: `wanted` when the rollout(s) have it (None: the first of COLOR_BY they have),
    else the first they have, with a note saying so; (None, note) when they have no per-token value."""
    if wanted is not None and wanted not in COLOR_BY:
        raise ValueError(f"no colour by {wanted!r}: one of {', '.join(COLOR_BY)}")
    have = _color_by_of(shown)
    if not have:
        return None, (f"{wanted}: not in this data; " if wanted else "") + "no per-token values to colour by"
    if wanted is None or wanted in have:
        return wanted or have[0], None
    return have[0], f"{wanted}: not in this data; coloured by {have[0]}"


def _color_by_of(shown: RolloutView | GroupView) -> tuple[str, ...]:
    views = shown.rows if isinstance(shown, GroupView) else [shown]
    names = {n for v in views for n in v.color_by}
    return tuple(n for n in COLOR_BY if n in names)


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> Color:
    return Color.from_rgb(*(round(x + (y - x) * t) for x, y in zip(a, b)))


def shade_color(s: float, color_by: str) -> Color:
    """The background of a token whose shade is `s` (`rollout_view.shade`)."""
    if color_by == "loss_mask":
        return Color.from_rgb(*(_MASK_ON if s >= 0.5 else _MASK_OFF))
    if color_by in DIVERGING:
        return _mix(_ZERO, _NEG, (0.5 - s) * 2) if s < 0.5 else _mix(_ZERO, _POS, (s - 0.5) * 2)
    return _mix(_COLD, _HOT, s)


def cell_text(cell: TokenCell, color_by: str | None, lo: float, hi: float, color: bool = True,
              cursor: bool = False) -> Text:
    """One token: its piece (newline as ↵, tab as →) on its value's colour; a token with a finding bold,
    underlined and yellow, padding dim, special tokens magenta; without colour, boundaries as │."""
    piece = clean(cell.piece).replace("\n", "↵\n").replace("\t", "→") or "∅"
    value = cell.values.get(color_by) if color_by else None
    s = shade(value, color_by, lo, hi) if color_by else None
    style = Style(color="white")
    if s is not None:
        style += Style(bgcolor=shade_color(s, color_by))
    elif value is not None:  # NaN: no place on any scale
        style += Style(bgcolor="#5f005f", italic=True)
    if cell.special:
        style += Style(color="#ff87ff", bold=True)
    if cell.padding:
        style += Style(dim=True, italic=True)
    if cell.findings:
        style += _FINDING
    if cursor:
        style += _CURSOR
    text = Text(piece, style)
    if not color:
        text.append("‼" if cell.findings else "", "bold").append("│", "dim")
    return text


def tokens_text(view: RolloutView, color_by: str | None, lo: float, hi: float, color: bool = True,
                cursor: int | None = None) -> Text:
    """The prompt and the response, each turn on a line of its own after a label naming its role (a tool
    call marked); `cursor` counts cells over prompt then response."""
    out = Text()
    offset = 0
    for part, cells in (("prompt", view.prompt), ("response", view.response)):
        turns = sorted((t for t in view.turns if t.part == part and t.start >= 0), key=lambda t: t.start)
        out.append(f"{part} ({len(cells):,} tokens)\n", "bold underline")
        for label, chunk in _segments(cells, turns):
            if label is not None:
                out.append_text(label).append("\n")
            for cell in chunk:
                out.append_text(cell_text(cell, color_by, lo, hi, color, cursor == offset + cell.position))
            out.append("\n")
        offset += len(cells)
    unplaced = [t for t in view.turns if t.start < 0]
    for t in unplaced:
        out.append_text(_turn_label(t)).append(" (not found in the tokens) ", "dim").append(clean(t.text)).append("\n")
    out.rstrip()
    return out


def _segments(cells: list[TokenCell], turns: list[Turn]) -> list[tuple[Text | None, list[TokenCell]]]:
    """The cells cut at each turn's start and end; a turn's cells under its label, the rest unlabelled."""
    if not turns:
        return [(None, cells)] if cells else []
    out: list[tuple[Text | None, list[TokenCell]]] = []
    at = 0
    for t in turns:
        if t.start > at:
            out.append((Text("(outside any turn)", "dim"), cells[at:t.start]))
        start = max(t.start, at)
        out.append((_turn_label(t), cells[start:t.end]))
        at = max(at, t.end)
    if at < len(cells):
        rest = cells[at:]
        label = "padding" if all(c.padding for c in rest) else "(outside any turn)"
        out.append((Text(label, "dim"), rest))
    return out


def _turn_label(t: Turn) -> Text:
    text = Text("▍", _ROLE_STYLE.get(t.role, "bold")).append(clean(t.role), _ROLE_STYLE.get(t.role, "bold"))
    if t.tool_call:
        text.append(" · tool call", "bold magenta reverse")
    if t.start >= 0:
        text.append(f"  {t.part} {t.start}–{t.end}", "dim")
    return text


def legend_text(color_by: str | None, lo: float, hi: float, note: str | None = None) -> Text:
    """What the colours mean: the value's name and swatches across its scale."""
    if color_by is None:
        return Text(note or "no per-token values to colour by", "dim")
    text = Text.assemble(("colour: ", "dim"), (LABELS[color_by], "bold"), "  ")
    for value, s in legend(color_by, lo, hi):
        text.append("  ", Style(bgcolor=shade_color(s, color_by))).append(f" {number(value)}  ")
    text.append("· NaN ", "dim").append("  ", Style(bgcolor="#5f005f"))
    text.append("  · finding ", "dim").append("tok", _FINDING)
    if note:
        text.append(f"\n{note}", "yellow")
    return text


def summary_text(view: RolloutView) -> Text:
    """One line: the rollout's address, key, group, policy version, reward(s), advantage and finish reason."""
    parts: list[tuple[str, str]] = [("rollout ", "dim"), (view.address, "bold")]
    for label, value in (("key", view.key), ("group", view.group), ("policy version", view.policy_version),
                         ("reward", view.reward), ("advantage", view.advantage),
                         ("finish", view.finish_reason)):
        if value is not None:
            parts += [(f"  {label} ", "dim"), (clean(number(value) if isinstance(value, float) else str(value)),
                                               _value_style(value))]
    if view.advantage_per_token:
        parts += [("  advantage ", "dim"), ("per token", "")]
    text = Text.assemble(*parts)
    if view.rewards:
        text.append("\nrewards ", "dim").append(clean(", ".join(f"{k}: {_short(v)}" for k, v in view.rewards.items())))
    return text


def _value_style(value: object) -> str:
    return "bold red" if isinstance(value, float) and not math.isfinite(value) else "bold"


def _short(value: object) -> str:
    return number(value) if isinstance(value, float) else str(value)


def findings_lines(findings: Sequence[Finding]) -> Text:
    """Each finding with where it is: a rollout's token positions (and what they count), or a group's rows
    and each row's positions."""
    text = Text()
    for f in findings:
        text.append(f"{f.severity.value}: ", _SEVERITY_STYLE[f.severity]).append(clean(f.message))
        text.append_text(_where(f.at or {})).append(f"  [{f.code}]\n", "dim")
    if not findings:
        text.append("no findings", "green")
    text.rstrip()
    return text


def _where(at: dict) -> Text:
    axis = at.get("axis") or "response"
    rows, positions = at.get("rows"), at.get("positions")
    if isinstance(rows, list):  # a group's finding: its rows, and each row's positions
        listed = [f"{r}" + (f" ({axis} {', '.join(map(str, p))})" if positions and p else "")
                  for r, p in zip(rows, positions or [None] * len(rows))]
        return Text(f"  rows {'; '.join(listed)}", "bold")
    if positions:
        return Text(f"  at {axis} token(s) {', '.join(map(str, positions))}", "bold")
    return Text()


def cell_detail(cell: TokenCell, part: str) -> Text:
    """Everything about one token: position, id, piece, loss mask, every value and its findings."""
    text = Text.assemble(("token ", "dim"), (f"{part} #{cell.position}", "bold"), ("  id ", "dim"),
                         (str(cell.id), "bold yellow"), ("  piece ", "dim"), f"'{_escaped(cell.piece)}'")
    flags = [name for name, on in (("special", cell.special), ("padding", cell.padding)) if on]
    if flags:
        text.append(f"  {' '.join(flags)}", "magenta")
    if cell.in_loss is not None:
        text.append("  loss ", "dim").append("yes" if cell.in_loss else "no", "bold" if cell.in_loss else "")
    for name in COLOR_BY:
        if name in cell.values and name != "loss_mask":
            text.append(f"  {name} ", "dim").append(number(cell.values[name]))
    if cell.findings:
        text.append("  " + ", ".join(cell.findings), "bold red")
    return text


def _escaped(piece: str) -> str:
    return clean(piece.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r"))


def values_table(view: RolloutView, page: int = 0) -> Table:
    """Every token of a page (prompt then response) with its id, piece, loss mask, values and findings."""
    cells = [("prompt", c) for c in view.prompt] + [("response", c) for c in view.response]
    pages = max(1, -(-len(cells) // TABLE_PAGE))
    page = min(max(page, 0), pages - 1)
    names = [n for n in COLOR_BY if n != "loss_mask" and any(n in c.values for _, c in cells)]
    title = "tokens" + (f" (page {page + 1}/{pages})" if pages > 1 else "")
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for col in ("part", "pos", "id", "piece", "loss", "findings"):
        table.add_column(col, justify="right" if col in ("pos", "id") else "left", no_wrap=col != "findings")
    for name in names:
        table.add_column(_SHORT[name], justify="right", no_wrap=True)
    for part, c in cells[page * TABLE_PAGE:(page + 1) * TABLE_PAGE]:
        loss = "-" if c.in_loss is None else ("yes" if c.in_loss else "no")
        table.add_row(part, str(c.position), str(c.id), Text(_escaped(c.piece), "dim" if c.padding else ""), loss,
                      Text(", ".join(f.removeprefix("rollout-") for f in c.findings), "bold red"),
                      *(number(c.values.get(n)) for n in names))
    return table


def number(x: object) -> str:
    """A value for a person: integers as they are, float32 values with their own shortest digits, other
    floats with 6 significant digits; "-" for none."""
    if x is None:
        return "-"
    if isinstance(x, (bool, int, np.integer)) or not isinstance(x, (float, np.floating)):
        return str(x)
    x = float(x)
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    narrow = np.float32(x)
    return str(narrow) if float(narrow) == x else f"{x:.6g}"


def render_rollout(view: RolloutView, color_by: str | None = None, color: bool = True, page: int = 0,
                   table: bool = True) -> RenderableType:
    """The rollout view: summary, legend, tokens by turn, findings, and (with `table`) each token's values."""
    chosen, note = pick_color_by(view, color_by)
    lo, hi = scale(view, chosen) if chosen else (0.0, 0.0)
    parts: list[RenderableType] = [summary_text(view), legend_text(chosen, lo, hi, note)]
    if view.prompt or view.response:
        parts.append(tokens_text(view, chosen, lo, hi, color))
    else:
        parts.append(texts_text(view))
    parts.append(findings_lines(view.findings))
    if table and (view.prompt or view.response):
        parts.append(values_table(view, page))
    return Group(*parts)


def texts_text(view: RolloutView) -> Text:
    """A rollout kept as text only: its prompt and response, turns listed."""
    text = Text()
    for label, value in (("prompt", view.prompt_text), ("response", view.response_text)):
        text.append(f"{label}\n", "bold underline").append(clean(value) if value is not None else "(none)", "")
        text.append("\n")
    for t in view.turns:
        text.append_text(_turn_label(t)).append(" ").append(clean(t.text)).append("\n")
    text.rstrip()
    return text


def render_group(group: GroupView, color_by: str | None = None, width: int = 120, color: bool = True,
                 selected: int | None = None) -> RenderableType:
    """The group's responses side by side (as many columns as fit `width`, then the next ones below),
    each headed by its index, reward and advantage, under the prompt they share; then the findings."""
    chosen, note = pick_color_by(group, color_by)
    lo, hi = scale(group, chosen) if chosen else (0.0, 0.0)
    head = Text.assemble(("group ", "dim"), (clean(str(group.group)), "bold"),
                         ("  rollouts ", "dim"), f"{group.size:,}",
                         ("  rewards ", "dim"), ", ".join(number(r) for r in group.rewards),
                         ("  advantages ", "dim"), ", ".join(number(a) for a in group.advantages))
    if group.zero_advantage:
        head.append("  all rewards equal: zero advantage", "bold yellow")
    if group.size > len(group.rows):
        head.append(f"  (the first {len(group.rows)} shown)", "dim")
    parts: list[RenderableType] = [head, legend_text(chosen, lo, hi, note)]
    if group.prompt_shared and group.rows:
        first = group.rows[0]
        prompt = Text("prompt ", "bold underline")
        prompt.append_text(_part(first.prompt, first.prompt_text, chosen, lo, hi, color))
        parts.append(prompt)
    per_table = max(1, min(len(group.rows), width // 28))
    for begin in range(0, len(group.rows), per_table):
        parts.append(_side_by_side(group, range(begin, min(begin + per_table, len(group.rows))), chosen, lo, hi,
                                   color, selected))
    parts.append(findings_lines(group.findings))
    return Group(*parts)


def _side_by_side(group: GroupView, which: Iterable[int], color_by: str | None, lo: float, hi: float,
                  color: bool, selected: int | None) -> Table:
    table = Table(show_edge=False, pad_edge=False, expand=True, show_lines=False)
    bodies = []
    for i in which:
        view = group.rows[i]
        header = Text.assemble((f"#{view.index}", "bold reverse" if i == selected else "bold"),
                               f" key {clean(str(view.key))}\nreward {number(group.rewards[i])} · adv "
                               f"{number(group.advantages[i])}")
        codes = sorted({f.code.removeprefix("rollout-") for f in view.findings})
        header.append("\n" + (", ".join(codes) or "no findings"), "bold red" if codes else "green")
        table.add_column(header, ratio=1, overflow="fold")
        body = Text()
        if not group.prompt_shared:
            body.append_text(_part(view.prompt, None, color_by, lo, hi, color))
            body.append("\n")
        body.append_text(_part(view.response, view.response_text, color_by, lo, hi, color))
        bodies.append(body)
    table.add_row(*bodies)
    return table


def _part(cells: list, text: str | None, color_by: str | None, lo: float, hi: float, color: bool) -> Text:
    """A prompt or response as its coloured token cells, or as its text when it has no tokens."""
    shown = Text()
    for cell in cells:
        shown.append_text(cell_text(cell, color_by, lo, hi, color))
    if not cells:
        shown.append(clean(text or ""))
    return shown
