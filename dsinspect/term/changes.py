"""A diff's changed fields for the terminal faces (`dsinspect diff`, the TUI's diff screen): each
field's change in words (`inspect.diff_text`) and, for text and tokens, the changed stretch in its
context (the diff's own `change`), wdiff-style so it reads without colours too."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from dsinspect.inspect.diff_text import detail_text

__all__ = ["what_changed"]

TOKEN_CONTEXT = 4  # token ids shown either side of a change (text keeps the diff's own context)


def what_changed(details: dict[str, dict[str, Any]]) -> Text:
    """Each field's change in words, and for text and tokens the changed stretch in its context,
    wdiff-style so it reads without colours too: [-removed-] in red, {+added+} in green (a rich
    Text: stored text is never markup)."""
    what = Text()
    for name, detail in details.items():
        if what:
            what.append("\n")
        what.append(f"{name}: {detail_text(detail)}")
        change = detail.get("change")
        if change:
            tokens = "tokens" in detail
            what.append("\n")
            what.append_text(_stretch(change, tokens, (detail["tokens"] if tokens else detail["chars"])[0]))
    return what


def _stretch(change: dict[str, Any], tokens: bool, length_a: int) -> Text:
    def shown(piece: Any) -> str:
        return " ".join(map(str, piece)) if tokens else piece.translate(_VISIBLE)

    start, end_a = change["span"][0], change["span"][1]
    before, after = change["before"], change["after"]
    if tokens:
        before, after = before[-TOKEN_CONTEXT:], after[:TOKEN_CONTEXT]
    gap = " " if tokens else ""
    text = Text("  ")
    text.append(("… " if start > len(before) else "") + shown(before) + (gap if before else ""), style="dim")
    if change["removed"]:
        text.append(f"[-{shown(change['removed'])}{' …' if change['cut'] else ''}-]", style="red strike")
    if change["added"]:
        text.append(gap if change["removed"] else "")
        text.append(f"{{+{shown(change['added'])}{' …' if change['cut'] else ''}+}}", style="green")
    text.append((gap if after else "") + shown(after) + (" …" if end_a + len(after) < length_a else ""), style="dim")
    return text


_VISIBLE = str.maketrans({"\n": "⏎", "\t": "→", "\r": "␍"})
