"""The Diff page through streamlit.testing.v1.AppTest (deep link, the two inputs, errors, escaping),
and its logic (dsinspect.web.models.diff) against the sample catalog's recorded changes."""

import io
import json
from pathlib import Path

import pyarrow as pa
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest
from web_fixtures import APP, DEMO, IMG_PAYLOAD, SCRIPT_PAYLOAD, codes, param, plain, png, run, texts

import dsinspect
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.web.models import diff
from dsinspect.web.ui.nav import PAGES, page_for

SAMPLE_DATA = Path(__file__).resolve().parent.parent / "sample_data" / "sample-data.json"


def recorded(name: str) -> dict:
    return json.loads(SAMPLE_DATA.read_text())["datasets"][name]


@pytest.fixture
def demo_env(monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", DEMO)


def test_diff_is_routed():
    assert "diff" in PAGES and PAGES["diff"][0] == "app_pages/diff.py"
    assert page_for({"a": "x@v1", "b": "x@v2"}) == "diff"
    assert page_for({"a": "x@v1"}) == "catalog"


def test_model_matches_the_recorded_demo_images_changes():
    want = recorded("demo-images")
    m = diff.diff_model(dsinspect.open_catalog(DEMO), "demo-images@v1", "demo-images@v2")
    assert m["a"]["id"] == want["v1"] and m["b"]["id"] == want["v2"]
    assert m["matched_by"] == "key" and m["key"] == want["key"] == m["ident"]
    assert {str(r["image_id"]): sorted(r["fields"]) for r in m["changed"]} == \
        {k: sorted(v) for k, v in want["updated"].items()}
    assert [r["image_id"] for r in m["added"]] == want["added"]
    assert [r["image_id"] for r in m["removed"]] == want["removed"]
    assert m["counts"]["changed"] == len(want["updated"]) and m["counts"]["added"] == len(want["added"])
    assert m["counts"]["removed"] == len(want["removed"]) and m["schema"] == []
    assert {s["change"] for s in m["shards"]} == {"added", "removed"}


def test_changed_rows_hold_before_and_after_values():
    cat = dsinspect.open_catalog(DEMO)
    m = diff.diff_model(cat, "demo-images@v1", "demo-images@v2")
    rows = diff.changed_rows(cat, "demo-images@v1", "demo-images@v2", m["changed"])
    va, vb = cat.resolve("demo-images@v1"), cat.resolve("demo-images@v2")
    for r in rows:
        by_name = {f["name"]: f for f in r["field_values"]}
        caption = by_name["caption"]
        assert caption["kind"] == "text"
        assert caption["before"] == va.take([r["index_a"]], ["caption"]).column(0)[0].as_py()
        assert caption["after"] == vb.take([r["index_b"]], ["caption"]).column(0)[0].as_py()
        assert caption["before"] != caption["after"]
        image = by_name["image"]
        assert image["kind"] == "image" and image["before"].startswith(b"\x89PNG")
        assert image["after"].startswith(b"\x89PNG") and image["difference"].startswith(b"\x89PNG")
        w, h = image["detail"]["size"][0]
        assert f"{w}×{h}" in image["before_caption"] and image["detail"]["mode"][0] in image["before_caption"]
        upright = Image.open(io.BytesIO(image["before"])).size  # turned by its EXIF orientation, as drawn
        assert upright == ((h, w) if "EXIF orientation" in image["before_caption"] else (w, h))
        assert Image.open(io.BytesIO(image["difference"])).size == upright


def test_deep_link_shows_summary_changed_pairs_and_added_removed(demo_env):
    want = recorded("demo-images")
    at = run(a="demo-images@v1", b="demo-images@v2")
    assert at.title[0].value == "Diff"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["changed"] == str(len(want["updated"])) and metrics["added"] == str(len(want["added"]))
    assert metrics["removed"] == str(len(want["removed"])) and metrics["rows before"] == "48"
    headers = [t for t in texts(at) if t.startswith("image_id ")]
    assert sorted(int(h.split()[1]) for h in headers) == sorted(int(k) for k in want["updated"])
    for h in headers:
        key = h.split()[1]
        assert sorted(h.split("changed: ")[1].split(", ")) == sorted(want["updated"][key])
    assert len(at.image) == 3 * len(want["updated"])  # before, after and the difference figure per row
    captions = [plain(img.caption) for el in at.image for img in el.proto.imgs]
    assert any(c.startswith("before: PNG 128×96 P") for c in captions)
    assert any(c.startswith("pixel difference") for c in captions)
    added = next(d.value for d in at.dataframe
                 if "image_id" in d.value.columns and list(d.value["image_id"]) == want["added"])
    v2 = json.loads((Path(DEMO) / "sample-data.json").read_text())["datasets"]["demo-images"]["v2"]
    assert added["address"].iloc[0].startswith(f"demo-images@{v2[:12]}:")
    assert any(list(d.value.get("image_id", [])) == want["removed"] for d in at.dataframe)
    assert "pixels changed" in "\n".join(texts(at))


def test_inputs_set_the_url(demo_env):
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("app_pages/diff.py").run()
    assert not at.exception and at.info
    at.text_input(key="diff_a").input("demo-text@v1").run()
    assert at.info and param(at, "a") == "demo-text@v1"
    at.text_input(key="diff_b").input("demo-text@v2").run()
    assert not at.exception and param(at, "b") == "demo-text@v2"
    assert plain(at.subheader[0].value).startswith("demo-text@") and len(at.metric) == 6


def test_changed_rows_page(demo_env, monkeypatch):
    import streamlit as st
    monkeypatch.setattr(diff, "CHANGED_PAGE", 1)
    st.cache_data.clear()
    try:
        at = run(a="demo-images@v1", b="demo-images@v2")
        first = [t for t in texts(at) if t.startswith("image_id ")]
        at.number_input(key="diff_page").set_value(2).run()
        second = [t for t in texts(at) if t.startswith("image_id ")]
        assert len(first) == len(second) == 1 and first != second and len(at.image) == 3
    finally:
        st.cache_data.clear()


def test_identical_versions_are_no_change(demo_env):
    at = run(a="demo-images@v1", b="demo-images@v1")
    assert at.success and {m.label: m.value for m in at.metric}["changed"] == "0"


@pytest.mark.parametrize("a, b, message", [
    ("nope@v1", "demo-images@v2", "no dataset 'nope'"), ("../../etc/passwd", "demo-images@v1", "bad dataset name"),
    ("demo-images@v1", "demo-images@../x", "bad version reference"), ("demo-images@v9", "demo-images@v1", "no tag"),
])
def test_bad_addresses_are_one_clear_error(demo_env, a, b, message):
    at = run(a=a, b=b)
    assert at.error[0].value == "Those versions cannot be compared." and message in codes(at)


def write_payload_catalog(root: str) -> None:
    """`pp`: v1 -> v2 changes row 0 (image and caption, now a script payload), removes row 1 and
    adds row 2 (its caption an onerror payload)."""
    cat = Catalog(root)
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("image", pa.binary(), "image"),
              Field("caption", pa.string(), "text")]
    cat.write_version("pp", [{"id": 0, "image": png(), "caption": "plain"},
                             {"id": 1, "image": png(), "caption": "gone"}],
                      fields, key="id", tags=["v1"], created_at="2026-01-01T00:00:00Z")
    cat.write_version("pp", [{"id": 0, "image": png(colour=(0, 200, 0)), "caption": SCRIPT_PAYLOAD},
                             {"id": 2, "image": png(8, 8), "caption": IMG_PAYLOAD}],
                      fields, key="id", tags=["v2"], created_at="2026-01-02T00:00:00Z")


@pytest.fixture
def payload_env(monkeypatch, tmp_path):
    write_payload_catalog(str(tmp_path / "cat"))
    monkeypatch.setenv("DSINSPECT_CATALOG", str(tmp_path / "cat"))


def test_payloads_render_literally(payload_env):
    at = run(a="pp@v1", b="pp@v2")
    assert SCRIPT_PAYLOAD in codes(at)  # the changed caption, as code
    assert not any(p in m.value for m in at.markdown for p in (SCRIPT_PAYLOAD, IMG_PAYLOAD))
    added = next(d.value for d in at.dataframe if "caption" in d.value.columns and list(d.value["id"]) == [2])
    assert added["caption"].iloc[0] == IMG_PAYLOAD
    assert len(at.image) == 3


@pytest.mark.slow
def test_browser_diff_link_shows_image_pairs_and_runs_no_script(tmp_path):
    """In a real headless Chromium: the diff deep link shows the image pair and its difference figure,
    and changed/added text holding script stays text (screenshot in test-artifacts/)."""
    from test_web_browser import ARGS, ARTIFACTS, CHROMIUM
    from web_server import running_web
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    root = str(tmp_path / "cat")
    write_payload_catalog(root)
    ARTIFACTS.mkdir(exist_ok=True)
    with running_web(root, str(ARTIFACTS / "web-diff-server.log")) as base, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30_000)
            page.goto(f"{base}/?a=pp@v1&b=pp@v2")
            images = page.locator('[data-testid="stImage"] img')
            images.nth(2).wait_for()
            assert images.count() == 3
            page.get_by_text(SCRIPT_PAYLOAD, exact=False).filter(visible=True).first.wait_for()
            page.wait_for_timeout(500)
            assert page.evaluate("typeof window.__pwned") == "undefined"
            assert page.locator("script", has_text="__pwned").count() == 0
            assert page.locator("img[src='x']").count() == 0
            page.screenshot(path=str(ARTIFACTS / "web-diff.png"), full_page=True)
        finally:
            browser.close()


def _png16(values) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    Image.fromarray(np.asarray(values, dtype=np.uint16)).save(buf, "PNG")
    return buf.getvalue()


def test_difference_figure_of_16_bit_images_uses_their_stored_values():
    """Both images are far above 255: clipped to 8 bits they were equal and the figure all black."""
    import numpy as np

    a = np.full((8, 8), 40_000)
    b = a.copy()
    b[2:4, 5:7] += 300
    assert Image.open(io.BytesIO(_png16(a))).mode in ("I;16", "I")
    figure = np.asarray(Image.open(io.BytesIO(diff.difference_png(_png16(a), _png16(b)))))
    assert figure[2:4, 5:7].min() == 255 and np.count_nonzero(figure) == 4
