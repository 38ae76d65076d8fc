"""The UI's only data boundary: every catalog read, row fetch and sample decode goes through here.

Methods block (they may read remote shards); screens call them from thread workers only.
"""

from __future__ import annotations

from dataclasses import dataclass
from threading import Lock
from typing import Any

import pyarrow as pa

from dsinspect.defaults import open_catalog
from dsinspect.inspect import Sample, open_sample
from dsinspect.inspect.cells import NARROW, column_cells
from dsinspect.loaders.records.transforms import guarded, load_job_transform
from dsinspect.loaders.store.address import Address, parse_address
from dsinspect.loaders.store.describe import catalog_listing, version_info
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.lru import LRU

__all__ = ["DataSource", "RowPage", "FilterPage"]

_GROUP_CACHE = 16  # row groups kept in memory for the sample table
# What one replay on the screen may hold (row groups read and rows, loaders/audit/bounds.py), as
# `dsinspect replay` shows: a larger batch is one line pointing at `replay --export`, not a UI out of memory.
REPLAY_BYTES = 512 << 20


@dataclass(frozen=True)
class RowPage:
    """Display cells for rows `start .. start + len(cells)` of a version."""

    start: int
    cells: list[list[str]]


@dataclass(frozen=True)
class FilterPage:
    """Rows `offset ..` of the samples matching a filter: `columns` ("_index" first), display cells and
    each row's sample index; `total` counts every match (asked with the first page)."""

    offset: int
    columns: list[str]
    cells: list[list[str]]
    indexes: list[int]
    total: int | None = None


class DataSource:
    """A catalog seen by the UI: listings, versions, pages of table cells and samples."""

    def __init__(self, catalog_url: str | None = None, catalog: Any = None, replay_bytes: int = REPLAY_BYTES):
        self.catalog = catalog if catalog is not None else open_catalog(catalog_url)
        self.replay_bytes = replay_bytes
        self._versions: dict[tuple[str, str], DatasetVersion] = {}
        self._groups: LRU[tuple[str, int, int], pa.Table] = LRU(_GROUP_CACHE)
        self._lock = Lock()
        self._queries: dict[str, Any] = {}  # version id -> its VersionQuery
        self._query_lock = Lock()
        self._rollouts: dict[str, bool] = {}  # version id -> is LLM rollouts
        self._rollout_checks: dict[str, dict] = {}  # version id -> the learner version and bound to check it at

    @property
    def url(self) -> str:
        return self.catalog.url

    def listing(self) -> dict[str, Any]:
        return catalog_listing(self.catalog)

    def version(self, address: str | Address) -> DatasetVersion:
        """The version an address names (its index, if any, is ignored); cached per (name, ref)."""
        addr = parse_address(address) if isinstance(address, str) else address
        key = (addr.name, addr.ref)
        with self._lock:
            cached = self._versions.get(key)
        if cached is None:
            cached = self.catalog.resolve(Address(addr.name, addr.ref))
            with self._lock:
                self._versions[key] = cached
        return cached

    def info(self, version: DatasetVersion) -> dict[str, Any]:
        return version_info(version)

    def history(self, name: str) -> list[dict[str, Any]]:
        """Every version of `name`, newest first, as plain summaries."""
        for item in self.listing()["datasets"]:
            if item["name"] == name:
                return sorted(item["versions"], key=lambda v: v.get("created_at") or "", reverse=True)
        return []

    def columns(self, version: DatasetVersion) -> list[str]:
        return [f.name for f in version.fields]

    def rows(self, version: DatasetVersion, start: int, count: int) -> RowPage:
        """Cells of rows [start, start + count): reads (and caches) whole row groups."""
        stop = min(version.num_rows, start + count)
        if start >= stop:
            return RowPage(start, [])
        names = self.columns(version)
        table = version.take(range(start, stop), names, read_group=lambda s, g: self._group(version, s, g, names))
        columns = [column_cells(table.column(n), NARROW) for n in names]
        return RowPage(start, [[str(start + i), *(col[i] for col in columns)] for i in range(stop - start)])

    def sample(self, address: str | Address) -> Sample:
        addr = parse_address(address) if isinstance(address, str) else address
        version = self.version(addr)
        return open_sample(version, 0 if addr.index is None else addr.index)

    def diff(self, a: str, b: str, limit: int = 500) -> Any:
        """What changed from version `a` to version `b` (a VersionDiff); indexes in the addresses are ignored."""
        from dsinspect.loaders.diff.compare import diff

        return diff(self.version(a), self.version(b), self.catalog, limit=limit)

    def replay(self, spec: str, step: int, rank: str, transform: str | None = None) -> Any:
        """The batch of (step, rank) of the run in `spec` (a spec file or run record directory);
        `rank` is an integer or "all". With `transform` (package.module:function) each rank's batch
        also carries `.transformed`, the job's transform re-run seeded as in the job."""
        from dsinspect.loaders.audit.bounds import BatchTooLarge
        from dsinspect.loaders.audit.replay import replay

        fn = _transform(transform)
        spec = self.run_location(spec)
        try:
            return guarded(lambda: replay(spec, step, rank, catalog=self.catalog, transform=fn,
                                          max_bytes=self.replay_bytes), transform)
        except BatchTooLarge as e:
            raise e.hinted(f"pick one rank, or write it as Parquet: dsinspect replay --spec {spec} --step {step} "
                           f"--rank {rank} --export DIR") from None

    def packs_sequences(self, spec: str, step: int) -> bool:
        """The run in `spec` reads packed sequences at `step` (its spec's `sequences` is set), not rows."""
        from dsinspect.errors import UserError
        from dsinspect.inspect.runs import is_run_record
        from dsinspect.loaders.audit.replay import resolve
        from dsinspect.loaders.stream.learner_record import is_learner_run

        location = self.run_location(spec)
        if is_run_record(location) and is_learner_run(location):  # the replay form was given one
            raise UserError(f"{spec} is a stream learner's record: its steps (the rollouts each rank consumed) open "
                            f"from its run screen (ctrl+p \"Open a run record\", or dsinspect tui {spec})")
        return resolve(location, step)[0].sequences is not None

    def replay_packed(self, spec: str, step: int, rank: str) -> Any:
        """The packed batch of (step, rank) of a packed run (a PackedReplay: its sequences, the documents
        each took tokens from, the documents that no longer verify)."""
        from dsinspect.loaders.audit.bounds import BatchTooLarge
        from dsinspect.loaders.audit.packed_replay import replay_packed

        spec = self.run_location(spec)
        try:
            return replay_packed(spec, step, rank, self.catalog, max_bytes=self.replay_bytes)
        except BatchTooLarge as e:
            raise e.hinted(f"pick one rank, or read it with dsinspect replay --spec {spec} --step {step} "
                           f"--rank {rank} --json") from None

    def packed_vocab(self, spec: Any) -> Any:
        """The vocabulary of the packed field's stored tokenizer (the first source's), or None (the ids
        are shown): what `dsinspect replay` decodes a packed batch with."""
        from dsinspect.inspect.packed import packed_vocab

        return packed_vocab(self.catalog, spec)

    def check_step(self, spec: str, log: str, step: int, transform: str | None = None) -> Any:
        """The fingerprint log `log` (a file or run record directory) checked at `step` against
        replay: a LogCheck (`.ok`, `.checked`, `.divergence`)."""
        from dsinspect.loaders.audit.logcheck import check_log

        fn = _transform(transform)
        spec, log = self.run_location(spec), self.run_location(log)
        return guarded(lambda: check_log(spec, log, steps=range(step, step + 1), catalog=self.catalog,
                                          transform=fn), transform)

    def run_location(self, given: str) -> str:
        """A run typed as a path, or by its name in `<catalog>/runs` (as the CLI and web app name it)."""
        from dsinspect.inspect.runs import run_location

        return run_location(self.url, given)

    def run_view(self, path: str) -> Any:
        """The run record directory `path` read once: its summary and grids (inspect.runs.RunView)."""
        from dsinspect.inspect.runs import open_run

        return open_run(self.run_location(path))

    def check_run(self, path: str, transform: str | None = None, on_progress: Any = None) -> Any:
        """The whole run record `path` checked against this catalog (each kept line against the spec of
        its segment): a LogCheck. `on_progress(done, total)` is called from this thread."""
        from dsinspect.loaders.audit.logcheck import check_log

        fn = _transform(transform)
        path = self.run_location(path)
        return guarded(lambda: check_log(path, path, catalog=self.catalog, transform=fn, on_progress=on_progress),
                       transform)

    # -- LLM RL rollouts ------------------------------------------------------------------------------

    def is_rollouts(self, version: DatasetVersion) -> bool:
        """The version is LLM rollouts (its fields' meanings; no row read), cached per version id."""
        from dsinspect.inspect.rollout_dataset import is_rollouts

        with self._lock:
            known = self._rollouts.get(version.id)
        if known is None:
            known = is_rollouts(version)
            with self._lock:
                self._rollouts[version.id] = known
        return known

    def rollout(self, version: DatasetVersion, index: int) -> Any:
        """Row `index` as a rollout (inspect.rollout_view.RolloutView), its group checked with it."""
        from dsinspect.inspect.rollout_view import rollout_view

        return rollout_view(version, index, overrides=self._rollout_checks.get(version.id))

    def rollout_group(self, version: DatasetVersion, index: int) -> Any:
        """The group of row `index` (inspect.rollout_view.GroupView): its responses side by side."""
        from dsinspect.errors import UserError
        from dsinspect.inspect.rollout_view import group_of, group_view

        group = group_of(version, index)
        if group is None:
            raise UserError(f"{version.address}:{index} belongs to no group (no group column, or a null group)")
        return group_view(version, group, overrides=self._rollout_checks.get(version.id))

    # -- a stream learner's record ----------------------------------------------------------------

    def learner_run(self, path: str) -> Any:
        """The stream learner's record `path` (or its name in `<catalog>/runs`), read once."""
        from dsinspect.loaders.stream.learner_record import read_learner_run

        return read_learner_run(self.run_location(path))

    def learner_step(self, run: Any, step: int, rank: str) -> Any:
        """What `rank` (or "all") consumed at `step` (inspect.learner_view.LearnerStep); commits heavier
        than a replay may hold are refused in one line, as a Loader's batch is."""
        from dsinspect.inspect.learner_view import learner_step

        return learner_step(self.catalog, run, step, rank, self.replay_bytes)

    def consumed_address(self, step: Any, rank: int, slot: int) -> str:
        """NAME@ID:INDEX of the rollout `rank` consumed at `slot` of `step`, in the stream up to the last
        commit the step read: an unpublished version held here (every screen then opens it by that
        address), its rollouts checked at the step's policy version and staleness bound."""
        consumed = step.consumed_by(rank)
        version, indices = consumed.version(self.catalog)
        checks = {k: v for k, v in (("learner_version", consumed.learner_version),
                                    ("staleness_bound", consumed.staleness_bound)) if v is not None}
        with self._lock:
            self._versions[(version.name, version.id)] = version
            self._rollout_checks[version.id] = checks
        return f"{version.name}@{version.id}:{indices[slot]}"

    def check_learner(self, path: str) -> Any:
        """The stream learner's record `path` checked against its stream (inspect.learner_view.LearnerCheckView)."""
        from dsinspect.inspect.learner_view import learner_check

        return learner_check(self.catalog, self.learner_run(path))

    # -- query and statistics (DuckDB over the version's view v) ----------------------------------

    def _query(self, version: DatasetVersion) -> Any:
        """One VersionQuery per version id, made once (it reads or makes the derived-value sidecars);
        it runs one statement at a time (its own lock), so workers may share it."""
        from dsinspect.inspect.query import VersionQuery

        with self._query_lock:  # held while one is made: two workers never make the sidecars twice
            query = self._queries.get(version.id)
            if query is None:
                query = self._queries[version.id] = VersionQuery(version)
        return query

    def filter(self, version: DatasetVersion, condition: str, offset: int = 0, limit: int = 128,
               count: bool = False) -> FilterPage:
        """Samples of `version` matching `condition` (the syntax of `dsinspect query --where`: an SQL
        condition over the view v), `limit` of them from `offset`, in index order. A bad condition
        raises UserError with one line."""
        result = self._query(version).where(condition, limit=limit, offset=offset, count=count)
        at = result.columns.index("_index")
        cells = [[_cell(v) for v in row] for row in result.rows]
        return FilterPage(offset, list(result.columns), cells, [int(row[at]) for row in result.rows], result.total)

    def stats(self, version: DatasetVersion) -> Any:
        """The version's statistics per column of its query view (inspect.stats.VersionStats)."""
        from dsinspect.inspect.stats import version_stats

        return version_stats(self._query(version))

    def compare_stats(self, a: DatasetVersion, b: DatasetVersion) -> tuple[Any, Any]:
        """Two versions' statistics, numeric columns on shared bins (inspect.stats.compare_stats)."""
        from dsinspect.inspect.stats import compare_stats

        return compare_stats(self._query(a), self._query(b))

    def _group(self, version: DatasetVersion, shard: int, group: int, names: list[str]) -> pa.Table:
        key = (version.id, shard, group)
        with self._lock:
            table = self._groups.get(key)
        if table is None:
            table = version.read_row_group(shard, group, names)
            with self._lock:
                self._groups.put(key, table)
        return table


def _cell(value: Any) -> str:
    """A query result's value as a table cell."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


# -- transforms -----------------------------------------------------------------------------------

def _transform(name: str | None) -> Any:
    """The job's transform by name (its modules import from the current directory), or None."""
    return load_job_transform(name) if name else None

