"""A stored version read as LLM RL rollouts: which column means what, what the checks need beyond the
rows, and the checks and statistics over a version or some of its rows. Every face (CLI, TUI, web)
reads rollouts through here, so they agree on meanings and findings.

Meanings are **declared** in a field's options (`{"rollout": "sampler_logprobs"}`, written at ingest or
when a stream is created) and **inferred** from names and types for the columns nothing declares
(`rollouts.infer_meanings`). What the checks need beyond the rows (pad, EOS and special ids, the
sampler's length limit, the staleness bound) is declared as `{"checks": {...}}` on any field's options
(the response tokens' by convention); a caller's options override it. Without a learner version, the
staleness check measures against the newest policy version in the version (for a dataset, the freshest
policy its samplers had; a learner's replay knows its own version).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.inspect.rollout_checks import check_rollouts
from dsinspect.inspect.rollout_findings import CheckOptions, RolloutReport
from dsinspect.inspect.rollout_stats import rollout_statistics
from dsinspect.inspect.rollouts import Meaning, RolloutColumns, infer_meanings
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["MEANING_OPTION", "CHECKS_OPTION", "rollout_columns", "is_rollouts", "check_options",
           "rollout_table", "check_version", "version_statistics", "declared_checks", "newest_policy_version",
           "needed_columns"]

MEANING_OPTION = "rollout"   # a field's options: {"rollout": "<meaning>"}
CHECKS_OPTION = "checks"     # a field's options: {"checks": {"pad_id": 1, "eos_ids": [0], ...}}
_DECLARABLE = ("pad_id", "eos_ids", "special_ids", "max_response_tokens", "logprob_gap", "staleness_bound",
               "learner_version", "unscored_nan_rewards")
# Without one of these a table is not rollouts of a language model (a gym episode, a corpus...).
_RESPONSE = (Meaning.RESPONSE_TOKENS, Meaning.SEQUENCE_TOKENS, Meaning.RESPONSE_TEXT)
_ABOUT_RL = (Meaning.REWARD, Meaning.REWARDS, Meaning.ADVANTAGE, Meaning.SAMPLER_LOGPROBS,
             Meaning.LEARNER_LOGPROBS, Meaning.GROUP, Meaning.POLICY_VERSION, Meaning.LOSS_MASK)


def rollout_columns(fields: Iterable[Field]) -> RolloutColumns | None:
    """Each meaning's column among `fields`: declared ones first, the rest inferred; None when the
    fields are not rollouts (no response, or nothing an RL stack adds to one)."""
    fields = list(fields)
    declared = {f.options[MEANING_OPTION]: f.name for f in fields
                if isinstance(f.options.get(MEANING_OPTION), str)}
    schema = pa.schema([pa.field(f.name, f.type) for f in fields])
    try:
        columns = infer_meanings(schema, declared)
    except ValueError:  # a declaration that does not fit its column's type: infer as if undeclared
        columns = infer_meanings(schema)
    has_response = any(columns.get(m) for m in _RESPONSE)
    has_rl = any(columns.get(m) for m in _ABOUT_RL) or columns.reward_functions
    return columns if has_response and has_rl else None


def is_rollouts(version: DatasetVersion) -> bool:
    return rollout_columns(version.fields) is not None


def declared_checks(fields: Iterable[Field]) -> dict[str, Any]:
    """The check options the fields declare (the first declaration of each name wins)."""
    found: dict[str, Any] = {}
    for f in fields:
        declared = f.options.get(CHECKS_OPTION)
        if isinstance(declared, Mapping):
            for name in _DECLARABLE:
                if name in declared and name not in found:
                    found[name] = declared[name]
    return found


def check_options(fields: Iterable[Field], newest_version: int | None = None, **overrides: Any) -> CheckOptions:
    """The declared options, `overrides` on top; the learner version, when a staleness bound is set and
    no learner version is, is `newest_version` (the newest policy version of the data checked)."""
    values = {**declared_checks(fields), **{k: v for k, v in overrides.items() if v is not None}}
    unknown = set(values) - {f.name for f in dataclasses.fields(CheckOptions)}
    if unknown:
        raise ValueError(f"unknown check options: {', '.join(sorted(unknown))}")
    if values.get("staleness_bound") is not None and values.get("learner_version") is None:
        values["learner_version"] = newest_version
    return CheckOptions(**values)


def newest_policy_version(version: DatasetVersion, columns: RolloutColumns) -> int | None:
    """The newest policy version among the version's rows (one column read), None without one."""
    name = columns.get(Meaning.POLICY_VERSION)
    if name is None:
        return None
    newest = [pc.max(table.column(0)).as_py() for _, table in version.iter_tables([name])]
    newest = [v for v in newest if v is not None]
    return int(max(newest)) if newest else None


def needed_columns(columns: RolloutColumns) -> list[str]:
    """The stored columns the checks and statistics read."""
    return list(dict.fromkeys([*columns.columns.values(), *columns.reward_functions]))


def rollout_table(version: DatasetVersion, rows: Sequence[int] | None = None,
                  columns: RolloutColumns | None = None) -> pa.Table:
    """The rollout columns of `rows` (default: every row, shard by shard) in that order."""
    columns = columns or _columns_of(version)
    names = needed_columns(columns)
    if rows is not None:
        return version.take(np.asarray(rows, dtype=np.int64), names)
    tables = [table for _, table in version.iter_tables(names)]
    return pa.concat_tables(tables) if tables else pa.schema([]).empty_table()


def check_version(version: DatasetVersion, rows: Sequence[int] | None = None, **overrides: Any) -> RolloutReport:
    """Every rollout check over the version (or `rows` of it); a finding's rows are version row
    indices (positions in `rows` mapped back when rows are given)."""
    columns = _columns_of(version)
    table = rollout_table(version, rows, columns)
    newest = newest_policy_version(version, columns)  # of the whole version, so a group is judged alike
    report = check_rollouts(table, check_options(version.fields, newest, **overrides), columns)
    if rows is None:
        return report
    back = np.asarray(rows, dtype=np.int64)
    report.findings = [dataclasses.replace(f, rows=tuple(int(back[r]) for r in f.rows)) for f in report.findings]
    return report


def version_statistics(version: DatasetVersion, **overrides: Any) -> dict[str, Any]:
    columns = _columns_of(version)
    table = rollout_table(version, None, columns)
    options = check_options(version.fields, newest_policy_version(version, columns), **overrides)
    return rollout_statistics(table, options, columns)


def _columns_of(version: DatasetVersion) -> RolloutColumns:
    columns = rollout_columns(version.fields)
    if columns is None:
        from dsinspect.errors import UserError

        raise UserError(f"{version.address}: not LLM rollouts (no response column with rewards, "
                        "advantages, log-probs or groups beside it)")
    return columns
