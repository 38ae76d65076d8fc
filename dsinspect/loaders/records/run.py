"""A run record read back: its segments, which of them the job finally kept for each step, the
lines that are evidence (the kept segment's), the lines later segments superseded, and the gaps.

A segment is a stretch of the run between a start (or resume) and the next. Each resumed segment
names its parent, the segment whose saved state it loaded, so the kept history is a chain: from the
last segment to start (by header time) back through parents, each covering the steps from its start
up to the start of the one after it. That holds when a job resumes from an older checkpoint than
its latest, or from a branch abandoned later. Without a known parent (a state saved before records
had segments, or by a loader that did not record) the previous segment in time stands in.
Pure functions over parsed lines: all I/O is `read_run`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.records.runlog import read_log, read_specs
from dsinspect.loaders.store.storage import url_to_fs

__all__ = ["Segment", "Gap", "RunRecord", "read_run", "is_run_dir"]


@dataclass
class Segment:
    id: str
    parent: str | None
    start: int
    world_size: int
    batch_size: int
    spec_hash: str | None
    time: float                       # when its first header was written (ordering only)
    spec: RunSpec | None = None       # from specs/ (None: no spec file seen)
    ranks: set[int] = field(default_factory=set)
    lines: int = 0
    first: int | None = None          # first and last step any rank logged in it
    last: int | None = None
    wait: float = 0.0                 # seconds the consumer waited for data, summed over its lines
    waited: int = 0                   # lines that carry "wait"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "parent": self.parent, "start": self.start, "world_size": self.world_size,
                "batch_size": self.batch_size, "spec": self.spec_hash, "time": self.time, "lines": self.lines,
                "steps": [self.first, self.last] if self.first is not None else None, "ranks": sorted(self.ranks),
                "wait_per_step": self.wait / self.waited if self.waited else None}


@dataclass(frozen=True)
class Gap:
    """Steps first..last (inclusive) where `ranks` have no line in the kept history."""
    first: int
    last: int
    ranks: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"steps": [self.first, self.last], "ranks": list(self.ranks)}

    def __str__(self) -> str:
        steps = f"step {self.first}" if self.first == self.last else f"steps {self.first}..{self.last}"
        return f"{steps}, rank{'s' if len(self.ranks) > 1 else ''} {_ranges(self.ranks)}"


class RunRecord:
    """A record's segments and lines. `lines` are parsed log lines (headers and steps, each file in
    written order); `specs` the (segment id, spec) pairs of its specs/ folder."""

    def __init__(self, lines: Iterable[dict], specs: Sequence[tuple[str | None, RunSpec]] = ()):
        self.segments: dict[str, Segment] = {}
        legacy = [spec for sid, spec in specs if sid is None]
        for i, spec in enumerate(legacy):  # old records: one segment per spec file, ordered by start
            self.segments[f"step-{spec.start.step}"] = Segment(
                f"step-{spec.start.step}", f"step-{legacy[i - 1].start.step}" if i else None, spec.start.step,
                spec.world_size, spec.batch_size, spec.hash, float(-len(legacy) + i), spec)
        steps: list[dict] = []
        for line in lines:
            if "segment" in line:
                self._header(line)
            else:
                steps.append(line)
        for sid, spec in specs:
            if sid is not None:
                segment = self.segments.setdefault(sid, Segment(sid, None, spec.start.step, spec.world_size,
                                                                spec.batch_size, spec.hash, float("-inf")))
                segment.spec = spec
        self.chain = self._chain()
        self._steps = steps
        self._kept, self.superseded = self._keep(steps)
        kept_steps = [int(line["step"]) for line in self._kept]
        self.end: int | None = max(kept_steps) if kept_steps else None
        self.begin: int | None = min(kept_steps) if kept_steps else None

    # -- segments and the kept history -------------------------------------------------------------

    def _header(self, line: dict) -> None:
        sid = str(line["segment"])
        known = self.segments.get(sid)
        when = float(line.get("time") or 0.0)
        if known is None:
            self.segments[sid] = Segment(sid, line.get("parent"), int(line["start"]), int(line["world_size"]),
                                         int(line.get("batch_size") or 0), line.get("spec"), when)
        elif known.time == float("-inf") or when < known.time:
            known.time, known.parent = when, line.get("parent")

    def _chain(self) -> list[Segment]:
        """The kept history, latest first."""
        if not self.segments:
            return []
        by_time = sorted(self.segments.values(), key=lambda s: s.time)
        chain, seen = [by_time[-1]], {by_time[-1].id}
        while True:
            current = chain[-1]
            parent = self.segments.get(current.parent) if current.parent else None
            if parent is None or parent.id in seen or parent.start > current.start:
                earlier = [s for s in by_time
                           if s.time < current.time and s.start <= current.start and s.id not in seen]
                parent = earlier[-1] if earlier and current.start > 0 else None
            if parent is None:
                return chain
            chain.append(parent)
            seen.add(parent.id)

    def segment_at(self, step: int) -> Segment | None:
        """The segment the job finally kept for `step` (None: before the record begins)."""
        for segment in self.chain:
            if segment.start <= step:
                return segment
        return None

    def spec_at(self, step: int) -> RunSpec:
        segment = self.segment_at(step)
        if segment is None:
            raise UserError(f"no run spec covers step {step}")
        if segment.spec is None:
            raise UserError(f"segment {segment.id} (from step {segment.start}) has no spec file in specs/")
        return segment.spec

    def _legacy_segment(self, step: int) -> Segment | None:
        legacy = [s for s in self.segments.values() if s.id.startswith("step-") and s.start <= step]
        return max(legacy, key=lambda s: s.start) if legacy else None

    def _keep(self, steps: list[dict]) -> tuple[list[dict], int]:
        """The kept segment's line for each (step, rank) (the last one written wins); the count of
        the others."""
        kept: dict[tuple[int, int], dict] = {}
        dropped = 0
        for line in steps:
            step, rank = int(line["step"]), int(line["rank"])
            sid = line.get("seg")
            segment = self.segments.get(sid) if sid is not None else None
            if segment is None:  # an old line, or lines given without their headers
                segment = self._legacy_segment(step)
            if segment is not None:
                segment.lines += 1
                segment.ranks.add(rank)
                segment.first = step if segment.first is None else min(segment.first, step)
                segment.last = step if segment.last is None else max(segment.last, step)
                if isinstance(line.get("wait"), (int, float)):
                    segment.wait += float(line["wait"])
                    segment.waited += 1
            keeper = self.segment_at(step)
            if segment is None or keeper is None or keeper.id != segment.id or not 0 <= rank < keeper.world_size:
                dropped += 1
                continue
            if (step, rank) in kept:
                dropped += 1
            kept[(step, rank)] = line
        return sorted(kept.values(), key=lambda e: (int(e["step"]), int(e["rank"]))), dropped

    # -- what a check reads --------------------------------------------------------------------------

    def kept(self, steps: range | None = None, ranks: set[int] | None = None) -> list[dict]:
        """The evidence: the kept line of each (step, rank) in `steps` and `ranks`, in step, rank order."""
        return [line for line in self._kept
                if (steps is None or int(line["step"]) in steps) and (ranks is None or int(line["rank"]) in ranks)]

    def checked_range(self, steps: range | None) -> range:
        """`steps`, or the kept history's steps when not given; an open end stops at the record's end."""
        if self.end is None:
            return range(0) if steps is None else steps
        if steps is None:
            return range(self.chain[-1].start if self.chain else 0, self.end + 1)
        if steps.stop >= 2 ** 63 - 1:
            return range(steps.start, max(steps.start, self.end + 1))
        return steps

    def gaps(self, steps: range | None = None, ranks: set[int] | None = None) -> list[Gap]:
        """(step, rank) pairs in the range with no kept line, merged into runs of steps with the same
        ranks missing. Steps past the record's end form one gap (no line is materialised for them)."""
        wanted = self.checked_range(steps)
        if len(wanted) == 0 or not self.chain:
            return []
        found: list[Gap] = []
        last_logged = self.end if self.end is not None else wanted.start - 1
        inside = range(wanted.start, min(wanted.stop, last_logged + 1))
        have: dict[int, set[int]] = {}
        for line in self._kept:
            step = int(line["step"])
            if step in inside:
                have.setdefault(step, set()).add(int(line["rank"]))
        run: list[Any] = []  # [first, last, ranks]
        for step in self._steps_with_missing(inside, have, ranks):
            missing = self._missing(step, have, ranks)
            if run and run[1] == step - 1 and run[2] == missing:
                run[1] = step
            else:
                if run:
                    found.append(Gap(*run))
                run = [step, step, missing]
        if run:
            found.append(Gap(*run))
        if wanted.stop > inside.stop:
            tail = max(inside.stop, wanted.start)
            keeper = self.segment_at(tail) or self.chain[0]
            everyone = tuple(r for r in range(keeper.world_size) if ranks is None or r in ranks)
            if everyone:
                found.append(Gap(tail, wanted.stop - 1, everyone))
        return found

    def _steps_with_missing(self, inside: range, have: dict[int, set[int]], ranks: set[int] | None) -> list[int]:
        if len(inside) == 0:
            return []
        counts = np.zeros(len(inside), np.int64)
        expect = np.zeros(len(inside), np.int64)
        for step, present in have.items():
            counts[step - inside.start] = len(present if ranks is None else present & ranks)
        for i, segment in enumerate(self.chain):  # expected ranks per step, segment by segment
            lo = max(segment.start, inside.start)
            hi = min(inside.stop, self.chain[i - 1].start) if i else inside.stop
            if lo < hi:
                n = segment.world_size if ranks is None else len([r for r in ranks if 0 <= r < segment.world_size])
                expect[lo - inside.start:hi - inside.start] = n
        return (np.flatnonzero(counts < expect) + inside.start).tolist()

    def _missing(self, step: int, have: dict[int, set[int]], ranks: set[int] | None) -> tuple[int, ...]:
        keeper = self.segment_at(step)
        present = have.get(step, set())
        return tuple(r for r in range(keeper.world_size if keeper else 0)
                     if r not in present and (ranks is None or r in ranks))

    def to_json(self) -> dict[str, Any]:
        return {"segments": [s.to_json() for s in sorted(self.segments.values(), key=lambda s: s.time)],
                "kept": [s.id for s in self.chain], "lines": len(self._kept), "superseded": self.superseded,
                "steps": [self.begin, self.end] if self.end is not None else None}


def is_run_dir(path: str | os.PathLike) -> bool:
    fs, root = url_to_fs(os.fspath(path))
    return fs.isdir(root)


def read_run(log: str | os.PathLike | Iterable[dict], specs_dir: str | os.PathLike | None = None,
             specs: Sequence[RunSpec] = ()) -> RunRecord:
    """A run record from its directory (lines and spec files), or from a log file or parsed lines
    with the spec files of `specs_dir` (a run record directory) if given. `specs` stand for the
    segments of lines written before segments existed (no "seg")."""
    if isinstance(log, (str, os.PathLike)):
        path = os.fspath(log)
        fs, root = url_to_fs(path)
        if not fs.exists(root):
            raise UserError(f"{path}: no such fingerprint log or run record directory")
        lines: Iterable[dict] = list(read_log(path))
        if specs_dir is None and fs.isdir(root):
            specs_dir = path
    else:
        lines = log
    found = read_specs(os.fspath(specs_dir)) if specs_dir is not None else []
    return RunRecord(lines, [*found, *((None, spec) for spec in specs)])


def _ranges(ranks: Sequence[int]) -> str:
    """0,1,2,5 -> "0-2,5"."""
    parts, i = [], 0
    ranks = sorted(ranks)
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)
