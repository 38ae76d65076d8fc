"""End to end in a real headless Chromium (Debian's package, driven by Playwright): deep links,
the raw view, and proof that sample text holding script never runs. Screenshots go to test-artifacts/."""

import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from web_fixtures import IMG_PAYLOAD, SCRIPT_PAYLOAD, write_web_catalog
from web_server import running_web

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                 reason="needs Debian's chromium (apt-get install -y chromium); "
                                        "in CI it must be there")]


_CATALOGS = {}


def server_catalog(base: str) -> str:
    return _CATALOGS[base]


@pytest.fixture
def server(web_catalog_server):
    """The web catalog with a recorded run (runs/job1: pics, 2 ranks, 2 steps), served with a job's
    transform module (webxform) importable: conftest's web_catalog_server, one per pytest process."""
    base, catalog = web_catalog_server
    _CATALOGS[base] = catalog
    return base


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh page; afterwards, proof that it asked no host but the app on 127.0.0.1."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    hosts = []
    context.on("request", lambda r: hosts.append(urlsplit(r.url).hostname or r.url.split(":", 1)[0]))
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    context.close()
    assert hosts and set(hosts) <= {"127.0.0.1", "data", "blob"}, sorted(set(hosts))


def wait_ready(page):
    """Streamlit done running the page: the app says its script is not running, and no status widget shows.
    The widget alone is not enough: Streamlit 1.67 draws it only after 500 ms of a run, so its absence also
    holds during the first 500 ms of every run (and through the whole of a short one)."""
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_function("() => ['notRunning', 'compilationError'].includes(document.querySelector("
                           "'[data-testid=stApp]').getAttribute('data-test-script-state'))", timeout=30_000)
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
    page.locator('[data-testid="stImage"]').first.wait_for(state="detached")  # the default shows it beside the hex
    page.get_by_text("00000000  89 50 4e 47", exact=False).filter(visible=True).first.wait_for()
    assert "view=Raw" in page.url
    wait_ready(page)
    page.screenshot(path=str(ARTIFACTS / "web-sample-raw.png"), full_page=True)


@pytest.mark.parametrize("index, payload", [(0, SCRIPT_PAYLOAD), (1, IMG_PAYLOAD)])
def test_payload_sample_runs_no_script(server, page, index, payload):
    page.goto(f"{server}/?address=xss@v1:{index}")
    page.get_by_text(f"before {payload} after", exact=False).filter(visible=True).first.wait_for()
    wait_ready(page)
    page.wait_for_timeout(500)  # give an injected onerror the chance to fire
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("script", has_text="__pwned").count() == 0
    assert page.locator("img[src='x']").count() == 0
    page.screenshot(path=str(ARTIFACTS / f"web-xss-{index}.png"), full_page=True)


def test_replay_link_shows_the_batch_table(server, page, tmp_path):
    import dsinspect
    from dsinspect.web.models.replay import build_spec, encode_spec
    cat = dsinspect.open_catalog(server_catalog(server))
    spec = encode_spec(build_spec(cat, "xss@v1", 0, 1, 2, "none"))
    page.goto(f"{server}/?spec={spec}&step=0&rank=all")
    page.get_by_text("rank 1: fingerprint", exact=False).filter(visible=True).first.wait_for()
    page.locator('[data-testid="stDataFrame"]').first.wait_for()
    wait_ready(page)
    page.screenshot(path=str(ARTIFACTS / "web-replay.png"), full_page=True)


def test_picture_with_payload_caption_and_dataset_page(server, page):
    page.goto(f"{server}/?address=pics@v1:1")
    page.get_by_text(IMG_PAYLOAD, exact=False).filter(visible=True).first.wait_for()
    page.goto(f"{server}/?address=xss@v1")
    page.get_by_text(SCRIPT_PAYLOAD, exact=True).filter(visible=True).first.wait_for()  # the version message, literal
    wait_ready(page)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.screenshot(path=str(ARTIFACTS / "web-dataset.png"), full_page=True)


def test_replay_run_record_with_a_typed_transform_and_the_log(server, page):
    page.goto(f"{server}/?run=job1&step=0&rank=all&log=job1")
    page.get_by_text("step 0: ✓ matches the log (2 line(s), 2 stored",
                     exact=False).filter(visible=True).first.wait_for()
    page.locator('[data-testid="stDataFrame"]').first.wait_for()
    assert page.get_by_text("as fed to the model", exact=False).count() == 0
    box = page.get_by_label("The job's transform (package.module:function)")
    box.fill("webxform:tag")
    box.press("Enter")
    page.get_by_text("as fed to the model", exact=False).filter(visible=True).first.wait_for()
    page.locator('[data-testid="stTable"]').nth(1).get_by_text("id_x10").wait_for()
    assert "transform" not in page.url
    wait_ready(page)
    page.screenshot(path=str(ARTIFACTS / "web-replay-transform.png"), full_page=True)


def test_run_page_grid_cell_opens_that_batchs_replay(server, page):
    page.goto(f"{server}/runs?run=job1")
    grid = page.locator("table.dsi-run-grid")
    grid.wait_for()
    assert grid.locator("td.kept").count() == 4  # 2 ranks × 2 steps, all logged
    page.get_by_text("No gaps: every (step, rank) of the kept history has its line").wait_for()
    wait_ready(page)
    page.screenshot(path=str(ARTIFACTS / "web-run.png"), full_page=True)
    cell = grid.locator('a[title^="rank 1, step 1:"]')
    assert cell.get_attribute("href") == "replay?run=job1&log=job1&step=1&rank=1"
    cell.click()  # the same tab: the replay page of step 1, rank 1, checked against the record
    verdict = page.get_by_text("step 1: ✓ matches the log (1 line(s), 1 stored", exact=False)
    verdict.filter(visible=True).first.wait_for()
    assert urlsplit(page.url).query == "run=job1&log=job1&step=1&rank=1"  # the replay page is the run link's default
    wait_ready(page)


class SlowShards:
    """WSGI middleware: the first `times` GETs of shard files wait `seconds` (a slow remote)."""

    def __init__(self, app, seconds: float, times: int):
        self.app, self.seconds, self.times = app, seconds, times

    def __call__(self, environ, start_response):
        if environ["REQUEST_METHOD"] == "GET" and "/shards/" in environ.get("PATH_INFO", "") and self.times > 0:
            self.times -= 1
            time.sleep(self.seconds)
        return self.app(environ, start_response)


def test_slow_remote_shows_a_spinner_then_the_sample(page, tmp_path):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.moto_server.werkzeug_app")
    from s3_server import s3_server

    with s3_server() as (s3, url, _):
        write_web_catalog(url)
        s3._server.app = SlowShards(s3._server.app, seconds=3.0, times=1)  # the werkzeug server's WSGI app
        cache = {"DSINSPECT_CACHE": str(tmp_path / "cache")}
        with running_web(url, str(ARTIFACTS / "web-server-s3.log"), env=cache) as base:
            page.goto(f"{base}/?address=pics@v1:0")
            spinner = page.get_by_text("Reading and decoding the sample…")
            spinner.wait_for(timeout=20_000)
            # the page is alive while it waits: its title and address box are drawn, the image is not yet
            assert page.get_by_role("heading", name="Sample").is_visible()
            assert page.get_by_label("Address (NAME[@REF]:INDEX)").is_visible()
            assert page.locator('[data-testid="stImage"]').count() == 0
            page.screenshot(path=str(ARTIFACTS / "web-slow-spinner.png"), full_page=True)
            img = page.locator('[data-testid="stImage"] img').first
            img.wait_for(timeout=30_000)
            wait_ready(page)
            assert spinner.count() == 0
            page.screenshot(path=str(ARTIFACTS / "web-slow-done.png"), full_page=True)
