"""Deterministic LLM RL rollouts: a tiny rule-based "policy" over the demo tokenizer answers arithmetic
prompts, a verifier rewards it, and a few RL data bugs of each kind are injected at known rows.

A prompt is `<|user|>12+7=<|assistant|>`; a response is the answer's digits and `<|endoftext|>`,
right-padded with `<|pad|>` to `MAX_RESPONSE_TOKENS` (as verl pads its `responses`). The policy puts
probability `PI[version]` on the right digit, the rest on the other nine digits, and `EOS_P` on EOS
after the last digit; each token's sampler log-prob is its log-probability under that policy, the
learner's differs by a little noise (as bf16 inference against the trainer's kernels), the reference's
comes from a weaker policy. Groups of `GROUP_SIZE` responses share a prompt; which of them are wrong
is drawn per group (one to three, so every clean group has mixed rewards), the wrong digit at random.
Reward: 1 for the right answer, 0 otherwise (`rewards` also holds a format score); advantage: reward
minus the group's mean (GRPO without the std, as Dr. GRPO). The loss mask covers prompt + response
(0 on the prompt and the padding), one of the layouts the checks tell by length.

Injected bugs (`INJECTED_GROUPS`): each group's bug and the exact rows and token positions it lands on
are returned with the rows (`DemoRollouts.injected`, finding code -> {row: positions or None}), so a test
can assert each finding at exactly those places and nowhere else. Positions count response tokens, but
for the loss mask over the prompt, where they count prompt tokens.

This module does not import dsinspect.inspect (it sits below it): the finding codes are spelled here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from dsinspect.demo.tokenizer import load_tokenizer

__all__ = ["DemoRollouts", "demo_rollouts", "rollout_table", "SCHEMA", "INJECTED_GROUPS", "CHECKS"]

PROMPTS = 24
GROUP_SIZE = 4
MAX_RESPONSE_TOKENS = 8
VERSIONS = (6, 7)               # the first half of the prompts sampled by 6, the second by 7
LEARNER_VERSION, STALENESS_BOUND, STALE_VERSION = 7, 1, 4
PI = {4: 0.7, 6: 0.8, 7: 0.9}   # the right digit's probability, by policy version
PI_REF, EOS_P, EOS_P_REF = 0.6, 0.97, 0.9
OTHER_P = 1e-6                  # any token the policy does not mean to say (a special token, say)
LEARNER_NOISE = 0.01            # std of the learner's log-prob around the sampler's (at most 5x this)
GAP = 2.5                       # an injected sampler/learner disagreement, in nats
EOS, PAD, USER, ASSISTANT = 0, 1, 2, 3
CHECKS = {"pad_id": PAD, "eos_ids": (EOS,), "special_ids": (EOS, PAD, USER, ASSISTANT),
          "max_response_tokens": MAX_RESPONSE_TOKENS, "learner_version": LEARNER_VERSION,
          "staleness_bound": STALENESS_BOUND}
_SALT = 0x5EED_4011
_MASK = (1 << 64) - 1

# group -> (the finding its bug causes, how it is injected); rows 4g..4g+3; the other groups are clean.
INJECTED_GROUPS = {
    1: ("rollout-loss-mask-on-prompt", "mask-prompt"),       # slot 0: <|assistant|> too; slot 2: all the prompt
    2: ("rollout-loss-mask-on-padding", "mask-padding"),     # slots 1 and 3: the mask covers the padded width
    3: ("rollout-logprob-gap", "gap"),                       # slot 0: first token; slot 2: second token and EOS
    4: ("rollout-zero-advantage-group", "all-right"),
    5: ("rollout-zero-advantage-group", "all-wrong"),
    6: ("rollout-truncated", "ramble"),                      # first wrong slot: digits to the limit, no EOS
    7: ("rollout-truncated", "ramble"),
    8: ("rollout-missing-eos", "drop-eos"),                  # slots 0 and 1: "stop", but no EOS
    9: ("rollout-special-token", "assistant-inside"),        # first wrong slot: <|assistant|> after a digit
    10: ("rollout-special-token", "user-before-eos"),        # first wrong slot: <|user|> before the EOS
    11: ("rollout-nonfinite-reward", "nan-reward"),          # slot 0: the verifier's NaN, slot 3: +inf; so
    12: ("rollout-nonfinite-rewards", "inf-format"),         #   the group's advantages are NaN; slot 1: format +inf
    13: ("rollout-nonfinite-advantage", "nan-advantage"),    # slot 2
    14: ("rollout-stale", "stale"),                          # the whole group sampled by STALE_VERSION
    15: ("rollout-token-length-mismatch", "misaligned"),     # slot 0: learner log-probs one short; slot 2:
                                                             #   sampler log-probs one long (the prompt's last)
}

SCHEMA = pa.schema([
    ("rollout_id", pa.int64()), ("group", pa.int64()), ("policy_version", pa.int64()),
    ("prompt_text", pa.string()), ("prompt_tokens", pa.list_(pa.int32())),
    ("response_text", pa.string()), ("response_tokens", pa.list_(pa.int32())),
    ("sampler_logprobs", pa.list_(pa.float32())), ("learner_logprobs", pa.list_(pa.float32())),
    ("ref_logprobs", pa.list_(pa.float32())), ("loss_mask", pa.list_(pa.int8())),
    ("reward", pa.float64()), ("rewards", pa.struct([("correct", pa.float64()), ("format", pa.float64())])),
    ("advantage", pa.float64()), ("finish_reason", pa.string()),
    ("turns", pa.list_(pa.struct([("role", pa.string()), ("start", pa.int32()), ("end", pa.int32())]))),
    ("env_output", pa.string()),
])


@dataclass
class DemoRollouts:
    rows: list[dict[str, Any]]
    injected: dict[str, dict[int, tuple[int, ...] | None]] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=lambda: dict(CHECKS))   # the CheckOptions these rows need

    @property
    def clean_rows(self) -> list[int]:
        """The rows of the groups no bug was injected into (whole groups: a group's rewards go together)."""
        return [i for i, row in enumerate(self.rows) if row["group"] not in INJECTED_GROUPS]


def demo_rollouts(seed: int = 0) -> DemoRollouts:
    """`PROMPTS` groups of `GROUP_SIZE` rollouts with the bugs of `INJECTED_GROUPS`; each group depends
    only on (seed, group)."""
    out = DemoRollouts([])
    for g in range(PROMPTS):
        rows, injected = _group(seed, g)
        for code, found in injected.items():
            out.injected.setdefault(code, {}).update({len(out.rows) + i: p for i, p in found.items()})
        out.rows += rows
    for i, row in enumerate(out.rows):
        row["rollout_id"] = i
    return out


def rollout_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


@lru_cache(maxsize=1)
def _tok() -> Tokenizer:
    return load_tokenizer()


def _rng(seed: int, group: int) -> np.random.Generator:
    return np.random.default_rng([seed & _MASK, group & _MASK, _SALT])



def _group(seed: int, g: int) -> tuple[list[dict], dict[str, dict[int, Any]]]:
    """One group: drafts sampled, token bugs injected, rows made, row, reward and advantage bugs injected."""
    rng = _rng(seed, g)
    a, b = int(rng.integers(10, 100)), int(rng.integers(1, 100))
    how = INJECTED_GROUPS.get(g, (None, None))[1]
    version = STALE_VERSION if how == "stale" else VERSIONS[g >= PROMPTS // 2]
    wrong = {"all-right": 0, "all-wrong": GROUP_SIZE}.get(how)
    wrong = int(rng.integers(1, GROUP_SIZE)) if wrong is None else wrong
    wrong_slots = sorted(rng.choice(GROUP_SIZE, wrong, replace=False).tolist())
    answer = [int(d) for d in str(a + b)]
    drafts = [_sample(rng, answer, version, slot in wrong_slots) for slot in range(GROUP_SIZE)]
    found = _inject_tokens(how, drafts, wrong_slots, answer, version, rng)
    prompt = _tok().encode(f"<|user|>{a}+{b}=<|assistant|>").ids
    rows = [_row(g, version, prompt, draft, answer) for draft in drafts]
    found.update(_inject_rows(how, rows, len(prompt)))
    if how == "nan-reward":
        rows[0]["reward"] = rows[0]["rewards"]["correct"] = math.nan
        rows[3]["reward"] = rows[3]["rewards"]["correct"] = math.inf
        found = {"rollout-nonfinite-reward": {0: None, 3: None}, "rollout-nonfinite-rewards": {0: None, 3: None},
                 "rollout-nonfinite-advantage": {slot: None for slot in range(GROUP_SIZE)}}  # via the mean
    if how == "inf-format":
        rows[1]["rewards"]["format"] = math.inf
        found = {"rollout-nonfinite-rewards": {1: None}}
    mean = sum(row["reward"] for row in rows) / len(rows)
    for row in rows:
        row["advantage"] = row["reward"] - mean
    if how == "nan-advantage":
        rows[2]["advantage"] = math.nan
        found = {"rollout-nonfinite-advantage": {2: None}}
    if how in ("all-right", "all-wrong", "stale"):
        found = {INJECTED_GROUPS[g][0]: {slot: None for slot in range(GROUP_SIZE)}}
    return rows, found


def _sample(rng: np.random.Generator, answer: list[int], version: int, wrong: bool) -> dict:
    """A response's digits and EOS (one digit changed when `wrong`) with the three log-prob lists."""
    digits = list(answer)
    if wrong:
        at = int(rng.integers(len(digits)))
        digits[at] = (digits[at] + int(rng.integers(1, 10))) % 10
    return _draft(rng, [_digit_ids()[d] for d in digits] + [EOS], answer, version)


def _draft(rng: np.random.Generator, tokens: list[int], answer: list[int], version: int,
           finish: str = "stop") -> dict:
    sampler = [_logp(t, i, answer, PI[version], EOS_P) for i, t in enumerate(tokens)]
    noise = np.clip(rng.normal(0.0, LEARNER_NOISE, len(tokens)), -5 * LEARNER_NOISE, 5 * LEARNER_NOISE)
    return {"tokens": tokens, "finish": finish, "sampler": _f32(sampler), "learner": _f32(np.add(sampler, noise)),
            "ref": _f32([_logp(t, i, answer, PI_REF, EOS_P_REF) for i, t in enumerate(tokens)])}


def _logp(token: int, step: int, answer: list[int], pi: float, eos_p: float) -> float:
    """log P(token) at `step` under a policy that means to say the answer's digits, then EOS."""
    digits = _digit_ids()
    if step < len(answer):
        if token == digits[answer[step]]:
            return math.log(pi)
        return math.log((1 - pi) / 9) if token in digits else math.log(OTHER_P)
    if token == EOS:
        return math.log(eos_p)
    return math.log((1 - eos_p) / 10) if token in digits else math.log(OTHER_P)


def _inject_tokens(how: str | None, drafts: list[dict], wrong_slots: list[int], answer: list[int], version: int,
                   rng: np.random.Generator) -> dict[str, dict[int, Any]]:
    """The bugs that change a response's tokens. They go to a wrong response (which stays wrong) or keep
    the digits, so no clean group loses its mix of rewards."""
    first_wrong = wrong_slots[0] if wrong_slots else 0
    tokens = list(drafts[first_wrong]["tokens"])
    if how == "ramble":
        body = tokens[:-1]
        drafts[first_wrong] = _draft(rng, (body * MAX_RESPONSE_TOKENS)[:MAX_RESPONSE_TOKENS], answer, version,
                                     "length")
        return {"rollout-truncated": {first_wrong: None}}
    if how == "drop-eos":
        for slot in (0, 1):
            drafts[slot] = _draft(rng, drafts[slot]["tokens"][:-1], answer, version)
        return {"rollout-missing-eos": {slot: (len(drafts[slot]["tokens"]) - 1,) for slot in (0, 1)}}
    if how in ("assistant-inside", "user-before-eos"):
        at = 1 if how == "assistant-inside" else len(tokens) - 1
        tokens.insert(at, ASSISTANT if how == "assistant-inside" else USER)
        drafts[first_wrong] = _draft(rng, tokens, answer, version)
        return {"rollout-special-token": {first_wrong: (at,)}}
    return {}


def _row(g: int, version: int, prompt: list[int], draft: dict, answer: list[int]) -> dict[str, Any]:
    """A rollout row: the response padded to the limit, its mask, the verifier's reward and output."""
    tokens, n = draft["tokens"], len(draft["tokens"])
    pad = MAX_RESPONSE_TOKENS - n
    body = tokens[:tokens.index(EOS)] if EOS in tokens else tokens
    digits = _digit_ids()
    correct = float(body == [digits[d] for d in answer])
    well_formed = float(tokens[-1:] == [EOS] and all(t in digits for t in body))
    said = _tok().decode(body, skip_special_tokens=False)
    return {
        "rollout_id": -1, "group": g, "policy_version": version,
        "prompt_text": _tok().decode(prompt, skip_special_tokens=False), "prompt_tokens": list(prompt),
        "response_text": _tok().decode(tokens, skip_special_tokens=False), "response_tokens": tokens + [PAD] * pad,
        "sampler_logprobs": draft["sampler"] + [0.0] * pad, "learner_logprobs": draft["learner"] + [0.0] * pad,
        "ref_logprobs": draft["ref"] + [0.0] * pad, "loss_mask": [0] * len(prompt) + [1] * n + [0] * pad,
        "reward": correct, "rewards": {"correct": correct, "format": well_formed}, "advantage": 0.0,
        "finish_reason": draft["finish"],
        "turns": [{"role": "user", "start": 0, "end": len(prompt)},
                  {"role": "assistant", "start": len(prompt), "end": len(prompt) + n}],
        "env_output": f"expected {''.join(map(str, answer))}, got {said or '(nothing)'}",
    }


def _inject_rows(how: str | None, rows: list[dict], prompt_len: int) -> dict[str, dict[int, Any]]:
    """The bugs in a row's loss mask or log-probs (its tokens unchanged)."""
    if how == "mask-prompt":
        rows[0]["loss_mask"][prompt_len - 1] = 1
        rows[2]["loss_mask"][:prompt_len] = [1] * prompt_len
        return {"rollout-loss-mask-on-prompt": {0: (prompt_len - 1,), 2: tuple(range(prompt_len))}}
    if how == "mask-padding":
        found = {}
        for slot in (1, 3):
            mask = rows[slot]["loss_mask"]
            found[slot] = tuple(p - prompt_len for p in range(prompt_len, len(mask)) if mask[p] == 0)
            mask[prompt_len:] = [1] * (len(mask) - prompt_len)
        return {"rollout-loss-mask-on-padding": found}
    if how == "gap":
        eos_at = rows[2]["response_tokens"].index(EOS)
        for slot, positions in ((0, (0,)), (2, (1, eos_at))):
            for p in positions:
                rows[slot]["learner_logprobs"][p] = _f32([rows[slot]["sampler_logprobs"][p] - GAP])[0]
        return {"rollout-logprob-gap": {0: (0,), 2: (1, eos_at)}}
    if how == "misaligned":
        rows[0]["learner_logprobs"] = rows[0]["learner_logprobs"][:-1]
        rows[2]["sampler_logprobs"] = [_f32([math.log(OTHER_P)])[0]] + rows[2]["sampler_logprobs"]
        return {"rollout-token-length-mismatch": {0: None, 2: None}}
    return {}


@lru_cache(maxsize=1)
def _digit_ids() -> tuple[int, ...]:
    """The token id of each digit 0-9."""
    return tuple(_tok().token_to_id(str(d)) for d in range(10))


def _f32(values: Any) -> list[float]:
    """Values rounded to float32 (what a trainer's tensors hold), as Python floats."""
    return [float(x) for x in np.asarray(values, np.float32)]
