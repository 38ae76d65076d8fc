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

from dsinspect.inspect.rollout_arrays import split_sequences
from dsinspect.inspect.rollout_checks import check_rollouts
from dsinspect.inspect.rollout_findings import CheckOptions, RolloutReport
from dsinspect.inspect.rollout_stats import rollout_statistics
from dsinspect.inspect.rollouts import Meaning, RolloutColumns
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.format.rollout_fields import MEANING_OPTION, rollout_columns
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["MEANING_OPTION", "CHECKS_OPTION", "rollout_columns", "is_rollouts", "check_options",
           "rollout_table", "read_rollouts", "check_version", "version_statistics", "declared_checks",
           "newest_policy_version", "needed_columns", "SPLIT_COLUMNS", "columns_of"]

CHECKS_OPTION = "checks"     # a field's options: {"checks": {"pad_id": 1, "eos_ids": [0], ...}}
_DECLARABLE = ("pad_id", "eos_ids", "special_ids", "max_response_tokens", "logprob_gap", "staleness_bound",
               "learner_version", "unscored_nan_rewards")
# OpenRLHF keeps prompt + response in `sequences`: the response is its last `response_length` tokens
# before `total_length` (split_sequences); read beside the sequence when there are no response tokens.
SPLIT_COLUMNS = ("response_length", "total_length")


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
    columns = columns or columns_of(version)
    return _read(version, rows, needed_columns(columns))


def read_rollouts(version: DatasetVersion, rows: Sequence[int] | None = None,
                  fields: Sequence[Field] | None = None) -> tuple[pa.Table, RolloutColumns]:
    """The rollout columns of `rows` (default: all) and their meanings, from `fields` (default the
    version's; others declare other meanings). A sequence without response tokens but with its
    response length (OpenRLHF) comes with `prompt_tokens` and `response_tokens` cut from it."""
    columns = columns_of(version, fields)
    names = {f.name for f in (fields or version.fields)}
    split = columns.get(Meaning.RESPONSE_TOKENS) is None and columns.get(Meaning.SEQUENCE_TOKENS) is not None \
        and SPLIT_COLUMNS[0] in names and not {"prompt_tokens", "response_tokens"} & names
    if not split:
        return _read(version, rows, needed_columns(columns)), columns
    extra = [c for c in SPLIT_COLUMNS if c in names]
    table = _read(version, rows, list(dict.fromkeys([*needed_columns(columns), *extra])))
    try:
        table = split_sequences(table, columns.get(Meaning.SEQUENCE_TOKENS), *extra)
    except ValueError as e:
        from dsinspect.errors import UserError

        raise UserError(f"{version.address}: {e}") from None
    meanings = {**columns.columns, Meaning.PROMPT_TOKENS: "prompt_tokens", Meaning.RESPONSE_TOKENS: "response_tokens"}
    order = list(Meaning)
    return table, RolloutColumns({m: meanings[m] for m in sorted(meanings, key=order.index)},
                                 columns.reward_functions)


def _read(version: DatasetVersion, rows: Sequence[int] | None, names: list[str]) -> pa.Table:
    if rows is not None:
        return version.take(np.asarray(rows, dtype=np.int64), names)
    tables = [table for _, table in version.iter_tables(names)]
    if not tables:  # no rows: the columns all the same (a schema-less table failed every check)
        return pa.schema([version.manifest.schema.field(n) for n in names]).empty_table()
    return pa.concat_tables(tables)


def check_version(version: DatasetVersion, rows: Sequence[int] | None = None, *,
                  fields: Sequence[Field] | None = None, **overrides: Any) -> RolloutReport:
    """Every rollout check over the version (or `rows` of it); a finding's rows are version row
    indices (positions in `rows` mapped back when rows are given). `fields`: see `read_rollouts`."""
    table, columns = read_rollouts(version, rows, fields)
    newest = newest_policy_version(version, columns)  # of the whole version, so a group is judged alike
    report = check_rollouts(table, check_options(fields or version.fields, newest, **overrides), columns)
    if rows is None:
        return report
    back = np.asarray(rows, dtype=np.int64)
    report.findings = [dataclasses.replace(f, rows=tuple(int(back[r]) for r in f.rows)) for f in report.findings]
    return report


def version_statistics(version: DatasetVersion, *, fields: Sequence[Field] | None = None, bins: int = 20,
                       **overrides: Any) -> dict[str, Any]:
    table, columns = read_rollouts(version, None, fields)
    options = check_options(fields or version.fields, newest_policy_version(version, columns), **overrides)
    return rollout_statistics(table, options, columns, bins)


def columns_of(version: DatasetVersion, fields: Sequence[Field] | None = None) -> RolloutColumns:
    """Each meaning's column in `version` (or in `fields` standing for its own); refused when it is not rollouts."""
    columns = rollout_columns(fields or version.fields)
    if columns is None:
        from dsinspect.errors import UserError

        raise UserError(f"{version.address}: not LLM rollouts (no response column with rewards, "
                        "advantages, log-probs or groups beside it)")
    return columns
