"""The rollout and group views (#34) in a real terminal: `dsinspect tui` in a tmux pane, driven by
send-keys and read with capture-pane (with -e, the colours the terminal was told to draw). Needs tmux."""

from __future__ import annotations

import re
import shutil

import pyarrow as pa
import pytest
from rollout_view_helpers import markup_tokenizer, write_rollouts
from test_tui_tmux import Pane, _command

import dsinspect
from dsinspect.inspect.rollout_view import rollout_view, scale, shade
from dsinspect.loaders.store.address import parse_address
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.term.rollout import shade_color

HOT, MASK_ON, MASK_OFF = "#d63031", "#1f5fa8", "#323232"  # the palette of term/rollout.py
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


def colours(pane: Pane) -> str:
    return pane.tmux("capture-pane", "-p", "-e", "-t", "tui")


def background_before(screen: str, line_holding: str, piece: str) -> str | None:
    """The background the terminal was told to draw the first character of `piece` on, on the line (right
    of the field list) whose text holds `line_holding`."""
    for line in screen.splitlines():
        chars: list[tuple[str, str | None]] = []
        background = None
        for escape, text in re.findall(r"(\x1b\[[0-9;]*m)|([^\x1b]+)", line):
            if escape:
                codes = escape[2:-1]
                rgb = re.search(r"48;2;(\d+);(\d+);(\d+)", codes)
                if rgb:
                    background = "#{:02x}{:02x}{:02x}".format(*map(int, rgb.groups()))
                elif codes in ("", "0", "49"):
                    background = None
            else:
                chars += [(c, background) for c in text]
        plain = "".join(c for c, _ in chars)
        if line_holding in plain:
            return chars[plain.index(piece, plain.index("▎"))][1]
    raise AssertionError(f"no line holds {line_holding!r}:\n{screen}")


def test_rollout_and_group_views_in_a_real_terminal():
    view = rollout_view(dsinspect.open_catalog().resolve(parse_address("demo-rollouts@v2")), 12)
    pane = Pane(_command("tui demo-rollouts@v2:12"), width=120, height=40)
    try:
        pane.wait_for("rollout demo-rollouts@", "▍assistant  response 0–3", "85<|endoftext|>",
                      "token response #0  id 27  piece '8'  loss yes  logprob_gap 2.5")
        lo, hi = scale(view, "logprob_gap")
        gap = shade_color(shade(view.response[1].values["logprob_gap"], "logprob_gap", lo, hi), "logprob_gap")
        assert background_before(colours(pane), "85<|endoftext|>", "5<") == gap.triplet.hex
        pane.keys("Right")
        pane.wait_for("token response #1  id 24  piece '5'")
        # the 2.5-nat gap is the scale's top: the hot end of the palette (docs/RL.md), no longer under the cursor
        assert background_before(colours(pane), "85<|endoftext|>", "85") == HOT
        pane.keys("v", "v", "v", "v", "v")  # gap → sampler → learner → reference → advantage → loss mask
        pane.wait_for("colour: loss mask")
        screen = colours(pane)
        assert background_before(screen, "<|user|>33+50=", "<|user|>") == MASK_OFF  # the prompt: not in the loss
        assert background_before(screen, "85<|endoftext|>", "85") == MASK_ON
        pane.keys("G")
        screen = pane.wait_for("group 3  rollouts 4  rewards 0.0, 0.0, 1.0, 0.0", "picked #12")
        header = next(t for t in screen.splitlines() if "#12 key 12" in t)
        assert all(f"#{i} key {i}" in header for i in (13, 14, 15))
        pane.keys("Right", "Enter")
        pane.wait_for("rollout demo-rollouts@a674398e62ca:13", "colour: loss mask")
        pane.keys("Down")  # from the rollout entry to the first field: its bytes and hash
        pane.wait_for("field hash (xxh3-128)", "canonical bytes")
        pane.keys("q")
    finally:
        pane.close()


def test_markup_in_the_data_is_shown_as_text_in_a_real_terminal(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    table = pa.table({"rollout_id": [0, 1], "group": [0, 0], "prompt_tokens": pa.array([[0, 1, 2]] * 2),
                      "response_tokens": pa.array([[0, 1, 2, 3], [2, 3]]), "reward": [1.0, 0.0],
                      "response_text": ["[bold red]x[/]", "[/]"]})
    write_rollouts(catalog, "pieces", table, tokenizer=markup_tokenizer())  # each token a markup tag
    pane = Pane(_command(f"tui --catalog {tmp_path / 'catalog'} pieces@latest:0"), width=120, height=40)
    try:
        screen = pane.wait_for("[bold red]x[/]<|endoftext|>", "piece '[bold red]'")
        assert "prompt (3 tokens)" in screen
        pane.keys("G")
        pane.wait_for("prompt [bold red]x[/]", "[/]<|endoftext|>", "picked #0")
        pane.keys("q")
    finally:
        pane.close()
