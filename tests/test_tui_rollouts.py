"""The TUI's rollout and group views (#34), driven by Pilot: a sample of LLM rollouts opens on the rollout
view (tokens by turn, coloured by the value picked, a cursor whose token shows its id, piece, values and
findings), `v` picks the next value (kept from sample to sample), `f` the next token with a finding, `G`
the group side by side and enter one of its rollouts; the fields' bytes and hashes stay a pick away;
markup in the data is shown as text."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from rich.style import Style
from rollout_view_helpers import EOS, USER, encode, ints, markup_tokenizer, write_rollouts
from textual.widgets import OptionList
from tui_helpers import SIZE, screen_text, until

from dsinspect.inspect.rollout_view import scale, shade
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.term.rollout import number, shade_color
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.rollout_group import RolloutGroupScreen
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets.field_view import FieldView
from dsinspect.tui.widgets.rollout_group import GroupColumns
from dsinspect.tui.widgets.rollout_tokens import ROLLOUT, RolloutTokens


async def open_rollout(pilot, app, address: str) -> tuple[SampleScreen, RolloutTokens]:
    app.open_address(address)
    index = int(address.rsplit(":", 1)[1])
    await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample is not None
                and app.screen.sample.index == index and app.screen.query(RolloutTokens)
                and app.screen.query_one(RolloutTokens).view.index == index, what=f"rollout {address}")
    return app.screen, app.screen.query_one(RolloutTokens)


def pane_lines(app) -> list[str]:
    """The screen's lines right of the field list, stripped."""
    return [line.split("▎", 1)[-1].strip() for line in screen_text(app).splitlines()]


def background_of(tokens: RolloutTokens, piece: str) -> str | None:
    """The background colour of the first span drawing `piece` in the widget's tokens text."""
    rendered = tokens.render().renderables[2]  # summary, legend, tokens
    for span in rendered.spans:
        if rendered.plain[span.start:span.end] == piece:
            style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
            return style.bgcolor.triplet.hex if style.bgcolor else None
    raise AssertionError(f"{piece!r} not drawn")


@pytest.mark.asyncio
async def test_a_rollout_sample_opens_on_the_rollout_view():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen, tokens = await open_rollout(pilot, app, "demo-rollouts@v2:12")
        assert screen.query_one("#fields", OptionList).get_option_at_index(0).id == ROLLOUT
        text = screen_text(app)
        assert "rollout demo-rollouts@" in text and "key 12  group 3  policy version 6  reward 0.0" in text
        assert "colour: |sampler − learner| log-prob" in text
        assert "▍user  prompt 0–7" in text and "▍assistant  response 0–3" in text
        assert "<|user|>33+50=<|assistant|>" in text and "85<|endoftext|>" in text
        assert "at response token(s) 0  [rollout-logprob-gap]" in text
        row = screen.sample.version.row(12)
        # the cursor starts on the first generated token: its id, piece, values and finding
        await until(pilot, lambda: "token response #0  id 27  piece '8'  loss yes  logprob_gap 2.5" in screen_text(app))
        assert f"learner_logprobs {number(row['learner_logprobs'][0])}" in screen_text(app).replace("\n", " ")
        assert "rollout-logprob-gap" in screen_text(app)
        assert "row hash " + screen.sample.row_hash.stored in screen_text(app)


@pytest.mark.asyncio
async def test_the_cursor_moves_and_finds_the_findings():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen, tokens = await open_rollout(pilot, app, "demo-rollouts@v2:14")  # gap at response 1 and 2
        await pilot.press("left")
        await until(pilot, lambda: "token prompt #6  id 3  piece '<|assistant|>'" in screen_text(app))
        await pilot.press("f")
        await until(pilot, lambda: "token response #1" in screen_text(app), what="the first finding")
        assert tokens.current[1].findings == ("rollout-logprob-gap",)
        await pilot.press("f")
        await until(pilot, lambda: "token response #2" in screen_text(app), what="the second finding")
        await pilot.press("f")
        await until(pilot, lambda: "token response #1" in screen_text(app), what="round to the first")
        await pilot.press("right", "right", "right")
        await until(pilot, lambda: "token response #4  id 1  piece '<|pad|>'  special padding" in screen_text(app))


@pytest.mark.asyncio
async def test_v_colours_by_the_next_value_and_keeps_it():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen, tokens = await open_rollout(pilot, app, "demo-rollouts@v2:12")
        view = tokens.view
        for expected in ("logprob_gap", "sampler_logprobs", "learner_logprobs"):
            assert tokens.color_by == expected
            lo, hi = scale(view, expected)
            want = shade_color(shade(view.response[1].values[expected], expected, lo, hi), expected).triplet.hex
            assert background_of(tokens, "5") == want, expected  # response token 1 ("5"), not under the cursor
            await pilot.press("v")
        await until(pilot, lambda: "colour: reference log-prob" in screen_text(app))
        await pilot.press("v", "v")
        await until(pilot, lambda: "colour: loss mask" in screen_text(app))
        assert background_of(tokens, "5") == shade_color(1.0, "loss_mask").triplet.hex  # in the loss
        assert background_of(tokens, "<|user|>") == shade_color(0.0, "loss_mask").triplet.hex  # the prompt: not
        await pilot.press("n")  # the next sample keeps the value picked
        _, tokens = await open_rollout(pilot, app, "demo-rollouts@v2:13")
        assert tokens.color_by == "loss_mask" and "colour: loss mask" in screen_text(app)
        await pilot.press("v")
        await until(pilot, lambda: "colour: |sampler − learner| log-prob" in screen_text(app), what="round again")


@pytest.mark.asyncio
async def test_the_fields_bytes_and_hashes_are_a_pick_away():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_rollout(pilot, app, "demo-rollouts@v2:12")
        fields = screen.query_one("#fields", OptionList)
        names = [fields.get_option_at_index(i).id for i in range(fields.option_count)]
        fields.highlighted = names.index("learner_logprobs")
        await until(pilot, lambda: screen.query(FieldView) and screen.query_one("#raw-body").content,
                    what="the field's bytes")
        text = screen_text(app)
        assert "field hash (xxh3-128) " + screen.sample.field("learner_logprobs").hash in text
        assert "canonical bytes" in text
        fields.highlighted = 0  # back to the rollout
        await until(pilot, lambda: screen.query(RolloutTokens), what="the rollout again")


@pytest.mark.asyncio
async def test_G_shows_the_group_side_by_side_and_enter_opens_one():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_rollout(pilot, app, "demo-rollouts@v2:16")  # group 4: all right
        await pilot.press("G")
        await until(pilot, lambda: isinstance(app.screen, RolloutGroupScreen) and app.screen.query(GroupColumns),
                    what="the group")
        text = screen_text(app)
        assert "group 4  rollouts 4  rewards 1.0, 1.0, 1.0, 1.0  advantages 0.0, 0.0, 0.0, 0.0" in text
        assert "all rewards equal: zero advantage" in text
        header = next(line for line in text.splitlines() if "#16 key 16" in line)
        assert all(f"#{i} key {i}" in header for i in (17, 18, 19))  # side by side on one line
        assert "rows 16; 17; 18; 19" in " ".join(line.strip() for line in text.splitlines())
        await pilot.press("right", "right")
        await until(pilot, lambda: "picked #18" in screen_text(app))
        await pilot.press("v")
        await until(pilot, lambda: "colour: sampler log-prob" in screen_text(app))
        await pilot.press("enter")
        _, tokens = await open_rollout(pilot, app, "demo-rollouts@v2:18")
        assert app.screen is screen and tokens.color_by == "sampler_logprobs"  # the same screen, the value kept
        assert len([s for s in app.screen_stack if isinstance(s, SampleScreen)]) == 1


@pytest.mark.asyncio
async def test_other_datasets_have_no_rollout_keys():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        app.open_address("demo-text@v1:0")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample
                    and app.screen.query(FieldView), what="a text sample")
        screen = app.screen
        assert ROLLOUT not in [screen.query_one("#fields", OptionList).get_option_at_index(i).id for i in range(3)]
        assert "Colour by" not in screen_text(app) and "G Group" not in screen_text(app)
        await pilot.press("G")
        await pilot.pause(0.1)
        assert app.screen is screen


@pytest.fixture
def markup_catalog(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    text = "[bold red]x[/]"
    table = pa.table({"rollout_id": [0, 1], "group": [0, 0], "prompt_tokens": ints([[USER, *encode(text)]] * 2),
                      "response_tokens": ints([encode(text) + [EOS], encode("[/]") + [EOS]]),
                      "reward": [1.0, 0.0], "prompt_text": [text] * 2, "response_text": [text, "[/]"],
                      "turns": [json.dumps([{"role": "user", "content": text}])] * 2})
    write_rollouts(catalog, "markup", table)
    pieces = pa.table({"rollout_id": [0, 1], "group": [0, 0], "prompt_tokens": ints([[0, 1, 2]] * 2),
                       "response_tokens": ints([[0, 1, 2, 3], [2, 3]]), "reward": [1.0, 0.0]})
    write_rollouts(catalog, "pieces", pieces, tokenizer=markup_tokenizer())  # each token a markup tag
    texts = pa.table({"rollout_id": [0], "group": [0], "prompt": [text], "completion": ["[/]"],
                      "accuracy_reward": [1.0]})
    write_rollouts(catalog, "texts", texts)
    return str(tmp_path / "catalog")


@pytest.mark.asyncio
async def test_markup_in_tokens_and_text_renders_literally(markup_catalog):
    app = DsinspectApp(markup_catalog)
    async with app.run_test(size=SIZE) as pilot:
        screen, tokens = await open_rollout(pilot, app, "markup@latest:0")
        text = screen_text(app)
        assert "▍user  prompt 1–10" in text
        assert "\n".join(line.strip("▊▎ ") for line in text.splitlines()).count("[bold red]x[/]") >= 2
        assert "[bold red]x[/]<|endoftext|>" in text
        await until(pilot, lambda: "token response #0  id 62  piece '['" in screen_text(app))
        await pilot.press("G")
        await until(pilot, lambda: isinstance(app.screen, RolloutGroupScreen) and app.screen.query(GroupColumns))
        text = screen_text(app)
        assert "[bold red]x[/]<|endoftext|>" in text and "[/]<|endoftext|>" in text
        assert "prompt <|user|>[bold red]x[/]" in text
        await pilot.press("escape")
        screen, tokens = await open_rollout(pilot, app, "pieces@latest:0")  # tokens that are markup tags
        lines = pane_lines(app)
        assert ("prompt (3 tokens)", "[bold red]x[/]") in zip(lines, lines[1:])
        assert ("response (4 tokens)", "[bold red]x[/]<|endoftext|>") in zip(lines, lines[1:])
        await until(pilot, lambda: "token response #0  id 0  piece '[bold red]'" in screen_text(app))
        await pilot.press("G")
        await until(pilot, lambda: isinstance(app.screen, RolloutGroupScreen) and app.screen.query(GroupColumns))
        assert "prompt [bold red]x[/]" in screen_text(app) and "[/]<|endoftext|>" in screen_text(app)
        await pilot.press("escape")
        await open_rollout(pilot, app, "texts@latest:0")  # text only
        lines = pane_lines(app)
        assert ("prompt", "[bold red]x[/]", "response", "[/]") in zip(lines, lines[1:], lines[2:], lines[3:])
        assert "rewards accuracy_reward: 1.0" in lines
