"""A small catalog for the web tests: a picture, and text fields holding XSS payloads."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
from PIL import Image

from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.manifest import Field

APP = Path(__file__).resolve().parent.parent / "dsinspect" / "web" / "app.py"
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
