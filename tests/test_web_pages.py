"""Every page through streamlit.testing.v1.AppTest: deep links, widgets, errors and escaping."""

import pytest
from streamlit.testing.v1 import AppTest
from web_fixtures import APP, DEMO, IMG_PAYLOAD, SCRIPT_PAYLOAD, codes, plain, run, write_web_catalog

import dsinspect


@pytest.fixture
def demo_env(monkeypatch):
    monkeypatch.setenv("DSINSPECT_CATALOG", DEMO)


@pytest.fixture
def xss_env(monkeypatch, tmp_path):
    write_web_catalog(str(tmp_path / "cat"))
    monkeypatch.setenv("DSINSPECT_CATALOG", str(tmp_path / "cat"))


def test_catalog_page_lists_versions_and_links(demo_env):
    at = run()
    assert at.title[0].value == "Catalog"
    df = at.dataframe[0].value
    assert set(df["dataset"]) == {"demo-text", "demo-images", "demo-video", "demo-rl", "demo-rollouts"}
    assert len(df) == 10


def test_dataset_deep_link_shows_schema_shards_versions_and_rows(demo_env):
    at = run(address="demo-text@v1")
    assert at.title[0].value == "Dataset"
    rows, schema, versions, shards = (d.value for d in at.dataframe)  # the rows first
    assert list(schema["name"]) == ["doc_id", "lang", "text", "tokens"]
    assert len(versions) == 2 and len(shards) == 4 and list(rows["index"]) == list(range(20))
    at.number_input(key="ds_page").set_value(3).run()
    assert list(at.dataframe[0].value["index"]) == list(range(40, 60))


def test_dataset_address_box_changes_the_query(demo_env):
    at = run(address="demo-text@v1")
    at.text_input(key="ds_address").input("demo-rl@v2").run()
    assert at.query_params["address"] == ["demo-rl@v2"] or at.query_params["address"] == "demo-rl@v2"
    assert at.metric[0].value == "41"


def test_image_sample_full_size_then_raw_hex_and_download(demo_env):
    at = run(address="demo-images@v1:3", view="Decoded")
    assert at.title[0].value == "Sample" and len(at.image) == 1
    assert "xxh128" not in codes(at)
    at.segmented_control(key="view").set_value("Raw").run()
    assert len(at.image) == 0
    hexdump = codes(at)
    assert "xxh128 (canonical)" in hexdump and "sha256 (raw)" in hexdump and "00000000  " in hexdump
    labels = [plain(b.proto.label) for b in at.get("download_button")]
    assert any(label.startswith("Download image (") for label in labels)


def test_view_is_deep_linkable(demo_env):
    at = run(address="demo-images@v1:3", view="Side by side")
    assert len(at.image) == 1 and "00000000  " in codes(at)


def test_tokens_render_as_escaped_spans(demo_env):
    at = run(address="demo-text@v1:17")
    spans = [m.value for m in at.markdown if "dsi-tok" in m.value]
    assert len(spans) == 1 and spans[0].count('class="dsi-tok"') > 10 and 'title="#0 id ' in spans[0]
    assert not at.dataframe  # the ids table is drawn on demand
    at.toggle(key="tok_more_tokens").set_value(True).run()
    ids, stats = (d.value for d in at.dataframe)
    assert list(ids["position"][:3]) == [0, 1, 2] and len(stats) == 1


def test_video_player_strip_and_frame_slider(demo_env):
    at = run(address="demo-video@v1:1")
    assert len(at.get("video")) == 1 and len(at.image) >= 3
    at.slider(key="frame_video").set_value(5).run()
    assert at.image[-1].proto.imgs[0].caption.startswith("frame 5")


def test_trajectory_table_and_charts(demo_env):
    at = run(address="demo-rl@v1:2")
    assert len(at.get("arrow_vega_lite_chart")) + len(at.get("vega_lite_chart")) >= 1
    steps = at.dataframe[0].value
    assert {"step", "reward", "cumulative"} <= set(steps.columns) and len(steps) > 1


@pytest.mark.parametrize("address, message", [
    ("nope:1", "no dataset 'nope'"), ("../../etc/passwd:0", "bad dataset name"),
    ("demo-text@v1:99999", "out of range"), ("demo-text@../x:1", "bad version reference"),
])
def test_bad_addresses_are_one_clear_error(demo_env, address, message):
    at = run(address=address)
    assert at.error[0].value == "That address cannot be opened." and message in codes(at)


def test_address_box_opens_another_sample(demo_env):
    at = run(address="demo-text@v1:17")
    at.text_input(key="sample_address").input("demo-images@v1:0").run()
    assert len(at.image) == 1


def test_payloads_render_literally(xss_env):
    for index, payload in enumerate((SCRIPT_PAYLOAD, IMG_PAYLOAD)):
        at = run(address=f"xss:{index}")
        assert f"before {payload} after" in codes(at)  # the text field
        assert payload in [t.value for t in at.text]  # the scalar label, as plain text
        assert not any(payload in m.value for m in at.markdown)  # never through Markdown
    at = run(address="xss")
    assert at.text[0].value == SCRIPT_PAYLOAD  # the version message, as plain text


def spec_text(**options):
    from dsinspect.web.models import replay
    cat = dsinspect.open_catalog(DEMO)
    return replay.encode_spec(replay.build_spec(cat, "demo-text@v1", 0, 8, 4, "global"))


def test_replay_deep_link_shows_the_batch_and_all_ranks(demo_env):
    at = run(spec=spec_text(), step="3", rank="1")
    assert at.title[0].value == "Replay"
    rows = at.dataframe[0].value
    assert len(rows) == 8 and rows["index"].iloc[0] == 15 and set(rows["rank"]) == {1}
    assert "rank 1: fingerprint " in codes(at)
    at.text_input(key="rp_rank").input("all").run()
    assert len(at.dataframe[0].value) == 32 and at.query_params["rank"] in ("all", ["all"])


def test_replay_from_fields_sets_the_url(demo_env):
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("app_pages/replay.py").run()
    assert at.info
    at.text_input(key="rp_address").input("demo-rl@v1")
    at.number_input(key="rp_batch").set_value(4)
    at.button[0].click().run()
    assert not at.exception and len(at.dataframe[0].value) == 4
    assert at.dataframe[0].value["address"].iloc[0].startswith("demo-rl@")


@pytest.mark.parametrize("spec", ["../../etc/passwd", "eyJmb3JtYXQiOiAxfQ", "{}"])
def test_replay_bad_specs_are_one_clear_error(demo_env, spec):
    at = run(spec=spec, step="0", rank="0")
    assert at.error[0].value == "That batch cannot be replayed."
