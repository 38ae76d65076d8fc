"""A fault-injecting fsspec filesystem for tests and debugging: wraps any filesystem and makes its
reads fail, time out, come back short, come back with a flipped bit, or come back late.

Every decision is a pure function of (seed, operation, path, offset, how many times that same
operation was asked before), so a run with the same seed and the same sequence of reads per file
meets the same faults. Writes and listings pass through untouched: the faults model a flaky
network read path, and a test of the writers needs real disk errors, not random ones.

Spec grammar (the `--inject-faults` option and $DSINSPECT_INJECT_FAULTS), comma-separated `key=value`:

    seed=INT          decision seed (default 0)
    error=RATE        transient errors: ConnectionResetError, ConnectionError, OSError(EIO)
    timeout=RATE      TimeoutError
    truncate=RATE     a read returns a short prefix, then end of file until the next seek
    flip=RATE         a read returns its bytes with one bit flipped
    slow=RATE         a read sleeps `delay` seconds first, then succeeds
    delay=SECONDS     the sleep of a slow read (default 0.005)
    match=GLOB        only paths matching this fnmatch pattern are faulted (default `*`)

Rates are probabilities per operation in [0, 1] and sum to at most 1 (one fault per operation).
Every error injected (`error`, `timeout`) is one `transient.is_transient` retries, as a network hiccup is.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any

import fsspec
from fsspec.spec import AbstractFileSystem

try:  # fsspec >= 2025.x: lets `faulty::file:///data` pass the inner path through
    from fsspec.implementations.chained import ChainedFileSystem
except ImportError:  # pragma: no cover - older fsspec: direct use only
    ChainedFileSystem = AbstractFileSystem  # type: ignore[misc,assignment]

from dsinspect.errors import UserError

__all__ = ["FaultSpec", "FaultStats", "FaultyFileSystem", "KINDS", "ENV", "wrap_from_env", "GLOBAL_STATS"]

ENV = "DSINSPECT_INJECT_FAULTS"
KINDS = ("error", "timeout", "truncate", "flip", "slow")  # in the order their rate intervals are laid out
_NO_DATA = ("error", "timeout")  # the kinds that can hit an operation returning no data (open)


@dataclass(frozen=True)
class FaultSpec:
    seed: int = 0
    error: float = 0.0
    timeout: float = 0.0
    truncate: float = 0.0
    flip: float = 0.0
    slow: float = 0.0
    delay: float = 0.005
    match: str = "*"

    def __post_init__(self) -> None:
        for kind in KINDS:
            rate = getattr(self, kind)
            if not 0.0 <= rate <= 1.0:
                raise UserError(f"fault spec: {kind}={rate} is not a rate in [0, 1]")
        if sum(getattr(self, k) for k in KINDS) > 1.0 + 1e-9:
            raise UserError("fault spec: the rates sum to more than 1 (one fault per operation at most)")
        if not 0.0 <= self.delay <= 60.0:
            raise UserError(f"fault spec: delay={self.delay} must be between 0 and 60 seconds")

    @classmethod
    def parse(cls, text: str) -> "FaultSpec":
        """`seed=7,error=0.05,flip=0.02` -> FaultSpec; anything else is a UserError naming the part."""
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for part in (p.strip() for p in str(text).split(",")):
            if not part:
                continue
            key, sep, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or key not in types:
                raise UserError(f"fault spec {text!r}: {part!r} is not one of "
                                f"{', '.join(k + '=' for k in types)}")
            if key in values:
                raise UserError(f"fault spec {text!r}: {key} is given twice")
            values[key] = _convert(text, key, value, types[key])
        return cls(**values)

    def to_text(self) -> str:
        return ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))

    def decide(self, op: str, path: str, offset: int, count: int,
               allowed: tuple[str, ...] = KINDS) -> tuple[str | None, int]:
        """(fault kind or None, a 64-bit number to derive the fault's details from)."""
        digest = hashlib.blake2b(f"{self.seed}\0{op}\0{path}\0{offset}\0{count}".encode(), digest_size=16).digest()
        u = int.from_bytes(digest[:8], "little") / 2.0 ** 64
        detail = int.from_bytes(digest[8:], "little")
        edge = 0.0
        for kind in KINDS:
            edge += getattr(self, kind)
            if u < edge:
                return (kind if kind in allowed else None), detail
        return None, detail


def _convert(text: str, key: str, value: str, kind: Any) -> Any:
    try:
        if kind in (int, "int"):
            return int(value)
        if kind in (float, "float"):
            return float(value)
    except ValueError:
        raise UserError(f"fault spec {text!r}: {key}={value!r} is not a number") from None
    return value


class FaultStats:
    """Counts of injected faults by kind, and of the operations that were considered. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.faults: Counter[str] = Counter()
        self.operations = 0

    def add(self, kind: str | None) -> None:
        with self._lock:
            self.operations += 1
            if kind:
                self.faults[kind] += 1

    @property
    def total(self) -> int:
        return sum(self.faults.values())

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {"operations": self.operations, "total": self.total, **{k: self.faults[k] for k in KINDS}}

    def summary(self) -> str:
        d = self.as_dict()
        return (f"injected {d['total']} faults in {d['operations']} read operations: "
                + ", ".join(f"{k}={d[k]}" for k in KINDS))


GLOBAL_STATS = FaultStats()  # what the `--inject-faults` debug option reports at exit


class FaultyFileSystem(ChainedFileSystem):
    """Reads of `fs` with faults injected per `spec`; everything else passes through to `fs`."""

    protocol = "faulty"
    cachable = False  # every wrapper owns its own counters and stats

    def __init__(self, fs: AbstractFileSystem | None = None, spec: FaultSpec | str = FaultSpec(),
                 stats: FaultStats | None = None, target_protocol: str | None = None,
                 target_options: dict | None = None, fo: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        if fs is None:  # as a chained URL, `faulty::file:///data`: options come as `faulty={"spec": "..."}`
            fs = fsspec.filesystem(target_protocol or "file", **(target_options or {}))
        self.fs = fs
        self.spec = FaultSpec.parse(spec) if isinstance(spec, str) else spec
        self.stats = stats if stats is not None else FaultStats()
        self._counts: Counter[tuple[str, str, int]] = Counter()
        self._lock = threading.Lock()

    # -- the fault decision ----------------------------------------------------------------------

    def inject(self, op: str, path: str, offset: int = 0, allowed: tuple[str, ...] = KINDS) -> tuple[str | None, int]:
        """Decide this operation's fault, count it, and raise or sleep for the kinds that do that;
        returns (kind, detail) so the caller can damage the data for truncate and flip."""
        if not fnmatch.fnmatchcase(path, self.spec.match):
            return None, 0
        with self._lock:
            count = self._counts[op, path, offset]
            self._counts[op, path, offset] += 1
        kind, detail = self.spec.decide(op, path, offset, count, allowed)
        self.stats.add(kind)
        if kind == "error":
            raise _transient(detail, f"injected fault: {op} {path} at byte {offset}")
        if kind == "timeout":
            raise TimeoutError(f"injected fault: {op} {path} at byte {offset} timed out")
        if kind == "slow":
            time.sleep(self.spec.delay)
        return kind, detail

    # -- reads (faulted) ---------------------------------------------------------------------------

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, autocommit: bool = True,
              cache_options: Any = None, **kwargs: Any) -> Any:
        if "r" not in mode:
            return self.fs.open(path, mode, block_size=block_size, cache_options=cache_options, **kwargs)
        self.inject("open", path, 0, _NO_DATA + ("slow",))
        return FaultyFile(self, path, self.fs.open(path, mode, block_size=block_size,
                                                   cache_options=cache_options, **kwargs))

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        kind, detail = self.inject("cat", path, start or 0)
        return damage(self.fs.cat_file(path, start=start, end=end, **kwargs), kind, detail)

    # -- everything else (passed through) -----------------------------------------------------------

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        return self.fs.ls(path, detail=detail, **kwargs)

    def info(self, path: str, **kwargs: Any) -> dict:
        return self.fs.info(path, **kwargs)

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self.fs.exists(path, **kwargs)

    def isdir(self, path: str) -> bool:
        return self.fs.isdir(path)

    def isfile(self, path: str) -> bool:
        return self.fs.isfile(path)

    def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        self.fs.pipe_file(path, value, **kwargs)

    def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        self.fs.put_file(lpath, rpath, **kwargs)

    def get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
        self.fs.get_file(rpath, lpath, **kwargs)

    def rm_file(self, path: str) -> None:
        self.fs.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        self.fs.rm(path, recursive=recursive, maxdepth=maxdepth)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self.fs.mkdir(path, create_parents=create_parents, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self.fs.makedirs(path, exist_ok=exist_ok)

    def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
        self.fs.mv(path1, path2, **kwargs)

    def unstrip_protocol(self, name: str) -> str:
        return self.fs.unstrip_protocol(name)  # errors name the real URL, not the wrapper

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:  # paths are the wrapped filesystem's own
        return path[len("faulty://"):] if isinstance(path, str) and path.startswith("faulty://") else path


class FaultyFile:
    """A read-only file whose reads go through the filesystem's fault decision."""

    def __init__(self, owner: FaultyFileSystem, path: str, inner: Any):
        self.owner, self.path, self.inner = owner, path, inner
        self._cut = False  # after a truncated read: end of file until the next seek

    def read(self, size: int = -1) -> bytes:
        if self._cut:
            return b""
        offset = self.inner.tell()
        kind, detail = self.owner.inject("read", self.path, offset)
        data = self.inner.read(size)
        if kind == "truncate" and data:
            self._cut = True
        return damage(data, kind, detail)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        self._cut = False
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.inner.close()

    @property
    def closed(self) -> bool:
        return self.inner.closed

    def __enter__(self) -> "FaultyFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:  # size, name, info(): as the real file has them
        return getattr(self.inner, name)


def damage(data: bytes, kind: str | None, detail: int) -> bytes:
    """`data` as a truncated or bit-flipped read returns it (unchanged for other kinds or no data)."""
    if not data or kind not in ("truncate", "flip"):
        return data
    if kind == "truncate":
        return data[:detail % len(data)]
    bit = detail % (len(data) * 8)
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _transient(detail: int, message: str) -> OSError:
    kind = detail % 3
    if kind == 0:
        return ConnectionResetError(errno.ECONNRESET, message)
    if kind == 1:
        return ConnectionError(message)
    return OSError(errno.EIO, message)


def wrap_from_env(fs: AbstractFileSystem) -> AbstractFileSystem:
    """`fs` wrapped per $DSINSPECT_INJECT_FAULTS (counting into GLOBAL_STATS), or `fs` itself when unset."""
    text = os.environ.get(ENV)
    if not text or isinstance(fs, FaultyFileSystem):
        return fs
    return FaultyFileSystem(fs, FaultSpec.parse(text), GLOBAL_STATS)


fsspec.register_implementation("faulty", FaultyFileSystem, clobber=True)
