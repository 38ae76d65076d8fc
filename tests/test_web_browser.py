"""End to end in a real headless Chromium (Debian's package, driven by Playwright): deep links,
the raw view, and proof that sample text holding script never runs. Screenshots go to test-artifacts/."""

import os
import shutil
from pathlib import Path

import pytest

from web_fixtures import IMG_PAYLOAD, SCRIPT_PAYLOAD, write_web_catalog
from web_server import running_web

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                 reason="needs Debian's chromium (apt-get install -y chromium); in CI it must be there")]


_CATALOGS = {}


def server_catalog(base: str) -> str:
    return _CATALOGS[base]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("webcat")
    write_web_catalog(str(root / "cat"))
    ARTIFACTS.mkdir(exist_ok=True)
    with running_web(str(root / "cat"), str(ARTIFACTS / "web-server.log")) as base:
        _CATALOGS[base] = str(root / "cat")
        yield base


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    context.close()


def wait_ready(page):
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=30_000)


def test_image_deep_link_then_raw_hex(server, page):
    page.goto(f"{server}/?address=pics@v1:0")
    img = page.locator('[data-testid="stImage"] img').first
    img.wait_for()
    page.wait_for_function("(el) => el.complete && el.naturalWidth > 0", arg=img.element_handle())
    assert img.evaluate("el => [el.naturalWidth, el.naturalHeight]") == [64, 48]  # full size
    wait_ready(page)
    page.screenshot(path=str(ARTIFACTS / "web-sample-image.png"), full_page=True)
    page.locator('[data-testid="stButtonGroup"]').get_by_text("Raw", exact=True).click()
    page.get_by_text("00000000  89 50 4e 47", exact=False).first.wait_for()
    assert page.locator('[data-testid="stImage"]').count() == 0
    assert "view=Raw" in page.url
    wait_ready(page)
    page.screenshot(path=str(ARTIFACTS / "web-sample-raw.png"), full_page=True)


@pytest.mark.parametrize("index, payload", [(0, SCRIPT_PAYLOAD), (1, IMG_PAYLOAD)])
def test_payload_sample_runs_no_script(server, page, index, payload):
    page.goto(f"{server}/?address=xss@v1:{index}")
    page.get_by_text(f"before {payload} after", exact=False).first.wait_for()
    wait_ready(page)
    page.wait_for_timeout(500)  # give an injected onerror the chance to fire
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("script", has_text="__pwned").count() == 0
    assert page.locator("img[src='x']").count() == 0
    page.screenshot(path=str(ARTIFACTS / f"web-xss-{index}.png"), full_page=True)


def test_replay_link_shows_the_batch_table(server, page, tmp_path):
    import dsinspect
    from dsinspect.web.web_replay import build_spec, encode_spec
    cat = dsinspect.open_catalog(server_catalog(server))
    spec = encode_spec(build_spec(cat, "xss@v1", 0, 1, 2, "none"))
    page.goto(f"{server}/?spec={spec}&step=0&rank=all")
    page.get_by_text("rank 1: fingerprint", exact=False).first.wait_for()
    page.locator('[data-testid="stDataFrame"]').first.wait_for()
    wait_ready(page)
    page.screenshot(path=str(ARTIFACTS / "web-replay.png"), full_page=True)


def test_picture_with_payload_caption_and_dataset_page(server, page):
    page.goto(f"{server}/?address=pics@v1:1")
    page.get_by_text(IMG_PAYLOAD, exact=False).first.wait_for()
    page.goto(f"{server}/?address=xss@v1")
    page.get_by_text(SCRIPT_PAYLOAD, exact=True).first.wait_for()  # the version message, literal
    wait_ready(page)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.screenshot(path=str(ARTIFACTS / "web-dataset.png"), full_page=True)
