"""The checks that name RL data bugs in a table of rollouts, each a pure function of the table's arrays
and the options, vectorised over all rows: `check_rollouts` runs them all.

A check that lacks its input (no such column, no pad id given) raises `Skip`, and the report says so:
a finding absent because it was never looked for is not a clean bill.
"""

from __future__ import annotations

import json
import math
from typing import Callable

import numpy as np
import pyarrow as pa

from dsinspect.arrays import ranges
from dsinspect.inspect.rollout_arrays import Aligned, Layout, RolloutArrays, categories, primitive, scalars
from dsinspect.inspect.rollout_findings import (
    CheckOptions,
    Code,
    RolloutReport,
    Skip,
    row_finding,
    token_finding,
)
from dsinspect.inspect.rollouts import Meaning, RolloutColumns, infer_meanings

__all__ = ["check_rollouts", "CHECKS", "finish_flags", "group_rewards", "logprob_region", "reward_functions",
           "token_gaps"]

Check = Callable[[RolloutArrays, CheckOptions], list]
PER_TOKEN = (Meaning.LOSS_MASK, Meaning.SAMPLER_LOGPROBS, Meaning.LEARNER_LOGPROBS, Meaning.REF_LOGPROBS,
             Meaning.ADVANTAGE)


def check_rollouts(table: pa.Table, options: CheckOptions | None = None,
                   columns: RolloutColumns | None = None) -> RolloutReport:
    """Every check over `table` (its meanings inferred unless `columns` is given)."""
    options = options or CheckOptions()
    columns = columns or infer_meanings(table.schema)
    data = RolloutArrays(table, columns, options.pad_id, options.eos_ids)
    report = RolloutReport(columns=columns)
    for code, check in CHECKS:
        try:
            report.findings += [f for f in check(data, options) if f is not None]
        except Skip as why:
            report.skipped[code.value] = str(why)
    return report


def _need(data: RolloutArrays, *meanings: Meaning) -> None:
    missing = [m.value for m in meanings if data.columns.get(m) is None]
    if missing:
        raise Skip(f"no {' or '.join(missing)} column")


def _need_response(data: RolloutArrays) -> None:
    _need(data, Meaning.RESPONSE_TOKENS)


def token_length_mismatch(data: RolloutArrays, options: CheckOptions) -> list:
    """Per-token columns whose length fits neither the response, the prompt+response, nor the
    prompt+response but its first token: they cannot be lined up with the tokens, and are left out of
    the other checks in those rows."""
    _need_response(data)
    out = []
    for meaning in PER_TOKEN:
        aligned = data.aligned(meaning)
        if aligned is not None:
            name = data.columns.get(meaning)
            out.append(row_finding(Code.TOKEN_LENGTH_MISMATCH, aligned.mismatched, options,
                                   f"{name} ({meaning.value}) does not line up with the tokens in {{rows}} "
                                   f"rollout(s) (its layout: one per {aligned.layout.value} token)", column=name))
    return out


def loss_mask_on_prompt(data: RolloutArrays, options: CheckOptions) -> list:
    """Mask entries that cover prompt tokens; positions count prompt tokens."""
    _need(data, Meaning.LOSS_MASK, Meaning.PROMPT_TOKENS)
    _need_response(data)
    aligned, lists = data.aligned(Meaning.LOSS_MASK), data.lists(Meaning.LOSS_MASK)
    if aligned is None:
        raise Skip("the loss mask is not a list")
    if not (aligned.row_ok.any() or aligned.mismatched.any()):
        return []  # no row to tell a layout by
    if aligned.layout is Layout.RESPONSE:
        raise Skip("the loss mask holds response tokens only: it cannot cover the prompt")
    shifted = aligned.layout is Layout.SHIFTED
    counts = np.where(aligned.row_ok, data.prompt_lengths - shifted, 0)
    hits = np.flatnonzero(lists.items[ranges(lists.starts, counts)] != 0)
    begins = np.cumsum(counts) - counts
    message = "the loss mask covers {tokens} prompt token(s) in {rows} rollout(s): the model learns its prompt"
    return [token_finding(Code.LOSS_MASK_ON_PROMPT, hits, begins, options, message, "prompt",
                          data.columns.get(Meaning.LOSS_MASK), offset=int(shifted))]


def loss_mask_on_padding(data: RolloutArrays, options: CheckOptions) -> list:
    """Mask entries over pad tokens of the response (not the final EOS when the pad id is the EOS)."""
    _need(data, Meaning.LOSS_MASK)
    _need_response(data)
    if options.pad_id is None:
        raise Skip("no pad_id given")
    mask = data.aligned(Meaning.LOSS_MASK)
    if mask is None:
        raise Skip("the loss mask is not a list")
    covered = mask.ok & (mask.values != 0) & (data.tokens == options.pad_id) & ~data.final_eos
    message = f"the loss mask covers {{tokens}} padding token(s) (id {options.pad_id}) in {{rows}} rollout(s)"
    return [token_finding(Code.LOSS_MASK_ON_PADDING, np.flatnonzero(covered), data.begins, options, message,
                          column=data.columns.get(Meaning.LOSS_MASK))]


def logprob_region(data: RolloutArrays) -> np.ndarray:
    """The tokens whose log-probs matter: under the loss mask where a row's mask lines up, else the
    response before its padding."""
    mask = data.aligned(Meaning.LOSS_MASK)
    region = data.in_response
    if mask is None:
        return region
    return np.where(mask.ok, mask.values != 0, region)


def token_gaps(sampler: Aligned, learner: Aligned) -> np.ndarray:
    """|sampler - learner| per response token, in float64 (NaN where either is NaN or both the same inf)."""
    with np.errstate(invalid="ignore"):
        return np.abs(sampler.values.astype(np.float64) - learner.values)


def logprob_gap(data: RolloutArrays, options: CheckOptions) -> list:
    """Tokens where the sampler's and the learner's log-probs differ by more than the threshold; a
    non-finite log-prob counts, since it cannot be within any threshold."""
    _need(data, Meaning.SAMPLER_LOGPROBS, Meaning.LEARNER_LOGPROBS)
    _need_response(data)
    sampler, learner = data.aligned(Meaning.SAMPLER_LOGPROBS), data.aligned(Meaning.LEARNER_LOGPROBS)
    if sampler is None or learner is None:
        raise Skip("the log-probs are not lists")
    gap = token_gaps(sampler, learner)
    hits = np.flatnonzero(sampler.ok & learner.ok & logprob_region(data) & ~(gap <= options.logprob_gap))
    worst = np.nanmax(gap[hits]) if len(hits) and not np.isnan(gap[hits]).all() else math.nan
    message = (f"|sampler - learner log-prob| > {options.logprob_gap:.3g} at {{tokens}} token(s) of {{rows}} "
               f"rollout(s) (largest {worst:.3g})")
    return [token_finding(Code.LOGPROB_GAP, hits, data.begins, options, message,
                          column=data.columns.get(Meaning.LEARNER_LOGPROBS))]


def group_rewards(data: RolloutArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each row's group code, -1 when it has no group or reward; the rewards; per group code whether its
    two or more rewarded members all got the same reward)."""
    codes, _ = categories(data.table.column(data.columns.get(Meaning.GROUP)))
    reward, valid = scalars(data.table.column(data.columns.get(Meaning.REWARD)))
    codes = np.where(valid, codes, -1)
    groups = int(codes.max(initial=-1)) + 1
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]
    sizes = np.bincount(codes[order], minlength=groups)
    begins = np.cumsum(sizes) - sizes
    low = _segment(np.minimum, reward[order], begins, sizes)
    high = _segment(np.maximum, reward[order], begins, sizes)
    return codes, reward, (sizes >= 2) & (low == high)


def _segment(ufunc: np.ufunc, values: np.ndarray, begins: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    out = np.full(len(sizes), np.nan)
    if (sizes > 0).any():
        out[sizes > 0] = ufunc.reduceat(values, begins[sizes > 0])
    return out


def zero_advantage_group(data: RolloutArrays, options: CheckOptions) -> list:
    """Groups (of two or more rewarded rollouts) whose rewards are all equal: GRPO's advantage, reward
    minus the group's mean, is zero for every one of them."""
    _need(data, Meaning.GROUP, Meaning.REWARD)
    codes, _, equal = group_rewards(data)
    rows = (codes >= 0) & equal[np.maximum(codes, 0)]
    message = (f"{int(equal.sum())} of {int(np.count_nonzero(np.bincount(codes[codes >= 0]) >= 2))} groups "
               "({rows} rollouts) have all-equal rewards: zero advantage, no gradient")
    return [row_finding(Code.ZERO_ADVANTAGE_GROUP, rows, options, message, data.columns.get(Meaning.GROUP))]


def finish_flags(data: RolloutArrays) -> tuple[np.ndarray, np.ndarray] | None:
    """(finished at the length limit, finished on a stop) per row from the finish reason: a string
    ("length", "stop") or a bool `truncated` (True: length, False: stop). None without the column."""
    name = data.columns.get(Meaning.FINISH_REASON)
    if name is None:
        return None
    column = data.table.column(name)
    if pa.types.is_boolean(column.type):
        values, valid = primitive(column.combine_chunks())
        return valid & (values != 0), valid & (values == 0)
    codes, names = categories(column)
    return _codes_of(codes, names, "length"), _codes_of(codes, names, "stop")


def _codes_of(codes: np.ndarray, names: list, wanted: str) -> np.ndarray:
    return np.isin(codes, [i for i, name in enumerate(names) if name == wanted])


def truncated(data: RolloutArrays, options: CheckOptions) -> list:
    """Rollouts cut at the length limit: finish reason "length", or as many tokens as `max_response_tokens`."""
    flags = finish_flags(data)
    if flags is None and options.max_response_tokens is None:
        raise Skip("no finish_reason column and no max_response_tokens given")
    cut = np.zeros(data.n, bool) if flags is None else flags[0]
    if options.max_response_tokens is not None:
        _need_response(data)
        cut |= data.response.valid & (data.effective >= options.max_response_tokens)
    limit = "" if options.max_response_tokens is None else f" or {options.max_response_tokens} tokens"
    return [row_finding(Code.TRUNCATED, cut, options, f"{{rows}} rollout(s) cut at the length limit "
                        f"(finish reason 'length'{limit})", data.columns.get(Meaning.FINISH_REASON))]


def missing_eos(data: RolloutArrays, options: CheckOptions) -> list:
    """Rollouts that stopped (finish reason "stop"; without one, shorter than the limit) but whose last
    token before the padding is no EOS. The position is that last token."""
    _need_response(data)
    if not options.eos_ids:
        raise Skip("no eos_ids given")
    flags = finish_flags(data)
    if flags is None and options.max_response_tokens is None:
        raise Skip("no finish_reason column and no max_response_tokens given")
    stopped = flags[1] if flags is not None else data.effective < options.max_response_tokens
    rows = stopped & data.response.valid & ~data.ends_with_eos
    last = data.effective[rows] - 1
    positions = [(int(p),) if p >= 0 else () for p in last[:options.rows_shown]]
    return [row_finding(Code.MISSING_EOS, rows, options, "{rows} rollout(s) stopped without an EOS at the end",
                        data.columns.get(Meaning.RESPONSE_TOKENS), positions)]


def special_token(data: RolloutArrays, options: CheckOptions) -> list:
    """Special tokens (chat-template roles, pad, EOS) inside a response, before its padding and other
    than its final EOS."""
    _need_response(data)
    if not options.special_ids:
        raise Skip("no special_ids given")
    hits = np.isin(data.tokens, options.special_ids) & data.in_response & ~data.final_eos
    message = "{tokens} special token(s) inside {rows} response(s)"
    return [token_finding(Code.SPECIAL_TOKEN, np.flatnonzero(hits), data.begins, options, message,
                          column=data.columns.get(Meaning.RESPONSE_TOKENS))]


def nonfinite_reward(data: RolloutArrays, options: CheckOptions) -> list:
    _need(data, Meaning.REWARD)
    name = data.columns.get(Meaning.REWARD)
    values, valid = scalars(data.table.column(name))
    return [row_finding(Code.NONFINITE_REWARD, valid & ~np.isfinite(values), options,
                        f"{{rows}} NaN or infinite reward(s) in {name}", name)]


def reward_functions(data: RolloutArrays) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each reward function's (values, validity) per row: from a struct's numeric fields, a JSON object
    per row (parsed row by row: JSON is text), or flat columns."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in data.columns.reward_functions:
        out[name] = scalars(data.table.column(name))
    name = data.columns.get(Meaning.REWARDS)
    if name is None:
        return out
    column = data.table.column(name).combine_chunks()
    if pa.types.is_struct(column.type):
        for child, spec in zip(column.flatten(), column.type):
            if pa.types.is_integer(spec.type) or pa.types.is_floating(spec.type):
                out[spec.name] = scalars(child)
        return out
    return {**out, **_json_rewards(column.to_pylist())}


def _json_rewards(texts: list) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    parsed = [json.loads(t) if t else {} for t in texts]
    keys = sorted({k for p in parsed if isinstance(p, dict) for k, v in p.items() if _is_number(v)})
    out = {}
    for key in keys:
        got = [p.get(key) if isinstance(p, dict) else None for p in parsed]
        valid = np.array([_is_number(v) for v in got], bool)
        out[key] = (np.array([float(v) if ok else 0.0 for v, ok in zip(got, valid)]), valid)
    return out


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def nonfinite_rewards(data: RolloutArrays, options: CheckOptions) -> list:
    """Per-function rewards that are NaN or infinite (only infinite with `unscored_nan_rewards`)."""
    functions = reward_functions(data)
    if not functions:
        raise Skip("no rewards column (per reward function)")
    bad, named = np.zeros(data.n, bool), []
    for name, (values, valid) in functions.items():
        wrong = valid & (np.isinf(values) if options.unscored_nan_rewards else ~np.isfinite(values))
        if wrong.any():
            named.append(f"{name}: {int(wrong.sum())}")
            bad |= wrong
    return [row_finding(Code.NONFINITE_REWARDS, bad, options,
                        f"{{rows}} rollout(s) with a NaN or infinite reward function ({', '.join(named)})",
                        data.columns.get(Meaning.REWARDS))]


def nonfinite_advantage(data: RolloutArrays, options: CheckOptions) -> list:
    """NaN or infinite advantages: per row, or per token (every token: a NaN times a zero mask is NaN)."""
    _need(data, Meaning.ADVANTAGE)
    name = data.columns.get(Meaning.ADVANTAGE)
    message = f"NaN or infinite advantage in {{rows}} rollout(s) ({name})"
    per_token: Aligned | None = data.aligned(Meaning.ADVANTAGE) if data.response is not None else None
    if per_token is not None:
        hits = np.flatnonzero(per_token.ok & ~np.isfinite(per_token.values))
        return [token_finding(Code.NONFINITE_ADVANTAGE, hits, data.begins, options,
                              message + ", {tokens} token(s)", column=name)]
    if data.lists(Meaning.ADVANTAGE) is not None:
        raise Skip("a per-token advantage needs the response_tokens column")
    values, valid = scalars(data.table.column(name))
    return [row_finding(Code.NONFINITE_ADVANTAGE, valid & ~np.isfinite(values), options, message, name)]


def stale(data: RolloutArrays, options: CheckOptions) -> list:
    """Rollouts sampled by a policy older than the learner's version minus the declared bound."""
    _need(data, Meaning.POLICY_VERSION)
    if options.learner_version is None or options.staleness_bound is None:
        raise Skip("no learner_version and staleness_bound given")
    name = data.columns.get(Meaning.POLICY_VERSION)
    versions, valid = primitive(data.table.column(name).combine_chunks())
    oldest = options.learner_version - options.staleness_bound
    rows = valid & (versions < oldest)
    first = int(versions[rows].min()) if rows.any() else None
    message = (f"{{rows}} rollout(s) sampled by a policy older than version {oldest} (learner "
               f"{options.learner_version}, bound {options.staleness_bound}; oldest {first})")
    return [row_finding(Code.STALE, rows, options, message, name)]


CHECKS: tuple[tuple[Code, Check], ...] = (
    (Code.TOKEN_LENGTH_MISMATCH, token_length_mismatch),
    (Code.LOSS_MASK_ON_PROMPT, loss_mask_on_prompt),
    (Code.LOSS_MASK_ON_PADDING, loss_mask_on_padding),
    (Code.LOGPROB_GAP, logprob_gap),
    (Code.ZERO_ADVANTAGE_GROUP, zero_advantage_group),
    (Code.TRUNCATED, truncated),
    (Code.MISSING_EOS, missing_eos),
    (Code.SPECIAL_TOKEN, special_token),
    (Code.NONFINITE_REWARD, nonfinite_reward),
    (Code.NONFINITE_REWARDS, nonfinite_rewards),
    (Code.NONFINITE_ADVANTAGE, nonfinite_advantage),
    (Code.STALE, stale),
)
