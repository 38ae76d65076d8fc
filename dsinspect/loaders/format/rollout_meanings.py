"""What the columns of an LLM RL rollout table mean: a small vocabulary (`Meaning`) and `infer_meanings`,
which finds each meaning's column from the names and types verl, TRL and OpenRLHF give them.

A rollout is one sampled response to a prompt, with what the RL stack knew about it (log-probs, reward,
advantage, loss mask...). The checks (`dsinspect.inspect.rollout_checks`) and statistics read a table
through this mapping, so a dump keeps its own column names; a version declares it in its fields' options
(`rollout_fields`). Here, beside the roles, because ingest and streams record meanings in the manifest
(the engine cannot import `dsinspect.inspect`, which re-exports this as `inspect.rollouts`). Where each
alias comes from is said beside it, and in docs/RL.md.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

__all__ = ["Meaning", "ALIASES", "RolloutColumns", "infer_meanings", "reward_function_like"]


class Meaning(str, enum.Enum):
    PROMPT_TOKENS = "prompt_tokens"        # token ids of the prompt (chat template included)
    RESPONSE_TOKENS = "response_tokens"    # token ids the sampler generated (and, for agents, tool output)
    SEQUENCE_TOKENS = "sequence_tokens"    # prompt and response in one list (OpenRLHF, verl's input_ids)
    PROMPT_TEXT = "prompt_text"
    RESPONSE_TEXT = "response_text"
    GROUP = "group"                        # the GRPO group: responses to the same prompt share it
    POLICY_VERSION = "policy_version"      # the policy (weights) version that sampled the rollout
    SAMPLER_LOGPROBS = "sampler_logprobs"  # per response token, from the inference engine (vLLM, SGLang)
    LEARNER_LOGPROBS = "learner_logprobs"  # per response token, recomputed by the trainer before the update
    REF_LOGPROBS = "ref_logprobs"          # per response token, under the frozen reference policy (KL term)
    REWARD = "reward"                      # one number per rollout (or per token, summed)
    REWARDS = "rewards"                    # per reward function: a struct or a JSON object
    ADVANTAGE = "advantage"                # per rollout or per response token
    LOSS_MASK = "loss_mask"                # per response token, or per prompt+response token
    FINISH_REASON = "finish_reason"        # "stop", "length", "abort"...; or a bool "truncated"
    TURNS = "turns"                        # the conversation: a role per span, tool calls
    ENV_OUTPUT = "env_output"              # what the environment or verifier answered


# Type predicates: a meaning's column must have one of these shapes.
def _ints(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def _number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _list_of(item: Callable[[pa.DataType], bool]) -> Callable[[pa.DataType], bool]:
    def check(t: pa.DataType) -> bool:
        lists = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        return lists and item(t.value_type)
    return check


def _scalar(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t))


def _any(t: pa.DataType) -> bool:
    return True


def _either(*checks: Callable[[pa.DataType], bool]) -> Callable[[pa.DataType], bool]:
    return lambda t: any(check(t) for check in checks)


_TOKENS = _list_of(_ints)
_PER_TOKEN = _list_of(_number)

# meaning -> (the column types it accepts, its names in the order they are tried). Names are matched
# without regard to case. A name two meanings share ("prompts", "rewards") goes to the one whose type fits.
ALIASES: dict[Meaning, tuple[Callable[[pa.DataType], bool], tuple[str, ...]]] = {
    Meaning.PROMPT_TOKENS: (_TOKENS, (
        "prompt_tokens",
        "prompt_ids",          # TRL GRPOTrainer: _generate_and_score_completions output
        "prompts",             # verl DataProto.batch (left-padded)
        "prompt_token_ids",    # vLLM RequestOutput
    )),
    Meaning.RESPONSE_TOKENS: (_TOKENS, (
        "response_tokens", "response_ids",
        "completion_ids",      # TRL
        "responses",           # verl (right-padded)
        "output_token_ids", "output_ids",
        "token_ids",           # vLLM CompletionOutput
    )),
    Meaning.SEQUENCE_TOKENS: (_TOKENS, (
        "sequence_tokens",
        "sequences",           # OpenRLHF Experience: prompt + response
        "input_ids",           # verl: prompts + responses
    )),
    Meaning.PROMPT_TEXT: (_text, (
        "prompt_text",
        "prompt",              # TRL completions table
        "prompts",             # OpenRLHF Experience metadata
        "input",               # verl trainer.rollout_data_dir JSONL
        "query",
    )),
    Meaning.RESPONSE_TEXT: (_text, (
        "response_text", "response",
        "completion",          # TRL completions table
        "output",              # verl trainer.rollout_data_dir JSONL
        "responses",
    )),
    Meaning.GROUP: (_scalar, (
        "group", "group_id",
        "uid",                 # verl non_tensor_batch: one uuid per prompt, repeated n times
        "prompt_uid", "prompt_id", "prompt_index",
    )),
    Meaning.POLICY_VERSION: (_ints, (
        "policy_version",
        "param_version",       # verl fully_async_policy
        "param_version_start",  # verl partial rollouts: the version a generation began with
        "weight_version", "model_version", "version",
        "step", "global_step",  # verl and TRL dumps: the trainer step that generated it (synchronous runs)
    )),
    Meaning.SAMPLER_LOGPROBS: (_list_of(_number), (
        "sampler_logprobs",
        "rollout_log_probs",   # verl (calculate_log_probs) and OpenRLHF Experience
        "sampling_per_token_logps",  # TRL with vLLM
        "rollout_logprobs", "behavior_logprobs", "inference_logprobs",
        "logprobs",            # TRL rollout_func / vLLM output
    )),
    Meaning.LEARNER_LOGPROBS: (_list_of(_number), (
        "learner_logprobs",
        "old_log_probs",       # verl: recomputed by the actor before the update
        "old_per_token_logps",  # TRL
        "action_log_probs",    # OpenRLHF Experience
        "old_logprobs", "train_logprobs",
    )),
    Meaning.REF_LOGPROBS: (_list_of(_number), (
        "ref_logprobs",
        "ref_log_prob",        # verl
        "ref_per_token_logps",  # TRL
        "base_action_log_probs",  # OpenRLHF Experience
        "ref_log_probs",
    )),
    Meaning.REWARD: (_either(_number, _PER_TOKEN), (
        "reward",
        "score",               # verl rollout dump: token_level_scores summed
        "rewards",             # OpenRLHF Experience (one float per sample)
        "token_level_scores",  # verl: the verifier's reward at the last response token
        "token_level_rewards",  # verl: the scores minus the KL penalty when it is in the reward
        "scores",              # OpenRLHF (the binary score dynamic filtering uses)
    )),
    Meaning.REWARDS: (_either(pa.types.is_struct, _text), (
        "rewards", "rewards_per_func", "reward_components", "reward_breakdown",
        "reward_extra_info",   # verl reward managers
    )),
    Meaning.ADVANTAGE: (_either(_number, _PER_TOKEN), (
        "advantage",           # TRL completions table (one per completion)
        "advantages",          # verl (per token), TRL tensors (per completion), OpenRLHF (per token)
    )),
    Meaning.LOSS_MASK: (_PER_TOKEN, (
        "loss_mask",
        "response_mask",       # verl: 1 on generated tokens, 0 on tool output and padding
        "completion_mask",     # TRL
        "action_mask",         # OpenRLHF: over sequences[1:]
        "labels_mask", "assistant_masks",
    )),
    Meaning.FINISH_REASON: (_either(_text, pa.types.is_boolean, pa.types.is_dictionary), (
        "finish_reason", "stop_reason", "finish_reasons",
        "truncated",           # OpenRLHF Experience: True when cut at the length limit
        "is_truncated",
    )),
    Meaning.TURNS: (_either(pa.types.is_list, pa.types.is_large_list, _text), (
        "turns", "messages", "conversation", "conversations", "chat",
    )),
    Meaning.ENV_OUTPUT: (_any, (
        "env_output", "environment_output", "verifier_output", "env_response",
        "tool_outputs", "tool_output", "observation", "observations",
    )),
}


@dataclass(frozen=True)
class RolloutColumns:
    """Which column plays each meaning. `reward_functions` holds per-function reward columns kept flat
    beside the others (TRL's completions table writes one float column per reward function)."""

    columns: Mapping[Meaning, str] = field(default_factory=dict)
    reward_functions: tuple[str, ...] = ()

    def get(self, meaning: Meaning | str) -> str | None:
        return self.columns.get(Meaning(meaning))

    def to_json(self) -> dict[str, Any]:
        return {"columns": {m.value: c for m, c in self.columns.items()},
                "reward_functions": list(self.reward_functions)}


def infer_meanings(schema: pa.Schema | pa.Table,
                   explicit: Mapping[Meaning | str, str | Sequence[str] | None] | None = None) -> RolloutColumns:
    """Each meaning's column, from the names and types in `schema`; `explicit` sets a meaning's column
    (or, for "rewards", a list of flat per-function columns) or unsets it with None. A column names one
    meaning at most. An explicit column that is missing or of the wrong type raises ValueError."""
    schema = schema.schema if isinstance(schema, pa.Table) else schema
    types = {f.name: f.type for f in schema}
    chosen, functions = _explicit(types, dict(explicit or {}))
    taken = set(chosen.values()) | set(functions)
    for meaning, (fits, names) in ALIASES.items():
        if meaning in chosen or Meaning(meaning) in _unset(explicit):
            continue
        column = _first_fit(types, names, fits, taken)
        if column is not None:
            chosen[meaning] = column
            taken.add(column)
    if Meaning.REWARDS not in chosen and not functions and Meaning.REWARDS not in _unset(explicit):
        functions = tuple(n for n, t in types.items() if n not in taken and _number(t) and reward_function_like(n))
    order = list(ALIASES)
    return RolloutColumns({m: chosen[m] for m in sorted(chosen, key=order.index)}, tuple(functions))


def reward_function_like(name: str) -> bool:
    """A name a reward function's column has in TRL's completions table (`accuracy_reward`,
    `think_format_reward`) or in a `rewards/<name>` metric."""
    low = name.lower()
    return low.endswith(("_reward", "_rewards")) or low.startswith(("reward_", "rewards/", "rewards."))


def _explicit(types: Mapping[str, pa.DataType], explicit: dict) -> tuple[dict[Meaning, str], tuple[str, ...]]:
    chosen: dict[Meaning, str] = {}
    functions: tuple[str, ...] = ()
    for key, column in explicit.items():
        meaning = _meaning(key)
        if column is None:
            continue
        if meaning is Meaning.REWARDS and not isinstance(column, str):
            functions = tuple(column)
            for name in functions:
                _check(types, name, meaning, _number)
            continue
        _check(types, column, meaning, ALIASES[meaning][0])
        chosen[meaning] = column
    return chosen, functions


def _unset(explicit: Mapping | None) -> set[Meaning]:
    return {_meaning(k) for k, v in (explicit or {}).items() if v is None}


def _meaning(key: Meaning | str) -> Meaning:
    try:
        return Meaning(key)
    except ValueError:
        raise ValueError(f"no meaning {key!r}: one of {', '.join(m.value for m in Meaning)}") from None


def _check(types: Mapping[str, pa.DataType], column: str, meaning: Meaning, fits: Callable) -> None:
    if column not in types:
        raise ValueError(f"{meaning.value}: no column {column!r} (columns: {', '.join(types)})")
    if not fits(types[column]):
        raise ValueError(f"{meaning.value}: column {column!r} is {types[column]}, which cannot hold it")


def _first_fit(types: Mapping[str, pa.DataType], names: tuple[str, ...], fits: Callable, taken: set) -> str | None:
    by_lower = {n.lower(): n for n in types if n not in taken}
    for name in names:
        column = by_lower.get(name)
        if column is not None and fits(types[column]):
            return column
    return None
