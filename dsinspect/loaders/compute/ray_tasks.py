"""The cluster engine: one Ray task per part, retried by Ray when it raises or its worker dies.

Uses the Ray instance this process is connected to, else starts a local one (`ray.init` with
`num_cpus=workers`, no dashboard). Tasks receive a task name and a JSON-able dict, like the pool.
"""

from __future__ import annotations

from dsinspect.extras import require
from dsinspect.loaders.compute.tasks import OnDone, TaskFailed, call_task, checked

__all__ = ["run_ray", "require_ray"]


def require_ray():
    return require("ray", "ray", "--engine ray")


def _remote_call(task: str, payload: dict) -> dict:
    return call_task(task, payload)


def run_ray(task: str, payloads: list[dict], *, workers: int | None, retries: int,
            on_done: OnDone | None) -> list[dict]:
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
    remote = ray.remote(num_cpus=1, max_retries=retries, retry_exceptions=True)(_remote_call)
    refs = {remote.remote(task, p): i for i, p in enumerate(payloads)}
    results: dict[int, dict] = {}
    pending = list(refs)
    try:
        _collect(ray, refs, pending, results, retries, on_done)
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)  # a failed run starts no further parts
        raise
    return [results[i] for i in range(len(payloads))]


def _collect(ray, refs: dict, pending: list, results: dict[int, dict], retries: int, on_done: OnDone | None) -> None:
    while pending:
        done, pending[:] = ray.wait(pending, num_returns=1)
        for ref in done:
            i = refs[ref]
            try:
                result = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - Ray already retried it `retries` times
                cause = getattr(e, "cause", None) or e
                raise TaskFailed(i, f"failed after {retries + 1} attempts: {type(cause).__name__}: "
                                    f"{str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}") from None
            results[i] = checked(i, result)
            if on_done:
                on_done(i, result)
