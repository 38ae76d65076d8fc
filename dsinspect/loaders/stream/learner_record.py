"""A stream learner's run record read back: the rollouts a (step, rank) consumed, and the check of the whole
record against the stream.

The record is a run record (records/: segment headers and one line per step and rank, the kept history
across kills and resumes) whose specs are `LearnerSpec`s under `learner-specs/` and whose lines also carry the
rows consumed (`rows`: runs of commit, offset, count), the policy version trained at (`version`) and the
rows dropped as stale (`dropped`). Commits never change once they exist, so a step is replayed from the
stream however far it has moved on since.

The check runs the selection again (selection.select) over the kept lines from the record's first step,
with each segment's batch size, world size, order and bound and each step's recorded policy version:
every kept line must name exactly the rows the selection gives its rank, drop what it dropped, and
carry the fingerprint of those rows' stored hashes (read from shards checked against their sha256). So
a record that checks proves that no committed rollout was consumed twice or skipped without a trace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field, Manifest
from dsinspect.loaders.records.run import Gap, RunRecord
from dsinspect.loaders.records.runlog import SPEC_FILE, batch_fingerprint, read_log
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.storage import join, url_to_fs
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.loaders.stream.learner import LEARNER_SPECS, LearnerSpec, StreamRows
from dsinspect.loaders.stream.log import Stream, open_stream
from dsinspect.loaders.stream.selection import Position, ranges_of, rows_of, select

__all__ = ["is_learner_run", "LearnerRun", "read_learner_run", "read_learner_specs", "ConsumedStep", "consumed_step",
           "LearnerCheck", "check_learner_run", "commits_version"]


def is_learner_run(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds a stream learner's record (its specs in learner-specs/)."""
    fs, root = url_to_fs(os.fspath(directory))
    return fs.isdir(join(root, LEARNER_SPECS))


@dataclass
class LearnerRun:
    directory: str
    record: RunRecord
    specs: dict[str, LearnerSpec]       # segment id -> its spec

    def spec_at(self, step: int) -> LearnerSpec:
        segment = self.record.segment_at(step)
        if segment is None or segment.id not in self.specs:
            raise UserError(f"{self.directory}: no learner segment covers step {step}")
        return self.specs[segment.id]

    def line(self, step: int, rank: int) -> dict:
        """The kept line of (step, rank); one line naming why when there is none."""
        found = self.record.kept(range(step, step + 1), {rank})
        if not found:
            end = self.record.end
            why = (f"the record ends at step {end}" if end is not None and step > end
                   else "no line kept for it (a gap, or a rank outside the world size)")
            raise UserError(f"{self.directory}: step {step}, rank {rank}: {why}")
        return found[0]


def read_learner_run(directory: str | os.PathLike) -> LearnerRun:
    path = os.fspath(directory)
    return LearnerRun(path, RunRecord(read_log(path)), read_learner_specs(path))


def read_learner_specs(directory: str | os.PathLike) -> dict[str, LearnerSpec]:
    """Segment id -> spec, from the record's learner-specs/ folder."""
    path = os.fspath(directory)
    fs, root = url_to_fs(path)
    base = join(root, LEARNER_SPECS)
    if not fs.isdir(base):
        raise UserError(f"{path}: not a stream learner's record (no {LEARNER_SPECS}/ folder)")
    specs: dict[str, LearnerSpec] = {}
    for name in sorted(p.rsplit("/", 1)[-1] for p in fs.ls(base, detail=False)):
        match = SPEC_FILE.match(name)
        if match and match.group(2):
            specs[match.group(2)] = LearnerSpec.loads(fs.cat_file(join(base, name)), f"{path}/{LEARNER_SPECS}/{name}")
    return specs


@dataclass
class ConsumedStep:
    """The rollouts rank `rank` consumed at `step`, read back from the stream, with their staleness."""

    step: int
    rank: int
    dataset: str
    learner_version: int | None
    staleness_bound: int | None
    positions: list[tuple[int, int]]
    rows: pa.Table                       # every stream column and the stored row hash, in consumed order
    staleness: list[int | None]          # learner_version - the row's policy version
    dropped: list[tuple[int, int]]       # rows this step dropped as stale (all ranks')
    fingerprint: str                     # as recorded
    recomputed: str                      # from the rows' stored hashes now
    fields: tuple[Field, ...] = ()       # the stream's
    key: str | None = None               # the stream's key (a rollout id)

    @property
    def ok(self) -> bool:
        return self.fingerprint == self.recomputed

    def version(self, catalog: Catalog) -> tuple[DatasetVersion, list[int]]:
        """The stream up to the last commit this step read, as a version in memory (`commits_version`),
        and each consumed row's index in it: what a viewer opens a consumed rollout with."""
        stream = open_stream(catalog, self.dataset)
        until = max(seq for seq, _ in self.positions) + 1
        version = commits_version(stream, until)
        starts = version.shard_starts
        firsts, shard = {}, 0
        for commit in stream.commits(0, until):
            firsts[commit.seq] = int(starts[shard])
            shard += len(commit.shards)
        return version, [firsts[seq] + offset for seq, offset in self.positions]

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "rank": self.rank, "dataset": self.dataset, "learner_version": self.learner_version,
                "staleness_bound": self.staleness_bound, "rows": [list(r) for r in ranges_of(self.positions)],
                "staleness": self.staleness, "dropped": [list(r) for r in ranges_of(self.dropped)],
                "fingerprint": self.fingerprint, "recomputed": self.recomputed, "ok": self.ok}


def commits_version(stream: Stream, until: int) -> DatasetVersion:
    """Commits 0 .. until - 1 as a version held in memory, not published: what `snapshot(stream, until)`
    would write (the same shards in the same order, so the same id and row indices), for a viewer to
    show a learner's rollouts with every tool a version has. Commit c's row r is row
    `sum(rows of commits before c) + r`."""
    commits = list(stream.commits(0, until))
    if len(commits) < until:
        raise UserError(f"stream {stream.name!r} has {len(commits)} commits, not {until}")
    manifest = Manifest(stream.spec.fields, tuple(s for c in commits for s in c.shards), stream.spec.key)
    return DatasetVersion(stream.catalog, stream.name, manifest.id, manifest)


def consumed_step(catalog: Catalog, run: LearnerRun, step: int, rank: int) -> ConsumedStep:
    """Replay: what (step, rank) consumed, from the commits it names (O(the commits it touched))."""
    line, spec = run.line(step, rank), run.spec_at(step)
    rows_source = _rows(catalog, spec, run.directory)
    positions, dropped = _positions(line, "rows", run.directory), _positions(line, "dropped", run.directory)
    table = rows_source.take(positions) if positions else None
    if table is None:
        raise UserError(f"{run.directory}: step {step}, rank {rank} consumed no rows")
    version = line.get("version")
    staleness: list[int | None] = [None] * table.num_rows
    if spec.version_field and version is not None:
        policies = table.column(spec.version_field).to_pylist()
        staleness = [None if pv is None else int(version) - int(pv) for pv in policies]
    return ConsumedStep(step, rank, spec.dataset, version, spec.staleness_bound, positions, table, staleness, dropped,
                        str(line["fingerprint"]), batch_fingerprint(table.column(HASH_COLUMN).to_pylist()),
                        rows_source.stream.spec.fields, rows_source.stream.spec.key)


@dataclass
class LearnerCheck:
    """The outcome of checking a learner's record against its stream."""

    steps: range
    lines: int = 0
    consumed: int = 0                    # rows the kept lines name
    dropped: int = 0                     # rows dropped as stale
    superseded: int = 0                  # lines of segments a resume replaced
    gaps: list[Gap] = field(default_factory=list)
    divergences: list[str] = field(default_factory=list)   # the first few, each one line
    first: tuple[int, int | None] | None = None            # (step, rank or None: the whole step) of the first
    replayed: bool = False               # the selection was run again from the first step
    position: Position | None = None     # where the last checked step left the learner

    @property
    def ok(self) -> bool:
        return not self.divergences

    def to_json(self) -> dict[str, Any]:
        return {"steps": [self.steps.start, self.steps.stop], "lines": self.lines, "consumed": self.consumed,
                "dropped": self.dropped, "superseded": self.superseded, "gaps": [g.to_json() for g in self.gaps],
                "divergences": self.divergences, "replayed": self.replayed, "ok": self.ok,
                "first": ({"step": self.first[0], "rank": self.first[1]} if self.first else None),
                "position": self.position.to_json() if self.position else None}


def check_learner_run(catalog: Catalog, run: LearnerRun, steps: range | None = None, *, allow_gaps: bool = False,
                      shown: int = 10) -> LearnerCheck:
    """Check every kept line in `steps` (default: all) against the stream. With the record complete from
    its first step (no gap before the checked range), the selection is run again: each line must be
    exactly what its rank was given. Gaps fail the check unless `allow_gaps`; then each line is checked on
    its own (its rows exist, hash to its fingerprint, are fresh within the bound, are consumed once)."""
    record = run.record
    wanted = record.checked_range(steps)
    result = LearnerCheck(wanted, superseded=record.superseded, gaps=record.gaps(wanted))
    if result.gaps and not allow_gaps:
        result.divergences.append(f"the record has gaps: {'; '.join(str(g) for g in result.gaps[:3])}")
    first = record.chain[-1].start if record.chain else 0
    result.replayed = not result.gaps and not (wanted.start > first and record.gaps(range(first, wanted.start)))
    by_step: dict[int, dict[int, dict]] = {}
    for line in record.kept(range(first if result.replayed else wanted.start, wanted.stop)):
        by_step.setdefault(int(line["step"]), {})[int(line["rank"])] = line
    sources: dict[str, StreamRows] = {}
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    position = Position()
    for step in sorted(by_step):
        lines, spec = by_step[step], run.spec_at(step)
        rows = sources.setdefault(spec.dataset, _rows(catalog, spec, run.directory))
        if result.replayed:  # every step from the first has all its lines: run the selection again
            versions = {line.get("version") for line in lines.values()}
            if len(versions) > 1:
                _say(result, shown, f"step {step}: its ranks trained at different policy versions {sorted(versions)}",
                     (step, None))
            need = spec.batch_size * spec.world_size
            chosen = select(position, rows.versions, need, next(iter(versions)), spec.staleness_bound, spec.order)
            if not chosen.complete:
                _say(result, shown, f"step {step}: the stream holds {len(chosen.taken)} of the {need} rollouts "
                                    "the step took", (step, None))
                break
            position = chosen.position
            if step not in wanted:
                continue
            for rank, line in sorted(lines.items()):
                expected = chosen.taken[rank * spec.batch_size:(rank + 1) * spec.batch_size]
                _compare(result, shown, step, rank, _positions(line, "rows", run.directory), expected, "consumed")
            recorded_drops = _positions(next(iter(lines.values())), "dropped", run.directory)
            _compare(result, shown, step, None, recorded_drops, chosen.dropped, "dropped")
        for rank, line in sorted(lines.items()):
            result.lines += 1
            _check_line(result, shown, rows, spec, step, rank, line, seen, run.directory)
    result.position = position if result.replayed else None
    return result


def _check_line(result: LearnerCheck, shown: int, rows: StreamRows, spec: LearnerSpec, step: int, rank: int,
                line: dict, seen: dict, where: str) -> None:
    """One kept line on its own: rows there, fingerprint, freshness, consumed once."""
    positions = _positions(line, "rows", where)
    result.consumed += len(positions)
    if rank == 0:
        result.dropped += len(_positions(line, "dropped", where))
    for p in positions:
        if p in seen:
            _say(result, shown, f"step {step}, rank {rank}: commit {p[0]} row {p[1]} was consumed before, "
                                f"at step {seen[p][0]}, rank {seen[p][1]}", (step, rank))
        seen[p] = (step, rank)
    try:
        table = rows.take(positions, [spec.version_field] if spec.version_field else [])
    except UserError as e:
        _say(result, shown, f"step {step}, rank {rank}: {e}", (step, rank))
        return
    recomputed = batch_fingerprint(table.column(HASH_COLUMN).to_pylist())
    if recomputed != line.get("fingerprint"):
        _say(result, shown, f"step {step}, rank {rank}: fingerprint {line.get('fingerprint')} recorded, "
                            f"{recomputed} from the rows it names", (step, rank))
    version = line.get("version")
    if spec.staleness_bound is not None and version is not None and spec.version_field:
        pv = np.asarray(table.column(spec.version_field).to_pylist(), dtype=float)
        stale = np.flatnonzero(pv < int(version) - spec.staleness_bound)
        if len(stale):
            seq, offset = positions[int(stale[0])]
            _say(result, shown, f"step {step}, rank {rank}: {len(stale)} rollouts staler than the bound "
                                f"{spec.staleness_bound} (first: commit {seq} row {offset}, policy "
                                f"{int(pv[stale[0]])} at learner version {version})", (step, rank))


def _compare(result: LearnerCheck, shown: int, step: int, rank: int | None, recorded: list, expected: list,
             what: str) -> None:
    if recorded == expected:
        return
    at = next((i for i, (a, b) in enumerate(zip(recorded, expected)) if a != b), min(len(recorded), len(expected)))
    who = f"step {step}, rank {rank}" if rank is not None else f"step {step}"
    got = f"commit {recorded[at][0]} row {recorded[at][1]}" if at < len(recorded) else "nothing"
    want = f"commit {expected[at][0]} row {expected[at][1]}" if at < len(expected) else "nothing"
    _say(result, shown, f"{who}: {what} {len(recorded)} rows, the stream gives {len(expected)}; "
                        f"first difference at position {at}: recorded {got}, expected {want}", (step, rank))


def _say(result: LearnerCheck, shown: int, message: str, at: tuple[int, int | None] | None = None) -> None:
    if result.first is None and at is not None:
        result.first = at
    if len(result.divergences) < shown:
        result.divergences.append(message)
    elif len(result.divergences) == shown:
        result.divergences.append("… (more not shown)")


def _positions(line: dict, key: str, where: str) -> list[tuple[int, int]]:
    try:
        return rows_of(line.get(key) or [])
    except (ValueError, TypeError) as e:
        raise UserError(f"{where}: step {line.get('step')}, rank {line.get('rank')}: bad {key!r} ({e})") from None


def _rows(catalog: Catalog, spec: LearnerSpec, where: str) -> StreamRows:
    stream = open_stream(catalog, spec.dataset)
    if stream.spec.id != spec.stream:
        raise UserError(f"{where}: recorded against another stream of {spec.dataset!r} (stream {spec.stream[:12]}, "
                        f"the catalog's is {stream.spec.id[:12]})")
    return StreamRows(stream, spec.version_field)
