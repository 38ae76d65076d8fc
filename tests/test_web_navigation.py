"""Issue #31's web navigation and layout, in a real headless Chromium on the sample catalog (one server
for the module): next and previous on a Sample page, Back and Forward through the browser's history,
the sidebar's Dataset link, the samples table near the top of a Dataset page, and a Sample page at
1400 px side by side whose hex dumps and step table show every column without scrolling."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from test_web_browser import ARTIFACTS, browser, page, pytestmark, wait_ready  # noqa: F401  (fixtures)


@pytest.fixture
def demo_server(demo_web_server):
    """conftest's server of the sample catalog, one per pytest process."""
    ARTIFACTS.mkdir(exist_ok=True)
    return demo_web_server


@pytest.fixture
def wide(browser):  # noqa: F811
    """A page 1400 px wide (a laptop's browser), asking no host but the app."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    hosts = []
    context.on("request", lambda r: hosts.append(urlsplit(r.url).hostname or r.url.split(":", 1)[0]))
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    context.close()
    assert set(hosts) <= {"127.0.0.1", "data", "blob"}, sorted(set(hosts))


def address_in_url(pg) -> str:
    return parse_qs(urlsplit(pg.url).query).get("address", [""])[0]


def shown_index(pg, n: int) -> None:
    """Wait until the Sample page shows sample `n`, and its URL names it."""
    pg.get_by_text(re.compile(rf"^sample {n} of ")).wait_for()
    pg.wait_for_function(f"() => decodeURIComponent(location.search).match(/address=[^&]*:{n}(&|$)/)")
    wait_ready(pg)


@pytest.mark.parametrize("address", ["demo-text@v1:17", "demo-images@v1:5", "demo-rl@v1:7"])
def test_next_and_previous_open_the_neighbours_and_back_retraces_them(demo_server, page, address):  # noqa: F811
    start = int(address.rsplit(":", 1)[1])
    page.goto(f"{demo_server}/?address={address}")  # a deep link as the README writes them

    def press(name: str) -> None:
        page.get_by_role("button", name=name).or_(page.get_by_role("link", name=name)).click()

    shown_index(page, start)
    press("next")
    shown_index(page, start + 1)  # it used to come back to the first: the box wrote its old address back
    press("next")
    shown_index(page, start + 2)
    press("previous")
    shown_index(page, start + 1)
    assert address_in_url(page).endswith(f":{start + 1}")
    page.go_back()
    shown_index(page, start + 2)
    page.go_back()
    shown_index(page, start + 1)
    page.go_forward()
    shown_index(page, start + 2)


def test_back_from_a_sample_opened_in_a_filtered_dataset_returns_there_then_to_the_catalog(demo_server,
                                                                                          page):  # noqa: F811
    page.goto(demo_server)
    page.get_by_role("heading", name="Catalog", exact=True).wait_for()
    wait_ready(page)
    page.goto(f"{demo_server}/?address=demo-text@v1&where=lang%20%3D%20%27el%27")
    page.get_by_text("16 of 240 rows match", exact=False).wait_for()
    wait_ready(page)
    grid = page.locator(".st-key-ds_rows")
    grid.scroll_into_view_if_needed()
    link = page.get_by_role("link", name=re.compile(r"^Open sample \d+ \("))
    sample = page.get_by_role("heading", name="Sample", exact=True)
    for _ in range(5):  # a click before the grid has drawn its rows selects nothing: click again
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 12, box["y"] + 35 + 17)  # the first row's selection cell
        try:
            link.or_(sample).first.wait_for(timeout=6_000)
            break
        except PlaywrightTimeout:
            pass
    link.or_(sample).first.wait_for()
    if link.is_visible():  # a row clicked offers its sample
        link.click()
    sample.wait_for()
    page.get_by_text(re.compile(r"^sample \d+ of 240")).wait_for()
    wait_ready(page)

    page.go_back()
    page.get_by_role("heading", name="Dataset", exact=True).wait_for()
    page.get_by_text("16 of 240 rows match", exact=False).wait_for()
    wait_ready(page)
    assert parse_qs(urlsplit(page.url).query)["where"] == ["lang = 'el'"]
    assert page.get_by_role("textbox", name="Filter: an SQL condition", exact=False).input_value() == "lang = 'el'"
    page.go_back()
    page.get_by_role("heading", name="Catalog", exact=True).wait_for()
    wait_ready(page)
    assert urlsplit(page.url).path == "/" and not urlsplit(page.url).query


def test_the_sidebars_dataset_link_opens_the_dataset_of_the_sample_shown(demo_server, page):  # noqa: F811
    page.goto(f"{demo_server}/?address=demo-rl@v1:3")
    shown_index(page, 3)
    page.locator('[data-testid="stSidebarNav"]').get_by_text("Dataset", exact=True).click()
    page.get_by_role("heading", name="Dataset", exact=True).wait_for()
    box = page.get_by_label("Address (NAME[@REF])")
    page.wait_for_function("(el) => el.value.startsWith('demo-rl@')", arg=box.element_handle())
    page.get_by_text("demo-rl@", exact=False).filter(has_text="version").first.wait_for()
    wait_ready(page)


def test_the_samples_table_is_near_the_top_of_the_dataset_page(demo_server, page):  # noqa: F811
    page.goto(f"{demo_server}/?address=demo-text@v1")
    grid = page.locator(".st-key-ds_rows")
    grid.wait_for()
    wait_ready(page)
    top = grid.bounding_box()["y"]
    schema = page.get_by_role("heading", name="Schema", exact=True).bounding_box()["y"]
    # it was below schema, versions and shards (~1,300 px down); now rows show in the first screen
    assert top < 700 < page.viewport_size["height"] and top < schema, (top, schema)
    page.screenshot(path=str(ARTIFACTS / "web-dataset-top.png"))


# each hex line measured: the range of its characters lies inside the block, the block does not scroll
HEX_LINES = """(el) => {
  const text = el.firstChild; const s = text.textContent; const out = []; let start = 0;
  const block = el.getBoundingClientRect();
  while (start < s.length) {
    let end = s.indexOf('\\n', start); if (end < 0) end = s.length;
    const r = document.createRange(); r.setStart(text, start); r.setEnd(text, end);
    const box = r.getBoundingClientRect();
    out.push({line: s.slice(start, end), right: box.right, left: box.left});
    start = end + 1;
  }
  return {lines: out, right: block.right, left: block.left, scroll: el.scrollWidth, client: el.clientWidth};
}"""


def test_side_by_side_at_1400_px_shows_every_hex_column_and_every_step_column(demo_server, wide):
    wide.goto(f"{demo_server}/?address=demo-rl@v1:2")  # a trajectory: its fields' hex and its steps
    blocks = wide.locator("div.dsi-pre", has_text="00000000  ")
    blocks.first.wait_for()
    steps = wide.locator('[data-testid="stDataFrame"]')  # the page's one table: the episode's steps
    steps.wait_for()
    wait_ready(wide)
    assert blocks.count() >= 4
    for i in range(blocks.count()):
        m = blocks.nth(i).evaluate(HEX_LINES)
        assert m["scroll"] <= m["client"], m  # nothing hidden to the right
        for line in m["lines"]:
            assert line["line"].endswith("|") and len(line["line"].split("|")[0].split()) <= 17, line
            assert line["right"] <= m["right"] + 0.5, (line, m["right"])  # the ASCII column in view
    scroller = steps.locator(".dvn-scroller").first
    assert scroller.evaluate("el => el.scrollWidth <= el.clientWidth + 1"), \
        scroller.evaluate("el => [el.scrollWidth, el.clientWidth]")  # terminated and truncated in view
    wide.screenshot(path=str(ARTIFACTS / "web-sample-1400.png"), full_page=True)
