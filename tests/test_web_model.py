"""The web app's logic without Streamlit: routing, view data, escaping, and module hygiene."""

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from web_fixtures import IMG_PAYLOAD, SCRIPT_PAYLOAD, write_web_catalog

import dsinspect
from dsinspect.errors import UserError
from dsinspect.web.models import catalog as catalogs
from dsinspect.web.models import sample as samples
from dsinspect.web.ui.nav import page_for

WEB = Path(samples.__file__).resolve().parent.parent  # dsinspect/web, the router's folder


@pytest.fixture(scope="module")
def demo():
    return dsinspect.open_catalog(str(dsinspect.defaults.bundled_catalog_path()))


@pytest.mark.parametrize("params, page", [
    ({}, "catalog"), ({"address": "demo-text"}, "dataset"), ({"address": "demo-text@v1"}, "dataset"),
    ({"address": "demo-text@v1:17"}, "sample"), ({"address": ""}, "catalog"),
])
def test_root_url_opens_the_page_its_parameters_name(params, page):
    assert page_for(params) == page


def test_configured_catalog_comes_from_the_environment_only(monkeypatch, tmp_path):
    monkeypatch.setenv("DSINSPECT_CATALOG", str(tmp_path))
    assert catalogs.configured_url() == str(tmp_path)
    monkeypatch.delenv("DSINSPECT_CATALOG")
    assert catalogs.configured_url() == str(dsinspect.defaults.bundled_catalog_path())


def test_catalog_rows_list_every_version(demo):
    rows = catalogs.catalog_rows(demo)
    assert {r["dataset"] for r in rows} == {"demo-text", "demo-images", "demo-video", "demo-rl", "demo-rollouts"}
    assert len(rows) == 10 and all(len(r["version"]) == 12 for r in rows)


def test_dataset_model_has_schema_shards_and_versions(demo):
    info = catalogs.dataset_model(demo, "demo-text@v1")
    assert [f["name"] for f in info["schema"]] == ["doc_id", "lang", "text", "tokens"]
    assert info["schema"][3]["type"] == "list<item: int32>" and "huggingface" in info["schema"][3]["options"]
    assert sum(s["rows"] for s in info["shards"]) == info["rows"] == 240
    assert len(info["versions"]) == 2 and "v1" in info["tags"]


def test_sample_table_pages_and_clamps(demo):
    first = catalogs.sample_table(demo, "demo-rl@v1", 0, page_size=16)
    assert first["pages"] == 3 and [r["index"] for r in first["rows"]] == list(range(16))
    last = catalogs.sample_table(demo, "demo-rl@v1", 99, page_size=16)
    assert last["page"] == 2 and [r["index"] for r in last["rows"]] == list(range(32, 40))
    assert last["rows"][0]["address"].startswith("demo-rl@") and last["rows"][0]["address"].endswith(":32")


@pytest.mark.parametrize("address, field, kind, keys", [
    ("demo-text@v1:17", "tokens", "tokens", {"pieces", "stats", "tokenizer"}),
    ("demo-text@v1:17", "text", "text", {"text", "visible"}),
    ("demo-images@v1:3", "image", "image", {"png", "width", "height"}),
    ("demo-video@v1:1", "video", "video", {"strip", "frame_count", "mime"}),
    ("demo-video@v1:1", "info", "json", {"pretty"}),
    ("demo-rl@v1:2", "trajectory", "trajectory", {"rows", "rewards", "returns"}),
])
def test_sample_model_decodes_every_role(demo, address, field, kind, keys):
    sample = samples.sample_model(demo, address)
    f = sample.field(field)
    assert f.kind == kind and keys <= set(f.view)
    assert sample.row_hash_ok and len(f.sha256) == 64 and f.raw


def test_image_is_full_size_png(demo):
    f = samples.sample_model(demo, "demo-images@v1:3").field("image")
    import io

    from PIL import Image
    img = Image.open(io.BytesIO(f.view["png"]))
    assert img.format == "PNG" and img.size == (f.view["width"], f.view["height"])


def test_video_strip_and_frames(demo):
    f = samples.sample_model(demo, "demo-video@v1:1").field("video")
    assert 2 <= len(f.view["strip"]) <= 8 and f.view["strip"][0][0] == 0
    png, label = samples.frame_png(demo, "demo-video@v1:1", "video", 3)
    assert png.startswith(b"\x89PNG") and label.startswith("frame 3")
    png, label = samples.frame_png(demo, "demo-video@v1:1", "video", 10_000)
    assert png is None and "out of range" in label


def test_token_pieces_sum_to_the_decoded_bytes(demo):
    v = samples.sample_model(demo, "demo-text@v1:17").field("tokens").view
    pieces = v["pieces"]
    assert len(pieces) == v["count"] and pieces[0][3] == 0
    assert all(a[4] == b[3] for a, b in zip(pieces, pieces[1:]))


def test_token_html_escapes_everything():
    pieces = [(0, 5, SCRIPT_PAYLOAD, 0, 33, False, False), (1, 6, IMG_PAYLOAD, 33, 69, True, False),
              (2, 7, '" onmouseover="x', 69, 84, False, True)]
    out = samples.token_html(pieces)
    assert "<script" not in out and "<img" not in out and 'onmouseover="x' not in out
    assert "&lt;script&gt;" in out and "&lt;img src=x onerror=window.__pwned=1&gt;" in out
    assert out.count('<span class="dsi-tok" title="#') == 3 and 'title="#1 id 6 bytes 33–69 special"' in out


def test_hex_text_pages():
    text, page, pages = samples.hex_text(bytes(range(256)) * 3, page=1)
    assert pages == 2 and page == 1 and text.startswith("00000200  00 01 02")
    assert samples.hex_text(b"")[0] == "(0 bytes)"


@pytest.mark.parametrize("address", ["../../etc/passwd:0", "/etc/passwd", "demo-text@../../x:1", "a/b:1", "~root:0"])
def test_paths_in_addresses_are_refused(demo, address):
    with pytest.raises(UserError):
        samples.sample_model(demo, address)


def test_payload_text_stays_text(tmp_path):
    cat = write_web_catalog(str(tmp_path / "cat"))
    sample = samples.sample_model(cat, "xss:0")
    assert sample.field("text").view["text"] == f"before {SCRIPT_PAYLOAD} after"
    assert sample.field("label").view["display"] == SCRIPT_PAYLOAD


def test_no_web_module_shadows_another_module():
    """`streamlit run app.py` puts dsinspect/web first on sys.path: no name there may hide another module."""
    others = [p for p in sys.path if Path(p or ".").resolve() != WEB]
    names = [p.stem for p in WEB.glob("*.py")] + [p.parent.name for p in WEB.glob("*/__init__.py")]
    for name in names:
        if name == "__init__":
            continue
        assert name not in sys.stdlib_module_names, name
        spec = importlib.util.find_spec(name) if name not in sys.modules else sys.modules[name].__spec__
        found = spec.origin if spec else None
        assert found is None or WEB in Path(found).resolve().parents, f"{name} shadows {found}"
        assert importlib.machinery.PathFinder.find_spec(name, others) is None, name


def _imports(script: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_web_and_tui_never_import_each_other():
    for part, other in (("web", "tui"), ("tui", "web")):
        for script in (WEB.parent / part).rglob("*.py"):
            assert not any(m == f"dsinspect.{other}" or m.startswith(f"dsinspect.{other}.")
                           for m in _imports(script)), script
    code = "import sys, dsinspect.web.models.sample, dsinspect.web.ui.nav; print('dsinspect.tui' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_spec_round_trips_through_the_url(demo):
    from dsinspect.web.models import replay as web_replay
    spec = web_replay.build_spec(demo, "demo-text@v1", 0, 8, 4, "global")
    text = web_replay.encode_spec(spec)
    assert "/" not in text and "=" not in text and web_replay.decode_spec(text).hash == spec.hash
    assert web_replay.decode_spec(spec.dumps()).hash == spec.hash
    model = web_replay.replay_model(demo, text, 3, "1")
    assert [r["index"] for r in model["rows"]][:1] == [15]
    assert web_replay.batch_parquet(demo, model["spec"], 3, "1").startswith(b"PAR1")
    assert len(web_replay.replay_model(demo, text, 3, "all")["rows"]) == 32


@pytest.mark.parametrize("name", ["../../etc", "/etc/passwd", "a/b"])
def test_a_spec_never_names_a_path(demo, name):
    import json

    from dsinspect.web.models import replay
    data = replay.build_spec(demo, "demo-text@v1", 0, 8, 1, "global").to_json()
    data["order"]["sources"][0]["name"] = name
    with pytest.raises(UserError):
        replay.replay_model(demo, json.dumps(data), 0, "0")


def test_mono_blocks_escape_everything_and_stay_one_html_block():
    """web_page.mono: any text, blank lines and Markdown syntax included, reaches the browser as one
    raw HTML element whose only text is the original (nothing for Markdown or HTML to interpret)."""
    from html.parser import HTMLParser

    from dsinspect.web.ui.page import MONO_CLASS, mono

    class Sink:
        def markdown(self, body, unsafe_allow_html):
            self.body = body

    class Text(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.tags, self.text = [], ""

        def handle_starttag(self, tag, attrs):
            self.tags.append((tag, attrs))

        def handle_data(self, data):
            if self.tags and self.tags[-1][0] == "div":
                self.text += data

    text = f"a\n\n# not a heading\r\n{SCRIPT_PAYLOAD}\n\n{IMG_PAYLOAD} [l](javascript:x) *b*\n  indented"
    sink = Sink()
    mono(text, sink)
    assert "\n" not in sink.body and "<script" not in sink.body and "<img" not in sink.body
    parsed = Text()
    parsed.feed(sink.body)
    assert [t for t, _ in parsed.tags] == ["style", "div"] and parsed.tags[1][1] == [("class", MONO_CLASS)]
    assert parsed.text == text
