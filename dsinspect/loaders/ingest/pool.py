"""The local engine: tasks in a process pool of spawned workers (no fork of a threaded parent).

Workers receive a task name and a JSON-able dict. A killed worker breaks the whole pool
(`BrokenProcessPool` for every unfinished task), so a new pool is started for what is left.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from dsinspect.loaders.ingest.tasks import OnDone, TaskFailed, call_task, checked

__all__ = ["run_pool", "default_workers"]


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _context() -> multiprocessing.context.BaseContext:
    # spawn, not forkserver: the fork server keeps the environment of its first use, so a later
    # pool would miss credentials or storage settings exported since (seen with S3 endpoints)
    return multiprocessing.get_context("spawn")


def run_pool(task: str, payloads: list[dict], *, workers: int | None, retries: int,
             on_done: OnDone | None) -> list[dict]:
    results: dict[int, dict] = {}
    attempts = dict.fromkeys(range(len(payloads)), 0)
    workers = min(workers or default_workers(), len(payloads))
    while len(results) < len(payloads):
        todo = [i for i in range(len(payloads)) if i not in results]
        with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
            futures: dict[Future, int] = {pool.submit(call_task, task, payloads[i]): i for i in todo}
            try:
                _collect(pool, task, payloads, futures, results, attempts, retries, on_done)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)  # a failed run starts no further parts
                raise
    return [results[i] for i in range(len(payloads))]


def _collect(pool: ProcessPoolExecutor, task: str, payloads: list[dict], futures: dict[Future, int],
             results: dict[int, dict], attempts: dict[int, int], retries: int, on_done: OnDone | None) -> None:
    """Wait for the futures, resubmitting failed tasks while the pool lives (the caller starts a
    new pool for whatever a broken one left unfinished)."""
    pending = set(futures)
    broken = False
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            i = futures.pop(future)
            try:
                result = future.result()
            except BrokenProcessPool as e:
                broken = True
                _count_attempt(i, attempts, retries, e)
                continue
            except Exception as e:  # noqa: BLE001 - a failing task is retried, then named
                _count_attempt(i, attempts, retries, e)
                if not broken:
                    try:
                        retry = pool.submit(call_task, task, payloads[i])
                    except BrokenProcessPool:
                        broken = True
                        continue
                    futures[retry] = i
                    pending.add(retry)
                continue
            results[i] = checked(i, result)
            if on_done:
                on_done(i, result)


def _count_attempt(i: int, attempts: dict[int, int], retries: int, error: BaseException) -> None:
    attempts[i] += 1
    if attempts[i] > retries:
        what = "a worker process died" if isinstance(error, BrokenProcessPool) else f"{type(error).__name__}: {error}"
        raise TaskFailed(i, f"failed after {attempts[i]} attempts: {what}")
