"""Run independent tasks on an engine (inline, a process pool, Ray): JSON in, JSON out, bounded retries.

A task is named by `"module:function"` and called with one JSON-able dict, so nothing of ours is
pickled between processes. A `DsinspectError` inside a task is bad input, which a retry would only
repeat: it comes back as `{"error": ...}` and fails the run at once. Anything else (an I/O error, a
killed worker) is retried up to `retries` times.
"""

from __future__ import annotations

import pkgutil
from dataclasses import dataclass
from typing import Callable

from dsinspect.errors import DsinspectError, UserError

__all__ = ["ENGINES", "TaskFailed", "call_task", "run_tasks", "check_engine"]

ENGINES = ("inline", "pool", "ray")
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


def check_engine(engine: str, workers: int | None) -> None:
    if engine not in ENGINES:
        raise UserError(f"unknown engine {engine!r} (engines: {', '.join(ENGINES)})")
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be at least 1, not {workers}")


def run_tasks(engine: str, task: str, payloads: list[dict], *, workers: int | None = None, retries: int = 2,
              on_done: OnDone | None = None) -> list[dict]:
    """Results in payload order; `on_done(i, result)` as each task finishes (in completion order)."""
    check_engine(engine, workers)
    if not payloads:
        return []
    if engine == "inline" or (engine == "pool" and len(payloads) == 1):  # one task: no processes to start
        return _run_inline(task, payloads, retries, on_done)
    if engine == "pool":
        from dsinspect.loaders.compute.pool import run_pool
        return run_pool(task, payloads, workers=workers, retries=retries, on_done=on_done)
    from dsinspect.loaders.compute.ray_tasks import run_ray
    return run_ray(task, payloads, workers=workers, retries=retries, on_done=on_done)


def _run_inline(task: str, payloads: list[dict], retries: int, on_done: OnDone | None) -> list[dict]:
    results = []
    for i, payload in enumerate(payloads):
        for attempt in range(retries + 1):
            try:
                result = call_task(task, payload)
                break
            except Exception as e:  # noqa: BLE001 - any failure of a part is retried, then named
                if attempt == retries:
                    raise TaskFailed(i, f"failed after {retries + 1} attempts: {type(e).__name__}: {e}") from None
        results.append(checked(i, result))
        if on_done:
            on_done(i, result)
    return results


def checked(index: int, result: dict) -> dict:
    """The result, or TaskFailed when the task reported a user-facing error."""
    if "error" in result:
        raise TaskFailed(index, result["error"], result.get("exit_code", 2))
    return result
