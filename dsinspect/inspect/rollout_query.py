"""The rollout findings and per-rollout values of a version as tables DuckDB joins into a query
(`query.VersionQuery`): `rollout_findings`, one row per (finding, rollout), and the `rollout_*` columns of
the view v. Made from one read of the version's rollout columns (`rollout_summary.read_version`), when a
query first names them; every row of every finding and, unless `positions_shown` bounds them, every
position.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from dsinspect.inspect.rollout_arrays import RolloutArrays, primitive, scalars, segment_reduce
from dsinspect.inspect.rollout_checks import check_rollouts, group_rewards, logprob_region, token_gaps
from dsinspect.inspect.rollout_findings import RolloutReport
from dsinspect.inspect.rollout_summary import RolloutRead, finding_keys, read_version
from dsinspect.inspect.rollouts import Meaning
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["FINDINGS_TABLE", "ROW_COLUMNS", "rollout_tables", "findings_type"]

FINDINGS_TABLE = "rollout_findings"
ALL_POSITIONS = 1 << 31
# (name, type, what): the per-rollout columns of the view v
ROW_COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("rollout_reward", pa.float64(), "the reward (a per-token reward summed); null without one"),
    ("rollout_policy_version", pa.int64(), "the policy version that sampled it"),
    ("rollout_response_len", pa.int64(), "response tokens before the padding"),
    ("rollout_logprob_gap_max", pa.float64(),
     "largest |sampler - learner log-prob| over the tokens the loss sees (inf: a non-finite log-prob)"),
    ("rollout_logprob_gaps", pa.list_(pa.float64()),
     "|sampler - learner log-prob| per response token (null where the loss does not see it)"),
    ("rollout_zero_advantage", pa.bool_(), "its group's rewards are all equal (GRPO: zero advantage)"),
    ("rollout_codes", pa.list_(pa.string()), "the codes of the findings it is in"),
)


def findings_type(key_type: pa.DataType) -> pa.Schema:
    return pa.schema([("code", pa.string()), ("severity", pa.string()), ("_index", pa.int64()), ("key", key_type),
                      ("positions", pa.list_(pa.int64())), ("axis", pa.string()), ("column", pa.string()),
                      ("message", pa.string())])


def rollout_tables(version: DatasetVersion, *, meanings: Mapping[str, str | None] | None = None,
                   checks: Mapping[str, Any] | None = None) -> tuple[pa.Table, pa.Table]:
    """(`_index` and the ROW_COLUMNS of every rollout, the `rollout_findings` table)."""
    read = read_version(version, meanings=meanings, checks=checks)
    given = dict(checks or {})
    options = dataclasses.replace(read.options, rows_shown=max(read.table.num_rows, 1),
                                  positions_shown=given.get("positions_shown") or ALL_POSITIONS)
    report = check_rollouts(read.table, options, read.columns)
    return _rows(read, report), _findings(version, report)


def _findings(version: DatasetVersion, report: RolloutReport) -> pa.Table:
    key = version.manifest.key
    key_type = version.manifest.schema.field(key).type if key else pa.string()
    keys = finding_keys(version, report.findings)
    columns: dict[str, list] = {name: [] for name in findings_type(key_type).names}
    for f, found in zip(report.findings, keys):
        n = len(f.rows)
        columns["code"] += [f.code] * n
        columns["severity"] += [f.severity.value] * n
        columns["_index"] += list(f.rows)
        columns["key"] += found or [None] * n
        columns["positions"] += list(f.positions) if f.positions is not None else [None] * n
        columns["axis"] += [f.axis] * n
        columns["column"] += [f.column] * n
        columns["message"] += [f.message] * n
    return pa.table(columns, schema=findings_type(key_type))


def _rows(read: RolloutRead, report: RolloutReport) -> pa.Table:
    table, columns, n = read.table, read.columns, read.table.num_rows
    data = RolloutArrays(table, columns, read.options.pad_id, read.options.eos_ids)
    out: dict[str, pa.Array] = {"_index": pa.array(np.arange(n, dtype=np.int64))}
    out["rollout_reward"] = _scalar(table, columns.get(Meaning.REWARD), pa.float64())
    out["rollout_policy_version"] = _scalar(table, columns.get(Meaning.POLICY_VERSION), pa.int64())
    response = data.response is not None
    out["rollout_response_len"] = pa.array(data.effective, pa.int64(), mask=~data.response.valid) if response \
        else pa.nulls(n, pa.int64())
    out["rollout_logprob_gap_max"], out["rollout_logprob_gaps"] = _gaps(data) if response else (
        pa.nulls(n, pa.float64()), pa.nulls(n, pa.list_(pa.float64())))
    out["rollout_zero_advantage"] = _zero_advantage(data)
    out["rollout_codes"] = _codes(report, n)
    return pa.table(out)


def _scalar(table: pa.Table, name: str | None, kind: pa.DataType) -> pa.Array:
    if name is None:
        return pa.nulls(table.num_rows, kind)
    if kind == pa.int64():
        values, valid = primitive(table.column(name).combine_chunks())
        return pa.array(values.astype(np.int64), kind, mask=~valid)
    values, valid = scalars(table.column(name))
    return pa.array(values, kind, mask=~valid)


def _gaps(data: RolloutArrays) -> tuple[pa.Array, pa.Array]:
    """Per row the largest gap the loss sees, and per response token its gap (null where not seen)."""
    n = data.n
    sampler, learner = data.aligned(Meaning.SAMPLER_LOGPROBS), data.aligned(Meaning.LEARNER_LOGPROBS)
    if sampler is None or learner is None:
        return pa.nulls(n, pa.float64()), pa.nulls(n, pa.list_(pa.float64()))
    seen = sampler.ok & learner.ok & logprob_region(data)
    gap = token_gaps(sampler, learner)
    worst = segment_reduce(np.maximum, np.where(seen, np.where(np.isnan(gap), np.inf, gap), -np.inf),
                           data.begins, data.lengths, -np.inf)
    row_seen = segment_reduce(np.logical_or, seen, data.begins, data.lengths, False).astype(bool)
    offsets = np.concatenate([[0], np.cumsum(data.lengths)]).astype(np.int64)
    per_token = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(gap, pa.float64(), mask=~seen),
                                              mask=pa.array(~data.response.valid))
    return pa.array(worst, pa.float64(), mask=~row_seen), per_token.cast(pa.list_(pa.float64()))


def _zero_advantage(data: RolloutArrays) -> pa.Array:
    if data.columns.get(Meaning.GROUP) is None or data.columns.get(Meaning.REWARD) is None:
        return pa.nulls(data.n, pa.bool_())
    codes, _, equal = group_rewards(data)
    return pa.array((codes >= 0) & equal[np.maximum(codes, 0)] if len(equal) else np.zeros(data.n, bool))


def _codes(report: RolloutReport, n: int) -> pa.Array:
    """Each row's finding codes, in the checks' order, each once."""
    rows = [np.asarray(f.rows, dtype=np.int64) for f in report.findings]
    codes = [f.code for f in report.findings]
    if not rows or not sum(map(len, rows)):
        return pa.array([[] for _ in range(n)], pa.list_(pa.string()))
    order = {code: i for i, code in enumerate(dict.fromkeys(codes))}
    flat_rows = np.concatenate(rows)
    flat_codes = np.concatenate([np.full(len(r), order[c]) for r, c in zip(rows, codes)])
    pairs = np.unique(flat_rows * len(order) + flat_codes)  # sorted by row, then code; duplicates gone
    by_row, code_at = pairs // len(order), pairs % len(order)
    counts = np.bincount(by_row, minlength=n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    names = pa.array(list(order))
    return pa.ListArray.from_arrays(pa.array(offsets), names.take(pa.array(code_at)))

