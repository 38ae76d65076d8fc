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
from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.manifest import Field
from dsinspect.web.web_page import MONO_CLASS

APP = Path(__file__).resolve().parent.parent / "dsinspect" / "web" / "app.py"
DEMO = str(bundled_catalog_path())
SCRIPT_PAYLOAD = "<script>window.__pwned=1</script>"
IMG_PAYLOAD = "<img src=x onerror=window.__pwned=1>"
PAYLOADS = (SCRIPT_PAYLOAD, IMG_PAYLOAD)


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
        blocks += [html.unescape(b) for b in re.findall(f'<div class="{MONO_CLASS}">(.*?)</div>', m.value, re.S)]
    return "\n".join(blocks)


def texts(at: AppTest) -> list[str]:
    return [t.value for t in at.text]


def param(at: AppTest, name: str):
    """A query parameter's value, whichever way this Streamlit version reports it."""
    value = at.query_params.get(name)
    return value[0] if isinstance(value, list) else value
