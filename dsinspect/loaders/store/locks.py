"""Advisory file locks between processes (flock): exclusive or shared, waiting or not. The kernel releases
a lock when its file descriptor closes, so a process that dies never leaves one behind."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator, Literal, overload

try:
    import fcntl
except ImportError:  # not POSIX: no file locks
    fcntl = None  # type: ignore[assignment]

__all__ = ["SUPPORTED", "open_locked", "locked_file", "SlotLocks"]

SUPPORTED = fcntl is not None


@overload
def open_locked(path: str | os.PathLike, *, shared: bool = ..., wait: Literal[True] = ..., create: bool = ...,
                mode: int = ...) -> int: ...
@overload
def open_locked(path: str | os.PathLike, *, shared: bool = ..., wait: bool, create: bool = ...,
                mode: int = ...) -> int | None: ...


def open_locked(path: str | os.PathLike, *, shared: bool = False, wait: bool = True, create: bool = True,
                mode: int = 0o644) -> int | None:
    """`path` opened (created with `mode` unless `create` is False) and locked, shared or exclusive: the
    descriptor, which holds the lock until closed. Waiting, it blocks until no other process holds a
    conflicting lock; without `wait` it returns None at once instead."""
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), mode)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def locked_file(path: str | os.PathLike, *, shared: bool = False, mode: int = 0o644) -> Iterator[None]:
    """Hold the lock on `path` (waiting for it) for the duration of a with-block."""
    fd = open_locked(path, shared=shared, mode=mode)
    try:
        yield
    finally:
        os.close(fd)  # closing drops the lock


class SlotLocks:
    """Exclusive locks on numbered slots of one file between processes (POSIX record locks, a byte
    per slot): a slot is held by this process until `unlock` or its death. Record locks belong to
    the process, not a thread (the caller keeps its threads apart) and all of a file's go when any
    descriptor of it is closed: open each file once per process and keep the handle."""

    def __init__(self, path: str | os.PathLike):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def try_lock(self, slot: int) -> bool:
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
        except OSError:  # EACCES or EAGAIN: another process holds it
            return False
        return True

    def unlock(self, slot: int) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, slot)

    def wait(self, slot: int, timeout: float) -> bool:
        """Until no other process holds `slot` (False: still held after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while not self.try_lock(slot):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        self.unlock(slot)
        return True

    def close(self) -> None:
        os.close(self.fd)
