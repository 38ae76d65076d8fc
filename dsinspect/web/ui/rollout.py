"""How a rollout and a group of rollouts are laid out (models/rollout.py makes their HTML): the Sample page
of a rollout dataset shows its rollout above the fields, the Group page its responses side by side. The
colour the tokens are shaded by is the URL's `?color=`; a rollout is also named by its id (`?rollout=`).
Stored text reaches the page only escaped (models/rollout.py), through md(), mono() or dataframes."""

from __future__ import annotations

from typing import Any

import streamlit as st

from dsinspect.inspect.rollout_view import COLOR_BY, LABELS, GroupView, RolloutView, TokenCell, scale
from dsinspect.loaders.store.address import parse_address
from dsinspect.web.models import rollout as model
from dsinspect.web.ui import cache
from dsinspect.web.ui.fields import VALUE_PAGE
from dsinspect.web.ui.nav import page_file
from dsinspect.web.ui.page import md, mono, or_stop
from dsinspect.web.ui.url import follow_url, set_param

__all__ = ["address_of", "color_choice", "rollout_panel", "show_rollout", "group_panel"]

_ICON = {"error": "✖", "warning": "⚠", "info": "ℹ"}
GROUP_COLUMNS = 4       # rollouts side by side in one row of a group page


def address_of(url: str, address: str, rollout_id: str) -> str:
    """The sample address (NAME@ID:INDEX) of the rollout `?rollout=` names in the version `address` names."""
    addr = or_stop(lambda: parse_address(address), "That address cannot be opened.")
    if addr.index is not None:
        st.error("Name a rollout by its id or by its row, not both: the address holds a row "
                 f"({addr.index}) and the link a rollout id.")
        st.stop()
    info = or_stop(lambda: cache.dataset_model(url, address), "That address cannot be opened.")
    version = f"{info['name']}@{info['id']}"
    index = or_stop(lambda: cache.rollout_index(url, version, rollout_id), "That rollout cannot be found.")
    return f"{info['name']}@{info['id'][:12]}:{index}"


def color_choice(key: str) -> str:
    """The URL's colour (`?color=`, checked: an unknown one stops the page with one message), in a
    selector whose change rewrites the URL."""
    given = or_stop(lambda: model.parse_color(st.query_params.get("color")), "Tokens cannot be coloured so.")
    follow_url(key, given)
    picked = st.segmented_control("Colour tokens by", list(COLOR_BY), format_func=lambda n: md(LABELS[n]),
                                  required=True, key=key)
    if picked and picked != given:
        st.query_params["color"] = picked
        st.rerun()
    return given


def _tokens(view: RolloutView, part: str, color: str, lo: float, hi: float, key: str) -> None:
    """One part's cells (prompt or response), TOKEN_PAGE at a time."""
    cells: list[TokenCell] = getattr(view, part)
    count = len(cells)
    pages = model.pages(count, model.TOKEN_PAGE)
    st.caption(md(f"{part} · {count:,} tokens" + (f" · {model.TOKEN_PAGE:,} a page" if pages > 1 else "")))
    page = 1
    if pages > 1:
        page = st.number_input(f"{part} token page (of {pages})", 1, pages, 1, key=key)
    start = (int(page) - 1) * model.TOKEN_PAGE
    st.markdown(model.part_html(cells, part, view.turns, color, lo, hi, start, start + model.TOKEN_PAGE),
                unsafe_allow_html=True)


def _findings(findings: list[Any]) -> None:
    """A rollout's findings, each with the positions it is at (response or prompt tokens)."""
    lines = []
    for f in findings:
        at = f.at or {}
        where = ""
        if at.get("positions"):
            where = f" · {at.get('axis') or 'response'} positions {', '.join(map(str, at['positions']))}"
        lines.append(f"{_ICON.get(f.severity.value, '•')} {f.severity.value} {f.code}{where}: {f.message}")
    if lines:
        mono("\n".join(lines))
    else:
        st.caption("no finding on this rollout")


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.6g}"


def rollout_panel(url: str, dataset: str, version_id: str, index: int) -> None:
    """Row `index` as a rollout, when the version is rollouts: its scalars, its prompt and response as token
    cells coloured by the URL's choice, turns set apart, its findings, and a link to its group."""
    view = or_stop(lambda: cache.rollout_model(url, f"{dataset}@{version_id}", index), "This rollout cannot be read.")
    if view is not None:
        show_rollout(view, f"{dataset}@{version_id[:12]}")


def show_rollout(view: RolloutView, name: str | None) -> None:
    """A rollout view (`rollout_panel`'s body); `name` (NAME@ID) is the published version it is a row of, for
    the links to its group and to itself by id; None for a version only held in memory (a learner's stream
    prefix, ui/learner.py): no link then."""
    st.markdown("### Rollout")
    c = st.columns(6)
    c[0].metric("rollout id", md(view.key if view.key is not None else "–"))
    c[1].metric("group", md(view.group if view.group is not None else "–"))
    c[2].metric("policy version", md(view.policy_version if view.policy_version is not None else "–"))
    c[3].metric("reward", _number(view.reward))
    c[4].metric("advantage", "per token" if view.advantage_per_token else _number(view.advantage))
    c[5].metric("finish reason", md(view.finish_reason or "–"))
    color = color_choice("rollout_color")
    if view.group is not None and name is not None:
        st.page_link(page_file("group"), label=md(f"Group {view.group}: every response to this prompt side by side"),
                     icon=":material/view_column:",
                     query_params={"address": name, "group": str(view.group), "color": color})
    if view.rewards:
        st.caption(md("rewards: " + " · ".join(f"{k} {v}" for k, v in view.rewards.items())))
    if view.key is not None and name is not None:
        st.caption(md(f"this rollout by its id: ?address={name}&rollout={view.key}"))
    _parts(view, color)
    _findings(view.findings)
    if view.skipped:
        st.caption(md("not checked: " + " · ".join(f"{k} ({v})" for k, v in view.skipped.items())))
    st.divider()


def _parts(view: RolloutView, color: str) -> None:
    """The prompt and the response as token cells, or their texts when the rollout has no tokens."""
    lo, hi = scale(view, color)
    if view.prompt or view.response:
        st.markdown(model.legend_html(color, lo, hi), unsafe_allow_html=True)
        if color not in view.color_by:
            st.caption(md(f"this rollout has no {LABELS[color]}"))
        _tokens(view, "prompt", color, lo, hi, "rollout_prompt_page")
        _tokens(view, "response", color, lo, hi, "rollout_response_page")
        st.caption(md(f"tokenizer {view.tokenizer or 'none'} · hover a token for its id, values and findings"))
    else:
        _text("prompt", view.prompt_text)
        _text("response", view.response_text)
    lost = [t for t in view.turns if t.start < 0]
    if lost:  # a message the rollout's turns hold that is not found in its tokens
        st.caption("turns not found in the tokens")
        mono("\n".join(f"{t.role}{' (tool call)' if t.tool_call else ''}: {t.text}" for t in lost))


def group_panel(g: GroupView, color: str, page: int, group_column: str | None) -> None:
    """A group: its rewards and advantages, zero advantage flagged, its findings, the shared prompt once and
    the responses of page `page` side by side (GROUP_PAGE a page, of the MAX_GROUP_ROWS the view holds)."""
    name = f"{g.dataset}@{g.version_id[:12]}"
    _group_summary(g, name, group_column)
    lo, hi = scale(g, color)  # one scale for the whole group: its responses compare by colour
    st.markdown(model.legend_html(color, lo, hi), unsafe_allow_html=True)
    if g.prompt_shared:
        st.markdown("#### The prompt")
        _prompt(g.rows[0], color, lo, hi, "group_prompt_page")
    _pager(page, model.pages(len(g.rows), model.GROUP_PAGE))
    st.markdown("#### Responses side by side")
    rows = g.rows[page * model.GROUP_PAGE:(page + 1) * model.GROUP_PAGE]
    for start in range(0, len(rows), GROUP_COLUMNS):
        for col, view in zip(st.columns(GROUP_COLUMNS), rows[start:start + GROUP_COLUMNS]):
            with col:
                _response_column(view, name, color, lo, hi, not g.prompt_shared)


def _group_summary(g: GroupView, name: str, group_column: str | None) -> None:
    """What the group is, how many rollouts it holds, zero advantage, a table of its rows and its findings."""
    shown = len(g.rows)
    st.subheader(md(f"{name} · group {g.group}"))
    more = f" · the first {shown:,} are shown" if shown < g.size else ""
    st.caption(md(f"{g.size:,} rollouts{more} · version {g.version_id}"))
    if shown < g.size and group_column:
        st.page_link(page_file("dataset"), label=md(f"All {g.size:,} rollouts of the group on the Dataset page"),
                     icon=":material/table:",
                     query_params={"address": name, "where": model.group_where(g, group_column)})
    if g.zero_advantage:
        st.warning("Zero advantage: every reward in this group is the same, so no response in it is better or "
                   "worse than another and the group teaches the policy nothing.", icon=":material/warning:")
    st.dataframe([{"row": v.index, "rollout id": str(v.key), "reward": r, "advantage": a,
                   "finish reason": v.finish_reason, "policy version": v.policy_version,
                   "response tokens": len(v.response), "findings": ", ".join(sorted({f.code for f in v.findings}))}
                  for v, r, a in zip(g.rows, g.rewards, g.advantages)], hide_index=True, key="group_table")
    if g.findings:
        mono("\n".join(f"{_ICON.get(f.severity.value, '•')} {f.severity.value} {f.code}: {f.message}"
                       for f in g.findings))


def _text(label: str, text: str | None) -> None:
    """A part's text, for a rollout without tokens (the first VALUE_PAGE characters; its field holds it all)."""
    if text is None:
        return
    more = f" · the first {VALUE_PAGE:,} of {len(text):,} characters: the field below holds them all" \
        if len(text) > VALUE_PAGE else ""
    st.caption(label + more)
    mono(text[:VALUE_PAGE])


def _prompt(view: RolloutView, color: str, lo: float, hi: float, key: str) -> None:
    if view.prompt:
        _tokens(view, "prompt", color, lo, hi, key)
    else:
        _text("prompt", view.prompt_text)


def _response_column(view: RolloutView, name: str, color: str, lo: float, hi: float, with_prompt: bool) -> None:
    key = view.key if view.key is not None else view.index
    st.page_link(page_file("sample"), label=md(f"rollout {key} · row {view.index}"), icon=":material/search:",
                 query_params={"address": f"{name}:{view.index}", "color": color})
    codes = sorted({f.code for f in view.findings})
    st.caption(md(f"reward {_number(view.reward)} · advantage "
                  f"{'per token' if view.advantage_per_token else _number(view.advantage)} · "
                  f"{view.finish_reason or 'no finish reason'}" + (f" · {', '.join(codes)}" if codes else "")))
    if with_prompt:
        _prompt(view, color, lo, hi, f"group_prompt_{view.index}")
    if view.response:
        _tokens(view, "response", color, lo, hi, f"group_response_{view.index}")
    else:
        _text("response", view.response_text)


def _pager(page: int, count: int) -> None:
    if count <= 1:
        return
    prev_col, next_col, info_col = st.columns([1, 1, 6])
    prev_col.button("previous page", key="group_prev", disabled=page == 0, on_click=set_param,
                    args=("page", str(page)))
    next_col.button("next page", key="group_next", disabled=page + 1 >= count, on_click=set_param,
                    args=("page", str(page + 2)))
    info_col.caption(f"page {page + 1} of {count} · {model.GROUP_PAGE} rollouts a page")
