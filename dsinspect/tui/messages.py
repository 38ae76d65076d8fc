"""Messages the screens and widgets exchange; worker results come back as these."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from textual.message import Message

__all__ = ["OpenAddress", "RowsLoaded", "LoadFailed", "Matches"]


@dataclass(frozen=True)
class Matches:
    """The samples a filter matched, stepped through by the sample screen's n/p: the one shown is
    match `position` (0-based) of `total`."""

    version: Any
    condition: str
    position: int
    total: int

    def moved(self, delta: int) -> "Matches | None":
        """The match `delta` away, or None past either end."""
        position = self.position + delta
        return replace(self, position=position) if 0 <= position < self.total else None


class OpenAddress(Message):
    """Open `address` (NAME[@REF][:INDEX]): a dataset screen, or a sample screen with an index;
    `matches` when the sample was opened from a filter's results (n/p then step through them)."""

    def __init__(self, address: str, matches: Matches | None = None) -> None:
        super().__init__()
        self.address, self.matches = address, matches


class RowsLoaded(Message):
    """A page of sample-table cells arrived from a worker."""

    def __init__(self, page: int, cells: list[list[str]]) -> None:
        super().__init__()
        self.page, self.cells = page, cells


class LoadFailed(Message):
    """A worker's read failed; the app shows `text` as an error notification."""

    def __init__(self, text: str, detail: Any = None) -> None:
        super().__init__()
        self.text, self.detail = text, detail
