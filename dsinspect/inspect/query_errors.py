"""DuckDB's errors about a query put in the person's own words: a syntax error quotes the text they
typed (the condition, the ordering, the SELECT) and where in it, never the statement dsinspect wraps
around it; an unknown column is named with the view's closest columns."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Sequence

from dsinspect.errors import UserError

__all__ = ["Part", "UnknownColumnError", "syntax_error", "unknown_column"]

_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_LINE = re.compile(r"^LINE (\d+): ")
_UNKNOWN = re.compile(r'Referenced column "((?:[^"]|"")+)" not found')


@dataclass(frozen=True)
class Part:
    """Text a person typed, at `start` in the statement built around it; `label` says which (e.g. where)."""
    label: str
    text: str
    start: int


class UnknownColumnError(UserError):
    """A query names a column the view does not have; `close` are the view's nearest names."""

    def __init__(self, message: str, column: str, close: Sequence[str]):
        super().__init__(message)
        self.column, self.close = column, list(close)


def unknown_column(message: str, columns: Sequence[str], address: str) -> UnknownColumnError | None:
    """The error for DuckDB's "Referenced column ... not found" `message`, else None."""
    found = _UNKNOWN.search(message)
    if not found:
        return None
    name = found.group(1).replace('""', '"')
    close = difflib.get_close_matches(name, columns, n=3, cutoff=0.5)
    hint = f" (closest: {', '.join(close)})" if close else ""
    return UnknownColumnError(f"bad query: no column {name!r} in {address}{hint}", name, close)


def syntax_error(message: str, sql: str, parts: Sequence[Part]) -> UserError:
    """DuckDB's parser `message` about `sql` as one line quoting the typed part it is in."""
    reason = message.strip().splitlines()[0].removeprefix("Parser Error: ") if message.strip() else "syntax error"
    offset = _offset(message, sql)
    part = _part_at(offset, parts) if offset is not None else None
    if part is None:
        return UserError(f"bad SQL: {reason}")
    at = offset - part.start
    if at < len(part.text.rstrip()):
        return UserError(f"bad SQL: {part.label} {part.text!r}: {reason} (character {at + 1})")
    return UserError(f"bad SQL: {part.label} {part.text!r}: incomplete at its end{_unclosed(part.text)}")


def _part_at(offset: int, parts: Sequence[Part]) -> Part | None:
    """The typed part holding `offset`, or the last one ending before it (an error in the text after
    it means the part stopped short: an unclosed parenthesis, a dangling operator)."""
    before = [p for p in parts if p.start <= offset]
    return max(before, key=lambda p: p.start) if before else None


def _unclosed(text: str) -> str:
    bare = _QUOTED.sub("", text)
    opened = bare.count("(") - bare.count(")")
    return f" ({opened} '(' not closed)" if opened > 0 else ""


def _offset(message: str, sql: str) -> int | None:
    """Where in `sql` DuckDB's caret points: its "LINE n: ..." excerpt (cut with "..." when long) is
    found in line n of `sql`, the caret under it gives the column."""
    lines = message.splitlines()
    for i, line in enumerate(lines[:-1]):
        head = _LINE.match(line)
        if not head or "^" not in lines[i + 1]:
            continue
        shown, caret = line[head.end():], lines[i + 1].index("^") - head.end()
        if shown.startswith("..."):
            shown, caret = shown[3:], caret - 3
        shown = shown.removesuffix("...")
        source = sql.split("\n")
        number = int(head.group(1)) - 1
        if not 0 <= number < len(source) or (start := source[number].find(shown)) < 0:
            return None
        return sum(len(s) + 1 for s in source[:number]) + start + caret
    return None
