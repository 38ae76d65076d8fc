"""The web Catalog page over a catalog with one truncated manifest (it once showed a traceback and
nothing else) and over a catalog that does not exist: AppTest in process, then real Chromium."""

import os
from pathlib import Path

import pytest
from web_fixtures import run
from web_server import running_web

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]




def test_the_page_lists_the_intact_versions_and_names_the_broken_file(damaged, monkeypatch):
    catalog_dir, path, _ = damaged
    monkeypatch.setenv("DSINSPECT_CATALOG", str(catalog_dir))
    at = run()  # no exception: run() asserts it
    df = at.dataframe[0].value
    assert set(df["dataset"]) == {"demo-text", "demo-images", "demo-video", "demo-rl", "demo-rollouts"} and len(df) == 9
    errors = [e.value.replace("\\", "") for e in at.error]
    assert "1 stored file(s) cannot be read" in errors[0]
    assert any(line.startswith("BROKEN demo-video") and str(path) in line and "not valid JSON" in line
               for line in errors[1:]), errors


def test_a_missing_catalog_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", str(tmp_path / "nothing-here"))
    at = run()
    assert [e.value for e in at.error] == ["Cannot list this catalog"]
    assert not at.dataframe


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason="needs Debian's chromium")
def test_in_a_browser_the_broken_file_is_named_and_no_traceback_shows(damaged, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    catalog_dir, path, _ = damaged
    with running_web(str(catalog_dir), str(tmp_path / "web.log")) as base, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{base}/")
        page.get_by_text("stored file(s) cannot be read", exact=False).filter(visible=True).first.wait_for()
        page.get_by_role("link").filter(has_text="demo-images").first.wait_for()  # Open links of intact datasets
        text = page.inner_text("body")
        browser.close()
    assert str(path) in text and "not valid JSON" in text
    assert "Traceback" not in text and "ManifestError" not in text
    for name in ("demo-text", "demo-images", "demo-rl", "demo-video"):
        assert name in text
