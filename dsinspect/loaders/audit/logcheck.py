"""Check a run record against replay: the proof that the data the job saw is the data the catalog
holds now, or the first (step, rank) where it is not, and why; with the lines later segments
superseded and the gaps (docs/RUN_RECORDS.md).

Only the kept lines are evidence. `stored` lines are compared in windows from the hashes of the
rows as they are now (hashes.py: each row group read and re-hashed once; `rehash=False` trusts the
stored hash column), `transformed` ones against the job's transform re-run. A line that does not
agree goes through the per-line check, which names the positions that differ (divergence.py).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.audit.divergence import Divergence, check_line
from dsinspect.loaders.audit.hashes import CACHE_BYTES, RowHashes, plan_many
from dsinspect.loaders.audit.packed_check import PackedLines
from dsinspect.loaders.audit.replay import (
    SpecSource,
    Transform,
    load_specs,
)
from dsinspect.loaders.audit.rows import RowReader
from dsinspect.loaders.order.plan import BatchPlan
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.records.run import Gap, RunRecord, is_run_dir, read_run
from dsinspect.loaders.records.runlog import batch_fingerprint, spec_for_step
from dsinspect.loaders.records.transforms import load_transform
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["Divergence", "LogCheck", "check_log", "parse_steps"]


@dataclass
class LogCheck:
    checked: int = 0                           # log lines compared
    steps: tuple[int, int] | None = None       # first and last step compared
    sides: dict[str, int] = field(default_factory=dict)
    divergence: Divergence | None = None
    superseded: int = 0                        # lines of segments the job did not keep (re-run later)
    gaps: list[Gap] = field(default_factory=list)  # (step, rank) in the checked range with no kept line
    allow_gaps: bool = False
    record_end: int | None = None              # the last step the kept history logged
    segments: int = 0                          # segments in the record

    @property
    def ok(self) -> bool:
        return self.divergence is None and (self.allow_gaps or not self.gaps)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checked": self.checked, "steps": list(self.steps) if self.steps else None,
                "sides": self.sides, "divergence": self.divergence.to_json() if self.divergence else None,
                "superseded": self.superseded, "gaps": [g.to_json() for g in self.gaps],
                "allow_gaps": self.allow_gaps, "record_end": self.record_end, "segments": self.segments}


def parse_steps(text: str | range | None) -> range | None:
    """`A:B` (B excluded), `A:`, `:B` or `N` as a range of steps; None stays None (every step)."""
    if text is None or isinstance(text, range):
        return text
    a, sep, b = str(text).partition(":")
    try:
        start = int(a) if a.strip() else 0
        stop = (int(b) if b.strip() else 2**63 - 1) if sep else start + 1
    except ValueError:
        raise UserError(f"steps must look like A:B, A:, :B or N, not {text!r}") from None
    if start < 0 or stop < start:
        raise UserError(f"steps {text!r}: need 0 <= A <= B")
    return range(start, stop)


def check_log(specs: SpecSource, log: str | os.PathLike | Iterable[dict], steps: range | str | None = None,
              catalog: Catalog | None = None, transform: Transform = None, *, ranks: Iterable[int] | None = None,
              columns: Sequence[str] | None = None, rehash: bool = True, allow_gaps: bool = False,
              on_progress: Callable[[int, int], None] | None = None, cache_bytes: int = CACHE_BYTES) -> LogCheck:
    """Compare the kept lines of the record `log` (in `steps`, for `ranks`) with replay, up to the
    first divergence; report the lines later segments superseded and the gaps. `log` is a run record
    directory, one rank's log file, or parsed lines. With `specs` a run record directory each line is
    checked against the spec of the segment that wrote it; a spec or spec file given instead stands
    for every line (to check a job's record against another version, say). `columns`: what the
    job's transform saw (as in its Loader). `on_progress(done, total)` as lines complete (at most
    ~10 times a second, and once at the end). `cache_bytes` bounds the row hashes and row groups kept
    (twice over: once each); any bound gives the same answer.

    Lines are planned and hashed in windows (hashes.py): each row group is read once while its
    shard's hashes stay cached. A line whose fingerprint does not match, a transformed line, and any
    line the fast path cannot decide go through the per-line check, which names the divergence."""
    if catalog is None:
        raise UserError("check_log needs a catalog: check_log(specs, log, steps, catalog=Catalog(url))")
    own = isinstance(specs, (str, os.PathLike)) and is_run_dir(specs)
    given = None if own else load_specs(specs)
    record = read_run(log, specs if own else None, given or ())
    fn = load_transform(transform) if isinstance(transform, str) else transform
    wanted = parse_steps(steps)
    chosen = None if ranks is None else set(ranks)
    lines = record.kept(wanted, chosen)
    result = LogCheck(superseded=record.superseded, gaps=record.gaps(wanted, chosen), allow_gaps=allow_gaps,
                      record_end=record.end, segments=sum(1 for s in record.segments.values() if s.lines))
    check = _Checker(record, given, catalog, columns, rehash, cache_bytes)
    progress = _Progress(on_progress, len(lines))
    size = _window_lines(record, given)
    for start in range(0, len(lines), size):
        window = lines[start:start + size]
        for line, (plan, agrees) in zip(window, check.window(window)):
            step = int(line["step"])
            divergence = None
            if not agrees:  # the per-line path decides (and explains, or raises as it always did)
                spec = check.spec(line)
                divergence = check.packed.check(spec, line) if spec.sequences is not None else \
                    check_line(spec, check.reader(spec), line, fn, rehash, plan)
            result.checked += 1
            of = line.get("of", "stored")
            result.sides[of] = result.sides.get(of, 0) + 1
            result.steps = (result.steps[0] if result.steps else step, step)
            if divergence is not None:
                result.divergence = divergence
                return result
            progress.advance()
    progress.finish()
    return result


_WINDOW_SAMPLES = 1 << 16  # samples planned and gathered at once (~1 MiB of row hashes)
_PROGRESS_EVERY = 0.1      # seconds between progress calls


class _Checker:
    """What the lines of one check share: their specs, a row reader per spec (the per-line path)
    and the row hashes of the catalog as it is now (the fast path)."""

    def __init__(self, record: RunRecord, given: list[RunSpec] | None, catalog: Catalog,
                 columns: Sequence[str] | None, rehash: bool, cache_bytes: int):
        self.record, self.given, self.catalog, self.columns = record, given, catalog, columns
        self.cache_bytes = cache_bytes
        self.hashes = RowHashes(rehash, cache_bytes)
        self.packed = PackedLines(catalog, self.hashes)  # lines of packed-sequence runs, one by one
        self._readers: dict[str, RowReader] = {}
        self._by_spec: dict[int, tuple[RunSpec, RowReader]] = {}  # by id(): order_hash is not free

    def spec(self, line: dict) -> RunSpec:
        return spec_for_step(self.given, int(line["step"])) if self.given is not None else _segment_spec(
            self.record, line)

    def reader(self, spec: RunSpec) -> RowReader:
        known = self._by_spec.get(id(spec))
        if known is not None:
            return known[1]
        reader = self._readers.get(spec.order_hash)
        if reader is None:
            reader = self._readers[spec.order_hash] = RowReader(self.catalog, spec, self.columns,
                                                                 cache_bytes=self.cache_bytes)
        self._by_spec[id(spec)] = (spec, reader)  # the spec kept alive, so its id stays its own
        return reader

    def window(self, lines: list[dict]) -> list[tuple[BatchPlan | None, bool]]:
        """Per line: its plan (None: not plannable here) and whether its stored-side fingerprint,
        epoch and row count agree with the data now. False means "not shown to agree": the per-line
        path decides, so every error and explanation stays where it was."""
        todo: list[tuple[int, RunSpec, RowReader]] = []
        for i, line in enumerate(lines):
            try:
                spec = self.spec(line)
                if spec.sequences is not None:
                    continue  # a packed run's line: PackedLines checks it on the per-line path
                reader = self.reader(spec)
                step, rank = int(line["step"]), int(line["rank"])
            except Exception:  # noqa: BLE001 (the per-line path raises it at this line)
                continue
            if 0 <= rank < spec.world_size and step >= spec.start.step:
                todo.append((i, spec, reader))
        out: list[tuple[BatchPlan | None, bool]] = [(None, False)] * len(lines)
        try:
            plans = plan_many([(spec, int(lines[i]["step"]), int(lines[i]["rank"])) for i, spec, _ in todo])
        except Exception:  # noqa: BLE001 (each line's own plan_batch raises it where it belongs)
            return out
        stored = [(i, plan, reader) for (i, _, reader), plan in zip(todo, plans)
                  if lines[i].get("of", "stored") == "stored"]
        for (i, _, _), plan in zip(todo, plans):
            out[i] = (plan, False)
        for (i, plan, _), fingerprint in zip(stored, self._fingerprints(stored)):
            out[i] = (plan, fingerprint is not None and _agrees(lines[i], fingerprint, plan))
        return out

    def _fingerprints(self, stored: list[tuple[int, BatchPlan, RowReader]]) -> list[str | None]:
        """The fingerprint of each plan's rows now (None: some row could not be read here)."""
        found: list[str | None] = [None] * len(stored)
        by_reader: dict[int, list[int]] = {}
        for j, (_, _, reader) in enumerate(stored):
            by_reader.setdefault(id(reader), []).append(j)
        for members in by_reader.values():
            reader = stored[members[0]][2]
            sources = np.concatenate([stored[j][1].sources for j in members])
            indices = np.concatenate([stored[j][1].indices for j in members])
            hashes = np.empty((len(indices), 16), np.uint8)
            ok = np.ones(len(indices), bool)
            for k in np.unique(sources).tolist():
                sel = np.flatnonzero(sources == k)
                hashes[sel], ok[sel] = self.hashes.gather(reader.versions[k], indices[sel])
            sizes = [len(stored[j][1].indices) for j in members]
            whole = np.logical_and.reduceat(ok, np.concatenate([[0], np.cumsum(sizes)[:-1]])) if len(ok) else ok
            at = 0
            for j, n, fine in zip(members, sizes, whole.tolist()):
                if fine and n:
                    found[j] = batch_fingerprint(hashes[at:at + n])
                at += n
        return found


def _agrees(line: dict, fingerprint: str, plan: BatchPlan) -> bool:
    """The per-line path's test of a matching line (any doubt: False, and that path decides)."""
    try:
        logged_n, epoch = line.get("n"), line.get("epoch")
        return (fingerprint == line["fingerprint"] and (logged_n is None or int(logged_n) == len(plan.indices))
                and (epoch is None or int(epoch) == plan.epoch))
    except (TypeError, ValueError, KeyError):
        return False


def _window_lines(record: RunRecord, given: list[RunSpec] | None) -> int:
    """Lines per window: about _WINDOW_SAMPLES samples at the largest batch size in the run."""
    sizes = [s.batch_size for s in given] if given is not None else [s.batch_size for s in record.segments.values()]
    return max(16, _WINDOW_SAMPLES // max([1, *sizes]))


class _Progress:
    """on_progress(done, total) as lines complete, at most every _PROGRESS_EVERY seconds, and at the end."""

    def __init__(self, callback: Callable[[int, int], None] | None, total: int):
        self.callback, self.total, self.done, self._last = callback, total, 0, time.monotonic()

    def advance(self) -> None:
        self.done += 1
        if self.callback is not None and time.monotonic() - self._last >= _PROGRESS_EVERY:
            self._last = time.monotonic()
            self.callback(self.done, self.total)

    def finish(self) -> None:
        if self.callback is not None and self.total:
            self.callback(self.done, self.total)


def _segment_spec(record: RunRecord, line: dict) -> RunSpec:
    segment = record.segments.get(line.get("seg")) if line.get("seg") else None
    if segment is not None and segment.spec is not None:
        return segment.spec
    return record.spec_at(int(line["step"]))
