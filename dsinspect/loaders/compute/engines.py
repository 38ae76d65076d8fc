"""Run independent tasks on an engine by name (inline, a process pool, Ray): JSON in, JSON out,
bounded retries. The engines themselves are `pool` and `ray_tasks`; what they share is in `tasks`."""

from __future__ import annotations

from dsinspect.errors import UserError
from dsinspect.loaders.compute.tasks import OnDone, TaskFailed, call_task, checked

__all__ = ["ENGINES", "run_tasks", "check_engine"]

ENGINES = ("inline", "pool", "ray")


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
