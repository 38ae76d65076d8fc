"""The Statistics page (`stats?address=…`, `stats?a=…&b=…`): per column counts, nulls, distinct values
and a Vega-Lite bar chart (value counts, or the histogram of the derived token counts, image sizes,
episode returns), two versions on the same bins with what moved marked; linked from the Dataset page;
in Chromium, the charts drawn and no host but the app asked."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest
from test_web_browser import ARTIFACTS, browser, page, wait_ready  # noqa: F401  (fixtures)
from test_web_browser import pytestmark as browser_marks
from web_fixtures import APP, DEMO, plain, run

import dsinspect
from dsinspect.inspect.query import VersionQuery
from dsinspect.inspect.stats import compare_stats, version_stats


@pytest.fixture
def demo_env(monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", DEMO)


def stats_page(**params: str) -> AppTest:
    """The Statistics page at `stats?k=v&…`, run once, with no exception raised."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("app_pages/stats.py")
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def charts(at: AppTest) -> dict[str, pa.Table]:
    """Each bar chart's data, by its x axis title (the column's name)."""
    out = {}
    for chart in at.get("vega_lite_chart") + at.get("arrow_vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        assert spec["mark"]["type"] == "bar"
        data = pa.ipc.open_stream(chart.proto.datasets[0].data.data).read_all()
        out[spec["encoding"]["x"]["title"]] = data
    return out


def series(table: pa.Table, name: str) -> dict[str, int]:
    """One series of a chart (Streamlit melts the series into a colour column): x -> count."""
    rows = table.to_pylist()
    if name in table.column_names:  # one series: not melted
        return {r["x"]: r[name] for r in rows}
    colour = next(c for c in table.column_names if c.startswith("color"))
    value = next(c for c in table.column_names if c.startswith("value"))
    return {r["x"]: r[value] for r in rows if r[colour] == name}


def headings(at: AppTest) -> list[str]:
    return [plain(m.value[5:]) for m in at.markdown if m.value.startswith("#### ")]


def test_one_versions_statistics_per_column_with_charts(demo_env):
    expected = version_stats(VersionQuery(dsinspect.open_catalog(DEMO).resolve("demo-text@v1")))
    at = stats_page(address="demo-text@v1")
    assert at.title[0].value == "Statistics"
    assert [h.split(" · ")[0] for h in headings(at)] == [c.name for c in expected.columns]
    drawn = charts(at)
    tokens = expected.column("tokens_len")
    assert tokens.histogram and sum(series(drawn["tokens_len"], "A").values()) == tokens.rows - tokens.nulls
    assert list(series(drawn["tokens_len"], "A").values()) == [n for *_, n in tokens.histogram]
    lang = expected.column("lang")
    assert lang.values and series(drawn["lang"], "A") == {str(v): n for v, n in lang.values}  # the label distribution
    # each column's counts as a table: rows, nulls, distinct …
    tables = [d.value for d in at.dataframe]  # one per column, nothing else on the page
    first = dict(zip(tables[0]["statistic"], tables[0]["value"]))
    assert first["rows"] == "240" and first["nulls"] == "0"


def test_episode_returns_and_image_sizes_are_histograms(demo_env):
    at = stats_page(address="demo-rl@v1")
    assert "trajectory_return" in charts(at)
    at = stats_page(address="demo-images@v1")
    drawn = charts(at)
    assert {"image_width", "image_height", "image_orientation", "label"} <= set(drawn)


def test_two_versions_side_by_side_on_the_same_bins_what_moved_marked(demo_env):
    cat = dsinspect.open_catalog(DEMO)
    sa, sb = compare_stats(VersionQuery(cat.resolve("demo-images@v1")), VersionQuery(cat.resolve("demo-images@v2")))
    at = stats_page(a="demo-images@v1", b="demo-images@v2")
    drawn = charts(at)
    a, b = sa.column("image_bytes"), sb.column("image_bytes")
    assert [lo for lo, *_ in a.histogram] == [lo for lo, *_ in b.histogram]  # compare_stats: the same bins
    assert list(series(drawn["image_bytes"], "A").values()) == [n for *_, n in a.histogram]
    assert list(series(drawn["image_bytes"], "B").values()) == [n for *_, n in b.histogram]
    assert series(drawn["label"], "B")["checkerboard"] == 7 and series(drawn["label"], "A")["checkerboard"] == 5
    marks = dict(h.split(" · ", 1) for h in headings(at))
    assert marks["label"] == "⟳ moved" and marks["image_orientation"] == "⟳ moved"
    assert marks["image"] == "⟳ moved"  # kept in the shards: 48 → 50 rows, no nulls in either
    moved_lines = [t.value for t in at.text if t.value.startswith("moved: ")]
    assert "moved: rows 48 → 50; nulls 42 → 44" in moved_lines
    assert any("checkerboard: 5 → 7" in line for line in moved_lines)


def test_a_field_kept_in_the_shards_is_never_called_unchanged_and_shows_its_nulls(demo_env, tmp_path,
                                                                                monkeypatch):
    """demo-text v1 -> v2: 240 -> 242 rows, two texts changed. `text` and `tokens` are kept in the shards
    (only their rows and nulls are counted): they moved by their rows; at equal counts they are "not
    compared", never "unchanged"; a list's nulls, which the shards' statistics do not give, are "unknown"."""
    at = stats_page(a="demo-text@v1", b="demo-text@v2")
    marks = dict(h.split(" · ", 1) for h in headings(at))
    assert marks["text"] == marks["tokens"] == "⟳ moved", marks
    assert [t.value for t in at.text].count("moved: rows 240 → 242") == 2  # text and tokens: rows alone
    tables = {h: d.value for h, d in zip(headings(at), at.dataframe)}
    tokens = tables["tokens · ⟳ moved"].set_index("statistic")
    assert list(tokens.index) == ["rows", "nulls"] and list(tokens.loc["nulls"]) == ["unknown", "unknown"]
    assert list(tables["text · ⟳ moved"].set_index("statistic").loc["nulls"]) == ["0", "0"]

    from dsinspect.loaders.format.manifest import Field
    from dsinspect.loaders.store.catalog import Catalog

    cat = Catalog(str(tmp_path / "cat"))  # equal row counts, one text changed
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text")]
    cat.write_version("t", [{"id": 0, "text": "a"}, {"id": 1, "text": "b"}], fields, key="id", tags=["v1"])
    cat.write_version("t", [{"id": 0, "text": "a"}, {"id": 1, "text": "c"}], fields, key="id", tags=["v2"])
    monkeypatch.setenv("DSINSPECT_CATALOG", str(tmp_path / "cat"))
    marks = dict(h.split(" · ", 1) for h in headings(stats_page(a="t@v1", b="t@v2")))
    assert marks["text"] == "not compared" and marks["text_chars"] == "unchanged", marks


def test_the_dataset_page_links_to_the_statistics(demo_env):
    at = run(address="demo-images@v2")
    links = {plain(p.proto.label): p.proto for p in at.get("page_link")}
    assert "Statistics" in links and links["Statistics"].page.endswith("stats")
    assert "address=demo-images%406f4714afe56b" in links["Statistics"].query_string or \
        "demo-images@6f4714afe56b" in links["Statistics"].query_string
    beside = next(p for label, p in links.items() if label.startswith("Statistics beside its parent"))
    assert "52bf293215f7" in beside.query_string and "6f4714afe56b" in beside.query_string


def test_a_bad_address_is_one_error(demo_env):
    at = stats_page(address="no-such-dataset@v1")
    assert [e.value for e in at.error] == ["That address cannot be opened."]


@browser_marks[0]
@browser_marks[1]
def test_the_statistics_page_draws_its_charts_in_chromium(demo_web_server, page, tmp_path):  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{demo_web_server}/stats?a=demo-images@v1&b=demo-images@v2")  # conftest's server of DEMO
    page.get_by_text("columns that moved", exact=False).wait_for()
    page.locator('[data-testid="stVegaLiteChart"]').first.wait_for()
    wait_ready(page)
    page.locator('[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg').first.wait_for()
    assert page.locator('[data-testid="stVegaLiteChart"]').count() >= 10
    page.screenshot(path=str(ARTIFACTS / "web-stats.png"))
