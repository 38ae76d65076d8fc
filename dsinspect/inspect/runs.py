"""A run record as people look at it: a summary (sources, world sizes, segments, steps covered,
superseded lines, gaps, time spent waiting for data) and a grid of steps × ranks whose cells say
which (step, rank) the kept history logged, which it is missing (a gap), and which only a
superseded segment logged. The CLI (`dsinspect runs`), the terminal UI and the web app all show
these; this module reads the record and imports no UI.

A long run is bucketed: at most `MAX_COLUMNS` step columns (and `MAX_ROWS` ranks at a time), a
bucket being a gap when any step in it is one, so a gap of one step in 10^5 still shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.records.run import Gap, RunRecord, is_run_dir, read_run
from dsinspect.loaders.records.runlog import read_log
from dsinspect.loaders.store.storage import join, url_to_fs
from dsinspect.loaders.stream.learner import LEARNER_SPECS
from dsinspect.loaders.stream.learner_record import read_learner_specs

__all__ = ["KEPT", "GAP", "SUPERSEDED", "NONE", "DIVERGED", "GLYPHS", "MAX_COLUMNS", "MAX_ROWS",
           "default_runs_dir", "is_run_record", "run_names", "SegmentSummary", "RunSummary", "RunGrid", "RunView",
           "open_run", "list_runs"]

KEPT = "kept"              # the kept history has this (step, rank)'s line: evidence the check reads
GAP = "gap"                # the kept history should have a line here and has none
SUPERSEDED = "superseded"  # only lines of segments a later resume re-ran (or a rank the kept world lacks)
NONE = "none"              # no rank of that number at these steps, and no line
DIVERGED = "diverged"      # the check's first divergence
GLYPHS = {KEPT: "█", GAP: "✗", SUPERSEDED: "░", NONE: " ", DIVERGED: "!"}  # one character per cell, any face
MAX_COLUMNS = 60  # step buckets in a grid
MAX_ROWS = 64     # ranks in a grid at a time (a 1,024-rank job is shown 64 ranks a page)


def default_runs_dir(catalog_url: str) -> str:
    """Where a catalog's run records live unless told otherwise: `<catalog>/runs`."""
    return join(str(catalog_url), "runs")


def is_run_record(path: str) -> bool:
    """`path` is a run record directory (it holds specs/, learner-specs/ or fingerprints/); False for anything
    else, a URL fsspec cannot open included (a face asks this of whatever a person typed)."""
    try:
        fs, root = url_to_fs(str(path))
        return any(fs.isdir(join(root, sub)) for sub in ("specs", LEARNER_SPECS, "fingerprints"))
    except (UserError, OSError, ValueError):
        return False


def run_location(catalog_url: str, given: str) -> str:
    """`given` as typed when something is there; else, when it names a run record in
    `<catalog>/runs` (what `dsinspect runs` lists), that record's path; else `given` (its reader
    then says what is missing)."""
    if "/" in given or path_exists(given):
        return given
    named = join(default_runs_dir(catalog_url), given)
    return named if is_run_dir(named) else given  # a folder there: its reader says if it is no record


def path_exists(path: str) -> bool:
    """A file or directory is at `path` (a URL fsspec cannot open is none)."""
    try:
        fs, root = url_to_fs(path)
        return fs.exists(root)
    except (UserError, OSError, ValueError):
        return False


def run_names(directory: str) -> list[str]:
    """The run record folders (those holding specs/ or fingerprints/) directly inside `directory`."""
    fs, root = url_to_fs(directory)
    if not fs.isdir(root):
        return []
    names = []
    for entry in fs.ls(root, detail=True):
        if entry.get("type") != "directory":
            continue
        path = entry["name"].rstrip("/")
        if any(fs.isdir(join(path, sub)) for sub in ("specs", LEARNER_SPECS, "fingerprints")):
            names.append(path.rsplit("/", 1)[-1])
    return sorted(names)


@dataclass
class SegmentSummary:
    id: str
    parent: str | None
    start: int
    world_size: int
    batch_size: int
    lines: int
    steps: tuple[int, int] | None   # first and last step any rank logged in it
    ranks: list[int]
    kept: bool                       # part of the kept history
    started: str | None              # when its first header was written (UTC, ISO 8601)
    wait_per_step: float | None      # mean seconds a rank waited for its batch, when lines recorded it

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "parent": self.parent, "start": self.start, "world_size": self.world_size,
                "batch_size": self.batch_size, "lines": self.lines, "steps": list(self.steps) if self.steps else None,
                "ranks": self.ranks, "kept": self.kept, "started": self.started, "wait_per_step": self.wait_per_step}


@dataclass
class RunSummary:
    name: str
    path: str
    sources: list[str]                   # name@version (12 hex) of every segment's spec, first seen first
    world_sizes: list[int]               # of the kept history's segments, oldest first
    segments: list[SegmentSummary]       # every segment, by start time
    steps: tuple[int, int] | None        # first and last step of the kept history
    lines: int                           # kept lines: the evidence
    superseded: int                      # lines of segments the job did not keep
    gaps: list[Gap]
    wait_per_step: float | None
    kind: str = "rows"                   # "rows" (a Loader's), or "learner" (a stream learner's: rollouts)

    @property
    def missing(self) -> int:
        """(step, rank) pairs the gaps hold."""
        return sum((g.last - g.first + 1) * len(g.ranks) for g in self.gaps)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "sources": self.sources, "world_sizes": self.world_sizes,
                "steps": list(self.steps) if self.steps else None, "lines": self.lines,
                "superseded": self.superseded, "gaps": [g.to_json() for g in self.gaps], "missing": self.missing,
                "wait_per_step": self.wait_per_step, "segments": [s.to_json() for s in self.segments],
                "kind": self.kind}


@dataclass
class RunGrid:
    """Steps × ranks: `cells[i][j]` is the status of rank `ranks[i]` over steps `columns[j]` (first,
    last, inclusive); `targets[i][j]` the step a click opens (the first gap or divergence in the
    bucket, else its first logged step; None where there is nothing to open)."""

    columns: list[tuple[int, int]]
    ranks: list[int]
    cells: list[list[str]]
    targets: list[list[int | None]]
    all_ranks: int                       # rows the whole run has (ranks beyond `ranks` are on other pages)
    steps: range = field(default_factory=lambda: range(0))

    @property
    def bucket(self) -> int:
        """Steps per column."""
        return self.columns[0][1] - self.columns[0][0] + 1 if self.columns else 1

    def rows_text(self) -> list[str]:
        """Each rank's row as one glyph per column (see GLYPHS)."""
        return ["".join(GLYPHS[c] for c in row) for row in self.cells]

    def to_json(self) -> dict[str, Any]:
        return {"columns": [list(c) for c in self.columns], "ranks": self.ranks, "cells": self.cells,
                "targets": self.targets, "all_ranks": self.all_ranks, "bucket": self.bucket}


class RunView:
    """One run record read once: its summary, and grids of any step range and ranks."""

    def __init__(self, path: str, name: str | None = None):
        self.path = str(path)
        self.name = name or self.path.rstrip("/").rsplit("/", 1)[-1]
        fs, root = url_to_fs(self.path)
        if not fs.isdir(root):
            raise UserError(f"{self.path}: no such run record directory")
        self.learner = read_learner_specs(self.path) if fs.isdir(join(root, LEARNER_SPECS)) else None
        if self.learner is None and not fs.isdir(join(root, "specs")):
            raise UserError(f"{self.path}: not a run record (no specs/ folder)")
        everything = list(read_log(self.path))
        self.lines = [line for line in everything if "segment" not in line]  # step lines, as the record holds them
        self.record: RunRecord = (RunRecord(everything) if self.learner is not None
                                  else read_run(everything, specs_dir=self.path))
        kept = {id(line) for line in self.record.kept()}
        n = len(self.lines)
        self._step = np.fromiter((int(line["step"]) for line in self.lines), np.int64, n)
        self._rank = np.fromiter((int(line["rank"]) for line in self.lines), np.int64, n)
        self._kept = np.fromiter((id(line) in kept for line in self.lines), bool, n)

    # -- the summary ------------------------------------------------------------------------------

    def summary(self) -> RunSummary:
        record = self.record
        by_time = sorted(record.segments.values(), key=lambda s: s.time)
        chain_ids = {s.id for s in record.chain}
        sources: list[str] = []
        for segment in sorted(by_time, key=lambda s: s.start):
            learner = (self.learner or {}).get(segment.id)
            texts = ([f"{source.name}@{source.version[:12]}" for source in segment.spec.sources] if segment.spec
                     else [f"{learner.dataset} (stream)"] if learner else [])
            sources += [text for text in texts if text not in sources]
        waited = sum(s.waited for s in by_time)
        segments = [SegmentSummary(
            s.id, s.parent, s.start, s.world_size, s.batch_size, s.lines,
            (s.first, s.last) if s.first is not None else None, sorted(s.ranks), s.id in chain_ids, _when(s.time),
            s.wait / s.waited if s.waited else None) for s in by_time]
        return RunSummary(
            self.name, self.path, sources, [s.world_size for s in reversed(record.chain)], segments,
            (record.begin, record.end) if record.end is not None else None, len(record.kept()), record.superseded,
            record.gaps(), sum(s.wait for s in by_time) / waited if waited else None,
            "learner" if self.learner is not None else "rows")

    # -- the grid ---------------------------------------------------------------------------------

    def span(self) -> range:
        """Every step the record speaks of: the kept history's, and superseded lines beyond it."""
        record = self.record
        lo = [record.chain[-1].start] if record.chain else []
        hi = [record.end] if record.end is not None else []
        if len(self._step):
            lo.append(int(self._step.min()))
            hi.append(int(self._step.max()))
        return range(min(lo), max(hi) + 1) if lo and hi else range(0)

    def rank_count(self) -> int:
        sizes = [s.world_size for s in self.record.segments.values()]
        seen = [int(self._rank.max()) + 1] if len(self._rank) else []
        return max([*sizes, *seen, 0])

    def grid(self, steps: range | None = None, ranks: range | None = None, columns: int = MAX_COLUMNS,
             check: Any = None) -> RunGrid:
        """The grid over `steps` (default: the whole span) for `ranks` (default: the first MAX_ROWS),
        in at most `columns` buckets; `check` (a LogCheck, or its to_json()) marks its divergence."""
        span = self.span()  # steps asked for past either end of the record are not drawn
        wanted = span if steps is None else range(max(span.start, steps.start), min(span.stop, steps.stop))
        wanted = wanted if len(wanted) else range(0)
        all_ranks = self.rank_count()
        shown = list(ranks if ranks is not None else range(min(all_ranks, MAX_ROWS)))[:MAX_ROWS]
        if len(wanted) == 0 or not shown:
            return RunGrid([], shown, [[] for _ in shown], [[] for _ in shown], all_ranks, wanted)
        width = max(1, math.ceil(len(wanted) / max(1, columns)))
        cols = [(a, min(a + width, wanted.stop) - 1) for a in range(wanted.start, wanted.stop, width)]
        n, row_of = len(cols), {r: i for i, r in enumerate(shown)}
        status = np.full((len(shown), n), 0, np.int8)  # 0 none, 1 superseded, 2 kept, 3 gap, 4 diverged
        target = np.full((len(shown), n), -1, np.int64)

        def mark(level: int, row: int, col: int, step: int) -> None:
            if level > status[row, col]:
                status[row, col], target[row, col] = level, step
            elif level == status[row, col] and (target[row, col] < 0 or step < target[row, col]):
                target[row, col] = step

        self._mark_lines(wanted, width, row_of, status, target)
        for gap in self._gaps(wanted):
            first, last = max(gap.first, wanted.start), min(gap.last, wanted.stop - 1)
            for rank in gap.ranks:
                if rank in row_of:
                    for col in range((first - wanted.start) // width, (last - wanted.start) // width + 1):
                        mark(3, row_of[rank], col, max(first, cols[col][0]))
        d = check.get("divergence") if isinstance(check, dict) else getattr(check, "divergence", None)
        if d is not None:
            step, rank = (int(d["step"]), int(d["rank"])) if isinstance(d, dict) else (d.step, d.rank)
            if step in wanted and rank in row_of:
                mark(4, row_of[rank], (step - wanted.start) // width, step)
        names = (NONE, SUPERSEDED, KEPT, GAP, DIVERGED)
        cells = [[names[v] for v in row] for row in status.tolist()]
        targets = [[t if t >= 0 else None for t in row] for row in target.tolist()]
        return RunGrid(cols, shown, cells, targets, all_ranks, wanted)

    def _mark_lines(self, wanted: range, width: int, row_of: dict[int, int], status: np.ndarray,
                    target: np.ndarray) -> None:
        """Kept (2) and superseded (1) lines into their buckets, each cell's target its first such step."""
        if not len(self._step):
            return
        inside = (self._step >= wanted.start) & (self._step < wanted.stop) & np.isin(self._rank, list(row_of))
        for level, chosen in ((1, inside & ~self._kept), (2, inside & self._kept)):
            if not chosen.any():
                continue
            steps = self._step[chosen]
            rows = np.array([row_of[int(r)] for r in self._rank[chosen]], np.int64)
            cols = (steps - wanted.start) // width
            first = np.full(status.shape, np.iinfo(np.int64).max, np.int64)
            np.minimum.at(first, (rows, cols), steps)
            hit = first != np.iinfo(np.int64).max
            status[hit] = level
            target[hit] = first[hit]

    def _gaps(self, wanted: range) -> list[Gap]:
        """The record's gaps inside `wanted`, up to its last logged step (past it the run never went)."""
        record = self.record
        if record.end is None or not record.chain:
            return []
        lo, hi = max(wanted.start, record.chain[-1].start), min(wanted.stop, record.end + 1)
        return record.gaps(range(lo, hi)) if lo < hi else []


def open_run(path: str, name: str | None = None) -> RunView:
    """The run record at `path` (a directory holding specs/ and fingerprints/), read once."""
    return RunView(path, name)


def list_runs(directory: str) -> tuple[list[RunSummary], list[tuple[str, str]]]:
    """The summaries of the run records in `directory` (or of `directory` itself when it is one),
    and (name, reason) for each record that cannot be read. A directory that does not exist, or
    is neither a record nor holds any, is one UserError."""
    directory = str(directory)
    fs, root = url_to_fs(directory)
    if not fs.isdir(root):
        raise UserError(f"{directory}: no such directory")
    if is_run_record(directory):
        return [open_run(directory).summary()], []
    found, broken = [], []
    for name in run_names(directory):
        try:
            found.append(open_run(join(directory.rstrip("/"), name), name).summary())
        except (UserError, OSError, ValueError) as e:
            broken.append((name, str(e)))
    return found, broken


def _when(seconds: float) -> str | None:
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
