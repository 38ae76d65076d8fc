"""The Catalog and Dataset pages' data: the configured catalog's versions, one version's schema, shards and
versions, and its rows a page at a time (media as thumbnails). Plain, picklable data; no Streamlit.
Every input that comes from a URL is an address, parsed by `dsinspect.loaders.store.address`; none is
used as a path."""

from __future__ import annotations

import base64
import json
import warnings
from typing import Any

import pyarrow as pa
from PIL import Image

from dsinspect.defaults import bundled_catalog_path
from dsinspect.inspect.cells import cell
from dsinspect.inspect.sizes import human_bytes
from dsinspect.inspect.views import ErrorView
from dsinspect.loaders.store.address import parse_address
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.describe import catalog_listing, version_info
from dsinspect.web import settings

__all__ = ["configured_url", "catalog_rows", "catalog_broken", "dataset_model", "sample_table", "thumbnails",
           "media_columns", "TABLE_PAGE", "THUMB_SIDE"]

TABLE_PAGE = 20
THUMB_SIDE = 64         # pixels: the longer side of a table's thumbnail


def configured_url() -> str:
    """The one catalog this app reads: the one `dsinspect web` was given (see `settings`), else the bundled one."""
    return settings.catalog_url() or str(bundled_catalog_path())


def catalog_rows(catalog: Catalog) -> list[dict[str, Any]]:
    """One row per dataset version, newest first within a dataset."""
    rows = []
    for ds in catalog_listing(catalog)["datasets"]:
        for v in ds["versions"]:
            rows.append({"dataset": ds["name"], "version": v["short_id"], "tags": ", ".join(v["tags"]),
                         "rows": v["rows"], "bytes": human_bytes(v["bytes"]), "shards": v["shards"],
                         "created": (v["created_at"] or "")[:10], "message": v["message"]})
    return rows


def catalog_broken(catalog: Catalog) -> list[dict[str, Any]]:
    """Stored files of the catalog that cannot be read (a truncated manifest, a damaged tags.json):
    dataset, version (short id, or "tags.json"), tags, file and reason; `catalog_rows` lists the rest."""
    return [{"dataset": ds["name"], "version": b["short_id"] or "tags.json", "tags": ", ".join(b["tags"]),
             "file": b["path"], "reason": b["reason"]}
            for ds in catalog_listing(catalog)["datasets"] for b in ds["broken"]]


def dataset_model(catalog: Catalog, address: str) -> dict[str, Any]:
    """Schema, shards, tags and every version of the dataset version `address` names."""
    addr = parse_address(address)
    version = catalog.resolve(addr)
    info = version_info(version)
    listing = [d for d in catalog_listing(catalog)["datasets"] if d["name"] == addr.name]
    info["versions"] = listing[0]["versions"] if listing else []
    info["schema"] = [{"name": f.name, "role": f.role.value, "type": str(f.type), "nullable": f.nullable,
                       "options": json.dumps(dict(f.options), sort_keys=True) if f.options else ""}
                      for f in version.fields]
    return info


def sample_table(catalog: Catalog, address: str, page: int, page_size: int = TABLE_PAGE) -> dict[str, Any]:
    """One page of rows of a version, each value cut to a short cell, with the sample's address."""
    version = catalog.resolve(parse_address(address))
    pages = max(1, -(-version.num_rows // page_size))
    page = min(max(page, 0), pages - 1)
    indices = list(range(page * page_size, min(version.num_rows, (page + 1) * page_size)))
    names = [f.name for f in version.fields]
    media = media_columns(version)
    table = version.take(indices, columns=names) if indices else None
    rows = []
    for i, index in enumerate(indices):
        row = {"index": index, "address": f"{version.name}@{version.id[:12]}:{index}"}
        for n in names:
            value = table.column(n)[i]  # the Arrow scalar: float32 numbers keep their own digits
            row[n] = thumbnail(value.as_py(), media[n]) if n in media else _cell(value)
        rows.append(row)
    return {"page": page, "pages": pages, "rows": rows, "columns": ["index", *names, "address"], "media": list(media)}


def _cell(value: Any) -> str:
    """A short table cell; bytes as their size for people."""
    if pa.types.is_binary(value.type) or pa.types.is_large_binary(value.type):
        return "null" if not value.is_valid else f"<{human_bytes(len(value.as_py()))}>"
    return cell(value)


def media_columns(version: Any) -> dict[str, str]:
    """The image and video fields of a version, by name: a table shows them as thumbnails."""
    return {f.name: f.role.value for f in version.fields if f.role.value in ("image", "video")}


def thumbnails(version: Any, indices: list[int]) -> dict[str, list[str | None]]:
    """Thumbnails (PNG data URLs, or None) of the image and video fields of rows `indices`."""
    media = media_columns(version)
    if not media or not indices:
        return {n: [None] * len(indices) for n in media}
    table = version.take(indices, columns=list(media))
    return {n: [thumbnail(v, kind) for v in table.column(n).to_pylist()] for n, kind in media.items()}


def thumbnail(value: Any, kind: str) -> str | None:
    """An image (upright by its EXIF orientation) or a video's first frame as a small PNG data URL,
    THUMB_SIDE pixels on its longer side; None when null or undecodable (the Sample page says why)."""
    if not isinstance(value, (bytes, bytearray)) or not value:
        return None
    from dsinspect.inspect.images import image_view
    from dsinspect.inspect.video import video_view

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        if kind == "image":
            view = image_view(bytes(value))
            png = view.png(THUMB_SIDE, oriented=True) if not isinstance(view, ErrorView) else None
        else:
            video = video_view(bytes(value))
            frame = video.frame(0, max_side=THUMB_SIDE) if not isinstance(video, ErrorView) else None
            png = frame.png() if frame is not None and not isinstance(frame, ErrorView) else None
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii") if png else None
