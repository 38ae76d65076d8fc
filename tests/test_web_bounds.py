"""Everything a link can ask the web app for is bounded: a 10 MB value is shown a page at a time
(AppTest, and in Chromium), and a `?spec=` naming a batch of 10^7 samples is refused before a row
is read (Chromium, with the server's memory watched the whole time). Bounds are generous and
load-proof: memory in hundreds of MB, time only as long timeouts on polling."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_web_browser import CHROMIUM, browser  # noqa: F401  (a fixture)
from web_fixtures import codes, plain, run

from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.web.models.replay import MAX_MIXTURE_BLOCK, MAX_REPLAY_BYTES, MAX_REPLAY_SAMPLES, check_size, encode_spec
from dsinspect.web.models.sample import STEP_CAP, TOKEN_CAP
from dsinspect.web.ui.fields import CHART_POINTS, VALUE_PAGE

BIG = 10_000_000
LONG = 100_000  # steps of one episode
HEAD, TAIL = "HEAD-OF-VALUE ", " TAIL-OF-VALUE"
SERVER_RSS = 700 << 20  # the Streamlit server, whole: a few hundred MB, whatever the link asks for


def write_big_catalog(root: str) -> Catalog:
    """`big`: one row whose text and string scalar are 10,000,000 characters; `small`: 2 rows;
    `long`: one episode of LONG steps; `toks`: LONG token ids."""
    cat = Catalog(root)
    value = HEAD + ("0123456789" * (BIG // 10))[:BIG - len(HEAD) - len(TAIL)] + TAIL
    assert len(value) == BIG
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text"),
              Field("name", pa.string(), "scalar")]
    cat.write_version("big", [{"id": 0, "text": value, "name": value}], fields, tags=["v1"],
                      created_at="2026-01-01T00:00:00Z")
    cat.write_version("small", [{"id": i, "text": f"row {i}", "name": "n"} for i in range(2)], fields, tags=["v1"],
                      created_at="2026-01-01T00:00:00Z")
    trajectory = pa.struct([("action", pa.list_(pa.int32())), ("reward", pa.list_(pa.float32()))])
    cat.write_version("long", [{"id": 0, "trajectory": {"action": [t % 4 for t in range(LONG)],
                                                        "reward": [1.0] * LONG}}],
                      [Field("id", pa.int64(), "scalar", nullable=False),
                       Field("trajectory", trajectory, "trajectory")],
                      tags=["v1"], created_at="2026-01-01T00:00:00Z")
    cat.write_version("toks", [{"id": 0, "tokens": list(range(LONG))}],
                      [Field("id", pa.int64(), "scalar", nullable=False),
                       Field("tokens", pa.list_(pa.int32()), "tokens")],
                      tags=["v1"], created_at="2026-01-01T00:00:00Z")
    return cat


@pytest.fixture(scope="module")
def big_catalog(tmp_path_factory):
    root = tmp_path_factory.mktemp("bigcat")
    write_big_catalog(str(root / "cat"))
    return str(root / "cat")


def page_chars(at) -> int:
    """Characters of text the page sent: every Markdown, text and caption element."""
    return sum(len(e.value) for kind in (at.markdown, at.text, at.caption) for e in kind)


def test_a_10mb_value_is_shown_a_page_at_a_time(big_catalog, monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", big_catalog)
    at = run(address="big@v1:0", view="Decoded")  # the value pages (the default also shows the hex beside)
    assert page_chars(at) < 4 * VALUE_PAGE + 20_000, page_chars(at)  # two fields, one page each
    captions = [plain(c.value) for c in at.caption]
    pages = -(-BIG // VALUE_PAGE)
    assert f"showing characters 1–{VALUE_PAGE:,} of {BIG:,} (a {BIG:,}-byte value): page through it here, " \
           "or download it whole in the Raw view" in captions
    # the text and the string scalar (paged as a monospace block, not one st.text), each its first page
    assert sum(HEAD in m.value for m in at.markdown) == 2 and not any(TAIL in m.value for m in at.markdown)
    assert not any(HEAD in t.value for t in at.text)
    at.number_input(key="value_page_text").set_value(pages).run()
    assert not at.exception
    assert sum(TAIL in m.value for m in at.markdown) == 1 and page_chars(at) < 4 * VALUE_PAGE + 20_000
    assert f"showing characters {(pages - 1) * VALUE_PAGE + 1:,}–{BIG:,} of {BIG:,}" in " ".join(
        plain(c.value) for c in at.caption)


def test_a_long_episode_lists_and_charts_a_bounded_number_of_steps(big_catalog, monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", big_catalog)
    at = run(address="long@v1:0")
    steps = at.dataframe[0].value
    assert len(steps) == STEP_CAP and list(steps["step"][:3]) == [0, 1, 2]
    captions = " ".join(c.value for c in at.caption)
    assert f"the first {STEP_CAP:,} of {LONG:,} steps are listed" in captions
    every = -(-LONG // CHART_POINTS)
    assert f"charts: every {every:,}th step" in captions
    chart = (at.get("arrow_vega_lite_chart") + at.get("vega_lite_chart"))[0].proto
    assert len(chart.SerializeToString()) < 100 * CHART_POINTS  # the chart's data: CHART_POINTS points, not LONG


def test_a_long_token_list_says_how_much_of_it_is_shown(big_catalog, monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", big_catalog)
    at = run(address="toks@v1:0")
    assert f"{LONG:,} tokens · the first {TOKEN_CAP:,} shown" in plain(" ".join(c.value for c in at.caption))
    assert page_chars(at) < 200_000  # one page of TOKEN_PAGE spans


def test_replays_beyond_the_bound_are_refused_whole(big_catalog):
    from dsinspect.errors import UserError
    from dsinspect.loaders.order.spec import RunSpec

    def spec(batch: int, world: int) -> RunSpec:
        return RunSpec.create(Catalog(big_catalog), "small@v1", batch_size=batch, world_size=world, last_batch="pad")

    check_size([spec(MAX_REPLAY_SAMPLES, 4)], "0")  # one rank of the largest batch a page replays
    check_size([spec(MAX_REPLAY_SAMPLES // 4, 4)], "all")
    for batch, world, rank in ((MAX_REPLAY_SAMPLES + 1, 1, "0"), (MAX_REPLAY_SAMPLES, 2, "all"), (10**7, 1, "0")):
        with pytest.raises(UserError, match=f"a page replays at most {MAX_REPLAY_SAMPLES:,}"):
            check_size([spec(batch, world)], rank)
    mix = {"small@v1": 1.0, "big@v1": 1.0}
    check_size([RunSpec.create(Catalog(big_catalog), mix, mixture_block=MAX_MIXTURE_BLOCK)], "0")
    with pytest.raises(UserError, match=f"blocks of at most {MAX_MIXTURE_BLOCK:,}"):
        check_size([RunSpec.create(Catalog(big_catalog), mix, mixture_block=MAX_MIXTURE_BLOCK + 1)], "0")


def big_batch(catalog: str, copies: int) -> str:
    """`?spec=` of a batch of `copies` copies of big@v1's one row (20 MB: text and name), padded."""
    from dsinspect.loaders.order.spec import RunSpec

    return encode_spec(RunSpec.create(Catalog(catalog), "big@v1", batch_size=copies, last_batch="pad"))


def test_a_link_past_the_byte_bound_is_one_message(big_catalog, monkeypatch):
    """256 copies of a 20 MB row are within the sample cap and 4.8 GiB: refused before a row is read."""
    monkeypatch.setenv("DSINSPECT_CATALOG", big_catalog)
    at = run(spec=big_batch(big_catalog, 256), step="0", rank="0")
    assert [e.value for e in at.error] == ["That batch cannot be replayed."]
    assert codes(at) == ("step 0, rank 0: the batch of 256 samples would hold ~4.8 GiB (4.8 GiB of rows read from "
                         f"19.1 MiB of row groups), more than the bound of {MAX_REPLAY_BYTES >> 20}.0 MiB: a page "
                         "replays at most this much: pick one rank, or use `dsinspect replay --spec RUN.json --step N "
                         "--export DIR`, which writes any batch a part at a time")
    at = run(spec=big_batch(big_catalog, 4), step="0", rank="0")  # 80 MB: shown, its Parquet made on demand
    assert len(at.dataframe[0].value) == 4 and not at.error


# -- in a real browser, the server's memory watched ------------------------------------------------

def group_rss(pgid: int) -> int:
    """Resident bytes of every process in group `pgid` (the server `running_web` started)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[2]) != pgid:
                continue
            status = (entry / "status").read_text()
        except (OSError, ValueError):
            continue
        total += next((int(line.split()[1]) << 10 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total


def watch(page, pgid: int, done, timeout: float = 180) -> int:
    """Poll until `done()` (the page answered), failing as soon as the server grows past SERVER_RSS;
    the largest resident size seen."""
    peak, deadline = 0, time.monotonic() + timeout
    while True:
        peak = max(peak, group_rss(pgid))
        assert peak < SERVER_RSS, f"the server grew to {peak >> 20} MB"
        if done():
            return peak
        assert time.monotonic() < deadline, "the page did not answer"
        page.wait_for_timeout(250)


@pytest.fixture(scope="module")
def big_server(big_catalog):
    from test_web_browser import ARTIFACTS
    from web_server import running_web

    ARTIFACTS.mkdir(exist_ok=True)
    with running_web(big_catalog, str(ARTIFACTS / "web-server-bounds.log")) as base:
        yield base


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason="needs Debian's chromium")
def test_an_oversized_link_is_refused_and_a_10mb_value_paged_in_chromium(big_server, big_catalog, browser):
    from test_web_browser import ARTIFACTS
    from web_server import server_pid

    import dsinspect
    from dsinspect.web.models.replay import encode_spec

    pgid = server_pid(big_server)
    cat = dsinspect.open_catalog(big_catalog)
    huge = dsinspect.RunSpec.create(cat, "small@v1", batch_size=10**7, world_size=1, shuffle="none", last_batch="pad")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        page.goto(f"{big_server}/?spec={encode_spec(huge)}&step=0&rank=0", wait_until="commit")
        refusal = page.get_by_text(f"a page replays at most {MAX_REPLAY_SAMPLES:,}", exact=False)
        peak = watch(page, pgid, lambda: refusal.count() > 0)
        assert page.get_by_text("That batch cannot be replayed.").is_visible()
        page.screenshot(path=str(ARTIFACTS / "web-bounds-replay.png"))

        # a mixture whose schedule block is 2×10^8 positions (4 GB and 12 s to build, unchecked)
        mixture = dsinspect.RunSpec.create(cat, {"small@v1": 1.0, "big@v1": 1.0}, mixture_block=2 * 10**8)
        page.goto(f"{big_server}/?spec={encode_spec(mixture)}&step=0&rank=0", wait_until="commit")
        refusal = page.get_by_text(f"blocks of at most {MAX_MIXTURE_BLOCK:,}", exact=False)
        peak = max(peak, watch(page, pgid, lambda: refusal.count() > 0))

        page.goto(f"{big_server}/?address=big@v1:0", wait_until="commit")
        shown = page.get_by_text(f"showing characters 1–{VALUE_PAGE:,} of {BIG:,}", exact=False)
        peak = max(peak, watch(page, pgid, lambda: shown.count() == 2))  # the text and the scalar
        assert page.evaluate("document.body.innerText.length") < 10 * VALUE_PAGE
        page.screenshot(path=str(ARTIFACTS / "web-bounds-value.png"))
    finally:
        context.close()
    print(f"server peak RSS {peak >> 20} MB")
    # and nothing keeps growing once the tab is gone
    for _ in range(8):
        assert group_rss(pgid) < SERVER_RSS
        time.sleep(0.25)


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason="needs Debian's chromium")
def test_a_link_past_the_byte_bound_in_chromium_keeps_the_server_small(big_server, big_catalog, browser, tmp_path):
    """The issue's link (256 copies of a 10 MB row: the server went to 2.4-2.7 GB, then a traceback) is
    one message; a batch within the bound is shown and downloads whole, the server within SERVER_RSS."""
    from test_web_browser import ARTIFACTS
    from web_server import server_pid

    pgid = server_pid(big_server)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        page.goto(f"{big_server}/?spec={big_batch(big_catalog, 256)}&step=0&rank=0", wait_until="commit")
        refusal = page.get_by_text(f"more than the bound of {MAX_REPLAY_BYTES >> 20}.0 MiB", exact=False)
        peak = watch(page, pgid, lambda: refusal.count() > 0)
        assert page.get_by_text("That batch cannot be replayed.").is_visible()
        assert page.get_by_text("Traceback").count() == 0
        page.screenshot(path=str(ARTIFACTS / "web-bounds-replay-bytes.png"))

        page.goto(f"{big_server}/?spec={big_batch(big_catalog, 4)}&step=0&rank=0", wait_until="commit")
        button = page.get_by_role("button", name="Download the batch as Parquet")
        peak = max(peak, watch(page, pgid, lambda: button.count() > 0))
        with page.expect_download() as got:
            button.click()
        path = tmp_path / "batch.parquet"
        got.value.save_as(path)
        peak = max(peak, watch(page, pgid, lambda: path.exists()))
        assert pq.read_table(path, columns=["id"]).num_rows == 4
    finally:
        context.close()
    print(f"server peak RSS {peak >> 20} MB")
