"""The Replay page on a packed-sequence run (web/models/packed_replay.py): the page model's sequences
and document spans are `replay_packed`'s, best_fit padding is marked, a document's text (script,
Markdown) is escaped, the page's bounds hold; then the page itself in a real Chromium: the sequences
shown, a document's link opens its sample, the script text shown as text and never run."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pytest
from replay_diff_fixtures import rewrite_shard
from test_web_browser import ARTIFACTS, CHROMIUM, browser, page, wait_ready  # noqa: F401  (fixtures)
from web_fixtures import codes, run

from dsinspect.errors import UserError
from dsinspect.inspect.vocab import tiktoken_vocab
from dsinspect.loaders import Catalog, Field, WriteOptions
from dsinspect.loaders.audit.packed_replay import replay_packed
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.web.models import replay
from dsinspect.web.models.packed_replay import MAX_PACKED_TOKENS, PACKED_CLASS, packed_html

EOS = 100_257  # cl100k_base's <|endoftext|>
SCRIPT = "<script>alert(1)</script>"
MARKDOWN = "**bold** ![img](http://198.51.100.9/x.png) [js](javascript:alert(1)) $x^2$ :red[hot]"
TOKENIZER = {"tokenizer": {"kind": "tiktoken", "name": "cl100k_base"}}
FIELDS = [Field("id", pa.int64(), "scalar", False), Field("tokens", pa.list_(pa.int32()), "tokens", options=TOKENIZER)]


def texts() -> list[str]:
    """40 documents of 3 to ~120 tokens: the script first, the Markdown second, prose after."""
    words = "the quick brown fox jumps over a lazy dog while rain falls on quiet hills".split()
    prose = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + (i * 37) % 90)) for i in range(38)]
    return [SCRIPT, MARKDOWN, *[f"doc {i + 2}: {p}" for i, p in enumerate(prose)]]


def write_catalog(root: Path) -> Catalog:
    vocab = tiktoken_vocab("cl100k_base")
    catalog = Catalog(str(root))
    catalog.write_version("corpus", [{"id": i, "tokens": vocab.encode(t)} for i, t in enumerate(texts())], FIELDS,
                          options=WriteOptions(shard_rows=10, row_group_rows=5), tags=["v1"])
    return catalog


def concat(catalog: Catalog, **options) -> RunSpec:
    seq = SequenceSpec(length=64, labels=True, eos=EOS)
    return RunSpec.create(catalog, "corpus@v1", **{**dict(seed=3, batch_size=3, world_size=2, shuffle="none",
                                                         sequences=seq), **options})


def best_fit(catalog: Catalog) -> RunSpec:
    seq = SequenceSpec(length=64, labels=True, eos=EOS, packing="best_fit", pad=7)
    return RunSpec.create(catalog, "corpus@v1", seed=3, batch_size=3, world_size=2, shuffle="global", sequences=seq)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_catalog(tmp_path_factory.mktemp("packedweb") / "cat")


def short(address: str) -> str:
    """The address a sample link names: the version id cut to 12 characters, as the row replay's links."""
    return re.sub(r"@(\w{12})\w*:", r"@\1:", address)


def where(catalog: Catalog, spec: RunSpec, index: int) -> tuple[int, int, int]:
    """The first (step, rank, slot) whose sequence takes tokens from document `index`."""
    address = f"corpus@{catalog.resolve('corpus@v1').id}:{index}"
    for step in range(-(-spec.epoch_length // spec.global_batch)):
        for b in replay_packed(spec, step, "all", catalog).batches:
            for i in range(len(b)):
                if any(g.address == address for g in b.segments(i)):
                    return step, b.rank, i
    raise AssertionError(f"no sequence takes document {index}")


# -- the model --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["concat", "best_fit"])
def test_the_page_model_shows_replay_packeds_sequences(corpus, kind):
    spec = concat(corpus) if kind == "concat" else best_fit(corpus)
    padded = 0
    for step in range(3):
        m = replay.replay_model(corpus, replay.encode_spec(spec), step, "all")
        want = replay_packed(spec, step, "all", corpus)
        assert m["packed"] and m["step"] == step and m["epoch"] == want.epoch and m["ranks"] == [0, 1]
        assert m["fingerprints"] == {str(r): fp for r, fp in want.fingerprints.items()} and m["damaged"] == []
        for shown, b in zip(m["batches"], want.batches):
            assert shown["rank"] == b.rank and shown["fingerprint"] == b.fingerprint
            for i, s in enumerate(shown["sequences"]):
                source = b.sequences[i]
                assert s["sequence"] == f"e{source.source_epoch}:{source.sequence}"
                assert s["padding"] == source.padding and s["digest"] == bytes(b.digests[i]).hex()
                got = [{k: g[k] for k in ("address", "start", "stop", "offset")} for g in s["segments"]]
                assert got == [vars(g) for g in b.segments(i)]
                assert s["held"] == int(b.held[i]) and s["pad_tokens"] == 65 - int(b.held[i])
                assert s["masked_tokens"] == 65 - int(b.loss_mask[i].sum())
                padded += s["pad_tokens"] > 0
                page = packed_html(shown, 7)
                if s["pad_tokens"]:
                    assert f"‹pad ×{s['pad_tokens']}›" in page
                links = [urlsplit(g["href"]) for g in s["segments"]]  # the Sample page's own ?address=
                assert {u.path for u in links} == {"sample"}
                assert [parse_qs(u.query) for u in links] == [{"address": [short(g.address)]} for g in b.segments(i)]
    assert (padded > 0) == (kind == "best_fit")  # best_fit sequences end in padding; concat never does


def test_the_text_is_decoded_per_document_and_escaped(corpus):
    spec = concat(corpus)  # stored order: documents 0 (script) and 1 (Markdown) open step 0's first sequence
    m = replay.replay_model(corpus, replay.encode_spec(spec), 0, "0")
    first = m["batches"][0]["sequences"][0]
    assert m["tokenizer"] == "cl100k_base"
    assert [g["text"] for g in first["segments"][:2]] == [SCRIPT + "<|endoftext|>", MARKDOWN + "<|endoftext|>"]
    page = packed_html(m["batches"][0], 7)
    assert "<script" not in page and "<img" not in page and 'href="javascript' not in page
    assert html.escape(SCRIPT, quote=True) in page and html.escape(MARKDOWN, quote=True) in page
    assert "\n" not in page  # one line: no blank line lets Markdown into the HTML block
    # each document's span on its own background, alternating
    assert re.findall(r'<span class="dsi-doc[^"]*" data-d="(\d)"', page)[:3] == ["0", "1", "0"]


def test_a_padding_repeat_and_a_damaged_document_are_marked(tmp_path):
    catalog = write_catalog(tmp_path / "cat")
    spec = concat(catalog, last_batch="pad", batch_size=4, world_size=3)
    last = -(-spec.epoch_length // spec.global_batch) - 1  # the epoch's last step: 32 sequences in 3 × 12
    m = replay.replay_model(catalog, replay.encode_spec(spec), last, "all")
    repeats = [s for b in m["batches"] for s in b["sequences"] if s["padding"]]
    assert repeats and all(s["masked_tokens"] == 65 and all(g["masked"] for g in s["segments"]) for s in repeats)
    assert " <b>pad</b>" in packed_html(next(b for b in m["batches"] if any(s["padding"] for s in b["sequences"])), 7)
    version = catalog.resolve("corpus@v1")
    vocab = tiktoken_vocab("cl100k_base")
    edited = vocab.encode(SCRIPT)
    edited[-1] += 1
    rewrite_shard(version, 0, "tokens", edited, rehash=False)  # same length, other tokens, the old row hash
    m = replay.replay_model(Catalog(catalog.url), replay.encode_spec(spec), 0, "0")
    address = f"corpus@{version.id}:0"
    assert m["damaged"] == [{"rank": 0, "slot": 0, "document": address}] and m["unverified"] == 1
    flagged = [g for g in m["batches"][0]["sequences"][0]["segments"] if g["damaged"]]
    assert [g["address"] for g in flagged] == [address]
    assert "dsi-damaged" in packed_html(m["batches"][0], 7) and "⚠ damaged" in packed_html(m["batches"][0], 7)


def test_a_packed_batch_is_held_to_the_pages_bounds(corpus, monkeypatch):
    import dsinspect.web.models.packed_replay as model

    spec = replay.encode_spec(concat(corpus))  # 3 sequences of 65 tokens per rank
    monkeypatch.setattr(model, "MAX_PACKED_TOKENS", 300)
    assert len(replay.replay_model(corpus, spec, 0, "0")["batches"][0]["sequences"]) == 3
    with pytest.raises(UserError, match="this batch holds 390 tokens .6 sequences of 65.; a page shows at most 300"):
        replay.replay_model(corpus, spec, 0, "all")
    monkeypatch.setattr(model, "MAX_PACKED_TOKENS", MAX_PACKED_TOKENS)
    with pytest.raises(UserError, match="outside the world size 2"):
        replay.replay_model(corpus, replay.encode_spec(concat(corpus)), 0, "7")
    many = concat(corpus, batch_size=replay.MAX_REPLAY_SAMPLES, world_size=2, last_batch="pad")
    with pytest.raises(UserError, match=f"a page replays at most {replay.MAX_REPLAY_SAMPLES:,}"):
        replay.replay_model(corpus, replay.encode_spec(many), 0, "all")
    calls = []  # the documents read are bounded as a row batch's are
    real = model.replay_packed
    monkeypatch.setattr(model, "replay_packed", lambda *a, **k: calls.append(k) or real(*a, **k))
    replay.replay_model(corpus, spec, 1, "0")
    assert calls == [{"max_bytes": replay.MAX_REPLAY_BYTES}]


def test_the_page_shows_a_packed_link_and_refuses_a_bad_rank(corpus, monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", corpus.url)
    monkeypatch.delenv("DSINSPECT_RUNS", raising=False)
    spec = best_fit(corpus)
    at = run(spec=replay.encode_spec(spec), step="1", rank="all")
    tables = [m.value for m in at.markdown if f'class="{PACKED_CLASS}"' in m.value]
    assert len(tables) == 2 and not at.error  # a table of sequences per rank
    assert "rank 0: fingerprint " in codes(at) and not at.dataframe
    at = run(spec=replay.encode_spec(spec), step="1", rank="9")
    assert [e.value for e in at.error] == ["That batch cannot be replayed."]
    assert "rank 9 is outside the world size 2" in codes(at)


# -- the page in a real Chromium --------------------------------------------------------------------

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                    reason="needs Debian's chromium (apt-get install -y chromium); in CI, there")


@pytest.fixture(scope="module")
def server(tmp_path_factory, corpus):
    """`dsinspect web` on the packed corpus (as conftest's web_catalog_server does for the web catalog)."""
    from web_server import artifact_log, running_web

    with running_web(corpus.url, artifact_log("web-server-packed")) as base:
        yield base


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("kind", ["concat", "best_fit"])
def test_the_replay_page_shows_the_packed_batch_in_chromium(server, corpus, page, kind):
    spec = concat(corpus) if kind == "concat" else best_fit(corpus)
    step, rank, slot = where(corpus, spec, 0)  # the sequence holding the script document
    dialogs = []  # alert(1), had it run
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{server}/?spec={replay.encode_spec(spec)}&step={step}&rank={rank}")
    table = page.locator(f"table.{PACKED_CLASS}")
    table.wait_for()
    wait_ready(page)
    want = replay_packed(spec, step, rank, corpus).batches[0]
    rows = table.locator("tr[data-slot]")
    assert rows.count() == len(want)
    body = page.inner_text("body")
    assert f"rank {rank}: fingerprint {want.fingerprint}" in body
    for i in range(len(want)):
        s = want.sequences[i]
        cells = rows.nth(i).locator("td")
        assert cells.nth(1).inner_text().startswith(f"e{s.source_epoch}:{s.sequence}")
        assert cells.nth(4).inner_text() == bytes(want.digests[i]).hex()
        assert [a.inner_text() for a in cells.nth(2).locator("a").all()] == [
            short(g.address) for g in want.segments(i)]
    if kind == "best_fit":
        assert "‹pad ×" in body
    script = rows.nth(slot).locator("td.dsi-text span.dsi-doc").filter(has_text=SCRIPT)
    assert script.count() == 1 and script.first.is_visible()  # the script's text, shown as text
    page.wait_for_timeout(300)  # give a script that got in the chance to run
    assert dialogs == [] and page.locator("script", has_text="alert").count() == 0
    page.screenshot(path=str(ARTIFACTS / f"web-replay-packed-{kind}.png"), full_page=True)

    link = rows.nth(slot).locator("td.dsi-docs a").filter(has_text=re.compile(r":0$"))
    href = link.get_attribute("href")
    address = parse_qs(urlsplit(href).query)["address"][0]
    assert address == f"corpus@{corpus.resolve('corpus@v1').id[:12]}:0"
    link.click()
    page.wait_for_url(re.compile(r"/sample\?address="))
    page.get_by_text("sample 0 of 40", exact=False).wait_for()
    page.get_by_text(SCRIPT, exact=False).filter(visible=True).first.wait_for()  # the document's sample, as text
    wait_ready(page)
    assert dialogs == []
