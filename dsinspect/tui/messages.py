"""Messages the screens and widgets exchange; worker results come back as these."""

from __future__ import annotations

from typing import Any

from textual.message import Message

__all__ = ["OpenAddress", "RowsLoaded", "LoadFailed"]


class OpenAddress(Message):
    """Open `address` (NAME[@REF][:INDEX]): a dataset screen, or a sample screen with an index."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address


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
