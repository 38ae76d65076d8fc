"""A version read as LLM rollouts for `stats` and `query`: which column means what (declared, inferred or
given), the check options in force and where each came from, the findings (rows by index and by the
dataset's key), the checks skipped and why, and the run-level statistics. Read once per call.

A person's overrides come in as `meanings` ({field: meaning, or None for none}) and `checks` ({option:
value, None to drop a declared one}); a value that does not fit is one UserError naming it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.inspect.rollout_arrays import primitive
from dsinspect.inspect.rollout_checks import check_rollouts
from dsinspect.inspect.rollout_dataset import check_options, declared_checks, read_rollouts
from dsinspect.inspect.rollout_findings import CheckOptions, RolloutFinding, RolloutReport
from dsinspect.inspect.rollout_stats import rollout_statistics
from dsinspect.inspect.rollouts import Meaning, RolloutColumns
from dsinspect.inspect.views import jsonable
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.format.rollout_fields import declared, rollout_columns, with_meanings
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["RolloutRead", "RolloutSummary", "read_version", "summarize", "check_values", "CHECK_NAMES"]

_INTS = ("pad_id", "max_response_tokens", "learner_version", "staleness_bound", "rows_shown", "positions_shown")
_ID_LISTS = ("eos_ids", "special_ids")
CHECK_NAMES = (*_INTS[:4], *_ID_LISTS, "logprob_gap", "unscored_nan_rewards", *_INTS[4:])


@dataclass
class RolloutRead:
    """A version's rollout columns as read, their meanings, and the options the checks run with."""

    version: DatasetVersion
    fields: list[Field]
    table: pa.Table
    columns: RolloutColumns
    options: CheckOptions
    meaning_from: dict[str, str]    # meaning -> "declared" | "given" | "inferred"
    option_from: dict[str, str]     # option -> "declared" | "given" | "newest policy version"


@dataclass
class RolloutSummary:
    address: str
    key: str | None
    read: RolloutRead
    report: RolloutReport
    keys: list[list[Any]] = field(default_factory=list)   # per finding, the key of each of its rows
    statistics: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        options = {k: v for k, v in dataclasses.asdict(self.read.options).items()}
        findings = [{**f.to_json(), "keys": keys} for f, keys in zip(self.report.findings, self.keys)]
        return jsonable({"key": self.key, "meanings": self.read.columns.to_json(),
                         "meaning_from": self.read.meaning_from, "options": options,
                         "option_from": self.read.option_from, "findings": findings,
                         "skipped": dict(self.report.skipped), "statistics": self.statistics})


def check_values(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`values` checked as CheckOptions takes them (None kept: it drops a declared value); the first
    that does not fit is a UserError naming it and `where`."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in CHECK_NAMES:
            raise UserError(f"{where}: no check option {name!r} (options: {', '.join(CHECK_NAMES)})")
        if value is None:
            out[name] = None
            continue
        out[name] = _checked(name, value, where)
    return out


def _checked(name: str, value: Any, where: str) -> Any:
    def integer(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if name in _INTS:
        if not integer(value) or value < 0:
            raise UserError(f"{where}: {name} takes an integer >= 0, not {value!r}")
        return value
    if name in _ID_LISTS:
        ids = [value] if integer(value) else value
        if not isinstance(ids, list) or not all(integer(v) for v in ids):
            raise UserError(f"{where}: {name} takes a token id or a list of them, e.g. [0, 2], not {value!r}")
        return tuple(ids)
    if name == "logprob_gap":
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise UserError(f"{where}: logprob_gap takes a number > 0 (nats), not {value!r}")
        return float(value)
    if not isinstance(value, bool):
        raise UserError(f"{where}: {name} takes true or false, not {value!r}")
    return value


def read_version(version: DatasetVersion, *, meanings: Mapping[str, str | None] | None = None,
                 checks: Mapping[str, Any] | None = None) -> RolloutRead:
    """The version's rollout columns (every row) read with `meanings` and `checks` on top of what its
    fields declare."""
    fields = with_meanings(version.fields, meanings or {}, f" in {version.address}")
    if rollout_columns(fields) is None:
        raise UserError(f"{version.address}: not LLM rollouts (no response column with rewards, advantages, "
                        "log-probs or groups beside it; --meaning FIELD=MEANING says what a column is)")
    table, columns = read_rollouts(version, None, fields)
    table = table.combine_chunks()  # one copy here, not one per check and statistic (a chunk per row group)
    said = check_values(declared_checks(fields), f"{version.address}: the checks its fields declare")
    given = dict(checks or {})
    values = {k: v for k, v in {**said, **given}.items() if v is not None}
    newest = _newest(table, columns)
    try:
        options = check_options([], newest, **values)
    except (ValueError, TypeError) as e:
        raise UserError(f"{version.address}: check options: {e}") from None
    option_from = {k: "given" if k in given else "declared" for k in values}
    if "learner_version" not in values and options.learner_version is not None:
        option_from["learner_version"] = "newest policy version"
    return RolloutRead(version, fields, table, columns, options, _meaning_from(version, columns, meanings or {}),
                       option_from)


def _meaning_from(version: DatasetVersion, columns: RolloutColumns, given: Mapping[str, Any]) -> dict[str, str]:
    was, names = declared(version.fields), {f.name for f in version.fields}
    return {m.value: "given" if c in given else "declared" if was.get(c) == m.value else "inferred" if c in names
            else f"cut from {columns.get(Meaning.SEQUENCE_TOKENS)}" for m, c in columns.columns.items()}


def summarize(version: DatasetVersion, *, meanings: Mapping[str, str | None] | None = None,
              checks: Mapping[str, Any] | None = None, bins: int = 20) -> RolloutSummary:
    """Findings (at most `rows_shown` rows each) and the four statistics of `version`."""
    read = read_version(version, meanings=meanings, checks=checks)
    report = check_rollouts(read.table, read.options, read.columns)
    statistics = rollout_statistics(read.table, read.options, read.columns, bins)
    key = version.manifest.key
    return RolloutSummary(version.address, key, read, report, finding_keys(version, report.findings), statistics)


def finding_keys(version: DatasetVersion, findings: list[RolloutFinding]) -> list[list[Any]]:
    """Per finding, the dataset key of each of its listed rows (empty lists without a key)."""
    key = version.manifest.key
    if key is None:
        return [[] for _ in findings]
    rows = np.unique(np.array([r for f in findings for r in f.rows], dtype=np.int64))
    values = version.take(rows, [key]).column(0).to_pylist() if len(rows) else []
    at = dict(zip(rows.tolist(), values))
    return [[at[r] for r in f.rows] for f in findings]


def _newest(table: pa.Table, columns: RolloutColumns) -> int | None:
    name = columns.get(Meaning.POLICY_VERSION)
    if name is None or table.num_rows == 0:
        return None
    values, valid = primitive(table.column(name).combine_chunks())
    return int(values[valid].max()) if valid.any() else None
