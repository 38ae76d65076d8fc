"""Run records: the run spec of each stretch of a run, and a per-step fingerprint log per rank.

    <dir>/specs/step-<start step, 12 digits>.json      the spec in force from that step (rank 0 writes)
    <dir>/fingerprints/rank-<rank, 5 digits>.jsonl     {"step", "rank", "epoch", "fingerprint", "n", "of"}

A batch fingerprint is XXH3-128 over the batch's 16-byte row hashes in batch order (padding
included), hex; "of" says whether the hashes are of the rows as stored or as transformed.
docs/RUN_RECORDS.md is the prose version.
"""

from __future__ import annotations

import json
import os
import re
from typing import IO, Iterable, Iterator

import xxhash

from dsinspect.errors import UserError
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.store.storage import join, refuse_read_only, url_to_fs, write_atomic

__all__ = ["batch_fingerprint", "RunRecorder", "read_fingerprints", "read_specs", "spec_for_step"]

_SPEC_FILE = re.compile(r"^step-(\d{12})\.json$")


def batch_fingerprint(row_hashes: Iterable[bytes]) -> str:
    return xxhash.xxh3_128_hexdigest(b"".join(row_hashes))


class RunRecorder:
    """Writes a run's records; lines are buffered, so the cost per step is one small write."""

    def __init__(self, directory: str, rank: int, flush_every: int = 64):
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise UserError(f"bad rank {rank!r}: a run record's rank is an integer >= 0")  # it names a file
        self.fs, self.root = url_to_fs(directory)
        refuse_read_only(self.fs, self.root)
        self.rank, self.flush_every = rank, flush_every
        self._lines: list[str] = []
        self._file: IO[str] | None = None

    def write_spec(self, spec: RunSpec) -> None:
        if self.rank == 0:
            write_atomic(self.fs, join(self.root, "specs", f"step-{spec.start.step:012d}.json"), spec.dumps().encode())

    def record(self, step: int, epoch: int, fingerprint: str, n: int, of: str = "stored") -> None:
        self._lines.append(json.dumps({"step": step, "rank": self.rank, "epoch": epoch, "fingerprint": fingerprint,
                                       "n": n, "of": of}) + "\n")
        if len(self._lines) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        if not self._lines:
            return
        if self._file is None:
            path = join(self.root, "fingerprints", f"rank-{self.rank:05d}.jsonl")
            self.fs.makedirs(os.path.dirname(path), exist_ok=True)
            self._file = self.fs.open(path, "a")
        self._file.write("".join(self._lines))
        self._file.flush()
        self._lines.clear()

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


def read_specs(directory: str) -> list[RunSpec]:
    """Every spec segment of a run, in start-step order."""
    fs, root = url_to_fs(directory)
    base = join(root, "specs")
    if not fs.isdir(base):
        raise UserError(f"{directory}: no run records here (no specs/ folder)")
    names = sorted(n for n in (p.rsplit("/", 1)[-1] for p in fs.ls(base, detail=False)) if _SPEC_FILE.match(n))
    return [RunSpec.loads(fs.cat_file(join(base, n)).decode(), f"{directory}/specs/{n}") for n in names]


def spec_for_step(specs: list[RunSpec], step: int) -> RunSpec:
    """The segment in force at `step`: the last one starting at or before it."""
    covering = [s for s in specs if s.start.step <= step]
    if not covering:
        raise UserError(f"no run spec covers step {step}")
    return covering[-1]


def read_fingerprints(path: str) -> Iterator[dict]:
    """Fingerprint log lines from a file or a run directory (all ranks), checked as they are read."""
    fs, root = url_to_fs(path)
    files = (sorted(fs.glob(join(root, "fingerprints", "rank-*.jsonl"))) if fs.isdir(root) else [root])
    for f in files:
        with fs.open(f, "r") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    entry["step"], entry["rank"], entry["fingerprint"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise UserError(f"{f}:{number}: not a fingerprint log line") from None
                yield entry
