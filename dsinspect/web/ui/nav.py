"""Which page a URL opens: deep links carry query parameters, and the root URL opens the page they name."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Mapping

from PIL import Image, ImageDraw

__all__ = ["PAGES", "page_file", "page_for", "favicon"]

HERE = Path(__file__).resolve().parent.parent  # the router's folder: page paths are relative to it
# key -> (script, title, icon)
PAGES = {
    "catalog": ("app_pages/catalog.py", "Catalog", ":material/folder:"),
    "dataset": ("app_pages/dataset.py", "Dataset", ":material/table:"),
    "sample": ("app_pages/sample.py", "Sample", ":material/search:"),
    "group": ("app_pages/group.py", "Group", ":material/view_column:"),
    "replay": ("app_pages/replay.py", "Replay", ":material/replay:"),
    "runs": ("app_pages/runs.py", "Runs", ":material/timeline:"),
    "diff": ("app_pages/diff.py", "Diff", ":material/compare_arrows:"),
    "stats": ("app_pages/stats.py", "Statistics", ":material/bar_chart:"),
}


def page_file(key: str) -> str:
    """A page's script, as st.page_link and st.switch_page take it (relative to the router)."""
    return PAGES[key][0]


def page_for(params: Mapping[str, str]) -> str:
    """The page a root URL with these query parameters opens: `address` with an index names a sample,
    without one a dataset version, with `rollout` one rollout (a sample, by its id), with `group` a group of
    rollouts; `spec` or `run` a replay; `a` and `b` a diff; nothing the catalog."""
    if (params.get("spec") or params.get("run")) and "replay" in PAGES:
        return "replay"
    if params.get("a") and params.get("b") and "diff" in PAGES:
        return "diff"
    address = params.get("address")
    if address and params.get("group") and "group" in PAGES:
        return "group"
    if address:
        return "sample" if ":" in address or params.get("rollout") else "dataset"
    return "catalog"


@cache
def favicon() -> Image.Image:
    """The tab icon, drawn here so the browser asks no other host for it: a small table."""
    img = Image.new("RGB", (32, 32), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    draw.rectangle((3, 5, 28, 26), outline=(38, 84, 160), width=2)
    for y in (12, 19):
        draw.line((3, y, 28, y), fill=(38, 84, 160), width=2)
    draw.line((13, 5, 13, 26), fill=(38, 84, 160), width=2)
    return img
