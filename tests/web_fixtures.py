"""A small catalog for the web tests (a picture, and text fields holding XSS payloads), and the
AppTest helpers every web page test uses."""

from __future__ import annotations

import html
import io
import re
from pathlib import Path

import pyarrow as pa
from PIL import Image
from streamlit.testing.v1 import AppTest

from dsinspect.defaults import bundled_catalog_path
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.web.ui.page import MONO_CLASS

APP = Path(__file__).resolve().parent.parent / "dsinspect" / "web" / "app.py"
DEMO = str(bundled_catalog_path())
SCRIPT_PAYLOAD = "<script>window.__pwned=1</script>"
IMG_PAYLOAD = "<img src=x onerror=window.__pwned=1>"
PAYLOADS = (SCRIPT_PAYLOAD, IMG_PAYLOAD)
# markup that makes a browser fetch from, or link to, another origin if it is rendered
MD_IMG = "![mdimg](http://198.51.100.1/x.png)"
HTML_IMG = "<img src=http://198.51.100.2/y.png>"
JS_LINK = "[jslink](javascript:alert(1))"
UNC_IMG = "![unc](\\\\198.51.100.3\\u.png)"  # a browser reads \\host\\path as //host/path: no slash needed
# bare URLs and an e-mail address: GFM makes each a link (off-site, or mailto:) by its text alone
BARE_URL, BARE_WWW, BARE_MAIL = "http://198.51.100.4/bare", "www.example.org/w", "someone@example.org"
MARKUP = (MD_IMG, HTML_IMG, JS_LINK, UNC_IMG, BARE_URL, BARE_WWW, BARE_MAIL)


def png(width: int = 64, height: int = 48, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buf, "PNG")
    return buf.getvalue()


def write_web_catalog(root: str) -> Catalog:
    """`pics` (two PNG images with captions) and `xss` (payloads in text, scalar and JSON fields)."""
    cat = Catalog(root)
    pic_fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("image", pa.binary(), "image"),
                  Field("caption", pa.string(), "text")]
    cat.write_version("pics", [{"id": 0, "image": png(), "caption": "a red box"},
                               {"id": 1, "image": png(32, 32, (20, 20, 200)), "caption": IMG_PAYLOAD}],
                      pic_fields, message="two pictures", tags=["v1"], created_at="2026-01-01T00:00:00Z")
    xss_fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text"),
                  Field("label", pa.string(), "scalar"), Field("meta", pa.string(), "json")]
    rows = [{"id": i, "text": f"before {p} after", "label": p, "meta": '{"note": "%s"}' % p.replace('"', "'")}
            for i, p in enumerate(PAYLOADS)]
    cat.write_version("xss", rows, xss_fields, message=SCRIPT_PAYLOAD, tags=["v1"], created_at="2026-01-01T00:00:00Z")
    return cat


def write_markup_catalog(root: str) -> Catalog:
    """`mk`, two versions whose rows, field names (the key field's too), messages, tags, image
    captions and JSON hold MARKUP (bare URLs too); v2 changes row 0 and adds row 2; and a run record over mk@v2
    named UNC_IMG (a name can hold no slash, but a browser reads backslashes as slashes)."""
    import json

    from dsinspect.loaders.order.spec import RunSpec
    from dsinspect.loaders.records.recorder import RunRecorder

    cat = Catalog(root)
    key, text = f"key {MD_IMG}", f"text {HTML_IMG}"
    fields = [Field(key, pa.int64(), "scalar", nullable=False), Field(text, pa.string(), "text"),
              Field(f"label {JS_LINK}", pa.string(), "scalar"), Field(f"meta {UNC_IMG}", pa.string(), "json"),
              Field("image", pa.binary(), "image"), Field(f"caption {MD_IMG}", pa.string(), "text"),
              Field(f"site {BARE_URL}", pa.string(), "scalar")]
    body = " · ".join(MARKUP)

    def row(i: int, note: str) -> dict:
        return {key: i, text: f"{note}\n\n{MD_IMG}\n{body}", f"label {JS_LINK}": body,
                f"meta {UNC_IMG}": json.dumps({"note": body}), "image": png(), f"caption {MD_IMG}": body,
                f"site {BARE_URL}": f"{BARE_WWW} {BARE_MAIL}"}

    cat.write_version("mk", [row(0, "first"), row(1, "second")], fields, key=key, message=f"v1 {body}",
                      tags=["v1"], created_at="2026-01-01T00:00:00Z")
    cat.write_version("mk", [row(0, f"changed {UNC_IMG}"), row(1, "second"), row(2, "third")], fields, key=key,
                      message=f"v2 {body}", tags=["v2"], created_at="2026-01-02T00:00:00Z")
    tags_path = Path(root) / "datasets" / "mk" / "tags.json"
    tags = json.loads(tags_path.read_text())
    tags[MD_IMG] = tags["v2"]  # a hand-edited tags.json: tag names no writer would accept
    tags_path.write_text(json.dumps(tags))
    spec = RunSpec.create(cat, "mk@v2", batch_size=2, world_size=1, shuffle="none")
    recorder = RunRecorder(str(Path(root) / "runs" / UNC_IMG), 0)
    recorder.begin(spec)
    recorder.close()
    return cat


XFORM = "def tag(batch):\n    return {'id_x10': [i * 10 for i in batch.table.column('id').to_pylist()]}\n"


def write_web_run_catalog(root: Path) -> str:
    """The web catalog in ROOT/cat with a recorded run (runs/job1: pics, 2 ranks, 2 steps), and a job's
    transform module (ROOT/webxform.py, `webxform:tag`); the catalog's path."""
    from dsinspect.loaders.audit.replay import replay
    from dsinspect.loaders.order.spec import RunSpec
    from dsinspect.loaders.records.recorder import RunRecorder

    cat = write_web_catalog(str(root / "cat"))
    spec = RunSpec.create(cat, "pics@v1", batch_size=1, world_size=2, shuffle="none")
    for rank in (0, 1):  # what the job's Loader logs (tests/test_replay.py proves the two agree)
        recorder = RunRecorder(str(root / "cat" / "runs" / "job1"), rank)
        recorder.begin(spec)
        for step in (0, 1):
            batch = replay(spec, step, rank, catalog=cat)
            recorder.record(step, batch.epoch, batch.fingerprints[rank], 1)
        recorder.close()
    (root / "webxform.py").write_text(XFORM)
    return str(root / "cat")


# -- AppTest helpers -----------------------------------------------------------------------------

def run(**params: str) -> AppTest:
    """The app opened at `?k=v&…` (a deep link), run once, with no exception raised."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def codes(at: AppTest) -> str:
    """Every monospace block the page shows: st.code values and web_page.mono blocks (unescaped)."""
    blocks = [c.value for c in at.code]
    for m in at.markdown:
        blocks += [html.unescape(b) for b in re.findall(f'<div class="{MONO_CLASS}"[^>]*>(.*?)</div>', m.value, re.S)]
    return "\n".join(blocks)


def plain(markdown: str) -> str:
    """What web_page.md's escaped Markdown shows: the text with its backslash escapes removed."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def texts(at: AppTest) -> list[str]:
    return [t.value for t in at.text]


def param(at: AppTest, name: str):
    """A query parameter's value, whichever way this Streamlit version reports it."""
    value = at.query_params.get(name)
    return value[0] if isinstance(value, list) else value


def backgrounds(pg, part: str = "response") -> list[str]:
    """The background colour of each visible token cell of a rollout panel's `part`, as Chromium drew it."""
    cells = pg.locator(f'.dsi-rollout[data-part="{part}"] .dsi-rc').filter(visible=True)
    return cells.evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)")


def expected(view, color: str, part: str = "response") -> list[str]:
    """The colours `shade` on `scale` gives `view`'s `part` (what every face draws), as CSS has them."""
    from dsinspect.inspect.rollout_view import scale, shade
    from dsinspect.web.models.rollout import colour

    lo, hi = scale(view, color)
    return [colour(shade(c.values.get(color), color, lo, hi), color) or "rgba(0, 0, 0, 0)"
            for c in getattr(view, part)]
