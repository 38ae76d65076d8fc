"""Page load of the web app in a real headless Chromium, against the issue's 1 s target.
Not a timed test; numbers depend on the machine (and on its load: the table prints the load average).

"Load" = from the navigation request (page.goto) until the page's main element is visible:

  Catalog         /                                   -> the catalog table
  Sample (image)  /?address=demo-images@v1:3           -> the image, decoded (naturalWidth > 0)
  Sample (tokens) /?address=demo-text@v1:17            -> the token spans
  Replay          /?spec=...&step=3&rank=0             -> the batch table
  Diff            /?a=demo-images@v1&b=demo-images@v2  -> the first image of a changed pair

Also printed per page: when the first heading is visible (the frontend has booted and drawn the
first element of the script's output) and how many elements the page draws. Two baselines are
measured in the same run, interleaved load by load with the app so that machine load hits all alike:

  floor    a Streamlit script holding only st.title, served with the same flags: what Streamlit's own
           frontend costs before any of our elements (the part of "load" no page can save)
  before   (--before DIR) the same pages from another source tree of dsinspect, e.g. the last
           commit exported with `git archive HEAD dsinspect | tar -x -C DIR`

Each server is warmed first (every page opened once, so its caches hold the views). Loads run in a
reused browser context (static files cached, as for someone who has the app open) and, fewer, in a
fresh context (a link opened for the first time). Chromium is Debian's (/usr/bin/chromium), driven by
Playwright with executable_path; never `playwright install`.

Run: python benchmarks/bench_web.py [--before DIR] [--runs N]   (a few minutes on 2 busy cores)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from web_server import running_script, running_web  # noqa: E402

import dsinspect.defaults  # noqa: E402
from dsinspect.web.models.replay import build_spec, encode_spec  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TARGET_MS = 1000.0
FLOOR_SCRIPT = 'import streamlit as st\nst.title("Floor")\n'
ELEMENTS = "document.querySelectorAll('[data-testid=\"stElementContainer\"]').length"


def pages(catalog: str) -> list[tuple[str, str, str, bool]]:
    """(label, path, selector of the main element, whether it is an image that must be decoded)."""
    spec = encode_spec(build_spec(dsinspect.open_catalog(catalog), "demo-text@v1", 0, 8, 4, "global"))
    return [("Catalog", "/", '[data-testid="stDataFrame"]', False),
            ("Sample (image)", "/?address=demo-images@v1:3", '[data-testid="stImage"] img', True),
            ("Sample (tokens)", "/?address=demo-text@v1:17", ".dsi-tokens", False),
            ("Replay", f"/?spec={spec}&step=3&rank=0", '[data-testid="stDataFrame"]', False),
            ("Diff", "/?a=demo-images@v1&b=demo-images@v2", '[data-testid="stImage"] img', True)]


def load(page, url: str, selector: str, image: bool) -> tuple[float, float, int]:
    """(ms until the first heading is visible, ms until the main element is, elements drawn)."""
    t0 = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.locator("h1").first.wait_for(state="visible")
    heading = time.perf_counter() - t0
    element = page.locator(selector).first
    element.wait_for(state="visible")
    if image:
        page.wait_for_function("(el) => el.complete && el.naturalWidth > 0", arg=element.element_handle())
    main = time.perf_counter() - t0
    return heading * 1000, main * 1000, page.evaluate(ELEMENTS)


def med(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", metavar="DIR", help="a source tree holding another dsinspect/ to compare")
    parser.add_argument("--runs", type=int, default=5, help="loads per page and server in the reused context")
    opts = parser.parse_args()
    catalog = str(dsinspect.defaults.bundled_catalog_path())
    targets = pages(catalog)
    tmp = tempfile.mkdtemp(prefix="bench-web-")
    floor_script = os.path.join(tmp, "floor.py")
    Path(floor_script).write_text(FLOOR_SCRIPT)
    print(f"dsinspect web page load · {platform.python_implementation()} {platform.python_version()} · "
          f"{os.cpu_count()} cores · load average {os.getloadavg()[0]:.1f} · catalog {catalog}")
    with ExitStack() as stack, sync_playwright() as p:
        servers = {"now": stack.enter_context(running_web(catalog, os.path.join(tmp, "now.log")))}
        if opts.before:
            before = os.path.abspath(opts.before)
            servers["before"] = stack.enter_context(running_web(catalog, os.path.join(tmp, "before.log"), cwd=before,
                                                                env={"PYTHONPATH": before}))
        floor = stack.enter_context(running_script(floor_script, os.path.join(tmp, "floor.log")))
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        version = browser.version
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        page.set_default_timeout(120_000)
        for base in servers.values():  # warm each server's caches and the browser's
            for _, path, selector, image in targets:
                load(page, base + path, selector, image)
        load(page, floor + "/", "h1", False)
        reused = {(name, label): [] for name in [*servers, "floor"] for label, *_ in targets}
        fresh = {key: [] for key in reused}
        for run in range(opts.runs):  # interleaved: each round loads every page from every server
            for label, path, selector, image in targets:
                for name, base in servers.items():
                    reused[(name, label)].append(load(page, base + path, selector, image))
                    if run < 3:
                        c = browser.new_context(viewport={"width": 1280, "height": 900})
                        pg = c.new_page()
                        pg.set_default_timeout(120_000)
                        fresh[(name, label)].append(load(pg, base + path, selector, image))
                        c.close()
            reused[("floor", "Catalog")].append(load(page, floor + "/", "h1", False))
        browser.close()
    print(f"Chromium {version} headless · servers warm · medians, ms from the navigation request "
          f"· load average now {os.getloadavg()[0]:.1f}\n")
    floor_ms = statistics.median(m for _, m, _ in reused[("floor", "Catalog")])
    print(f"floor: a page holding only st.title, reused context: {floor_ms:.0f} ms (Streamlit's own frontend)\n")
    names = list(servers)
    head = f"{'page':<16}" + "".join(f" {n + ' heading':>15} {n + ' main':>11} {n + ' fresh':>11} {'elements':>8}"
                                     for n in names)
    print(head + "  main/floor  target")
    for label, *_ in targets:
        cells = ""
        for n in names:
            r, f = reused[(n, label)], fresh[(n, label)]
            cells += (f" {med([h for h, _, _ in r]):>15} {med([m for _, m, _ in r]):>11} "
                      f"{med([m for _, m, _ in f]):>11} {r[-1][2]:>8}")
        now_ms = statistics.median(m for _, m, _ in reused[("now", label)])
        verdict = "ok (< 1 s)" if now_ms < TARGET_MS else "OVER 1 s"
        print(f"{label:<16}{cells}  {now_ms / floor_ms:>10.1f}  {verdict}")


if __name__ == "__main__":
    main()
