"""The Dataset page's filter box (`?where=`, the syntax of `dsinspect query --where`): AppTest for the
deep link, paging, a bad condition and the bounds; Chromium for a result row opening its sample."""

from __future__ import annotations

import pytest
from test_web_browser import browser, page, server  # noqa: F401  (fixtures)
from test_web_browser import pytestmark as browser_marks
from web_fixtures import DEMO, codes, param, plain, run

MAX_WHERE = 2_000  # query.MAX_WHERE, checked below


@pytest.fixture
def demo_env(monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", DEMO)


def rows_frame(at):
    return next(d.value for d in at.dataframe if d.key == "ds_rows")


def test_a_where_link_lists_only_matching_rows_with_their_count(demo_env):
    import dsinspect
    from dsinspect.inspect.query import VersionQuery

    with VersionQuery(dsinspect.open_catalog(DEMO).resolve("demo-images@v1")) as q:
        expected = [r[0] for r in q.where("image_orientation <> 1", limit=100).rows]
    assert expected  # the demo has EXIF-rotated images
    at = run(address="demo-images@v1", where="image_orientation <> 1")
    frame = rows_frame(at)
    assert list(frame["index"]) == expected
    assert set(frame["image_orientation"]) <= {3, 6, 8} and "address" in frame
    assert frame["address"].iloc[0].endswith(f":{expected[0]}")
    captions = " ".join(plain(c.value) for c in at.caption)
    assert f"{len(expected):,} of 48 rows match" in captions
    assert at.text_input(key="ds_where").value == "image_orientation <> 1"


def test_the_filter_box_writes_the_url_and_results_page(demo_env):
    at = run(address="demo-text@v1")
    at.text_input(key="ds_where").input("_index % 2 = 1").run()
    assert not at.exception
    assert param(at, "where") == "_index % 2 = 1"
    assert list(rows_frame(at)["index"]) == list(range(1, 40, 2))
    assert "120 of 240 rows match" in " ".join(plain(c.value) for c in at.caption)
    at.number_input(key="ds_page").set_value(3).run()
    assert list(rows_frame(at)["index"]) == list(range(81, 120, 2))
    at.text_input(key="ds_where").input("").run()
    assert param(at, "where") is None
    assert list(rows_frame(at)["index"]) == list(range(20))


def test_derived_values_filter_and_no_match_says_so(demo_env):
    at = run(address="demo-text@v1", where="tokens_len > 1000000")
    assert "0 of 240 rows match" in " ".join(plain(c.value) for c in at.caption)
    assert any("No row matches" in i.value for i in at.info)


@pytest.mark.parametrize("condition, line", [
    ("no_such_column > 1", "bad query:"),
    ("1; DROP TABLE v", "bad SQL:"),
    ("(SELECT count(*) FROM read_csv('/etc/passwd')) > 0", "a query reads only the version"),
    ("x" * (MAX_WHERE + 1), f"a page takes at most {MAX_WHERE:,}"),
])
def test_a_bad_condition_is_one_line_not_a_traceback(demo_env, condition, line):
    from dsinspect.web.models import query

    assert query.MAX_WHERE == MAX_WHERE
    at = run(address="demo-text@v1", where=condition)
    assert [e.value for e in at.error] == ["That condition cannot be run."]
    shown = codes(at)
    assert line in shown and "Traceback" not in shown and len(shown.splitlines()) == 1
    assert not any(d.key == "ds_rows" for d in at.dataframe)


def test_a_slow_condition_is_stopped_at_the_web_time_limit(demo_env, monkeypatch):
    import time

    from dsinspect.web.models import query
    from dsinspect.web.ui import cache

    monkeypatch.setattr(query, "WEB_TIMEOUT", 1.0)  # 10 s on a real server
    cache.version_query.clear()
    try:
        start = time.monotonic()
        at = run(address="demo-rl@v1", where="(SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3) > 0")
        assert time.monotonic() - start < 30
        assert [e.value for e in at.error] == ["That condition cannot be run."]
        assert "the query ran longer than 1 s and was stopped" in codes(at)
    finally:
        cache.version_query.clear()


def test_the_query_view_is_cached_per_version(demo_env):
    from dsinspect.web.ui import cache

    cache.version_query.clear()
    at = run(address="demo-text@v1", where="_index < 30")
    at.number_input(key="ds_page").set_value(2).run()
    assert list(rows_frame(at)["index"]) == list(range(20, 30))
    at.text_input(key="ds_where").input("_index >= 230").run()
    assert list(rows_frame(at)["index"]) == list(range(230, 240))
    # one SharedQuery for the version: the resource cache was filled once
    import dsinspect
    from dsinspect.web.models.catalog import configured_url
    vid = dsinspect.open_catalog(DEMO).resolve("demo-text@v1").id
    assert cache.version_query(configured_url(), f"demo-text@{vid}") is \
        cache.version_query(configured_url(), f"demo-text@{vid}")


# -- in Chromium: a result row, clicked, links to its sample ---------------------------------------

@browser_marks[0]
@browser_marks[1]
def test_a_filtered_row_clicked_links_to_its_sample_in_chromium(server, page):  # noqa: F811
    from playwright.sync_api import expect
    from test_web_browser import ARTIFACTS, wait_ready

    page.goto(f"{server}/?address=pics@v1&where=image_width%20%3C%2050")
    page.get_by_text("1 of 2 rows match", exact=False).wait_for()
    grid = page.locator(".st-key-ds_rows")
    grid.wait_for()
    wait_ready(page)
    # the grid's container is there before the grid is drawn (its data arrives after the script's run, so even
    # wait_ready may come first): wait for the first data row as the grid lays it out (its accessible cells, which
    # it renders with the canvas; the row's first column holds 1), then for the frames that paint it
    first_row = grid.get_by_test_id("glide-cell-1-0")
    expect(first_row).to_have_text("1")
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    grid.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "web-query.png"))
    box = grid.bounding_box()
    assert box["height"] >= 35 + 35  # the header and that row, at the heights the click below counts on
    page.mouse.click(box["x"] + 12, box["y"] + 35 + 17)  # the first data row's selection cell
    page.get_by_role("link", name="Open sample 1 (", exact=False).click()
    page.get_by_role("heading", name="Sample", exact=True).wait_for()
    page.get_by_text("sample 1 of 2", exact=False).wait_for()
    assert "address=pics%40" in page.url or "address=pics@" in page.url
    assert page.url.endswith(":1") or page.url.endswith("%3A1")
