"""What several pages lay out the same way: the one clear error a bad input gets instead of the page,
and text made inert for Streamlit's Markdown.

Almost every Streamlit element renders its text as Markdown: titles, captions, alerts, metric values,
image captions, st.table cells and every widget label. Any text there that comes from stored data
or a manifest (sample values, field names, tags, messages, names) goes through `md` or `mono`, or
into st.text / st.dataframe, which show plain text; otherwise `![x](http://elsewhere/)` in a row
makes the browser fetch from another host."""

from __future__ import annotations

import html
import re
from typing import Any, Callable, NoReturn, TypeVar

import streamlit as st

from dsinspect.errors import DsinspectError

__all__ = ["stop_with", "or_stop", "mono", "md", "MONO_CLASS"]

T = TypeVar("T")
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character: CommonMark escapes each
# what GFM's autolink literals start at: a protocol, www., or an e-mail address's local part
_LINKISH = re.compile(r"(?i)(?<![\w.+-])(?:https?://|www\.|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)")
MONO_CLASS = "dsi-pre"
_MONO_STYLE = (f"<style>.{MONO_CLASS}{{font-family:'Source Code Pro',monospace;font-size:0.85rem;margin:0 0 1rem;"
               "padding:0.75rem 1rem;border-radius:0.5rem;background:rgba(128,128,144,0.1);white-space:pre-wrap;"
               "overflow-wrap:anywhere}</style>")


def mono(text: str, where: Any = st, wrap: bool = True, marked: tuple[int, int] | None = None,
         columns: int = 0) -> None:
    """Text as a monospace block, every character escaped (html.escape: no tag or attribute survives).
    Not st.code: its syntax highlighter costs the browser ~0.8 s per page load here (bench_web.py),
    even for a single block of plain text. `where` is st or a column/container. `wrap=False` (hex
    dumps): no line ever wraps; the font shrinks (to 0.6rem at least) until `columns` characters (or the
    longest line) fit the block's width, and only a narrower block scrolls sideways. `marked`: characters [start, end)
    inside <mark class="dsi-changed"> (a diff's changed stretch; an empty one marks where text went)."""
    # one line of raw HTML: newlines as &#10;, so no blank line ends the HTML block and lets Markdown in
    # (and a div, since Streamlit swaps <pre> for its own element and drops the class)
    text = str(text)
    if marked is None:
        body = _escaped(text)
    else:
        start, end = marked
        body = (_escaped(text[:start]) + f'<mark class="{CHANGED_MARK}">{_escaped(text[start:end]) or "∅"}</mark>'
                + _escaped(text[end:]))
    block = f'<div class="{MONO_CLASS}"{"" if wrap else _fitted(text, columns)}>{body}</div>'
    if not wrap:  # the block's own width, for the font size to refer to (container query units)
        block = f'<div style="container-type:inline-size">{block}</div>'
    where.markdown(_MONO_STYLE + block, unsafe_allow_html=True)


def _fitted(text: str, columns: int) -> str:
    """The style of an unwrapped block whose font shrinks until its longest line fits: a character of a
    monospace font is 0.6em wide (a little more, for other fonts than Source Code Pro), plus the padding."""
    longest = max([columns, 1, *(len(line) for line in text.splitlines())])
    size = f"clamp(0.6rem,calc((100cqi - 1rem - 2px) / {0.61 * longest:.2f}),0.85rem)"
    return f' style="white-space:pre;overflow-wrap:normal;overflow-x:auto;padding:0.75rem 0.5rem;font-size:{size}"'

CHANGED_MARK = "dsi-changed"  # the class of a diff's marked stretch (models/diff.py: CHANGED_CLASS)


def _escaped(text: str) -> str:
    return html.escape(text, quote=True).replace("\r", "&#13;").replace("\n", "&#10;")


def md(text: Any) -> str:
    """`text` as Markdown that shows exactly these characters on one line: every ASCII punctuation
    character backslash-escaped (no link, image, emphasis, HTML, math, directive or :icon: survives)
    and line breaks as spaces (no block can start). A bare URL or e-mail address (`http://…`,
    `www.…`, `a@b.c`) gets an invisible word joiner (U+2060) before it: Streamlit's Markdown links
    those by the text itself, escaped or not, unless a letter-like character precedes them."""
    one_line = " ".join(str(text).splitlines())
    return _PUNCTUATION.sub(r"\\\1", _LINKISH.sub("\u2060\\g<0>", one_line))


def stop_with(headline: str, error: Exception) -> NoReturn:
    """One clear error (the headline, then the message as plain text), and nothing more of the page."""
    st.error(headline)
    mono(str(error))
    st.stop()


def or_stop(load: Callable[[], T], headline: str) -> T:
    """`load()`, or the page stops with `headline` and the error's one line."""
    try:
        return load()
    except DsinspectError as e:
        stop_with(headline, e)
