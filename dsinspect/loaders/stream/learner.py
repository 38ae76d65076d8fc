"""A learner reading a stream of rollouts step by step while samplers append to it (docs/RL.md).

Each step takes `batch_size` rollouts per rank (`selection.select`: commit order, or by policy version,
with a staleness bound), waiting for commits when the stream does not hold enough yet. Every byte is
checked: a commit's shards are read whole and must hash to the sha256 their commit names (a shard is
a few MB: one read, one hash, then rows come from memory). With `record_dir`, each rank writes a run
record line per step naming exactly the rows it consumed (commit, offset), the policy version it
trained at, the rows dropped as stale, and the batch fingerprint; `state_dict()` makes the record
durable first, so a job killed and resumed from its last checkpoint has a record that checks
(`learner_record.check_learner_run`), in the same or another world size.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dsinspect.errors import IntegrityError, StorageError, UserError
from dsinspect.loaders.format.manifest import HASH_COLUMN, canonical_json, sha256_hex
from dsinspect.loaders.format.rollout_fields import MEANING_OPTION
from dsinspect.loaders.format.rollout_meanings import Meaning
from dsinspect.loaders.records.recorder import RunRecorder
from dsinspect.loaders.records.runlog import batch_fingerprint, segment_id
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.stream.commits import Commit
from dsinspect.loaders.stream.log import Stream, open_stream
from dsinspect.loaders.stream.selection import ORDERS, Position, Selection, ranges_of, select
from dsinspect.lru import LRU

__all__ = ["StreamLearner", "LearnerBatch", "LearnerSpec", "StreamRows", "StreamTimeout", "LEARNER_SPECS",
           "version_field"]

LEARNER_SPECS = "learner-specs"  # a learner's record keeps its specs here, not in specs/ (not RunSpecs)
LEARNER_SPEC_FORMAT = "dsinspect.learner-spec/1"
STATE_FORMAT = "dsinspect.learner-state/1"
_CACHED_COMMITS = 64                # verified commit tables kept (a learner reads commits nearly in order)
_MAX_POLL = 0.01                    # the longest sleep between looks for a new commit (a look: one failed open)


class StreamTimeout(UserError, TimeoutError):
    """The stream did not hold enough rows for a step within the timeout."""


@dataclass(frozen=True)
class LearnerSpec:
    """What a learner segment reads: the same on every rank of the segment (its id is made from it)."""

    dataset: str
    stream: str                     # the stream spec id: a record never checks against another stream
    batch_size: int                 # per rank
    world_size: int
    order: str
    staleness_bound: int | None
    version_field: str | None       # the policy version column the selection reads
    start_step: int

    def __post_init__(self) -> None:
        for name in ("batch_size", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"{name} must be an integer >= 1, not {value!r}")
        if self.order not in ORDERS:
            raise UserError(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}")
        if self.staleness_bound is not None and (not isinstance(self.staleness_bound, int) or self.staleness_bound < 0):
            raise UserError(f"staleness_bound must be an integer >= 0, not {self.staleness_bound!r}")
        if not isinstance(self.start_step, int) or self.start_step < 0:
            raise UserError(f"start step must be an integer >= 0, not {self.start_step!r}")

    @property
    def hash(self) -> str:
        return sha256_hex(canonical_json(self.to_json()))

    def to_json(self) -> dict:
        return {"format": LEARNER_SPEC_FORMAT, **dataclasses.asdict(self)}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def loads(cls, text: str | bytes, where: str) -> "LearnerSpec":
        try:
            obj = json.loads(text)
            if obj.pop("format", None) != LEARNER_SPEC_FORMAT:
                raise ValueError(f"not {LEARNER_SPEC_FORMAT}")
            return cls(**obj)
        except (ValueError, TypeError, UserError) as e:
            raise UserError(f"{where}: not a readable learner spec ({e})") from None


@dataclass
class LearnerBatch:
    """One rank's rollouts of a step, in the order the learner got them, with where each came from."""

    step: int
    rank: int
    rows: pa.Table                          # the stream's columns (those asked for) and the row hash
    positions: list[tuple[int, int]]        # (commit, offset) of each row
    learner_version: int | None
    dropped: int                            # rows the step dropped as stale (all ranks')
    fingerprint: str

    def __len__(self) -> int:
        return self.rows.num_rows


def version_field(stream: Stream) -> str | None:
    """The stream's policy version column: the one declared {"rollout": "policy_version"}, else one named
    policy_version; None when it has neither."""
    for f in stream.spec.fields:
        if f.options.get(MEANING_OPTION) == Meaning.POLICY_VERSION.value:
            return f.name
    return "policy_version" if any(f.name == "policy_version" for f in stream.spec.fields) else None


class StreamRows:
    """A stream's commits as rows, read and verified once each: what the selection and a replay read."""

    def __init__(self, stream: Stream, version_name: str | None):
        self.stream, self.version_name = stream, version_name
        self._commits: dict[int, Commit] = {}
        self._versions: dict[int, np.ndarray] = {}
        self._tables: LRU[int, pa.Table] = LRU(_CACHED_COMMITS)

    def commit(self, seq: int) -> Commit | None:
        if seq not in self._commits:
            commit = self.stream.commit(seq)
            if commit is None:
                return None
            self._commits[seq] = commit
        return self._commits[seq]

    def versions(self, seq: int) -> np.ndarray | None:
        """Commit seq's policy version per row (NaN where none), None while it does not exist."""
        if seq in self._versions:
            return self._versions[seq]
        commit = self.commit(seq)
        if commit is None:
            return None
        if self.version_name is None:
            pv = np.full(commit.rows, np.nan)
        else:
            column = self.table(seq).column(self.version_name)
            pv = pc.cast(column, pa.float64()).fill_null(math.nan).to_numpy(zero_copy_only=False)
        self._versions[seq] = pv
        return pv

    def table(self, seq: int) -> pa.Table:
        """Commit seq's rows, every shard checked against the sha256 its commit names."""
        table = self._tables.get(seq)
        if table is None:
            commit = self.commit(seq)
            if commit is None:
                raise UserError(f"stream {self.stream.name!r} has no commit {seq}")
            table = pa.concat_tables([self._shard(s) for s in commit.shards])
            self._tables.put(seq, table)
        return table

    def _shard(self, shard: Any) -> pa.Table:
        fs = self.stream.catalog.fs
        path = self.stream.catalog.layout.shard(self.stream.name, shard.sha256)
        try:
            data = fs.cat_file(path)
        except OSError as e:
            raise StorageError(f"cannot read {fs.unstrip_protocol(path)}: {e}") from None
        if hashlib.sha256(data).hexdigest() != shard.sha256:
            raise IntegrityError(f"{fs.unstrip_protocol(path)}: its bytes do not hash to the sha256 its commit names")
        table = pq.ParquetFile(pa.BufferReader(data)).read()  # not read_table: it imports pyarrow.dataset
        if table.num_rows != shard.rows:
            raise IntegrityError(f"{fs.unstrip_protocol(path)}: {table.num_rows} rows, its commit says {shard.rows}")
        return table

    def take(self, positions: Sequence[tuple[int, int]], columns: Sequence[str] | None = None) -> pa.Table:
        """The rows at (commit, offset) `positions`, in that order, with their stored row hashes."""
        names = None if columns is None else [*dict.fromkeys([*columns, HASH_COLUMN])]
        parts = []
        for seq, offset, count in ranges_of(list(positions)):
            table = self.table(seq)
            if offset + count > table.num_rows:
                raise UserError(f"stream {self.stream.name!r}: commit {seq} has {table.num_rows} rows, "
                                f"not {offset + count}")
            part = table.slice(offset, count)
            parts.append(part.select(names) if names else part)
        if not parts:
            raise ValueError("no rows to take")
        return pa.concat_tables(parts)

    def forget_before(self, seq: int) -> None:
        """Drop what is kept of commits before seq (nothing the learner still needs)."""
        for old in [s for s in self._versions if s < seq]:
            del self._versions[old]
            self._commits.pop(old, None)


class StreamLearner:
    """Rank `rank` of `world_size` reading dataset `name`'s stream, `batch_size` rollouts a step.

    `order`: "commit" (every fresh row in commit order) or "policy" (rows sampled by a policy newer than
    the learner's wait until the learner gets there). `staleness_bound`: rows sampled by a policy older
    than learner_version - bound are dropped (needs a policy version column, `version_field`).
    `timeout`: seconds a step waits for commits (None: forever). `columns`: the columns returned."""

    def __init__(self, catalog: Catalog, name: str, batch_size: int, *, rank: int = 0, world_size: int = 1,
                 order: str = "commit", staleness_bound: int | None = None, columns: Sequence[str] | None = None,
                 record_dir: str | None = None, timeout: float | None = None, poll: float = 0.005,
                 version_field_name: str | None = None):
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise UserError(f"rank {rank!r} is not in 0..{world_size - 1}")
        self.stream = open_stream(catalog, name)
        names = {f.name for f in self.stream.spec.fields}
        vfield = version_field_name or version_field(self.stream)
        if vfield is not None and vfield not in names:
            raise UserError(f"stream {name!r} has no field {vfield!r} (its fields: {', '.join(sorted(names))})")
        if staleness_bound is not None and vfield is None:
            raise UserError(f"stream {name!r} has no policy version field: a staleness bound needs one "
                            "(declare it: options {\"rollout\": \"policy_version\"})")
        missing = [c for c in columns or () if c not in names]
        if missing:
            raise UserError(f"stream {name!r} has no field {missing[0]!r}")
        self.rank, self.columns, self.timeout, self.poll = rank, list(columns) if columns else None, timeout, poll
        self.spec = LearnerSpec(name, self.stream.spec.id, batch_size, world_size, order, staleness_bound, vfield, 0)
        self.rows = StreamRows(self.stream, vfield)
        self.position = Position()
        self.step = self._start = 0
        self._parent: str | None = None  # the segment whose state this one resumed from
        self._recorder = (RunRecorder(record_dir, rank, flush_every=1, samples=False, specs_folder=LEARNER_SPECS)
                          if record_dir else None)

    # -- reading -----------------------------------------------------------------------------------

    def next_batch(self, learner_version: int | None = None) -> LearnerBatch:
        """This rank's rollouts for the next step, trained at policy `learner_version` (the same on every
        rank); waits for commits until the stream holds the step's rows (StreamTimeout after `timeout`)."""
        if learner_version is not None and (not isinstance(learner_version, int) or isinstance(learner_version, bool)):
            raise UserError(f"learner_version must be an integer, not {learner_version!r}")
        need = self.spec.batch_size * self.spec.world_size
        chosen = self._select(need, learner_version)
        mine = chosen.taken[self.rank * self.spec.batch_size:(self.rank + 1) * self.spec.batch_size]
        rows = self.rows.take(mine, self.columns)
        fingerprint = batch_fingerprint(rows.column(HASH_COLUMN).to_pylist())
        batch = LearnerBatch(self.step, self.rank, rows, mine, learner_version, len(chosen.dropped), fingerprint)
        if self._recorder is not None:
            self._recorder.begin(self._segment_spec(), self._parent)
            self._recorder.record(self.step, 0, fingerprint, len(mine), extra={
                "rows": [list(r) for r in ranges_of(mine)], "version": learner_version,
                "dropped": [list(r) for r in ranges_of(chosen.dropped)],
                "cursor": [chosen.position.seq, chosen.position.offset]})
        self.position = chosen.position
        self.rows.forget_before(min([self.position.seq, *(s for s, _ in self.position.waiting)]))
        self.step += 1
        return batch

    def _select(self, need: int, learner_version: int | None) -> Selection:
        started, pause = time.monotonic(), self.poll
        while True:
            chosen = select(self.position, self.rows.versions, need, learner_version, self.spec.staleness_bound,
                            self.spec.order)
            if chosen.complete:
                return chosen
            waited = time.monotonic() - started
            if self.timeout is not None and waited >= self.timeout:
                raise StreamTimeout(f"stream {self.stream.name!r}: step {self.step} needs {need} rollouts, "
                                    f"{len(chosen.taken)} are there after {waited:.1f} s (commits up to "
                                    f"{chosen.position.seq - 1})")
            time.sleep(pause)
            pause = min(pause * 2, _MAX_POLL)

    # -- resuming ----------------------------------------------------------------------------------

    def _segment_spec(self) -> LearnerSpec:
        """This segment's spec: it starts where the learner started or last resumed."""
        if self.spec.start_step != self._start:
            self.spec = dataclasses.replace(self.spec, start_step=self._start)
        return self.spec

    def state_dict(self) -> dict[str, Any]:
        """Where this learner is (the same on every rank): a checkpoint's part. Makes the record durable
        first, so no saved state stands after record lines a crash could lose."""
        if self._recorder is not None:
            self._recorder.sync()
        segment = segment_id(self._segment_spec(), self._parent) if self._recorder is not None else None
        return {"format": STATE_FORMAT, "dataset": self.spec.dataset, "stream": self.spec.stream,
                "step": self.step, "position": self.position.to_json(), "segment": segment}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state` (from any world size): the next step is the one after it."""
        try:
            if state.get("format") != STATE_FORMAT:
                raise ValueError(f"format {state.get('format')!r}, expected {STATE_FORMAT!r}")
            step, position = int(state["step"]), Position.from_json(state["position"])
            if step < 0:
                raise ValueError(f"step {step}")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"not a learner state ({e})") from None
        if state.get("stream") != self.spec.stream or state.get("dataset") != self.spec.dataset:
            raise UserError(f"a learner state of another stream ({state.get('dataset')!r}), "
                            f"not {self.spec.dataset!r}'s")
        self.step, self.position, self._parent, self._start = step, position, state.get("segment"), step

    def close(self) -> None:
        if self._recorder is not None:
            self._recorder.close()

    def __enter__(self) -> "StreamLearner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
