"""The local engine: tasks in a process pool of spawned workers (no fork of a threaded parent).

Workers receive a task name and a JSON-able dict. A killed worker breaks the whole pool
(`BrokenProcessPool` for every unfinished task), so a new pool is started for what is left. Only
the parts that had started when it broke are charged an attempt: each part drops a start marker
(an empty file) before it runs, and a part still queued behind the killer retries for free.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from dsinspect.loaders.compute.tasks import OnDone, TaskFailed, call_task, checked

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
    markers = tempfile.mkdtemp(prefix="dsinspect-pool-")
    try:
        while len(results) < len(payloads):
            todo = [i for i in range(len(payloads)) if i not in results]
            for i in todo:  # a part of a broken pool that had started was charged already
                _unmark(markers, i)
            with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
                def submit(i: int, pool: ProcessPoolExecutor = pool) -> Future:
                    return pool.submit(_call_marked, task, payloads[i], _marker(markers, i))

                futures: dict[Future, int] = {submit(i): i for i in todo}
                try:
                    _collect(submit, futures, results, attempts, retries, on_done, markers)
                except BaseException:
                    pool.shutdown(wait=True, cancel_futures=True)  # a failed run starts no further parts
                    raise
    finally:
        shutil.rmtree(markers, ignore_errors=True)
    return [results[i] for i in range(len(payloads))]


def _call_marked(task: str, payload: dict, marker: str) -> dict:
    open(marker, "wb").close()  # this part has started: if the pool breaks now, it was a try
    return call_task(task, payload)


def _marker(markers: str, i: int) -> str:
    return os.path.join(markers, str(i))


def _unmark(markers: str, i: int) -> None:
    try:
        os.unlink(_marker(markers, i))
    except FileNotFoundError:
        pass


def _collect(submit: Callable[[int], Future], futures: dict[Future, int], results: dict[int, dict],
             attempts: dict[int, int], retries: int, on_done: OnDone | None, markers: str) -> None:
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
                if os.path.exists(_marker(markers, i)):  # running when the pool broke; else never started
                    _count_attempt(i, attempts, retries, e)
                continue
            except Exception as e:  # noqa: BLE001 - a failing task is retried, then named
                _count_attempt(i, attempts, retries, e)
                if not broken:
                    _unmark(markers, i)  # the retry has not started yet
                    try:
                        retry = submit(i)
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
