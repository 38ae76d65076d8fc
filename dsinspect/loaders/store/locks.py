"""Advisory file locks between processes (flock): exclusive or shared, waiting or not. The kernel releases
a lock when its file descriptor closes, so a process that dies never leaves one behind."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Literal, overload

try:
    import fcntl
except ImportError:  # not POSIX: no file locks
    fcntl = None  # type: ignore[assignment]

__all__ = ["SUPPORTED", "open_locked", "locked_file"]

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
