"""RL rollout findings (#34): each found on the demo rollouts at exactly the injected rows and positions,
none on clean rows; meanings inferred from tables shaped as verl, TRL and OpenRLHF keep them; the
vectorised checks against brute-force loops; the run-level statistics against plain Python."""

from __future__ import annotations

import hashlib
import json
import math
import time

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsinspect.demo import rollouts as demo
from dsinspect.inspect.rollout_arrays import Layout, RolloutArrays, split_sequences
from dsinspect.inspect.rollout_checks import check_rollouts
from dsinspect.inspect.rollout_findings import CheckOptions, Code, RolloutReport
from dsinspect.inspect.rollout_stats import rollout_statistics
from dsinspect.inspect.rollouts import Meaning, infer_meanings

M = Meaning


def found(report: RolloutReport) -> dict[str, dict[int, tuple[int, ...] | None]]:
    """{code: {row: positions}} over every finding, each required to list all its rows."""
    out: dict[str, dict] = {}
    for f in report.findings:
        assert f.count == len(f.rows), f"{f.code}: {f.count} rows but {len(f.rows)} listed"
        out.setdefault(f.code, {}).update(f.at())
    return out


@pytest.fixture(scope="module")
def rollouts():
    return demo.demo_rollouts()


@pytest.fixture(scope="module")
def stored(rollouts, tmp_path_factory):
    """The demo rows written as Parquet and read back: the checks run on stored bytes."""
    path = tmp_path_factory.mktemp("rollouts") / "rollouts.parquet"
    pq.write_table(demo.rollout_table(rollouts.rows), path, row_group_size=40)  # several chunks
    return pq.read_table(path)


@pytest.fixture(scope="module")
def report(stored, rollouts):
    return check_rollouts(stored, CheckOptions(**rollouts.checks))


# --- the demo rollouts ---------------------------------------------------------------------------------

@pytest.mark.parametrize("code", [c.value for c in Code])
def test_each_finding_is_found_exactly_where_it_was_injected(report, rollouts, code):
    assert rollouts.injected.get(code), f"the demo injects no {code}"
    assert found(report).get(code) == rollouts.injected[code]


def test_no_check_was_skipped_and_no_other_finding(report, rollouts):
    assert report.skipped == {}
    assert set(found(report)) == set(rollouts.injected)


def test_clean_rows_have_no_finding(stored, rollouts):
    clean = stored.take(rollouts.clean_rows)
    assert clean.num_rows >= 8 * demo.GROUP_SIZE
    result = check_rollouts(clean, CheckOptions(**rollouts.checks))
    assert result.findings == [] and result.skipped == {}


def test_demo_meanings_are_its_own_column_names(stored):
    columns = infer_meanings(stored.schema)
    assert {m.value: c for m, c in columns.columns.items()} == {m.value: m.value for m in Meaning
                                                                 if m is not M.SEQUENCE_TOKENS}


# The demo rows' digest, pinned so a change to them (or to numpy's generator) is a decision, not a drift.
DEMO_DIGEST = "85e09a0000ff4ab6ed7a4fc99d8619581c381dfa78860ad7229d402c80a2b0e0"


def test_demo_rows_are_deterministic_and_well_formed(rollouts):
    again = demo.demo_rollouts()
    assert _digest(again.rows) == _digest(rollouts.rows) == DEMO_DIGEST and again.injected == rollouts.injected
    assert _digest(demo.demo_rollouts(seed=1).rows) != _digest(rollouts.rows)
    for row in rollouts.rows:
        prompt, response = row["prompt_tokens"], row["response_tokens"]
        assert prompt[0] == demo.USER and prompt[-1] == demo.ASSISTANT
        assert len(response) == demo.MAX_RESPONSE_TOKENS
        assert len(row["loss_mask"]) == len(prompt) + len(response)
    versions = {row["policy_version"] for row in rollouts.rows}
    assert versions == {*demo.VERSIONS, demo.STALE_VERSION}


def test_demo_advantage_is_reward_minus_group_mean(rollouts):
    by_group: dict[int, list[dict]] = {}
    for row in rollouts.rows:
        by_group.setdefault(row["group"], []).append(row)
    for group, rows in by_group.items():
        assert len(rows) == demo.GROUP_SIZE
        if group in demo.INJECTED_GROUPS:
            continue
        mean = sum(r["reward"] for r in rows) / len(rows)
        assert [r["advantage"] for r in rows] == [r["reward"] - mean for r in rows]
        assert 0 < sum(r["reward"] for r in rows) < len(rows)  # every clean group has mixed rewards


def _digest(rows: list[dict]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


# --- meanings from the stacks' dumps -------------------------------------------------------------------

def _lists(rows, t=None):
    return pa.array(rows, pa.list_(t or pa.int64()))


QWEN_EOS, QWEN_PAD = 151645, 151643  # Qwen2.5-Instruct: <|im_end|> ends a turn, <|endoftext|> pads


def verl_batch() -> pa.Table:
    """A verl DataProto as a GRPO step leaves it (verl/experimental/agent_loop/agent_loop.py _postprocess:
    prompts left-padded, responses right-padded, response_mask; verl/trainer/ppo/ray_trainer.py:
    old_log_probs, rollout_log_probs, ref_log_prob, token_level_scores/rewards, advantages, uid)."""
    P = QWEN_PAD
    f32 = pa.float32()
    return pa.table({
        "prompts": _lists([[P, P, 10, 11], [P, 12, 13, 14], [P, 12, 13, 14]]),
        "responses": _lists([[20, 21, QWEN_EOS, P], [22, QWEN_EOS, P, P], [23, 24, 25, QWEN_EOS]]),
        "response_mask": _lists([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]]),   # row 1: one pad masked in
        "input_ids": _lists([[P, P, 10, 11, 20, 21, QWEN_EOS, P], [P, 12, 13, 14, 22, QWEN_EOS, P, P],
                             [P, 12, 13, 14, 23, 24, 25, QWEN_EOS]]),
        "attention_mask": _lists([[0, 0, 1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 1, 1]]),
        "old_log_probs": _lists([[-.5, -.25, -.125, 0], [-1, -.5, 0, 0], [-.5, -.5, -.5, -.5]], f32),
        "rollout_log_probs": _lists([[-.5, -3, -.125, 0], [-1, -.5, 0, 0], [-.5, -.5, -.5, -.5]], f32),
        "ref_log_prob": _lists([[-.5, -.5, -.5, 0], [-1, -1, 0, 0], [-.5, -.5, -.5, -.5]], f32),
        "token_level_scores": _lists([[0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]], f32),
        "token_level_rewards": _lists([[0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]], f32),
        "advantages": _lists([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, math.nan, 0]], f32),
        "returns": _lists([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], f32),
        "uid": ["u0", "u1", "u1"],
    })


def test_verl_batch_meanings_and_findings():
    table = verl_batch()
    columns = infer_meanings(table)
    assert columns.columns == {
        M.PROMPT_TOKENS: "prompts", M.RESPONSE_TOKENS: "responses", M.SEQUENCE_TOKENS: "input_ids",
        M.GROUP: "uid", M.SAMPLER_LOGPROBS: "rollout_log_probs", M.LEARNER_LOGPROBS: "old_log_probs",
        M.REF_LOGPROBS: "ref_log_prob", M.REWARD: "token_level_scores", M.ADVANTAGE: "advantages",
        M.LOSS_MASK: "response_mask"}
    options = CheckOptions(pad_id=QWEN_PAD, eos_ids=QWEN_EOS, special_ids=(QWEN_PAD, QWEN_EOS), max_response_tokens=4)
    got = found(check_rollouts(table, options))
    assert got == {Code.LOGPROB_GAP.value: {0: (1,)}, Code.LOSS_MASK_ON_PADDING.value: {1: (2,)},
                   Code.NONFINITE_ADVANTAGE.value: {2: (2,)}, Code.ZERO_ADVANTAGE_GROUP.value: {1: None, 2: None},
                   Code.TRUNCATED.value: {2: None}}  # row 2: 4 tokens, the limit, though it ends with EOS


def test_verl_rollout_dump_jsonl(tmp_path):
    """verl's trainer.rollout_data_dir: one JSONL per step with input, output, gts, score, step and the
    reward manager's extra infos (verl/trainer/ppo/ray_trainer.py _dump_generations)."""
    lines = [{"input": "1+1=", "output": "2", "gts": "2", "score": 1.0, "step": 3, "acc": True},
             {"input": "1+1=", "output": "3", "gts": "2", "score": float("nan"), "step": 3, "acc": False}]
    path = tmp_path / "3.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    table = pajson.read_json(path)
    columns = infer_meanings(table)
    assert columns.columns == {M.PROMPT_TEXT: "input", M.RESPONSE_TEXT: "output", M.POLICY_VERSION: "step",
                               M.REWARD: "score"}
    result = check_rollouts(table, CheckOptions(learner_version=3, staleness_bound=0))
    assert found(result) == {Code.NONFINITE_REWARD.value: {1: None}}
    assert "group" in result.skipped[Code.ZERO_ADVANTAGE_GROUP.value]


def test_trl_completions_table():
    """TRL GRPOTrainer.log writes completions/completions_NNNNN.parquet: step, prompt, completion, one
    column per reward function (NaN where it did not apply), advantage (trl/trainer/grpo_trainer.py)."""
    table = pa.table({"step": [5, 5, 5], "prompt": ["a", "a", "b"], "completion": ["x", "y", "z"],
                      "accuracy_reward": [1.0, math.nan, 0.0], "think_format_reward": [1.0, 1.0, math.inf],
                      "advantage": [0.5, -0.5, 0.0]})
    columns = infer_meanings(table)
    assert columns.columns == {M.PROMPT_TEXT: "prompt", M.RESPONSE_TEXT: "completion", M.POLICY_VERSION: "step",
                               M.ADVANTAGE: "advantage"}
    assert columns.reward_functions == ("accuracy_reward", "think_format_reward")
    assert found(check_rollouts(table)) == {Code.NONFINITE_REWARDS.value: {1: None, 2: None}}
    unscored = check_rollouts(table, CheckOptions(unscored_nan_rewards=True))
    assert found(unscored) == {Code.NONFINITE_REWARDS.value: {2: None}}


def test_trl_batch_tensors():
    """The batch GRPOTrainer._generate_and_score_completions returns: prompt_ids/prompt_mask (left
    padded), completion_ids/completion_mask, sampling_per_token_logps (vLLM), old_per_token_logps,
    ref_per_token_logps, advantages (one per completion)."""
    table = pa.table({"prompt_ids": _lists([[0, 5, 6]]), "prompt_mask": _lists([[0, 1, 1]]),
                      "completion_ids": _lists([[7, 2]]), "completion_mask": _lists([[1, 1]]),
                      "sampling_per_token_logps": _lists([[-1.0, -0.5]], pa.float32()),
                      "old_per_token_logps": _lists([[-1.0, -0.5]], pa.float32()),
                      "ref_per_token_logps": _lists([[-1.0, -0.5]], pa.float32()), "advantages": [0.0]})
    assert infer_meanings(table).columns == {
        M.PROMPT_TOKENS: "prompt_ids", M.RESPONSE_TOKENS: "completion_ids", M.SAMPLER_LOGPROBS:
        "sampling_per_token_logps", M.LEARNER_LOGPROBS: "old_per_token_logps", M.REF_LOGPROBS:
        "ref_per_token_logps", M.ADVANTAGE: "advantages", M.LOSS_MASK: "completion_mask"}


def openrlhf_experience() -> pa.Table:
    """OpenRLHF's Experience (openrlhf/trainer/ppo_utils/experience.py, samples_generator.py): sequences
    = prompt + response; action_mask and the log-probs over sequences[1:]; rewards one per sample;
    response_length, total_length, truncated; prompts as text."""
    f32 = pa.float32()
    return pa.table({
        "sequences": _lists([[2, 5, 6, 3, 7, 8, 0], [2, 5, 3, 9, 0]]),      # prompts of 4 and 3 tokens
        "action_mask": _lists([[0, 0, 1, 1, 1, 1], [0, 0, 1, 1]]),          # row 0: covers the last prompt token
        "rollout_log_probs": _lists([[0, 0, 0, -1, -1, -1], [0, 0, -1, -1]], f32),
        "action_log_probs": _lists([[0, 0, 0, -1, -1, -1], [0, 0, -1, -4]], f32),
        "base_action_log_probs": _lists([[0, 0, 0, -1, -1, -1], [0, 0, -1, -1]], f32),
        "advantages": _lists([[0, 0, 1, 1, 1, 1], [0, 0, 1, 1]], f32),
        "rewards": pa.array([1.0, 0.0]), "response_length": [3, 2], "total_length": [7, 5],
        "truncated": [False, False], "prompts": ["2+3=", "1+1="], "index": [0, 1],
    })


def test_openrlhf_experience_split_and_shifted_layout():
    table = openrlhf_experience()
    columns = infer_meanings(table)
    assert columns.columns == {
        M.SEQUENCE_TOKENS: "sequences", M.PROMPT_TEXT: "prompts", M.SAMPLER_LOGPROBS: "rollout_log_probs",
        M.LEARNER_LOGPROBS: "action_log_probs", M.REF_LOGPROBS: "base_action_log_probs", M.REWARD: "rewards",
        M.ADVANTAGE: "advantages", M.LOSS_MASK: "action_mask", M.FINISH_REASON: "truncated"}
    split = split_sequences(table)
    assert split.column("prompt_tokens").to_pylist() == [[2, 5, 6, 3], [2, 5, 3]]
    assert split.column("response_tokens").to_pylist() == [[7, 8, 0], [9, 0]]
    data = RolloutArrays(split, infer_meanings(split))
    assert data.aligned(M.LOSS_MASK).layout is Layout.SHIFTED
    got = found(check_rollouts(split, CheckOptions(pad_id=1, eos_ids=0)))
    # mask index 2 of row 0 is token 3, the last prompt token; row 1's gap is at its response token 1
    assert got == {Code.LOSS_MASK_ON_PROMPT.value: {0: (3,)}, Code.LOGPROB_GAP.value: {1: (1,)}}


def test_split_sequences_stops_at_the_total_length():
    """Merged OpenRLHF batches are right-padded: the response ends at total_length, not at the list's end."""
    table = pa.table({"sequences": _lists([[2, 5, 7, 0, 1, 1], [2, 8, 0]]), "response_length": [2, 1],
                      "total_length": [4, 3]})
    split = split_sequences(table)
    assert split.column("prompt_tokens").to_pylist() == [[2, 5], [2, 8]]
    assert split.column("response_tokens").to_pylist() == [[7, 0], [0]]
    with pytest.raises(ValueError, match="longer than"):
        split_sequences(table.set_column(1, "response_length", pa.array([5, 1])))


def test_rewards_per_function_as_json_or_struct():
    """A reward manager's extra info kept as a JSON object per row, or a struct of numbers."""
    texts = ['{"acc": 1, "len_penalty": -0.5}', '{"acc": NaN, "len_penalty": 0}', None, '{"acc": 0, "note": "x"}']
    result = check_rollouts(pa.table({"reward_extra_info": texts}))
    assert result.columns.get(M.REWARDS) == "reward_extra_info"
    assert found(result) == {Code.NONFINITE_REWARDS.value: {1: None}}
    struct = pa.array([{"acc": 1, "fmt": 0.5}, None, {"acc": 0, "fmt": -math.inf}],
                      pa.struct([("acc", pa.int64()), ("fmt", pa.float64())]))
    assert found(check_rollouts(pa.table({"rewards": struct}))) == {Code.NONFINITE_REWARDS.value: {2: None}}


def test_explicit_mapping_sets_unsets_and_refuses():
    table = verl_batch()
    columns = infer_meanings(table, {"reward": "token_level_rewards", "group": None, M.REF_LOGPROBS: None})
    assert columns.get(M.REWARD) == "token_level_rewards"
    assert columns.get(M.GROUP) is None and columns.get(M.REF_LOGPROBS) is None
    assert columns.get(M.LEARNER_LOGPROBS) == "old_log_probs"
    with pytest.raises(ValueError, match="no column 'nope'"):
        infer_meanings(table, {"reward": "nope"})
    with pytest.raises(ValueError, match="cannot hold it"):
        infer_meanings(table, {"group": "responses"})
    with pytest.raises(ValueError, match="no meaning 'rewardz'"):
        infer_meanings(table, {"rewardz": "uid"})
    flat = infer_meanings(pa.table({"a": [1.0], "b": [2.0]}), {"rewards": ["a", "b"]})
    assert flat.reward_functions == ("a", "b") and flat.columns == {}


def test_a_check_without_its_input_says_why():
    result = check_rollouts(verl_batch(), CheckOptions())
    assert result.skipped[Code.LOSS_MASK_ON_PADDING.value] == "no pad_id given"
    assert "response tokens only" in result.skipped[Code.LOSS_MASK_ON_PROMPT.value]
    assert result.skipped[Code.STALE.value] == "no policy_version column"
    assert "learner_version" in check_rollouts(verl_batch().append_column("param_version", pa.array([1, 1, 1])),
                                               CheckOptions()).skipped[Code.STALE.value]
    with pytest.raises(ValueError):
        CheckOptions(logprob_gap=0)


def test_output_is_bounded_but_counts_everything():
    n, width = 500, 100
    table = pa.table({"response_tokens": _lists([[3] * width] * n)})
    options = CheckOptions(special_ids=(3,), max_response_tokens=width, rows_shown=7, positions_shown=5)
    result = check_rollouts(table, options)
    (special,) = result.by_code(Code.SPECIAL_TOKEN)
    assert special.count == n and special.tokens == n * width
    assert special.rows == tuple(range(7)) and special.positions == ((0, 1, 2, 3, 4),) * 7
    (cut,) = result.by_code(Code.TRUNCATED)
    assert cut.count == n and cut.rows == tuple(range(7)) and cut.positions is None
    json.dumps(result.to_json())  # JSON all the way down
    assert special.as_finding().at["count"] == n


def test_when_the_pad_is_the_eos_the_first_trailing_pad_is_the_eos():
    """Many tokenizers pad with their EOS: the loss mask may cover that EOS, not the pads after it."""
    eos = 0
    table = pa.table({"response_tokens": _lists([[5, 6, eos, eos, eos], [5, eos, eos]]),
                      "loss_mask": _lists([[1, 1, 1, 0, 0], [1, 1, 1]]), "finish_reason": ["stop", "stop"]})
    got = found(check_rollouts(table, CheckOptions(pad_id=eos, eos_ids=eos, special_ids=(eos,))))
    assert got == {Code.LOSS_MASK_ON_PADDING.value: {1: (2,)}}


def test_per_token_scores_are_summed_and_null_logprobs_are_no_numbers():
    """verl's token_level_scores hold the reward at one token: a rollout's reward is their sum. A null
    log-prob inside a list cannot be within any gap; a misaligned row's values are not read."""
    f32 = pa.float32()
    table = pa.table({
        "responses": _lists([[5, 0], [6, 0], [7, 0], [8, 0]]),
        "token_level_scores": _lists([[0.5, 0.5], [0.0, 1.0], [0.0, math.inf], [0.0, 0.0]], f32),
        "uid": ["a", "a", "b", "b"],
        "rollout_log_probs": _lists([[-1.0, None], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]], f32),
        "old_log_probs": _lists([[-1.0, 0.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]], f32),  # 0.0: a null's bytes
        "advantages": _lists([[math.nan], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], f32),
    })
    got = found(check_rollouts(table, CheckOptions()))
    assert got == {Code.ZERO_ADVANTAGE_GROUP.value: {0: None, 1: None}, Code.NONFINITE_REWARD.value: {2: None},
                   Code.LOGPROB_GAP.value: {0: (1,)}, Code.TOKEN_LENGTH_MISMATCH.value: {0: None}}


# --- the vectorised checks against loops ---------------------------------------------------------------

VALUES = [-3.0, -1.0, -0.5, -0.25, 0.0, math.nan, -math.inf]  # exact in float32


@st.composite
def gap_tables(draw):
    n = draw(st.integers(1, 8))
    rows = []
    for _ in range(n):
        length = draw(st.integers(0, 6))
        rows.append({"tokens": draw(st.lists(st.sampled_from([0, 1, 5, 6]), min_size=length, max_size=length)),
                     "sampler": draw(st.lists(st.sampled_from(VALUES), min_size=length, max_size=length)),
                     "learner": draw(st.lists(st.sampled_from(VALUES), min_size=max(0, length - 1),
                                              max_size=length)),   # sometimes one short
                     "mask": draw(st.lists(st.sampled_from([0, 1]), min_size=length, max_size=length))})
    return rows, draw(st.booleans()), draw(st.sampled_from([0.25, 0.5, 1.0, 2.0]))


@settings(max_examples=150, deadline=None)
@given(gap_tables())
def test_logprob_gap_positions_equal_a_loop(case):
    rows, with_mask, threshold = case
    table = {"response_tokens": _lists([r["tokens"] for r in rows]),
             "sampler_logprobs": _lists([r["sampler"] for r in rows], pa.float32()),
             "learner_logprobs": _lists([r["learner"] for r in rows], pa.float32())}
    if with_mask:
        table["loss_mask"] = _lists([r["mask"] for r in rows], pa.int8())
    result = check_rollouts(pa.table(table), CheckOptions(pad_id=1, logprob_gap=threshold))
    expected = {}
    for i, r in enumerate(rows):
        if len(r["learner"]) != len(r["tokens"]):
            continue
        effective = _strip(r["tokens"], 1, ())
        hits = tuple(k for k, (sampled, learned) in enumerate(zip(r["sampler"], r["learner"]))
                     if (r["mask"][k] if with_mask else k < effective) and not abs(sampled - learned) <= threshold)
        if hits:
            expected[i] = hits
    assert found(result).get(Code.LOGPROB_GAP.value, {}) == expected


def _strip(tokens: list[int], pad: int, eos: tuple[int, ...]) -> int:
    """The response's length without its trailing pads (the first of them kept when the pad is an EOS)."""
    end = len(tokens)
    while end and tokens[end - 1] == pad:
        end -= 1
    return end + 1 if pad in eos and end < len(tokens) else end


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from([0, 1, 2, 5]), max_size=6), st.sampled_from(["stop", "length"])),
                min_size=1, max_size=8),
       st.sampled_from([(0,), (1,), (0, 1)]), st.integers(1, 6))
def test_eos_special_and_truncation_equal_a_loop(rows, eos, limit):
    table = pa.table({"response_tokens": _lists([t for t, _ in rows]), "finish_reason": [f for _, f in rows]})
    options = CheckOptions(pad_id=1, eos_ids=eos, special_ids=(0, 1, 2), max_response_tokens=limit)
    got = found(check_rollouts(table, options))
    special, missing, cut = {}, {}, {}
    for i, (tokens, finish) in enumerate(rows):
        end = _strip(tokens, 1, eos)
        ends = end > 0 and tokens[end - 1] in eos
        inside = tuple(k for k in range(end) if tokens[k] in (0, 1, 2) and not (ends and k == end - 1))
        if inside:
            special[i] = inside
        if finish == "stop" and not ends:
            missing[i] = (end - 1,) if end else ()
        if finish == "length" or end >= limit:
            cut[i] = None
    assert got.get(Code.SPECIAL_TOKEN.value, {}) == special
    assert got.get(Code.MISSING_EOS.value, {}) == missing
    assert got.get(Code.TRUNCATED.value, {}) == cut


# --- statistics ----------------------------------------------------------------------------------------

def test_statistics_agree_with_plain_python(stored, rollouts, report):
    stats = rollout_statistics(stored, CheckOptions(**rollouts.checks))
    rows = rollouts.rows
    for entry in stats["reward_by_policy_version"]:
        rewards = [r["reward"] for r in rows if r["policy_version"] == entry["policy_version"]]
        finite = [x for x in rewards if math.isfinite(x)]
        assert entry["rollouts"] == len(rewards) and entry["rewarded"] == len(finite)
        assert entry["mean"] == pytest.approx(sum(finite) / len(finite))
    assert sum(e["rollouts"] for e in stats["reward_by_policy_version"]) == len(rows)
    lengths = [_strip(r["response_tokens"], demo.PAD, (demo.EOS,)) for r in rows]
    assert stats["response_length"]["max"] == max(lengths)
    assert stats["response_length"]["mean"] == pytest.approx(sum(lengths) / len(lengths))
    assert sum(stats["response_length"]["histogram"]["counts"]) == len(rows)
    gap = stats["logprob_gap"]
    assert gap["above"] == report.by_code(Code.LOGPROB_GAP)[0].tokens
    assert sum(gap["histogram"]["counts"]) + gap["nonfinite"] == gap["tokens"]
    assert len(gap["histogram"]["counts"]) == len(gap["histogram"]["edges"]) - 1
    groups: dict[int, list[float]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r["reward"])
    equal = sum(len(set(v)) == 1 for v in groups.values())  # NaN != NaN: a NaN group is not "equal"
    assert stats["zero_advantage_groups"] == {"groups": len(groups), "zero_advantage": equal,
                                              "share": equal / len(groups)}


# --- speed (printed, never asserted) -------------------------------------------------------------------

def test_a_hundred_thousand_rollouts_time():
    rng = np.random.default_rng(0)
    n = 100_000
    lengths = rng.integers(16, 400, n)
    prompt_lengths = rng.integers(8, 64, n)

    def lists(sizes, values):
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))

    total = int(lengths.sum())
    tokens = rng.integers(4, 50_000, total).astype(np.int32)
    sampler = rng.normal(-1, 0.3, total).astype(np.float32)
    table = pa.table({
        "prompt_tokens": lists(prompt_lengths, rng.integers(4, 50_000, int(prompt_lengths.sum())).astype(np.int32)),
        "response_tokens": lists(lengths, tokens), "sampler_logprobs": lists(lengths, sampler),
        "learner_logprobs": lists(lengths, sampler + rng.normal(0, 0.05, total).astype(np.float32)),
        "loss_mask": lists(lengths, np.ones(total, np.int8)), "group": np.arange(n) // 8,
        "reward": rng.integers(0, 2, n).astype(np.float64), "advantage": rng.normal(0, 1, n),
        "finish_reason": pa.array(np.where(rng.random(n) < 0.05, "length", "stop")),
        "policy_version": rng.integers(0, 10, n),
    })
    options = CheckOptions(pad_id=1, eos_ids=(0,), special_ids=(0, 1, 2, 3), max_response_tokens=400,
                           learner_version=9, staleness_bound=4)
    start = time.perf_counter()
    result = check_rollouts(table, options)
    checks = time.perf_counter() - start
    start = time.perf_counter()
    rollout_statistics(table, options)
    stats = time.perf_counter() - start
    print(f"\n{n} rollouts, {total / 1e6:.1f}M response tokens: checks {checks:.2f} s, statistics {stats:.2f} s "
          f"({len(result.findings)} findings)")
    assert set(result.skipped) == {Code.LOSS_MASK_ON_PROMPT.value, Code.NONFINITE_REWARDS.value}
