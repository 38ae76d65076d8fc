"""What every engine shares: a task, how it is called, and how it fails (the engines: `engines.run_tasks`).

A task is named by `"module:function"` and called with one JSON-able dict, so nothing of ours is
pickled between processes. A `DsinspectError` inside a task is bad input, which a retry would only
repeat: it comes back as `{"error": ...}` and fails the run at once. Anything else (an I/O error, a
killed worker) is retried up to `retries` times.
"""

from __future__ import annotations

import pkgutil
from dataclasses import dataclass
from typing import Callable

from dsinspect.errors import DsinspectError

__all__ = ["OnDone", "TaskFailed", "call_task", "checked"]

OnDone = Callable[[int, dict], None]


@dataclass
class TaskFailed(Exception):
    """Task `index` failed for good; `message` is one line, `exit_code` the CLI's."""

    index: int
    message: str
    exit_code: int = 2

    def __str__(self) -> str:
        return self.message


def call_task(task: str, payload: dict) -> dict:
    """Import and run one task; a user-facing error becomes a result instead of a retry."""
    fn = pkgutil.resolve_name(task)
    try:
        return fn(payload)
    except DsinspectError as e:
        return {"error": str(e), "exit_code": e.exit_code}


def checked(index: int, result: dict) -> dict:
    """The result, or TaskFailed when the task reported a user-facing error."""
    if "error" in result:
        raise TaskFailed(index, result["error"], result.get("exit_code", 2))
    return result
