"""Which parts of a shard being filled are in its `.partial` file, checked: the conversion of the
shard (`convert.py`) follows the fill row group by row group instead of starting after its last
byte (a 65 MB shard took ~1 s to convert after its fill ended: at the end of a cold epoch, a second
the link was idle and the consumer waited)."""

from __future__ import annotations

import threading
from typing import Iterable

__all__ = ["Landed", "FillAborted", "FillAbandoned"]


class FillAborted(Exception):
    """The fill a conversion was following failed (its own error is raised by the fill)."""


class FillAbandoned(Exception):
    """The reader that started a fill closed: the fill stopped at a run's boundary, leaving what it
    fetched and checked in the `.partial` file (listed in `.have`) for the next fill, and no entry."""


class Landed:
    """A set of part numbers that grows as a fill writes checked parts; `wait_for` blocks until
    some are in, or the fill failed."""

    def __init__(self) -> None:
        self._parts: set[int] = set()
        self._failed = False
        self._changed = threading.Condition()

    def add(self, parts: Iterable[int]) -> None:
        with self._changed:
            self._parts.update(parts)
            self._changed.notify_all()

    def fail(self) -> None:
        with self._changed:
            self._failed = True
            self._changed.notify_all()

    def wait_for(self, parts: Iterable[int]) -> None:
        wanted = set(parts)
        with self._changed:
            while not wanted <= self._parts:
                if self._failed:
                    raise FillAborted("the fill this conversion followed failed")
                self._changed.wait()
