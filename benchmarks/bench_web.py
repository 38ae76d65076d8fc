"""Page load of the web app in a real headless Chromium, against the issue's 1 s target.
Not a timed test; numbers depend on the machine. Prints, per page, the median of 5 loads (and the
min and max), from navigation start until the page's main element is visible:

  Catalog         /                                   -> the catalog table
  Sample (image)  /?address=demo-images@v1:3           -> the image, decoded (naturalWidth > 0)
  Replay          /?spec=...&step=3&rank=0             -> the batch table
  Diff            /?a=demo-images@v1&b=demo-images@v2  -> the first image of a changed pair

`dsinspect web` runs on a free loopback port over the bundled sample catalog and is warmed first
(every page opened once, so its caches hold the views). Each page is timed twice: in a fresh
browser context (no browser cache: a link opened for the first time) and in a reused context (the
app's static files cached). Chromium is Debian's (/usr/bin/chromium), driven by Playwright with
executable_path; never `playwright install`.

Run: python benchmarks/bench_web.py   (under a minute on 2 cores)
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from web_server import running_web  # noqa: E402

import dsinspect  # noqa: E402
from dsinspect.web.web_replay import build_spec, encode_spec  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUNS = 5
TARGET_MS = 1000.0


def pages(catalog: str) -> list[tuple[str, str, str, bool]]:
    """(label, path, selector of the main element, whether it is an image that must be decoded)."""
    spec = encode_spec(build_spec(dsinspect.open_catalog(catalog), "demo-text@v1", 0, 8, 4, "global"))
    return [("Catalog", "/", '[data-testid="stDataFrame"]', False),
            ("Sample (image)", "/?address=demo-images@v1:3", '[data-testid="stImage"] img', True),
            ("Replay", f"/?spec={spec}&step=3&rank=0", '[data-testid="stDataFrame"]', False),
            ("Diff", "/?a=demo-images@v1&b=demo-images@v2", '[data-testid="stImage"] img', True)]


def load_ms(page, url: str, selector: str, image: bool) -> float:
    t0 = time.perf_counter()
    page.goto(url, wait_until="commit")
    element = page.locator(selector).first
    element.wait_for(state="visible")
    if image:
        page.wait_for_function("(el) => el.complete && el.naturalWidth > 0", arg=element.element_handle())
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    from playwright.sync_api import sync_playwright

    catalog = str(dsinspect.defaults.bundled_catalog_path())
    targets = pages(catalog)
    log = os.path.join(tempfile.gettempdir(), f"bench-web-{os.getpid()}.log")
    print(f"dsinspect web page load · {platform.python_implementation()} {platform.python_version()} · "
          f"{os.cpu_count()} cores · catalog {catalog}")
    with running_web(catalog, log) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            version = browser.version
            warm = browser.new_context(viewport={"width": 1280, "height": 900})
            warm_page = warm.new_page()
            warm_page.set_default_timeout(60_000)
            for _, path, selector, image in targets:  # warm the server's caches and the browser's
                load_ms(warm_page, base + path, selector, image)
            results = []
            for label, path, selector, image in targets:
                fresh = []
                for _ in range(RUNS):
                    context = browser.new_context(viewport={"width": 1280, "height": 900})
                    pg = context.new_page()
                    pg.set_default_timeout(60_000)
                    fresh.append(load_ms(pg, base + path, selector, image))
                    context.close()
                reused = [load_ms(warm_page, base + path, selector, image) for _ in range(RUNS)]
                results.append((label, fresh, reused))
            warm.close()
        finally:
            browser.close()
    print(f"Chromium {version} headless · server warm · median of {RUNS} loads, until the main element is visible\n")
    print(f"{'page':<16} {'fresh context ms':>18} {'(min–max)':>14} {'reused context ms':>19} {'(min–max)':>14}  target")
    for label, fresh, reused in results:
        worst = max(statistics.median(fresh), statistics.median(reused))
        verdict = "ok (< 1 s)" if worst < TARGET_MS else "OVER 1 s"
        print(f"{label:<16} {statistics.median(fresh):>18.0f} {f'({min(fresh):.0f}–{max(fresh):.0f})':>14} "
              f"{statistics.median(reused):>19.0f} {f'({min(reused):.0f}–{max(reused):.0f})':>14}  {verdict}")
    os.remove(log)


if __name__ == "__main__":
    main()
