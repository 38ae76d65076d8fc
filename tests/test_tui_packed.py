"""The replay screen of a run that packs documents into sequences (docs/PRETRAINING.md): each sequence a
row with its documents, the token range taken from each and where it sits, its decoded text and digest,
each rank's fingerprint; best_fit padding marked; Enter opens a sequence's segments and Enter on one its
document in the sample view; `]`/`[` step. A real catalog with a stored tokenizer, driven by Pilot."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest
from replay_diff_fixtures import rewrite_shard
from textual.widgets import DataTable
from tui_helpers import SIZE, screen_text, until

from dsinspect.demo.tokenizer import documents, load_tokenizer, tokenizer_bytes
from dsinspect.loaders import Catalog, Field, WriteOptions
from dsinspect.loaders.audit.packed_replay import replay_packed
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.packed_replay import PackedSequenceScreen
from dsinspect.tui.screens.replay import ReplayScreen
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets.packed_batch import MASKED, PackedBatchTable

EOS = 0  # the demo tokenizer's <|endoftext|>
MARKUP = "[bold]x[/] is data, [red]not markup[/red]"
CONCAT = SequenceSpec(length=64, labels=True, eos=EOS)
BEST_FIT = SequenceSpec(length=64, labels=True, eos=EOS, packing="best_fit", pad=7)


def write_corpus(root) -> tuple[Catalog, list[str]]:
    """40 documents of 3-40 words of the demo corpus (document 5 reads like Rich markup), tokenized with
    the demo tokenizer stored beside the tokens field, in 4 shards of 10."""
    rng = np.random.default_rng(3)
    texts = [" ".join(d.split()[:int(rng.integers(3, 40))]) for d in documents()[:40]]
    texts[5] = MARKUP
    tok = load_tokenizer()
    catalog = Catalog(str(root / "cat"))
    blob = catalog.put_blob("corpus", tokenizer_bytes(), ".json")
    fields = [Field("id", pa.int64(), "scalar", False), Field("text", pa.string(), "text"),
              Field("tokens", pa.list_(pa.int32()), "tokens", options={"tokenizer": {"kind": "huggingface",
                                                                                    "blob": blob}})]
    rows = [{"id": i, "text": t, "tokens": tok.encode(t).ids} for i, t in enumerate(texts)]
    catalog.write_version("corpus", rows, fields, options=WriteOptions(shard_rows=10, row_group_rows=5))
    return catalog, texts


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("tui-packed"))


def spec_file(catalog: Catalog, root, sequences: SequenceSpec, name: str) -> tuple[RunSpec, str]:
    spec = RunSpec.create(catalog, "corpus", seed=5, batch_size=3, world_size=2, shuffle="global",
                          sequences=sequences)
    path = root / f"{name}.json"
    path.write_text(spec.dumps())
    return spec, str(path)


def replay_screen(app) -> ReplayScreen:
    assert isinstance(app.screen, ReplayScreen)
    return app.screen


async def replayed(pilot, app, step: int) -> ReplayScreen:
    """The replay screen once the packed batch of `step` is on it."""
    await until(pilot, lambda: replay_screen(app).packed is not None and replay_screen(app).result.step == step,
                what=f"the packed batch of step {step}")
    return replay_screen(app)


def shown_segments(screen: ReplayScreen) -> dict[tuple[int, int], list[tuple[str, int, int, int]]]:
    return {(v.rank, v.slot): [(g.address, g.start, g.stop, g.offset) for g in v.segments] for v in screen.packed}


def expected_segments(spec, step: int, catalog) -> dict[tuple[int, int], list[tuple[str, int, int, int]]]:
    return {(b.rank, i): [(g.address, g.start, g.stop, g.offset) for g in b.segments(i)]
            for b in replay_packed(spec, step, "all", catalog).batches for i in range(len(b))}


def cells(screen: ReplayScreen) -> list[list[str]]:
    """The packed table's rows as the screen holds them (plain text of each cell)."""
    table = screen.query_one("#replay-packed", PackedBatchTable)
    return [[getattr(c, "plain", c) for c in table.get_row_at(r)] for r in range(table.row_count)]


def column(table: PackedBatchTable, row: int, name: str):
    """The cell of a row in the named column (the rank column shows only when several ranks are)."""
    return table.get_row_at(row)[table.get_column_index(name)]


def short(address: str) -> str:
    name, rest = address.split("@")
    version, index = rest.split(":")
    return f"{name}@{version[:12]}:{index}"


@pytest.mark.asyncio
async def test_a_concat_batch_shows_each_sequences_documents_ranges_text_and_fingerprints(corpus, tmp_path):
    catalog, texts = corpus
    spec, path = spec_file(catalog, tmp_path, CONCAT, "concat")
    app = DsinspectApp(source=DataSource(catalog=Catalog(catalog.url)))
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(path, 2, "all")
        screen = await replayed(pilot, app, 2)
        assert shown_segments(screen) == expected_segments(spec, 2, catalog)
        assert not screen.query_one("#replay-packed").has_class("hidden")
        assert screen.query_one("#replay-batch").has_class("hidden")  # the row table is not the one shown
        text = screen_text(app)
        replay = replay_packed(spec, 2, "all", catalog)
        for rank, fp in replay.fingerprints.items():
            assert f"rank {rank}: {fp}" in text
        assert f"sequences of 64 tokens (+1 shared with the next, for labels) · concat · spec {spec.hash[:12]}" in text
        rows = cells(screen)
        assert len(rows) == 6 and [r[:2] for r in rows] == [[str(r), str(i)] for r in (0, 1) for i in range(3)]
        for row, batch_rank in zip(rows, [(b, i) for b in replay.batches for i in range(len(b))]):
            b, i = batch_rank
            s = b.sequences[i]
            assert row[2] == f"e{s.source_epoch}:{s.sequence:,}"
            assert row[3] == "\n".join(f"{short(g.address)} [{g.start}, {g.stop}) → {g.offset}" for g in b.segments(i))
            assert row[5] == bytes(b.digests[i]).hex()[:16]
        # the decoded text: a document's first words, in the row of the sequence that starts it
        (rank, slot), seg = next(((k, g) for k, gs in shown_segments(screen).items() for g in gs if g[1] == 0
                                  and len(texts[int(g[0].rsplit(":", 1)[1])]) > 12))
        row = rows[rank * 3 + slot]
        assert texts[int(seg[0].rsplit(":", 1)[1])][:12].replace("\n", "↵") in row[4]
        assert " │ " in "".join(r[4] for r in rows)  # document boundaries marked
        # step navigation: `]` and `[` replay the next and previous step
        screen.query_one("#replay-packed").focus()
        await pilot.press("right_square_bracket")
        screen = await replayed(pilot, app, 3)
        assert shown_segments(screen) == expected_segments(spec, 3, catalog)
        await pilot.press("left_square_bracket")
        screen = await replayed(pilot, app, 2)
        assert shown_segments(screen) == expected_segments(spec, 2, catalog)


@pytest.mark.asyncio
async def test_a_best_fit_sequence_shows_its_padding_masked(corpus, tmp_path):
    catalog, _ = corpus
    spec, path = spec_file(catalog, tmp_path, BEST_FIT, "best_fit")
    step, (rank, slot, pad) = next(
        (t, (b.rank, i, 65 - int(b.held[i]))) for t in range(spec.epoch_length // 6)
        for b in replay_packed(spec, t, "all", catalog).batches for i in range(len(b)) if b.held[i] < 65)
    app = DsinspectApp(source=DataSource(catalog=Catalog(catalog.url)))
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(path, step, "all")
        screen = await replayed(pilot, app, step)
        assert shown_segments(screen) == expected_segments(spec, step, catalog)
        assert "best_fit" in screen_text(app)
        table = screen.query_one("#replay-packed", PackedBatchTable)
        cell = column(table, rank * 3 + slot, "text")
        assert cell.plain.endswith(f" ‹pad ×{pad}›")
        marked = [cell.plain[s.start:s.end] for s in cell.spans if s.style == MASKED]
        assert f" ‹pad ×{pad}›" in marked  # dim, as the loss mask leaves it out
        full = [v for v in screen.packed if v.pad == 0]
        assert all("‹pad" not in column(table, i, "text").plain for i, v in enumerate(screen.packed) if v in full)
        table.move_cursor(row=rank * 3 + slot)
        table.focus()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, PackedSequenceScreen), what="the sequence's segments")
        assert f"+ {pad} padding (masked from the loss)" in screen_text(app)


@pytest.mark.asyncio
async def test_a_segment_opens_its_document_and_markup_in_a_document_is_shown_as_text(corpus, tmp_path):
    catalog, texts = corpus
    spec, path = spec_file(catalog, tmp_path, CONCAT, "concat")
    version = catalog.resolve("corpus")
    markup = f"corpus@{version.id}:5"
    step, (rank, slot, n) = next(  # the sequence where document 5 starts
        (t, (b.rank, i, k)) for t in range(spec.epoch_length // 6)
        for b in replay_packed(spec, t, "all", catalog).batches for i in range(len(b))
        for k, g in enumerate(b.segments(i)) if g.address == markup and g.start == 0)
    app = DsinspectApp(source=DataSource(catalog=Catalog(catalog.url)))
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(path, step, str(rank))
        screen = await replayed(pilot, app, step)
        table = screen.query_one("#replay-packed", PackedBatchTable)
        assert "[bold]x[/] is data" in column(table, slot, "text").plain
        table.move_cursor(row=slot)
        table.focus()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, PackedSequenceScreen), what="the sequence's segments")
        segments = app.screen.query_one("#packed-segments", DataTable)
        assert segments.row_count == len(replay_packed(spec, step, rank, catalog).batches[0].segments(slot))
        text = screen_text(app)
        assert "[bold]x[/] is data, [red]not markup[/red]" in text  # literally: never read as markup
        assert f"{short(markup)}" in text
        segments.move_cursor(row=n)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample is not None,
                    what="the document's sample")
        assert (app.screen.sample.index, app.screen.addr.ref) == (5, version.id)
        await until(pilot, lambda: MARKUP in screen_text(app), what="the document's text on the sample screen")


@pytest.mark.asyncio
async def test_a_document_whose_bytes_no_longer_hash_as_stored_is_red(tmp_path):
    catalog, texts = write_corpus(tmp_path)  # edited below: a catalog of its own
    spec, path = spec_file(catalog, tmp_path, CONCAT, "concat")
    batch = replay_packed(spec, 1, 0, catalog).batches[0]
    address = batch.segments(0)[0].address
    target = int(address.rsplit(":", 1)[1])
    version = catalog.resolve("corpus")
    tokens = version.row(target)["tokens"]
    rewrite_shard(version, target, "tokens", [t ^ 1 for t in tokens], rehash=False)
    app = DsinspectApp(source=DataSource(catalog=Catalog(catalog.url)))
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(path, 1, "0")
        screen = await replayed(pilot, app, 1)
        assert "no longer match their stored row hash: " + short(address) in screen_text(app)
        documents = column(screen.query_one("#replay-packed", PackedBatchTable), 0, "documents [tokens) → at")
        line = documents.plain.split("\n")[0]
        assert line == f"{short(address)} [{batch.segments(0)[0].start}, {batch.segments(0)[0].stop}) → 0 ✗ damaged"
        assert all("red" in str(s.style) for s in documents.spans if s.start < len(line))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_packed_replay_in_a_real_terminal(corpus, tmp_path):
    """`dsinspect tui` in a tmux pane: the replay form given a packed run's spec shows its sequences;
    Enter opens the first one's segments, Enter again its first document as a sample."""
    from test_tui_tmux import Pane, _command

    catalog, _ = corpus
    spec, path = spec_file(catalog, tmp_path, CONCAT, "concat")
    first = replay_packed(spec, 2, 0, catalog).batches[0].segments(0)[0]
    pane = Pane(_command(f"tui --catalog {catalog.url}"))
    try:
        pane.wait_for("datasets", "corpus")
        pane.keys("R")
        pane.wait_for("escape leaves a field")
        pane.keys(path, "Tab", "BSpace", "2", "Enter")
        pane.wait_for("sequences of 64 tokens", "fingerprints  rank 0", f"{short(first.address)} [{first.start}, "
                      f"{first.stop}) → 0")
        pane.keys("Enter")
        pane.wait_for("packed sequence", "tokens [start, stop)", "slot 0")
        pane.keys("Enter")
        pane.wait_for(f"row {int(first.address.rsplit(':', 1)[1])} of 40", "row hash")
        pane.keys("q")
    finally:
        pane.close()


@pytest.mark.asyncio
async def test_a_packed_run_record_replays_and_its_log_check_matches(corpus, tmp_path):
    """The spec given as the run record a PackedLoader wrote, and the same record as the log."""
    from dsinspect.loaders.read.cache import ShardCache
    from dsinspect.loaders.read.packed_loader import PackedLoader

    catalog, _ = corpus
    spec, _ = spec_file(catalog, tmp_path, BEST_FIT, "best_fit")
    record = str(tmp_path / "run")
    for rank in (0, 1):
        with PackedLoader(spec, rank, catalog, cache=ShardCache(tmp_path / "cache"), record_dir=record) as loader:
            for _ in zip(range(3), loader):
                pass
    app = DsinspectApp(source=DataSource(catalog=Catalog(catalog.url)))
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(record, 1, "all", log=record)
        screen = await replayed(pilot, app, 1)
        assert shown_segments(screen) == expected_segments(spec, 1, catalog)
        await until(pilot, lambda: "matches the log" in screen_text(app), what="the log check")
        assert "step 1: ✓ matches the log (2 line(s)" in screen_text(app)


@pytest.mark.asyncio
async def test_a_sequence_that_diverges_from_the_log_is_flagged(tmp_path):
    """A document edited after the run with its row hash recomputed (it verifies, but is not what the job
    read): the log check diverges at the sequence that took tokens from it, and that row says so."""
    from dsinspect.loaders.read.cache import ShardCache
    from dsinspect.loaders.read.packed_loader import PackedLoader

    catalog, _ = write_corpus(tmp_path)
    spec, path = spec_file(catalog, tmp_path, CONCAT, "concat")
    record = str(tmp_path / "run")
    with PackedLoader(spec, 0, catalog, cache=ShardCache(tmp_path / "cache"), record_dir=record,
                      record_samples=True) as loader:
        batch = next(iter(loader))
    target = int(batch.segments(1)[-1].address.rsplit(":", 1)[1])
    slots = {i for i in range(len(batch)) if any(g.address.endswith(f":{target}") for g in batch.segments(i))}
    version = catalog.resolve("corpus")
    rewrite_shard(version, target, "tokens", [t ^ 1 for t in version.row(target)["tokens"]], rehash=True)
    app = DsinspectApp(source=DataSource(catalog=Catalog(catalog.url)))
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(path, 0, "0", log=record)
        screen = await replayed(pilot, app, 0)
        await until(pilot, lambda: "DIVERGES from the log" in screen_text(app), what="the log check")
        table = screen.query_one("#replay-packed", PackedBatchTable)
        flagged = {v.slot for i, v in enumerate(screen.packed) if "DIVERGES" in str(column(table, i, "digest"))}
        assert flagged == slots
