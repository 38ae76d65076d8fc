"""Text: the string with its lengths, and every invalid byte or unusual code point (control
characters, zero-width and format characters, bidi overrides, private use, unassigned) made visible."""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dsinspect.inspect.views import Finding, Severity, View

__all__ = ["CodePointNote", "TextView", "text_view", "MAX_NOTES"]

MAX_NOTES = 1000
_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
_ZERO_WIDTH = {0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x180E}
_NOT_PLAIN = re.compile(r"[^\x20-\x7e\n\t\r]")  # \r too: CRLF line ends are ordinary
_SURROGATE = re.compile("[\ud800-\udfff]")
_SEVERITY = {"invalid-utf8": Severity.ERROR, "bidi": Severity.WARNING, "control": Severity.WARNING,
             "replacement": Severity.WARNING, "noncharacter": Severity.WARNING, "unassigned": Severity.INFO,
             "private-use": Severity.INFO, "zero-width": Severity.INFO, "format": Severity.INFO}


@dataclass(frozen=True)
class CodePointNote:
    """An invalid byte or unusual code point: where it is (character index and UTF-8 byte offset) and what."""

    index: int
    byte: int
    codepoint: int | None   # None for an invalid byte
    category: str           # invalid-utf8, control, bidi, zero-width, format, private-use, unassigned, ...
    label: str              # "U+202E RIGHT-TO-LEFT OVERRIDE", or "byte 0xFF" for an invalid byte

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "byte": self.byte, "codepoint": self.codepoint,
                "category": self.category, "label": self.label}


@dataclass
class TextView(View):
    """`text` has invalid bytes replaced by U+FFFD; `notes` say where they and unusual code points are."""

    kind: ClassVar[str] = "text"
    text: str
    chars: int
    utf8_bytes: int
    lines: int
    notes: list[CodePointNote] = field(default_factory=list)
    notes_total: int = 0
    findings: list[Finding] = field(default_factory=list)

    def segments(self, limit: int | None = None) -> list[tuple[str, CodePointNote | None]]:
        """The text as runs of plain text (note None) and single noted characters, up to `limit` chars."""
        end = len(self.text) if limit is None else min(limit, len(self.text))
        out: list[tuple[str, CodePointNote | None]] = []
        pos = 0
        for note in self.notes:
            if note.index >= end:
                break
            if note.index > pos:
                out.append((self.text[pos:note.index], None))
            out.append((self.text[note.index], note))
            pos = note.index + 1
        if pos < end:
            out.append((self.text[pos:end], None))
        return out

    @property
    def visible(self) -> str:
        """The text with every noted character replaced by a marker such as ⟨U+200B⟩."""
        return "".join(text if note is None else _marker(note) for text, note in self.segments())


def _marker(note: CodePointNote) -> str:
    return f"⟨{note.label.split(' ')[0] if note.codepoint is not None else note.label}⟩"


def text_view(value: str | bytes) -> TextView:
    """View a string, or bytes meant as UTF-8 (invalid bytes are kept visible as notes)."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
    decoded = raw.decode("utf-8", "surrogateescape")
    notes: list[CodePointNote] = []
    total, byte, end = 0, 0, 0
    for m in _NOT_PLAIN.finditer(decoded):  # only characters outside printable ASCII are looked at
        i = m.start()
        byte += i - end  # the plain run before it is ASCII: a byte a character
        width, described = _describe(m.group())
        if described is not None:
            total += 1
            if len(notes) < MAX_NOTES:
                notes.append(CodePointNote(i, byte, *described))
        byte += width
        end = i + 1
    text = _SURROGATE.sub("\ufffd", decoded)
    return TextView(text, len(text), len(raw), text.count("\n") + 1 if text else 0, notes, total,
                    _summarise(notes, total))


@functools.lru_cache(maxsize=4096)
def _describe(ch: str) -> tuple[int, tuple[int | None, str, str] | None]:
    """A character's UTF-8 length (an escaped invalid byte: 1) and, when it is worth a note, its
    (code point, category, label); per distinct character once (a text of random bytes notes most
    of its characters, mostly the same few hundred)."""
    width = len(ch.encode("utf-8", "surrogateescape"))
    category = _category(ch)
    if category is None:
        return width, None
    cp = ord(ch)
    if category == "invalid-utf8":
        return width, (None, category, f"byte 0x{cp - 0xDC00:02X}")
    name = unicodedata.name(ch, "") or {"control": "<control>"}.get(category, "<unnamed>")
    return width, (cp, category, f"U+{cp:04X} {name}")


def _category(ch: str) -> str | None:
    cp = ord(ch)
    if 0xDC80 <= cp <= 0xDCFF:
        return "invalid-utf8"  # surrogateescape of a byte that is not UTF-8
    if cp in _BIDI:
        return "bidi"
    if cp in _ZERO_WIDTH:
        return "zero-width"
    if cp == 0xFFFD:
        return "replacement"
    if (cp & 0xFFFE) == 0xFFFE or 0xFDD0 <= cp <= 0xFDEF:
        return "noncharacter"
    cat = unicodedata.category(ch)
    return {"Cc": "control", "Cf": "format", "Co": "private-use", "Cn": "unassigned"}.get(cat)


def _summarise(notes: list[CodePointNote], total: int) -> list[Finding]:
    """One finding per category, counting all occurrences and naming the first."""
    firsts: dict[str, CodePointNote] = {}
    counts: dict[str, int] = {}
    for n in notes:
        firsts.setdefault(n.category, n)
        counts[n.category] = counts.get(n.category, 0) + 1
    findings = []
    for cat, first in firsts.items():
        more = f" (listing stopped at the first {MAX_NOTES} of {total})" if total > len(notes) else ""
        findings.append(Finding(_SEVERITY.get(cat, Severity.INFO), f"text-{cat}",
                                f"{counts[cat]} {cat} {'byte' if cat == 'invalid-utf8' else 'character'}(s){more}, "
                                f"first: {first.label} at byte {first.byte}",
                                {"index": first.index, "byte": first.byte}))
    return findings
