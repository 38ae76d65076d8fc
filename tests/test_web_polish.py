"""Issue #20's polish of the web pages, in a real Chromium (and AppTest where the page's data says it):
the Sample page opens on decoded beside raw with hashes, its hex never wraps; the Diff page draws an
EXIF-rotated image rotated and says what changed in words; the Dataset page shows thumbnails and
readable sizes; seeds are hex as on the command line."""

from __future__ import annotations

import pytest
from test_web_browser import ARTIFACTS, browser, page, server, wait_ready  # noqa: F401  (fixtures)
from test_web_browser import pytestmark as browser_marks
from web_fixtures import DEMO, codes, run
from web_server import running_web

slow_browser = [browser_marks[0], browser_marks[1]]


@pytest.fixture
def demo_env(monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", DEMO)


@pytest.fixture(scope="module")
def demo_server():
    ARTIFACTS.mkdir(exist_ok=True)
    with running_web(DEMO, str(ARTIFACTS / "web-server-polish.log")) as base:
        yield base


# -- item 4: the Sample page ------------------------------------------------------------------------

def test_the_sample_page_opens_decoded_beside_raw_and_hashes(demo_env):
    at = run(address="demo-images@v1:3")
    assert len(at.image) == 1  # decoded …
    shown = codes(at)
    assert "xxh128 (canonical)" in shown and "sha256 (raw)" in shown and "00000000  " in shown  # … beside raw
    assert at.segmented_control(key="view").value == "Side by side"


# the hex block, each of its lines measured: one line box per line (a wrapped line has two or more)
LINE_BOXES = """(el) => {
  const text = el.firstChild; const s = text.textContent; const out = []; let start = 0;
  const lh = parseFloat(getComputedStyle(el).lineHeight);
  while (start < s.length) {
    let end = s.indexOf('\\n', start); if (end < 0) end = s.length;
    const r = document.createRange(); r.setStart(text, start); r.setEnd(text, end);
    const rects = Array.from(r.getClientRects()).filter(x => x.width > 0);
    out.push({line: s.slice(start, end), boxes: rects.length,
              height: Math.max(...rects.map(x => x.bottom)) - Math.min(...rects.map(x => x.top)), lh: lh});
    start = end + 1;
  }
  return out;
}"""


@pytest.mark.parametrize("address, start", [("pics@v1:0", "00000000  89 50 4e 47"),  # the PNG
                                            ("xss@v1:0", "00000000  62 65 66 6f 72 65")])  # "before <script>…"
@slow_browser[0]
@slow_browser[1]
def test_hex_lines_never_wrap_at_the_default_viewport(server, page, address, start):  # noqa: F811
    page.goto(f"{server}/?address={address}")  # the default view: side by side, half the width for the hex
    block = page.locator("div.dsi-pre", has_text=start).first
    block.wait_for()
    wait_ready(page)
    lines = block.evaluate(LINE_BOXES)
    assert len(lines) >= 2
    for line in lines:
        assert len(line["line"].split("|")[0].split()) == 17 or line is lines[-1]  # offset + 16 bytes
        assert line["boxes"] == 1, line
        assert line["height"] <= 1.5 * line["lh"], line
    overflow = block.evaluate("el => [getComputedStyle(el).whiteSpace, getComputedStyle(el).overflowX]")
    assert overflow == ["pre", "auto"]
    block.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"web-hex-{address.split('@')[0]}.png"))
