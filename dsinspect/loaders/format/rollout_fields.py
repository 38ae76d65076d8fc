"""Rollout meanings declared in a version's fields: `{"rollout": "<meaning>"}` in a field's options says
what the column means to the RL checks and views (`{"rollout": null}`: nothing, whatever its name).

Ingest records every meaning it infers there (`declare_meanings`), so a viewer reads what was decided
once instead of guessing again; `rollout_columns` reads them back, inferring only for the fields that
declare nothing.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.format.rollout_meanings import Meaning, RolloutColumns, infer_meanings

__all__ = ["MEANING_OPTION", "NO_MEANING", "rollout_columns", "declare_meanings", "with_meanings", "declared"]

MEANING_OPTION = "rollout"   # a field's options: {"rollout": "<meaning>"}, or None for no meaning
NO_MEANING = "none"          # how a person unsets one (`--meaning FIELD=none`)
# Without one of these a table is not rollouts of a language model (a gym episode, a corpus...).
_RESPONSE = (Meaning.RESPONSE_TOKENS, Meaning.RESPONSE_TEXT)
_ABOUT_RL = (Meaning.REWARD, Meaning.REWARDS, Meaning.ADVANTAGE, Meaning.SAMPLER_LOGPROBS,
             Meaning.LEARNER_LOGPROBS, Meaning.GROUP, Meaning.POLICY_VERSION, Meaning.LOSS_MASK)
# `input_ids` is every tokenized corpus's column: a prompt+response list makes rollouts only beside what
# an RL step adds per token (a scored corpus, input_ids and a score, is not rollouts).
_PER_TOKEN_RL = (Meaning.SAMPLER_LOGPROBS, Meaning.LEARNER_LOGPROBS, Meaning.LOSS_MASK, Meaning.ADVANTAGE)


def declared(fields: Iterable[Field]) -> dict[str, str | None]:
    """{field: its declared meaning, or None for a declared "no meaning"} of the fields that declare."""
    return {f.name: f.options[MEANING_OPTION] for f in fields if MEANING_OPTION in f.options
            and (f.options[MEANING_OPTION] is None or isinstance(f.options[MEANING_OPTION], str))}


def rollout_columns(fields: Iterable[Field]) -> RolloutColumns | None:
    """Each meaning's column among `fields`: declared ones first, the rest inferred; None when the
    fields are not rollouts (no response, or nothing an RL stack adds to one)."""
    fields = list(fields)
    said = declared(fields)
    schema = pa.schema([pa.field(f.name, f.type) for f in fields if not (f.name in said and said[f.name] is None)])
    try:
        columns = infer_meanings(schema, _explicit(fields, said))
    except ValueError:  # a declaration that does not fit its column's type: infer as if undeclared
        columns = infer_meanings(schema)
    return columns if _is_rollouts(columns) else None


def with_meanings(fields: Iterable[Field], meanings: Mapping[str, str | None], where: str = "") -> list[Field]:
    """`fields` with `meanings` ({field: meaning, or None / "none" for no meaning}) declared in their
    options; a field, meaning or type that does not fit is a UserError naming it (and `where`)."""
    fields = list(fields)
    by_name = {f.name: f for f in fields}
    wanted: dict[str, str | None] = {}
    for name, meaning in meanings.items():
        flag = f"--meaning {name}={meaning if meaning is not None else NO_MEANING}"
        if name not in by_name:
            raise UserError(f"{flag}: no field {name!r}{where} (fields: {', '.join(by_name)})")
        if meaning is None or meaning == NO_MEANING:
            wanted[name] = None
            continue
        try:
            Meaning(meaning)
        except ValueError:
            raise UserError(f"{flag}: no meaning {meaning!r} (meanings: {', '.join(m.value for m in Meaning)}, "
                            f"{NO_MEANING})") from None
        kind = by_name[name].type
        try:  # the meaning's type check (flat numbers may each be one reward function)
            infer_meanings(pa.schema([pa.field(name, kind)]),
                           {meaning: [name] if meaning == Meaning.REWARDS.value and _number(kind) else name})
        except ValueError:
            raise UserError(f"{flag}: field {name!r}{where} is {kind}, which cannot hold {meaning}") from None
        wanted[name] = meaning
    return [_declare(f, wanted[f.name]) if f.name in wanted else f for f in fields]


def declare_meanings(fields: Iterable[Field], meanings: Mapping[str, str | None] | None = None,
                     where: str = "") -> list[Field]:
    """`fields` with the given `meanings` declared and, when they make rollouts, every other meaning
    inferred for them declared too (a table that is not rollouts keeps only the given ones: its
    fields, and so its version id, are what they were)."""
    fields = with_meanings(fields, meanings or {}, where)
    columns = rollout_columns(fields)
    if columns is None:
        return fields
    meaning_of = {column: meaning.value for meaning, column in columns.columns.items()}
    meaning_of.update({column: Meaning.REWARDS.value for column in columns.reward_functions})
    said = declared(fields)
    return [f if f.name in said or f.name not in meaning_of else _declare(f, meaning_of[f.name]) for f in fields]


def _declare(f: Field, meaning: str | None) -> Field:
    return Field(f.name, f.type, f.role, f.nullable, {**f.options, MEANING_OPTION: meaning})


def _explicit(fields: list[Field], said: Mapping[str, str | None]) -> dict[str, str | list[str]]:
    """The declarations as `infer_meanings` takes them: numeric fields declared "rewards" are the
    per-function columns, any other the one rewards column."""
    types = {f.name: f.type for f in fields}
    explicit: dict[str, str | list[str]] = {}
    functions = [name for name, m in said.items() if m == Meaning.REWARDS.value and _number(types[name])]
    for name, meaning in said.items():
        if meaning is not None and name not in functions:
            explicit[meaning] = name
    if functions:
        explicit[Meaning.REWARDS.value] = functions
    return explicit


def _is_rollouts(columns: RolloutColumns) -> bool:
    has_rl = any(columns.get(m) for m in _ABOUT_RL) or bool(columns.reward_functions)
    if any(columns.get(m) for m in _RESPONSE):
        return has_rl
    return bool(columns.get(Meaning.SEQUENCE_TOKENS)) and any(columns.get(m) for m in _PER_TOKEN_RL)


def _number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
