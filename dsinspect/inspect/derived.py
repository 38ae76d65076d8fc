"""Values derived from each row, by name, for queries and statistics: token counts, text lengths,
image sizes, formats and EXIF orientations, video frame counts and durations, episode lengths and
returns. Pure: a shard's rows in, one row of derived values per row out (nulls where a value cannot
be had: a broken image is a null width, never an error). Media are probed the way the viewers probe
them (Pillow's safe formats, PyAV demuxing without decoding), so a query and a sample page agree.

A column is `<field>_<what>` (`tokens_len`, `caption_chars`, `image_width`, `clip_seconds`,
`episode_return`); one that would shadow a stored field is left out. `kind` hashes the derivations
with their format version: a stored sidecar is reused only by the same derivations.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.loaders.format.manifest import Field, canonical_json, sha256_hex
from dsinspect.loaders.format.roles import Role

__all__ = ["Derived", "derivations", "derive", "derived_kind"]

FORMAT = "dsinspect.derived/1"


@dataclass(frozen=True)
class Derived:
    name: str          # the column's name in a query
    field: str         # the stored field it is derived from
    what: str          # len, chars, bytes, width, height, format, orientation, frames, seconds, steps, return
    type: pa.DataType
    about: str         # one line for `--help` and the filter box's hint


# role -> [(what, type, about)]
_BY_ROLE: dict[Role, list[tuple[str, pa.DataType, str]]] = {
    Role.TOKENS: [("len", pa.int64(), "tokens in the sample")],
    Role.TEXT: [("chars", pa.int64(), "characters (code points)"), ("bytes", pa.int64(), "UTF-8 bytes")],
    Role.IMAGE: [("bytes", pa.int64(), "encoded size"), ("width", pa.int32(), "width as stored"),
                 ("height", pa.int32(), "height as stored"), ("format", pa.string(), "JPEG, PNG, ..."),
                 ("orientation", pa.int32(), "EXIF orientation (1-8; null: none)")],
    Role.VIDEO: [("bytes", pa.int64(), "encoded size"), ("frames", pa.int64(), "frames (demuxed)"),
                 ("seconds", pa.float64(), "duration"), ("width", pa.int32(), "frame width"),
                 ("height", pa.int32(), "frame height")],
    Role.TRAJECTORY: [("steps", pa.int64(), "episode length"), ("return", pa.float64(), "sum of rewards")],
    Role.BYTES: [("bytes", pa.int64(), "size")],
}


def derivations(fields: Sequence[Field]) -> list[Derived]:
    """The derived columns of a version with these fields, in field order."""
    taken = {f.name for f in fields}
    out = []
    for f in fields:
        for what, kind, about in _BY_ROLE.get(Role(f.role), []):
            name = f"{f.name}_{what}"
            if name not in taken:
                taken.add(name)
                out.append(Derived(name, f.name, what, kind, about))
    return out


def derived_kind(derived: Sequence[Derived], kept: Sequence[str] = ()) -> str:
    """A content hash of the derivations (and the stored fields kept beside them): names a stored
    sidecar's directory."""
    return sha256_hex(canonical_json({"format": FORMAT, "kept": list(kept),
                                      "columns": [[d.name, d.field, d.what] for d in derived]}))


def derive(table: pa.Table, derived: Sequence[Derived]) -> pa.Table:
    """One row of derived values per row of `table` (which holds the fields they come from);
    `derived` is not empty."""
    columns: dict[str, pa.Array] = {}
    by_field: dict[str, list[Derived]] = {}
    for d in derived:
        by_field.setdefault(d.field, []).append(d)
    for field, wanted in by_field.items():
        values = table.column(field)
        whats = {d.what for d in wanted}
        found = _probe(values, whats)
        for d in wanted:
            columns[d.name] = pa.array(found[d.what], d.type) if isinstance(found[d.what], list) \
                else found[d.what].cast(d.type)
    return pa.table(columns)


def _probe(values: pa.ChunkedArray, whats: set[str]) -> dict[str, Any]:
    """Each requested value for every row of one column: Arrow compute where it can, else per row."""
    found: dict[str, Any] = {}
    kind = values.type
    if "len" in whats:
        found["len"] = pc.list_value_length(values)
    if "chars" in whats:
        found["chars"] = pc.utf8_length(values)
    if "bytes" in whats:
        found["bytes"] = pc.binary_length(values)
    media = whats & {"width", "height", "format", "orientation", "frames", "seconds", "steps", "return"}
    if media:
        probe = _trajectory if pa.types.is_struct(kind) else _video if "frames" in whats else _image
        rows = [probe(v) for v in values.to_pylist()]
        for what in media:
            found[what] = [None if r is None else r.get(what) for r in rows]
    return found


def _image(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    from PIL import Image

    from dsinspect.loaders.format.image_formats import SAFE_FORMATS
    try:
        with Image.open(io.BytesIO(data), formats=SAFE_FORMATS) as img:  # the header only: nothing decoded
            orientation = img.getexif().get(0x0112)
            return {"width": img.width, "height": img.height, "format": img.format,
                    "orientation": orientation if isinstance(orientation, int) else None}
    except Exception:  # noqa: BLE001 - any unreadable image is a row of nulls, never a failed query
        return None


def _video(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    from dsinspect.inspect.video import VideoView, video_view
    view = video_view(data)
    if not isinstance(view, VideoView):
        return None
    return {"frames": view.frame_count, "seconds": view.duration, "width": view.width, "height": view.height}


def _trajectory(value: dict | None) -> dict[str, Any] | None:
    if value is None:
        return None
    from dsinspect.inspect.trajectory import trajectory_view
    try:
        view = trajectory_view(value)
    except Exception:  # noqa: BLE001 - a malformed episode is a row of nulls
        return None
    return {"steps": view.length, "return": view.episode_return}

