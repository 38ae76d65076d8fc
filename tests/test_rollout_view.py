"""The rollout and group views (#34): on the demo rollouts each token's values are the stored ones, each
finding sits at exactly the injected rows and positions (on the view and on its cells), a group holds its
rows, rewards and advantages; odd shapes (no group, no turns, text only, per-token advantage, the full and
shifted layouts, chat messages) built as versions; the shading every face uses."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
from rollout_view_helpers import (
    ASSISTANT,
    EOS,
    MARKUP_PIECES,
    PAD,
    USER,
    encode,
    floats,
    ints,
    markup_tokenizer,
    write_rollouts,
)

import dsinspect
from dsinspect.demo import rollouts as demo
from dsinspect.errors import NotFoundError, UserError
from dsinspect.inspect.rollout_turns import Turn
from dsinspect.inspect.rollout_view import (
    COLOR_BY,
    MIN_GAP_SCALE,
    find_rollout,
    group_view,
    legend,
    rollout_view,
    scale,
    shade,
)
from dsinspect.loaders.store.address import parse_address
from dsinspect.loaders.store.catalog import Catalog


@pytest.fixture(scope="module")
def v2():
    return dsinspect.open_catalog().resolve(parse_address("demo-rollouts@v2"))


@pytest.fixture(scope="module")
def rollouts():
    return demo.demo_rollouts()


@pytest.fixture(scope="module")
def groups(v2):
    return {g: group_view(v2, g) for g in range(demo.PROMPTS)}


@pytest.fixture
def catalog(tmp_path):
    return Catalog(str(tmp_path / "catalog"))


def _stored(v2, index: int) -> dict:
    return v2.row(index)


# -- the demo rollouts ---------------------------------------------------------------------------------

def test_every_tokens_values_are_the_stored_ones(v2):
    for index in (0, 12, 37, 41):
        view, row = rollout_view(v2, index), _stored(v2, index)
        assert view.key == row["rollout_id"] and view.group == row["group"]
        assert [c.id for c in view.prompt] == row["prompt_tokens"]
        assert [c.id for c in view.response] == row["response_tokens"]
        for k, cell in enumerate(view.response):
            for name in ("sampler_logprobs", "learner_logprobs", "ref_logprobs"):
                assert cell.values[name] == row[name][k]  # float32 as stored, widened exactly
            gap = abs(np.float64(row["sampler_logprobs"][k]) - np.float64(row["learner_logprobs"][k]))
            assert cell.values["logprob_gap"] == gap
            assert cell.values["advantage"] == row["advantage"]  # a per-rollout advantage on every token
        prompt_len = len(row["prompt_tokens"])
        mask = row["loss_mask"]  # stored over prompt + response (the full layout)
        assert [c.in_loss for c in view.prompt] == [m != 0 for m in mask[:prompt_len]]
        assert [c.in_loss for c in view.response] == [m != 0 for m in mask[prompt_len:]]
        assert [c.values["loss_mask"] for c in view.prompt + view.response] == [float(m) for m in mask]
        assert view.reward == row["reward"] and view.advantage == row["advantage"]
        assert view.policy_version == row["policy_version"] and view.finish_reason == row["finish_reason"]
        assert view.rewards == json.loads(row["rewards"])
        assert view.layouts == {"sampler_logprobs": "response", "learner_logprobs": "response",
                                "ref_logprobs": "response", "loss_mask": "full"}
        assert view.row_hash == v2.row_hash(index).hex()
        assert view.color_by == COLOR_BY


def test_pieces_padding_special_and_turns_of_a_demo_rollout(v2):
    view = rollout_view(v2, 37)  # <|user|>15+35=<|assistant|> -> 4<|assistant|>0<|endoftext|> + 4 pads
    assert "".join(c.piece for c in view.prompt) == "<|user|>15+35=<|assistant|>"
    assert [c.piece for c in view.response][:4] == ["4", "<|assistant|>", "0", "<|endoftext|>"]
    assert [c.padding for c in view.response] == [False] * 4 + [True] * 4
    assert [c.special for c in view.response] == [False, True, False, True] + [True] * 4
    assert view.tokenizer and view.tokenizer.startswith("tokenizer.json")
    assert view.turns == [Turn("user", "prompt", 0, 8, "<|user|>15+35=<|assistant|>", False),
                          Turn("assistant", "response", 0, 4, "4<|assistant|>0<|endoftext|>", False)]


def test_each_finding_at_exactly_the_injected_rows_and_positions(v2, rollouts):
    for code, rows in rollouts.injected.items():
        for row, positions in rows.items():
            view = rollout_view(v2, find_rollout(v2, row))
            [finding] = [f for f in view.findings if f.code == code]
            assert finding.at["positions"] == (None if positions is None else list(positions)), (code, row)
            if positions is None:
                assert not any(code in c.findings for c in view.cells)
                continue
            cells = view.prompt if finding.at["axis"] == "prompt" else view.response
            assert {c.position for c in cells if code in c.findings} == set(positions), (code, row)
            other = view.response if cells is view.prompt else view.prompt
            assert not any(code in c.findings for c in other)


def test_no_finding_where_none_was_injected(groups, rollouts):
    expected: dict[int, set[str]] = {}
    for code, rows in rollouts.injected.items():
        for row in rows:
            expected.setdefault(row, set()).add(code)
    seen = {}
    for g in groups.values():
        for view in g.rows:
            seen[view.key] = {f.code for f in view.findings}
            assert {code for c in view.cells for code in c.findings} <= seen[view.key]
    assert seen == {row: expected.get(row, set()) for row in range(len(rollouts.rows))}


def test_a_group_view_holds_its_rows_rewards_and_advantages(groups, rollouts):
    for g, view in groups.items():
        members = [i for i, row in enumerate(rollouts.rows) if row["group"] == g]
        assert [r.key for r in view.rows] == members == view.indices  # rollout_id is the demo row here
        assert view.size == demo.GROUP_SIZE and view.group == g and view.prompt_shared
        for got, want in zip(view.rewards, [rollouts.rows[i]["reward"] for i in members]):
            assert got == want or (math.isnan(got) and math.isnan(want))
        for got, want in zip(view.advantages, [rollouts.rows[i]["advantage"] for i in members]):
            assert got == want or (math.isnan(got) and math.isnan(want))
        assert view.zero_advantage == (g in (4, 5)), g
    assert {f.code for f in groups[3].findings} == {"rollout-logprob-gap"}


def test_a_misaligned_column_has_no_values_on_that_row(v2, rollouts):
    learner_short, sampler_long = sorted(rollouts.injected["rollout-token-length-mismatch"])
    view = rollout_view(v2, find_rollout(v2, learner_short))
    assert "learner_logprobs" not in view.color_by and "logprob_gap" not in view.color_by
    assert "sampler_logprobs" in view.color_by
    assert all("learner_logprobs" not in c.values for c in view.response)
    view = rollout_view(v2, find_rollout(v2, sampler_long))
    assert "sampler_logprobs" not in view.color_by and "learner_logprobs" in view.color_by


def test_nonfinite_values_are_kept_as_floats(v2, rollouts):
    nan_row = min(rollouts.injected["rollout-nonfinite-reward"])
    view = rollout_view(v2, find_rollout(v2, nan_row))
    assert math.isnan(view.reward) and math.isnan(view.advantage)
    assert all(math.isnan(c.values["advantage"]) for c in view.response)
    assert json.loads(json.dumps(view.to_json()))["reward"] == "nan"


def test_addressing_by_key_and_group_and_their_errors(v2):
    assert find_rollout(v2, 37) == find_rollout(v2, "37") == 37
    with pytest.raises(NotFoundError, match="no rollout with rollout_id = 999"):
        find_rollout(v2, 999)
    with pytest.raises(NotFoundError, match="no rollout in group 99"):
        group_view(v2, 99)
    assert group_view(v2, "3").group == 3
    assert [r.index for r in group_view(v2, 3).rows] == [12, 13, 14, 15]


def test_a_view_and_a_group_as_json(v2):
    view = rollout_view(v2, 12)
    data = json.loads(json.dumps(view.to_json()))
    assert data["kind"] == "rollout" and data["index"] == 12 and data["key"] == 12
    assert data["response"][0]["findings"] == ["rollout-logprob-gap"]
    assert data["findings"][0]["at"] == {"positions": [0], "axis": "response", "column": "learner_logprobs",
                                         "rows": 2}
    group = json.loads(json.dumps(group_view(v2, 3).to_json()))
    assert group["kind"] == "rollout-group" and len(group["rows"]) == 4


# -- odd shapes ---------------------------------------------------------------------------------------

def _base(n: int = 2, **extra) -> dict:
    prompt = encode("<|user|>1+1=<|assistant|>")
    return {"rollout_id": list(range(n)), "prompt_tokens": ints([prompt] * n),
            "response_tokens": ints([[encode("2")[0], EOS]] * n), "reward": [1.0, 0.0][:n], **extra}


def test_no_group_no_turns(catalog):
    v = write_rollouts(catalog, "plain", pa.table(_base(sampler_logprobs=floats([[-0.1, -0.2]] * 2))))
    view = rollout_view(v, 1)
    assert view.group is None and view.turns == [] and view.reward == 0.0
    assert view.color_by == ("sampler_logprobs",)
    with pytest.raises(UserError, match="no group column"):
        group_view(v, 0)


def test_text_only_rollouts(catalog):
    table = pa.table({"rollout_id": [0], "prompt": ["What is [bold]1+1[/]?"], "completion": ["2\u200b"],
                      "accuracy_reward": [1.0], "group": [0]})
    v = write_rollouts(catalog, "texts", table)
    view = rollout_view(v, 0)
    assert view.prompt == [] and view.response == [] and view.color_by == ()
    assert view.prompt_text == "What is [bold]1+1[/]?" and view.response_text == "2⟨U+200B⟩"
    assert view.rewards == {"accuracy_reward": 1.0}
    assert group_view(v, 0).rewards == [None]  # no reward column: the function's score is not "the" reward


def test_per_token_advantage(catalog):
    table = pa.table({**_base(), "group": [0, 0], "advantages": floats([[0.5, 0.5], [-0.5, -0.25]]),
                      "response_mask": ints([[1, 1], [1, 0]])})
    v = write_rollouts(catalog, "pertoken", table)
    view = rollout_view(v, 1)
    assert view.advantage is None and view.advantage_per_token
    assert [c.values["advantage"] for c in view.response] == [-0.5, -0.25]
    assert [c.in_loss for c in view.response] == [True, False]
    assert view.prompt and all(c.in_loss is None for c in view.prompt)  # the mask holds the response only
    assert group_view(v, 0).advantages == [0.5, -0.5]  # the mean over the loss mask


def test_shifted_layout_like_openrlhf(catalog):
    """Masks and log-probs over sequences[1:]: entry j is about token j + 1, so prompt token 0 has none."""
    prompt = encode("<|user|>1+1=<|assistant|>")
    n = len(prompt) + 2
    mask = [0] * (len(prompt) - 2) + [1, 1, 1]  # one prompt token (the last) wrongly in the loss
    logps = [-float(j) / 10 for j in range(n - 1)]
    table = pa.table({"rollout_id": [0], "prompt_tokens": ints([prompt]), "response_tokens": ints([[25, EOS]]),
                      "action_mask": ints([mask]), "rollout_log_probs": floats([logps]), "rewards": [1.0]})
    v = write_rollouts(catalog, "shifted", table, checks={"pad_id": PAD, "eos_ids": [EOS]})
    view = rollout_view(v, 0)
    assert view.layouts == {"sampler_logprobs": "shifted", "loss_mask": "shifted"}
    assert [c.values["sampler_logprobs"] for c in view.response] == [np.float32(x) for x in logps[-2:]]
    assert view.prompt[0].in_loss is None and view.prompt[0].values == {"sampler_logprobs": None, "loss_mask": None}
    assert [c.in_loss for c in view.prompt[1:]] == [m != 0 for m in mask[:len(prompt) - 1]]
    assert [c.position for c in view.prompt if c.findings] == [len(prompt) - 1]
    assert view.prompt[-1].findings == ("rollout-loss-mask-on-prompt",)


def test_an_openrlhf_sequence_is_split_into_prompt_and_response(catalog):
    """`sequences` holds prompt + response; the response is its last `response_length` tokens."""
    prompt = encode("<|user|>1+1=<|assistant|>")
    seq = prompt + [encode("2")[0], EOS]
    logps = [-0.5] * (len(prompt) - 1) + [-0.25, -0.125]  # over sequences[1:]
    table = pa.table({"rollout_id": [0], "sequences": ints([seq]), "response_length": [2],
                      "total_length": [len(seq)], "action_mask": ints([[0] * (len(prompt) - 1) + [1, 1]]),
                      "action_log_probs": floats([logps]), "rollout_log_probs": floats([logps]), "rewards": [1.0]})
    view = rollout_view(write_rollouts(catalog, "openrlhf", table), 0)
    assert [c.id for c in view.prompt] == prompt and [c.id for c in view.response] == seq[-2:]
    assert view.response[1].piece == "<|endoftext|>"  # decoded with the sequence's tokenizer
    assert view.layouts["loss_mask"] == "shifted" and [c.in_loss for c in view.response] == [True, True]
    assert [c.values["learner_logprobs"] for c in view.response] == [-0.25, -0.125]
    assert not view.findings


def test_chat_messages_placed_on_their_parts(catalog):
    system, user = "You add.", "1+1=?"
    call = '{"name": "add", "arguments": [1, 1]}'
    prompt = encode(f"<|user|>{system} {user}<|assistant|>")
    response = encode(f"{call} 2") + [EOS]
    messages = [{"role": "system", "content": system}, {"from": "human", "value": user},
                {"role": "assistant", "content": call, "tool_calls": [{"name": "add"}]},
                {"role": "ipython", "content": "2"}, {"role": "assistant", "content": "not said"}]
    table = pa.table({"rollout_id": [0], "prompt_tokens": ints([prompt]), "response_tokens": ints([response]),
                      "reward": [1.0], "turns": [json.dumps(messages)]})
    view = rollout_view(write_rollouts(catalog, "chat", table), 0)
    roles = [(t.role, t.part, t.tool_call, t.text) for t in view.turns]
    assert [r[:3] for r in roles] == [("system", "prompt", False), ("user", "prompt", False),
                                      ("assistant", "response", True), ("tool", "response", False),
                                      ("assistant", "response", False)]
    assert system in roles[0][3] and user in roles[1][3] and call in roles[2][3] and roles[3][3].strip() == "2"
    assert (view.turns[-1].start, view.turns[-1].end, view.turns[-1].text) == (-1, -1, "not said")
    placed = view.turns[2]
    assert "".join(c.piece for c in view.response[placed.start:placed.end]).strip().startswith('{"name"')


def test_markup_in_tokens_and_text_is_kept_as_text(catalog):
    text = "[bold red]x[/]"
    table = pa.table({"rollout_id": [0], "prompt_tokens": ints([[USER, *encode(text), ASSISTANT]]),
                      "response_tokens": ints([encode(text) + [EOS]]), "reward": [0.0],
                      "prompt_text": [text], "response_text": [text]})
    view = rollout_view(write_rollouts(catalog, "markup", table), 0)
    assert "".join(c.piece for c in view.response[:-1]) == text
    assert view.prompt_text == view.response_text == text
    pieces = pa.table({"rollout_id": [0], "prompt_tokens": ints([[0, 1, 2]]), "response_tokens": ints([[0, 1, 2, 3]]),
                       "reward": [0.0]})
    view = rollout_view(write_rollouts(catalog, "pieces", pieces, tokenizer=markup_tokenizer()), 0)
    assert [c.piece for c in view.response] == list(MARKUP_PIECES)


def test_ids_without_a_tokenizer(catalog):
    v = write_rollouts(catalog, "ids", pa.table(_base()), tokenizer=False)
    view = rollout_view(v, 0)
    assert view.tokenizer is None and view.response[0].piece == f"⟨{view.response[0].id}⟩"


# -- colour -------------------------------------------------------------------------------------------

def test_shades():
    assert shade(0.0, "sampler_logprobs", -4.0, 0.0) == 0.0
    assert shade(-2.0, "sampler_logprobs", -4.0, 0.0) == 0.5
    assert shade(-8.0, "learner_logprobs", -4.0, 0.0) == 1.0
    assert shade(-math.inf, "ref_logprobs", -4.0, 0.0) == 1.0
    assert shade(math.nan, "sampler_logprobs", -4.0, 0.0) is None and shade(None, "advantage", -1, 1) is None
    assert shade(0.0, "advantage", -2.0, 2.0) == 0.5 and shade(-2.0, "advantage", -2.0, 2.0) == 0.0
    assert shade(1.0, "advantage", -2.0, 2.0) == 0.75 and shade(math.inf, "advantage", -2.0, 2.0) == 1.0
    assert shade(0.5, "logprob_gap", 0.0, 2.0) == 0.25 and shade(math.inf, "logprob_gap", 0.0, 2.0) == 1.0
    assert shade(0.0, "loss_mask", 0, 1) == 0.0 and shade(1.0, "loss_mask", 0, 1) == 1.0
    with pytest.raises(ValueError, match="no colour by"):
        shade(1.0, "nonsense", 0, 1)


def test_scales_over_one_view_and_a_group(v2, groups):
    view = rollout_view(v2, 12)  # a 2.5-nat gap injected at its first token
    lo, hi = scale(view, "logprob_gap")
    assert lo == 0.0 and hi == pytest.approx(max(c.values["logprob_gap"] for c in view.response))
    assert hi > MIN_GAP_SCALE
    assert scale(rollout_view(v2, 37), "logprob_gap") == (0.0, MIN_GAP_SCALE)  # no gap: the scale's floor
    low = min(c.values["sampler_logprobs"] for g in [groups[3]] for r in g.rows for c in r.response
              if not c.padding)
    assert scale(groups[3], "sampler_logprobs") == (low, 0.0)
    assert scale(groups[3], "advantage") == (-0.75, 0.75) and scale(view, "loss_mask") == (0.0, 1.0)
    assert [s for _, s in legend("advantage", -1.0, 1.0, 3)] == [0.0, 0.5, 1.0]
    assert [s for _, s in legend("sampler_logprobs", -4.0, 0.0, 3)] == [0.0, 0.5, 1.0]
