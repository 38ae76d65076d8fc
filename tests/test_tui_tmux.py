"""A real terminal: `dsinspect tui demo-text@v1` in a tmux pane, driven by send-keys and read with
capture-pane. Needs tmux (apt-get install -y tmux)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


class Pane:
    """One tmux session on a private server socket, so no other session is touched."""

    def __init__(self, command: str, width: int = 120, height: int = 40):
        self.socket = f"dsinspect-test-{uuid.uuid4().hex[:8]}"
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}  # the pane's size rules
        env.update(COLORTERM="truecolor", TERM="xterm-256color")
        self.tmux("new-session", "-d", "-x", str(width), "-y", str(height), "-s", "tui", command, env=env)

    def tmux(self, *args: str, env: dict | None = None) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=env, timeout=20)
        return done.stdout

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.tmux("send-keys", "-t", "tui", key)
            time.sleep(0.15)

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "tui")

    def wait_for(self, *needles: str, timeout: float = 90) -> str:  # generous: a loaded CI machine
        deadline = time.monotonic() + timeout
        while True:
            screen = self.text()
            if all(n in screen for n in needles):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{needles} never appeared; the pane shows:\n{screen}")
            time.sleep(0.2)

    def close(self) -> None:
        self.tmux("kill-server")


def _command(args: str) -> str:
    exe = shutil.which("dsinspect")
    return f"{exe} {args}" if exe else f"{sys.executable} -m dsinspect {args}"


def test_sample_table_and_token_view_in_a_real_terminal():
    pane = Pane(_command("tui demo-text@v1"))
    try:
        screen = pane.wait_for("Samples", "doc_id", "A simple bread")  # the sample table, first rows drawn
        assert "Open sample" in screen  # footer bindings
        pane.keys("Down", "Enter")  # sample 1
        pane.wait_for("row 1 of 240", "row hash")
        pane.keys("Down")  # from the text field to the tokens field
        screen = pane.wait_for("tokenizer", "token #0", "id ")
        pane.keys("Right", "Right")
        screen = pane.wait_for("token #2")
        assert "canonical bytes" in screen
        pane.keys("q")
        deadline = time.monotonic() + 10
        while "tui" in pane.tmux("list-sessions") and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        pane.close()


def test_dsinspect_alone_opens_the_catalog_in_a_terminal():
    pane = Pane(_command(""))
    try:
        pane.wait_for("datasets", "demo-text", "versions of demo-images", "Go to")
        pane.keys("q")
    finally:
        pane.close()


def test_an_address_that_names_nothing_is_one_line_and_exit_2_before_the_ui_starts():
    """`tui nosuch` once opened the UI and stayed on "loading…" (exit 0 after q): now the catalog and
    the address are resolved first, in the real terminal; a catalog, dataset or row that is not there
    ends in one line."""
    script = (f"{_command('tui nosuch')}; echo \"exit=$?\"; {_command('tui demo-text@v1:240')}; echo \"exit=$?\"; "
              f"{_command('tui --catalog /nonexistent/catalog')}; echo \"exit=$?\"; echo done; sleep 60")
    pane = Pane(f"sh -c '{script}'", width=240)  # the default catalog's copy has a long path: one line
    try:
        screen = pane.wait_for("done", timeout=60)
        lines = [line for line in screen.splitlines() if line.strip()]
        assert lines == ["dsinspect: error: no dataset 'nosuch' in catalog " + lines[0].split(" in catalog ", 1)[-1],
                         "exit=2", lines[2], "exit=2",
                         "dsinspect: error: catalog /nonexistent/catalog does not exist", "exit=2", "done"], screen
        assert lines[2].startswith("dsinspect: error: demo-text@") and "index 240 is out of range" in lines[2]
    finally:
        pane.close()


def test_replay_form_keys_in_a_real_terminal(tmp_path):
    """Issue #20: in a replay field `D` and `]` are text; Escape leaves the field and then `D` opens the
    diff prompt; Tab goes spec → step → rank; the step refuses a letter with a message and keeps its
    value; a typed form replays and `]` steps once the batch has the focus."""
    import dsinspect

    spec = dsinspect.RunSpec.create(dsinspect.open_catalog(), "demo-text@v1", seed=0, batch_size=4, world_size=2,
                                    shuffle="global")
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    pane = Pane(_command(""))
    try:
        pane.wait_for("datasets", "demo-text")
        pane.keys("R")
        pane.wait_for("escape leaves a field", "transform")
        pane.keys("D", "]")
        screen = pane.wait_for("D]")  # typed into the spec field: text, not keys
        assert "Diff two versions" not in screen and "spec" in next(t for t in screen.splitlines() if "D]" in t)
        pane.keys("Escape")
        pane.wait_for("keys act on the screen now")
        pane.keys("D")
        pane.wait_for("Diff two versions")
        pane.keys("Escape")
        pane.wait_for("keys act on the screen now")
        pane.keys("Tab", "C-u", str(path), "Tab", "x")  # the spec, then a letter in the step field
        screen = pane.wait_for("digits only", "'x' refused")
        step_line = next(t for t in screen.splitlines() if "step" in t and str(path)[-20:] in t)
        assert " 0 " in step_line + " " and "x" not in step_line.split("step", 1)[1].split("rank")[0], step_line
        pane.keys("BSpace", "3", "Tab", "BSpace", "all", "Enter")
        pane.wait_for("step 3 · epoch", "ranks [0, 1]")
        pane.keys("]")
        pane.wait_for("step 4 · epoch")
        pane.keys("q")
    finally:
        pane.close()


def test_a_newcomers_first_steps_in_a_real_terminal():
    """Issue #20, the fixes a newcomer met, in a real pane: one Enter on a dataset opens it (the
    footer says so); the diff prompt opens centred, below the header; a sample opened from the table
    shows its own title; `x` hides the hex and keeps the hashes; a partial UTF-8 token piece is
    escaped once; a trajectory's steps count from 0."""
    from dsinspect.defaults import open_catalog
    from dsinspect.inspect.sample import open_address
    from dsinspect.loaders.store.describe import catalog_listing

    listed = [d["name"] for d in catalog_listing(open_catalog())["datasets"]]  # the pane's catalog, in its order
    pane = Pane(_command(""), width=120, height=40)
    try:
        pane.wait_for("datasets", "demo-text", "Open dataset")
        pane.keys(*["Down"] * listed.index("demo-text"))
        pane.wait_for("versions of demo-text")
        pane.keys("Enter")
        pane.wait_for("Samples", "doc_id")  # one Enter: the dataset's sample table
        pane.keys("D")
        screen = pane.wait_for("Diff two versions")
        lines = screen.splitlines()
        top = next(i for i, t in enumerate(lines) if "Diff two versions" in t)
        assert top > 2, screen  # below the header, not over it
        row = lines[top]  # the dialog's title row, between its two border columns, over the table
        left, right = row.find("█"), row.rfind("█")
        assert 0 < left < row.find("Diff two versions") < right, row
        assert abs(left - (119 - right)) <= 1, (left, right, row)  # as far from both sides
        pane.keys("Escape")
        pane.wait_for("Samples", "doc_id")
        pane.keys("Down", "Down", "Enter")  # sample 2 of the latest version: the changelog with emoji
        screen = pane.wait_for("row 2 of 242", "row hash", "Tiny changelog")
        assert "demo-text@" in screen.splitlines()[0] and ":2" in screen.splitlines()[0], screen  # its own title
        pane.wait_for(" bytes (")
        pane.keys("x")
        screen = pane.wait_for("field hash (xxh3-128)")
        deadline = time.monotonic() + 10
        while " bytes (" in pane.text() and time.monotonic() < deadline:
            time.sleep(0.2)
        screen = pane.text()
        assert " bytes (" not in screen and "field hash (xxh3-128)" in screen and "row hash" in screen, screen
        pane.keys("Down")  # the tokens field
        pane.wait_for("token #0")
        view = open_address(open_catalog(), "demo-text:2").view("tokens")
        partial = next(p for p in view.pieces(0, len(view.ids)) if p.partial)  # the first bytes of 📝
        pane.keys("Tab", *["Right"] * partial.position)
        screen = pane.wait_for(f"token #{partial.position} ")
        assert "piece ' \\xf0\\x9f\\x93' partial" in screen and "\\\\x" not in screen, screen  # escaped once
        pane.keys("g")
        pane.wait_for("Go to address")  # the prompt itself, not the footer
        pane.keys("C-u", "demo-rl@v1:0", "Enter")
        pane.wait_for("step 0", "reward")
        pane.keys("q")
    finally:
        pane.close()


LONG_MESSAGE = ("relabelled 312 tickets after the taxonomy review (billing split into refunds and invoices), and "
                "removed the 14 tickets that were test traffic from the staging environment")
WIDE = [("plain ascii text that is rather long indeed", "L-plain"),
        ("안녕하세요 세계 한국어 텍스트입니다 아주 길어요 정말로 길어요", "L-한국어"),
        ("emoji 😀🎉 ok and more emoji 🎉🎉🎉🎉🎉🎉🎉", "L-😀🎉"),
        ("مرحبا بالعالم هذا نص عربي طويل جدا جدا", "L-عربي"),
        ("日本語のテキストはとても長いです。日本語のテキスト", "L-日本語のラベルがとても長いです。とても長い")]


def test_long_messages_and_wide_scripts_in_a_real_terminal(tmp_path):
    """Issue #20 in a real 120-column pane: a version's long message is readable in full under the
    versions table; rows of Korean, Arabic, Japanese and emoji keep the sample table's columns in
    line (each row's label column starts at the same terminal cell)."""
    import pyarrow as pa
    from rich.cells import cell_len

    from dsinspect.loaders import Catalog, Field

    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.write_version("tickets", [{"id": 0}], [Field("id", pa.int64(), "scalar")],
                          tags=["v1"], message=LONG_MESSAGE)
    fields = [Field("id", pa.int64(), "scalar"), Field("text", pa.string(), "text"),
              Field("label", pa.string(), "scalar")]
    catalog.write_version("wide", [{"id": i, "text": t, "label": label} for i, (t, label) in enumerate(WIDE)], fields,
                          tags=["v1"])
    pane = Pane(_command(f"--catalog {catalog.url} tui"), width=120, height=40)
    try:
        pane.wait_for("tickets", "wide", "Open dataset")
        screen = pane.wait_for("relabelled 312")
        right = " ".join(" ".join(line[34:].split()) for line in screen.splitlines())
        assert LONG_MESSAGE in right, screen  # in full, under the table
        pane.keys("Down", "Enter")  # wide
        screen = pane.wait_for("L-plain", "L-한국어")
        starts = set()
        for line in screen.splitlines():
            at = line.find("L-")
            if at >= 0:
                starts.add(cell_len(line[:at]))
        assert len(starts) == 1, screen  # every row's label in the same column
        assert sum("L-" in line for line in screen.splitlines()) == len(WIDE)
        pane.keys("q")
    finally:
        pane.close()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_a_run_opens_by_its_name_in_the_catalogs_runs(tmp_path, size):
    """Issue #31: the README's training run lands in <catalog>/runs/NAME; `dsinspect runs` and `replay`
    find it by name, and so does `dsinspect tui NAME` (it was a malformed or missing dataset)."""
    from run_fixtures import toy_catalog, write_run

    cat = toy_catalog(str(tmp_path / "cat"))
    write_run(cat, str(tmp_path / "cat" / "runs" / "resumed"))
    pane = Pane(_command(f"--catalog {cat.url} tui resumed"), *size)
    try:
        screen = pane.wait_for("resumed", "gaps:", "Check the run")
        assert "█" in screen and "no dataset" not in screen
        pane.keys("R")  # this run's replay, not an empty form
        pane.wait_for("step 0 · epoch")
        pane.keys("q")
    finally:
        pane.close()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_a_damaged_tags_json_is_said_on_the_screen(tmp_path, size):
    """Issue #31: a tag of a dataset whose tags.json is damaged, opened in the UI (go-to), sat on
    "reading the manifest…" with no word; now the failure is on the screen."""
    from dsinspect.defaults import BUNDLED

    root = tmp_path / "catalog"
    shutil.copytree(BUNDLED, root)
    (root / "datasets" / "demo-text" / "tags.json").write_text('{"latest": "6f47')
    pane = Pane(_command(f"--catalog {root} tui"), *size)
    try:
        pane.wait_for("demo-text", "1 broken")
        pane.keys("g")
        pane.wait_for("Go to address")  # the prompt, not the footer's "g Go to": typing before it loses keys
        pane.keys("C-u", "demo-text@latest", "Enter")
        screen = pane.wait_for("could not open demo-text@latest", "not valid")
        deadline = time.monotonic() + 90  # under the header, where "loading…" was (not only in a passing toast)
        while not screen.splitlines()[1].strip().startswith("could not open demo-text@latest"):
            assert time.monotonic() < deadline, screen
            time.sleep(0.2)
            screen = pane.text()
        assert "reading the manifest" not in screen
        pane.keys("q")
    finally:
        pane.close()


def test_an_80_by_24_terminal_keeps_the_keys_and_the_hex_columns():
    """Issue #31 at 80×24 in a real pane: the footer lost c, D, R, q; hex lines wrapped; an image
    showed 8 of its 24 rows."""
    import re

    pane = Pane(_command("tui demo-images@v1:3"), width=80, height=24)
    try:
        screen = pane.wait_for("JPEG 48x48", "ff d8 ff e0", "c Catalog", "R Replay", "q Quit")
        picture = [line.count("▀") for line in screen.splitlines() if "▀" in line]
        assert len(picture) >= 8 and set(picture) == {2 * len(picture)}, screen  # square, whole: 2 cells a row
        footer = screen.splitlines()[-1]
        assert all(k in footer for k in ("esc Back", "n Next", "p Prev", "x Hex", "c Catalog", "D Diff", "q Quit"))
        hex_lines = [line for line in screen.splitlines() if re.search(r"\b[0-9a-f]{8}  [0-9a-f]{2} ", line)]
        assert hex_lines and all(re.search(r"│[^│]{8}│", line) for line in hex_lines), screen  # 8 bytes, whole
        pane.keys("?")
        screen = pane.wait_for("NAME[@REF][:INDEX]")
        title = next(line for line in screen.splitlines() if "terminal UI" in line)
        assert title.startswith("█") and title.rstrip().endswith("█"), screen  # both borders: the box fits
        pane.keys("Escape", "q")
    finally:
        pane.close()
