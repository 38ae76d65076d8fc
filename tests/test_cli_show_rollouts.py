"""`dsinspect show` on LLM rollouts (#34): the rollout view before the fields (tokens by turn, the
legend, reward and advantage, findings with positions, each token's values), colours that follow the
value picked, --json, a group side by side (--group), a rollout by its key (--rollout-id), markup in the
data printed as text, and one-line errors."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pytest
from cli_inprocess import run_cli
from rollout_view_helpers import EOS, USER, encode, ints, markup_tokenizer, write_rollouts
from test_cli import assert_one_line_error

import dsinspect
from dsinspect.inspect.rollout_view import rollout_view, scale, shade
from dsinspect.loaders.store.address import parse_address
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.term.rollout import shade_color

UNSET = ("DSINSPECT_CATALOG", "FORCE_COLOR", "COLUMNS", "NO_COLOR", "COLORTERM")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def show(*args, catalog=None, color=False):
    env = {"FORCE_COLOR": "1", "COLORTERM": "truecolor", "COLUMNS": "160"} if color else {"COLUMNS": "160"}
    return run_cli(*(["--catalog", str(catalog)] if catalog else []), "show", *args, env=env, unset=UNSET)


def ok(*args, **kwargs) -> str:
    done = show(*args, **kwargs)
    assert done.returncode == 0, done.stderr
    return done.stdout


def one_line_error(done, *fragments) -> None:
    assert_one_line_error(done, 2, *fragments)


@pytest.fixture(scope="module")
def v2():
    return dsinspect.open_catalog().resolve(parse_address("demo-rollouts@v2"))


def test_the_rollout_view_comes_before_the_fields(v2):
    out = ok("demo-rollouts@v2:37")
    row = v2.row(37)
    rollout, fields = out.index("rollout demo-rollouts@"), out.index("field hash (xxh3-128)")
    assert rollout < fields
    view = out[rollout:fields]
    assert "key 37  group 9  policy version 6  reward 0.0  advantage -0.5  finish stop" in view
    assert "rewards correct: 0.0, format: 0.0" in view
    assert "colour: |sampler − learner| log-prob" in view
    assert "▍user  prompt 0–8\n<|user|>│1│5│+│3│5│=│<|assistant|>│" in view  # turns set apart, cell boundaries
    assert "▍assistant  response 0–4\n4│<|assistant|>‼│0│<|endoftext|>│\npadding\n<|pad|>│" in view
    assert "1 special token(s) inside 1 response(s)  at response token(s) 1  [rollout-special-token]" in view
    line = next(t for t in view.splitlines() if t.startswith("response") and "│   1 │" in t)
    assert "special-token" in line and str(np.float32(row["sampler_logprobs"][1])) in line
    assert str(np.float32(row["learner_logprobs"][1])) in line
    # then the per-field sections as ever: hashes and the row hash
    assert f"row hash {v2.row_hash(37).hex()}" in out and "learner_logprobs · array" in out[fields:]


def test_findings_on_the_prompt_name_prompt_positions():
    out = ok("demo-rollouts@v2:4")
    assert "at prompt token(s) 6  [rollout-loss-mask-on-prompt]" in out
    line = next(t for t in out.splitlines() if t.startswith("prompt") and "│   6 │" in t)
    assert "loss-mask-on-prompt" in line and "│ yes" in line


@pytest.mark.parametrize("color_by", ["logprob_gap", "loss_mask", "sampler_logprobs", "advantage"])
def test_token_colours_follow_the_value_picked(v2, color_by):
    out = ok("demo-rollouts@v2:12", "--color-by", color_by, color=True)
    view = rollout_view(v2, 12)
    lo, hi = scale(view, color_by)
    rollout = out[:out.index("field hash")]
    for cell in view.response[:3]:
        rgb = shade_color(shade(cell.values[color_by], color_by, lo, hi), color_by).triplet
        code = f"48;2;{rgb.red};{rgb.green};{rgb.blue}"
        assert re.search(rf"\x1b\[[0-9;]*{code}m{re.escape(cell.piece)}\x1b", rollout), (cell, code)
    assert "colour: " + {"logprob_gap": "|sampler − learner| log-prob", "loss_mask": "loss mask",
                         "sampler_logprobs": "sampler log-prob", "advantage": "advantage"}[color_by] \
        in ANSI.sub("", rollout)


def test_json_holds_the_rollout_view_beside_the_fields(v2):
    data = json.loads(ok("demo-rollouts@v2:12", "--json"))
    assert data["rollout"]["kind"] == "rollout" and data["rollout"]["index"] == 12
    assert data["rollout"]["response"][0]["findings"] == ["rollout-logprob-gap"]
    assert data["rollout"]["response"][0]["values"]["learner_logprobs"] == v2.row(12)["learner_logprobs"][0]
    assert [f["name"] for f in data["fields"]][:3] == ["rollout_id", "group", "policy_version"]
    assert "rollout" not in json.loads(ok("demo-text@v1:0", "--json"))


def test_a_group_side_by_side():
    out = ok("demo-rollouts@v2", "--group", "3")
    assert "group 3  rollouts 4  rewards 0.0, 0.0, 1.0, 0.0  advantages -0.25, -0.25, 0.75, -0.25" in out
    header = next(t for t in out.splitlines() if "#12 key 12" in t)
    assert all(f"#{i} key {i}" in header for i in (13, 14, 15))  # one line: the responses side by side
    assert "prompt <|user|>│3│3│+│50│=│<|assistant|>│" in out  # the prompt they share, once
    assert "rows 12 (response 0); 14 (response 1, 2)  [rollout-logprob-gap]" in ANSI.sub("", out).replace("\n", " ")
    zero = ok("demo-rollouts@v2", "--group", "4")
    assert "all rewards equal: zero advantage" in zero
    data = json.loads(ok("demo-rollouts@v2", "--group", "3", "--json"))
    assert data["kind"] == "rollout-group" and [r["key"] for r in data["rows"]] == [12, 13, 14, 15]
    assert data["rewards"] == [0.0, 0.0, 1.0, 0.0]


def test_a_rollout_by_its_key():
    by_key = ok("demo-rollouts@v2", "--rollout-id", "37")
    assert by_key == ok("demo-rollouts@v2:37")
    assert "rollout demo-rollouts@a674398e62ca:37  key 37" in by_key


def test_mistakes_are_one_line():
    one_line_error(show("demo-rollouts@v2:3", "--group", "2"), "without :INDEX", "demo-rollouts@v2 --group 2")
    one_line_error(show("demo-rollouts@v2", "--group", "2", "--rollout-id", "4"), "give one")
    one_line_error(show("demo-rollouts@v2", "--group", "99"), "no rollout in group '99'")
    one_line_error(show("demo-rollouts@v2", "--rollout-id", "999"), "no rollout with rollout_id = '999'")
    one_line_error(show("demo-text@v1:0", "--color-by", "advantage"), "demo-text is not rollouts")
    one_line_error(show("demo-text@v1", "--group", "1"), "not LLM rollouts")


def test_markup_in_tokens_and_text_is_printed_as_text(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    text = "[bold red]x[/]"
    table = pa.table({"rollout_id": [0], "group": [0], "prompt_tokens": ints([[USER, *encode(text)]]),
                      "response_tokens": ints([encode(text) + [EOS]]), "reward": [1.0],
                      "prompt_text": [text], "response_text": [text],
                      "turns": [json.dumps([{"role": "user", "content": text}])]})
    write_rollouts(catalog, "markup", table)
    out = ANSI.sub("", ok("markup@latest:0", catalog=tmp_path / "catalog", color=True))
    rollout = out[:out.index("field hash")]
    assert f"▍user  prompt 1–10\n{text}\n" in rollout and f"\n{text}<|endoftext|>\n" in rollout
    grouped = ANSI.sub("", ok("markup", "--group", "0", catalog=tmp_path / "catalog", color=True))
    assert f"{text}<|endoftext|>" in grouped
    pieces = pa.table({"rollout_id": [0], "group": [0], "prompt_tokens": ints([[0, 1, 2]]),
                       "response_tokens": ints([[0, 1, 2, 3]]), "reward": [1.0]})
    write_rollouts(catalog, "pieces", pieces, tokenizer=markup_tokenizer())  # each token a markup tag
    out = ANSI.sub("", ok("pieces@latest:0", catalog=tmp_path / "catalog", color=True))
    assert f"prompt (3 tokens)\n{text}\nresponse (4 tokens)\n{text}<|endoftext|>\n" in out
    assert "│   0 │  0 │ [bold red]    │" in out  # the values table's piece column
    grouped = ANSI.sub("", ok("pieces", "--group", "0", catalog=tmp_path / "catalog", color=True))
    assert f"prompt {text}\n" in grouped and f"{text}<|endoftext|>" in grouped


def test_the_cli_lists_every_colour_value():
    from dsinspect.cli.show_cmd import COLOR_BY
    from dsinspect.inspect.rollout_view import COLOR_BY as MODEL

    assert COLOR_BY == MODEL


def test_turns_and_tool_calls_are_set_apart(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    call, result = '{"name": "add"}', "2"
    prompt = encode("<|user|>add 1 and 1<|assistant|>")
    response = encode(f"{call}{result} so 2") + [EOS]
    turns = [{"role": "user", "content": "add 1 and 1"},
             {"role": "assistant", "content": call, "tool_calls": [{"name": "add"}]},
             {"role": "tool", "content": result}, {"role": "assistant", "content": " so 2"}]
    table = pa.table({"rollout_id": [0], "prompt_tokens": ints([prompt]), "response_tokens": ints([response]),
                      "reward": [1.0], "turns": [json.dumps(turns)]})
    write_rollouts(catalog, "agent", table)
    out = ok("agent@latest:0", catalog=tmp_path / "catalog")
    lines = out[:out.index("field hash")].splitlines()
    labels = [line for line in lines if line.startswith("▍")]
    assert [label.split("  ")[0] for label in labels] == ["▍user", "▍assistant · tool call", "▍tool", "▍assistant"]
    at = lines.index(labels[1])
    assert lines[at + 1].replace("│", "") == call and lines[at + 3].replace("│", "") == result
