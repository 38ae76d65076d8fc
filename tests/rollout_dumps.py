"""Rollout dumps in the shapes verl, TRL and OpenRLHF write them (docs/RL.md lists the fields and where
each comes from), each with RL data bugs injected at known rows and token positions, or clean.

A dump is one or more files (Parquet tables or JSON Lines rows) whose rows, in file order, are the rows of
the version they ingest into. `injected` is what the checks must find: {finding code: {row: positions or
None}}, written out by hand from the construction below (a cascade included: a NaN score makes its
whole GRPO group's advantages NaN). No dsinspect import: the expectations do not come from the code tested.
Token ids are Qwen2.5's: <|endoftext|> pads, <|im_end|> ends a turn, digits are ids 15-24.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

PAD, IM_START, EOS = 151643, 151644, 151645
SPECIAL = [PAD, IM_START, EOS]
DIGITS = list(range(15, 25))
GROUP, GROUPS = 4, 6          # GRPO: 4 responses to each of 6 prompts
WIDTH = 8                     # responses padded to (verl's response_length, TRL's max_completion_length)
TOKEN_CHECKS = {"pad_id": PAD, "eos_ids": [EOS], "special_ids": SPECIAL, "max_response_tokens": WIDTH}
ALL_CODES = ("rollout-token-length-mismatch", "rollout-loss-mask-on-prompt", "rollout-loss-mask-on-padding",
             "rollout-logprob-gap", "rollout-zero-advantage-group", "rollout-truncated", "rollout-missing-eos",
             "rollout-special-token", "rollout-nonfinite-reward", "rollout-nonfinite-rewards",
             "rollout-nonfinite-advantage", "rollout-stale")
F32, I64 = pa.list_(pa.float32()), pa.list_(pa.int64())


@dataclass
class Dump:
    name: str
    files: list[tuple[str, Any]]                  # (file name, a pa.Table for .parquet or row dicts for .jsonl)
    injected: dict[str, dict[int, tuple[int, ...] | None]]
    checks: dict[str, Any]                        # `--check` values the findings need beyond the rows
    checked: set[str]                             # the codes whose checks run on this shape (the rest skipped)
    declared: dict[str, str]                      # field -> the meaning ingest records
    meanings: dict[str, str] = field(default_factory=dict)   # `--meaning` given at ingest
    key: str | None = None

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, content in self.files:
            path = directory / name
            if name.endswith(".parquet"):
                pq.write_table(content, path)
            else:
                path.write_text("".join(json.dumps(row) + "\n" for row in content))
            paths.append(path)
        return paths

    def check_flags(self) -> list[str]:
        return [f for name, value in self.checks.items() for f in ("--check", f"{name}={json.dumps(value)}")]


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def _prompt(rng: np.random.Generator) -> list[int]:
    """<|im_start|>user\\n{digits}<|im_end|>\\n<|im_start|>assistant\\n"""
    return [IM_START, 872, 198, *rng.choice(DIGITS, int(rng.integers(1, 4))).tolist(), EOS, 198, IM_START, 77091, 198]


def _answer(rng: np.random.Generator, digits: int | None = None) -> list[int]:
    return [*rng.choice(DIGITS, digits or int(rng.integers(2, 5))).tolist(), EOS]


def _logps(rng: np.random.Generator, n: int) -> tuple[list[float], list[float], list[float]]:
    """Sampler, learner (within 0.05 of it) and reference log-probs of n tokens, as float32 values."""
    sampler = rng.uniform(-2.0, -0.01, n)
    learner = sampler + rng.uniform(-0.05, 0.05, n)
    ref = sampler + rng.uniform(-0.3, 0.3, n)
    return tuple(np.asarray(x, np.float32).astype(float).tolist() for x in (sampler, learner, ref))


def _scores(rng: np.random.Generator) -> list[float]:
    """One group's 0/1 rewards, never all equal."""
    right = int(rng.integers(1, GROUP))
    return [1.0 if i < right else 0.0 for i in rng.permutation(GROUP)]


def _grpo(scores: list[float]) -> list[float]:
    """(score - group mean) / (group std + 1e-6): NaN for every member when one score is NaN."""
    mean, std = float(np.mean(scores)), float(np.std(scores, ddof=1))
    return [(s - mean) / (std + 1e-6) for s in scores]


# --- verl ---------------------------------------------------------------------------------------------

def verl_batch(bugs: bool = True) -> Dump:
    """A verl DataProto of one GRPO step as Parquet: `prompts` left-padded, `responses` right-padded to
    WIDTH, `response_mask`, `input_ids`, `attention_mask`, `rollout_log_probs` (the sampler's),
    `old_log_probs` (the actor's recompute), `ref_log_prob`, `token_level_scores` (the score at the last
    response token), `advantages` per token (GRPO, times the mask), `uid` per prompt."""
    rng = _rng("verl-batch")
    prompt_width = 12
    rows: list[dict] = []
    for g in range(GROUPS):
        prompt = _prompt(rng)
        scores = [1.0] * GROUP if bugs and g == 4 else _scores(rng)     # group 4: all right
        if bugs and g == 3:
            scores[1] = math.nan                                          # row 13: the verifier's NaN
        for score in scores:
            i = len(rows)
            answer = _answer(rng)
            if bugs and i == 2:
                answer = [answer[0], IM_START, *answer[1:]]              # a special token at position 1
            if bugs and i == 7:
                answer = rng.choice(DIGITS, WIDTH).tolist()               # cut at the limit, no EOS
            if bugs and i == 21:
                answer = answer[:-1]                                      # stopped, EOS dropped
            sampler, learner, ref = _logps(rng, len(answer))
            if bugs and i == 9:
                learner[1] = sampler[1] - 3.0                             # the learner disagrees at token 1
            pad = WIDTH - len(answer)
            mask = [1] * len(answer) + [0] * pad
            if bugs and i == 5:
                mask[len(answer):len(answer) + 2] = [1, 1]                # the mask runs into the padding
            rows.append({"prompts": [PAD] * (prompt_width - len(prompt)) + prompt, "responses": answer + [PAD] * pad,
                         "response_mask": mask, "rollout_log_probs": sampler + [0.0] * pad,
                         "old_log_probs": learner + [0.0] * pad, "ref_log_prob": ref + [0.0] * pad,
                         "token_level_scores": [0.0] * (len(answer) - 1) + [score] + [0.0] * pad,
                         "uid": f"{g:08x}-uid", "score": score, "length": len(answer), "plen": len(prompt)})
        for row, adv in zip(rows[-GROUP:], _grpo(scores)):
            row["advantages"] = [adv * m for m in row["response_mask"]]  # NaN * 0 is NaN: the whole row
    if bugs:
        rows[10]["advantages"][0] = math.nan
    table = pa.table({
        "prompts": pa.array([r["prompts"] for r in rows], I64),
        "responses": pa.array([r["responses"] for r in rows], I64),
        "response_mask": pa.array([r["response_mask"] for r in rows], I64),
        "input_ids": pa.array([r["prompts"] + r["responses"] for r in rows], I64),
        "attention_mask": pa.array([[0] * (prompt_width - r["plen"]) + [1] * r["plen"] + [1] * r["length"]
                                    + [0] * (WIDTH - r["length"]) for r in rows], I64),
        "rollout_log_probs": pa.array([r["rollout_log_probs"] for r in rows], F32),
        "old_log_probs": pa.array([r["old_log_probs"] for r in rows], F32),
        "ref_log_prob": pa.array([r["ref_log_prob"] for r in rows], F32),
        "token_level_scores": pa.array([r["token_level_scores"] for r in rows], F32),
        "advantages": pa.array([r["advantages"] for r in rows], F32),
        "uid": [r["uid"] for r in rows],
    })
    injected = {} if not bugs else {
        "rollout-special-token": {2: (1,)},
        "rollout-loss-mask-on-padding": {5: (rows[5]["length"], rows[5]["length"] + 1)},
        "rollout-truncated": {7: None},
        "rollout-logprob-gap": {9: (1,)},
        "rollout-nonfinite-reward": {13: None},
        "rollout-nonfinite-advantage": {10: (0,), **{i: tuple(range(WIDTH)) for i in range(12, 16)}},
        "rollout-zero-advantage-group": {i: None for i in range(16, 20)},
        "rollout-missing-eos": {21: (rows[21]["length"] - 1,)},
    }
    declared = {"prompts": "prompt_tokens", "responses": "response_tokens", "input_ids": "sequence_tokens",
                "uid": "group", "rollout_log_probs": "sampler_logprobs", "old_log_probs": "learner_logprobs",
                "ref_log_prob": "ref_logprobs", "token_level_scores": "reward", "advantages": "advantage",
                "response_mask": "loss_mask"}
    checked = set(ALL_CODES) - {"rollout-loss-mask-on-prompt", "rollout-nonfinite-rewards", "rollout-stale"}
    return Dump("verl-batch", [("batch-00001.parquet", table)], injected, dict(TOKEN_CHECKS), checked, declared)


def verl_dump(bugs: bool = True) -> Dump:
    """verl's `trainer.rollout_data_dir`: `<step>.jsonl` per step with `input`, `output`, `gts`, `score`,
    `step` and the reward manager's extra infos (`acc`, `pred`); each prompt sampled GROUP times. No
    group column: `--meaning input=group` (the prompt text is the group)."""
    rng = _rng("verl-dump")
    files, row = [], 0
    for step in (3, 4, 5):
        lines = []
        for g in range(2):
            a, b = (int(x) for x in rng.integers(10, 99, 2))
            scores = [1.0] * GROUP if bugs and step == 3 and g == 1 else _scores(rng)   # rows 4-7: all right
            for score in scores:
                said = a + b if score else a + b + 1
                lines.append({"input": f"<|im_start|>user\nstep {step}: {a}+{b}=<|im_end|>\n", "output": str(said),
                              "gts": str(a + b), "score": score, "step": step, "acc": bool(score), "pred": str(said)})
                row += 1
        files.append((f"{step}.jsonl", lines))
    if bugs:
        files[1][1][1]["score"] = math.nan           # row 9: the verifier timed out
        files[2][1][2]["step"] = 2                   # row 18: sampled three policies ago
    injected = {} if not bugs else {"rollout-zero-advantage-group": {4: None, 5: None, 6: None, 7: None},
                                    "rollout-nonfinite-reward": {9: None}, "rollout-stale": {18: None}}
    declared = {"input": "group", "output": "response_text", "score": "reward", "step": "policy_version"}
    checked = {"rollout-zero-advantage-group", "rollout-nonfinite-reward", "rollout-stale"}
    return Dump("verl-dump", files, injected, {"staleness_bound": 2}, checked, declared, {"input": "group"})


# --- TRL ----------------------------------------------------------------------------------------------

def trl_completions(bugs: bool = True) -> Dump:
    """TRL GRPOTrainer's `completions/completions_<step>.parquet` (log_completions): `step`, `prompt`,
    `completion`, one column per reward function (`accuracy_reward`, `format_reward`; NaN where one did
    not apply), `advantage`."""
    rng = _rng("trl-completions")
    files = []
    for step in (10, 11, 12):
        rows: dict[str, list] = {k: [] for k in ("step", "prompt", "completion", "accuracy_reward",
                                                 "format_reward", "advantage")}
        for g in range(2):
            accuracy, fmt = _scores(rng), [1.0] * GROUP
            for acc, f, adv in zip(accuracy, fmt, _grpo([a + f for a, f in zip(accuracy, fmt)])):
                for k, v in (("step", step), ("prompt", f"user: sum of {step}.{g}?\nassistant:"),
                             ("completion", f"<think>…</think>{acc}"), ("accuracy_reward", acc),
                             ("format_reward", f), ("advantage", adv)):
                    rows[k].append(v)
        files.append((f"completions_{step:05d}.parquet", rows))
    if bugs:
        files[0][1]["accuracy_reward"][3] = math.nan      # row 3: a reward function returned None
        files[1][1]["format_reward"][1] = math.inf        # row 9
        files[1][1]["advantage"][6] = math.nan            # row 14
        files[2][1]["step"][4] = 7                        # row 20: stale
    files = [(name, pa.table(rows)) for name, rows in files]
    injected = {} if not bugs else {"rollout-nonfinite-rewards": {3: None, 9: None},
                                    "rollout-nonfinite-advantage": {14: None}, "rollout-stale": {20: None}}
    declared = {"step": "policy_version", "prompt": "prompt_text", "completion": "response_text",
                "accuracy_reward": "rewards", "format_reward": "rewards", "advantage": "advantage"}
    checked = {"rollout-nonfinite-rewards", "rollout-nonfinite-advantage", "rollout-stale"}
    return Dump("trl-completions", files, injected, {"staleness_bound": 2}, checked, declared)


def trl_batch(bugs: bool = True) -> Dump:
    """The batch GRPOTrainer._generate_and_score_completions returns, as Parquet: `prompt_ids` and
    `prompt_mask` (left-padded), `completion_ids` (padded after the first EOS) and `completion_mask`,
    `sampling_per_token_logps` (vLLM's), `old_per_token_logps`, `ref_per_token_logps`, `advantages`
    (one per completion)."""
    rng = _rng("trl-batch")
    prompt_width = 12
    columns: dict[str, list] = {k: [] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask",
                                                "sampling_per_token_logps", "old_per_token_logps",
                                                "ref_per_token_logps", "advantages")}
    lengths = []
    for _ in range(GROUPS):
        prompt = _prompt(rng)
        for adv in _grpo(_scores(rng)):
            i = len(lengths)
            answer = _answer(rng)
            if bugs and i == 12:
                answer = answer[:-1]                                   # no EOS, short of the limit
            if bugs and i == 15:
                answer = rng.choice(DIGITS, WIDTH).tolist()            # the limit, no EOS
            if bugs and i == 19:
                answer = [*answer[:2], IM_START, *answer[2:]]          # <|im_start|> at position 2
            sampler, learner, ref = _logps(rng, len(answer))
            if bugs and i == 1:
                learner[0] = sampler[0] + 2.0
            pad = WIDTH - len(answer)
            mask = [1] * len(answer) + [0] * pad
            if bugs and i == 4:
                mask = [1] * WIDTH                                     # the padding trained on
            for k, v in (("prompt_ids", [PAD] * (prompt_width - len(prompt)) + prompt),
                         ("prompt_mask", [0] * (prompt_width - len(prompt)) + [1] * len(prompt)),
                         ("completion_ids", answer + [PAD] * pad), ("completion_mask", mask),
                         ("sampling_per_token_logps", sampler + [0.0] * pad),
                         ("old_per_token_logps", learner + [0.0] * pad), ("ref_per_token_logps", ref + [0.0] * pad),
                         ("advantages", math.nan if bugs and i == 8 else adv)):
                columns[k].append(v)
            lengths.append(len(answer))
    types = {"prompt_ids": I64, "prompt_mask": I64, "completion_ids": I64, "completion_mask": I64,
             "sampling_per_token_logps": F32, "old_per_token_logps": F32, "ref_per_token_logps": F32,
             "advantages": pa.float32()}
    table = pa.table({k: pa.array(v, types[k]) for k, v in columns.items()})
    injected = {} if not bugs else {
        "rollout-logprob-gap": {1: (0,)}, "rollout-loss-mask-on-padding": {4: tuple(range(lengths[4], WIDTH))},
        "rollout-nonfinite-advantage": {8: None}, "rollout-missing-eos": {12: (lengths[12] - 1,)},
        "rollout-truncated": {15: None}, "rollout-special-token": {19: (2,)}}
    declared = {"prompt_ids": "prompt_tokens", "completion_ids": "response_tokens", "completion_mask": "loss_mask",
                "sampling_per_token_logps": "sampler_logprobs", "old_per_token_logps": "learner_logprobs",
                "ref_per_token_logps": "ref_logprobs", "advantages": "advantage"}
    checked = set(ALL_CODES) - {"rollout-loss-mask-on-prompt", "rollout-zero-advantage-group",
                                "rollout-nonfinite-reward", "rollout-nonfinite-rewards", "rollout-stale"}
    return Dump("trl-batch", [("batch.parquet", table)], injected, dict(TOKEN_CHECKS), checked, declared)


# --- OpenRLHF -----------------------------------------------------------------------------------------

def openrlhf_experience(bugs: bool = True) -> Dump:
    """OpenRLHF's Experience, one row per sample: `sequences` (prompt + response), `attention_mask`,
    `action_mask`, `action_log_probs`, `base_action_log_probs`, `rollout_log_probs` and `advantages`
    over sequences[1:], `rewards`, `response_length`, `total_length`, `truncated`, `index`, `prompts`."""
    rng = _rng("openrlhf")
    rows: list[dict] = []
    for _ in range(GROUPS * GROUP):
        i = len(rows)
        prompt, answer = _prompt(rng), _answer(rng, int(rng.integers(2, 5)))
        if bugs and i == 10:
            answer = rng.choice(DIGITS, WIDTH).tolist()                  # cut at the limit
        if bugs and i == 13:
            answer = answer[:-1]                                         # EOS stripped
        if bugs and i == 22:
            answer = [answer[0], IM_START, *answer[1:]]
        p, n = len(prompt), len(answer)
        sampler, learner, ref = _logps(rng, n)
        if bugs and i == 6:
            learner[2] = sampler[2] - 3.0
        shifted = [0.0] * (p - 1)                                        # entries j: token j + 1
        mask = [0] * (p - 1) + [1] * n
        if bugs and i == 3:
            mask[p - 2] = 1                                              # token p - 1: the last prompt token
        reward = float(rng.integers(0, 2))
        advantages = [0.0] * (p - 1) + [reward - 0.5] * n
        if bugs and i == 20:
            advantages[p - 1] = math.nan
        rows.append({"sequences": prompt + answer, "attention_mask": [1] * (p + n), "action_mask": mask,
                     "action_log_probs": shifted + learner, "rollout_log_probs": shifted + sampler,
                     "base_action_log_probs": (shifted + ref)[:-1] if bugs and i == 8 else shifted + ref,
                     "advantages": advantages, "rewards": math.inf if bugs and i == 17 else reward,
                     "response_length": n, "total_length": p + n, "truncated": bugs and i == 10,
                     "index": 1000 + 7 * i, "prompts": f"<|im_start|>user\n{i}<|im_end|>\n"})
    types = {"sequences": I64, "attention_mask": I64, "action_mask": I64, "action_log_probs": F32,
             "rollout_log_probs": F32, "base_action_log_probs": F32, "advantages": F32, "rewards": pa.float32(),
             "response_length": pa.int64(), "total_length": pa.int64(), "truncated": pa.bool_(),
             "index": pa.int64(), "prompts": pa.string()}
    table = pa.table({k: pa.array([r[k] for r in rows], t) for k, t in types.items()})
    injected = {} if not bugs else {
        "rollout-loss-mask-on-prompt": {3: (len(rows[3]["sequences"]) - rows[3]["response_length"] - 1,)},
        "rollout-logprob-gap": {6: (2,)}, "rollout-token-length-mismatch": {8: None}, "rollout-truncated": {10: None},
        "rollout-missing-eos": {13: (rows[13]["response_length"] - 1,)}, "rollout-nonfinite-reward": {17: None},
        "rollout-nonfinite-advantage": {20: (0,)}, "rollout-special-token": {22: (1,)}}
    declared = {"sequences": "sequence_tokens", "action_mask": "loss_mask", "action_log_probs": "learner_logprobs",
                "rollout_log_probs": "sampler_logprobs", "base_action_log_probs": "ref_logprobs",
                "advantages": "advantage", "rewards": "reward", "truncated": "finish_reason",
                "prompts": "prompt_text"}
    checked = set(ALL_CODES) - {"rollout-zero-advantage-group", "rollout-nonfinite-rewards", "rollout-stale"}
    checks = {k: v for k, v in TOKEN_CHECKS.items() if k != "max_response_tokens"}  # `truncated` says it
    return Dump("openrlhf", [("experience.parquet", table)], injected, checks, checked, declared, key="index")


DUMPS = (verl_batch, verl_dump, trl_completions, trl_batch, openrlhf_experience)


def found(report: dict) -> dict[str, dict[int, tuple[int, ...] | None]]:
    """{code: {row: positions}} of a `stats --json` rollout report, each finding listing all its rows."""
    out: dict[str, dict] = {}
    for f in report["findings"]:
        assert f["count"] == len(f["rows"]), f
        positions = f["positions"] or [None] * len(f["rows"])
        out.setdefault(f["code"], {}).update({r: None if p is None else tuple(p) for r, p in zip(f["rows"], positions)})
    return out
