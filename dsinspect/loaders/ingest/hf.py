"""Hugging Face `datasets` directories written by `save_to_disk`, and plain Arrow IPC files.

Read with pyarrow alone (no `datasets` import): `state.json` lists the Arrow stream files in order,
`dataset_info.json` (or the Arrow schema's `huggingface` metadata) names the features. Media features
(`Image()`, `Audio()`, `Video()`, `Pdf()`) are stored as structs `{bytes, path}`; they come out as
their bytes (`pa.binary()`). A value that has only a path — a file on the writer's disk — cannot be
ingested and is a UserError naming the file, field and row. A `DatasetDict` directory needs the
`split` option unless it has one split.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.errors import UserError
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.format.pathnames import check_component, check_relative
from dsinspect.loaders.ingest.normalize import normalize_batch, normalize_schema
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_BYTES, BATCH_ROWS, SourceFile, list_files, open_file, read_bytes
from dsinspect.loaders.store.storage import join, url_to_fs

__all__ = ["HfSource", "MEDIA_ROLES"]

MEDIA_ROLES = {"Image": "image", "Video": "video", "Audio": "bytes", "Pdf": "bytes"}
_FILE_MAGIC = b"ARROW1"


class HfSource:
    def __init__(self, spec: SourceSpec):
        self.spec = spec

    @cached_property
    def _root(self) -> str:
        """The dataset directory (a split's, for a DatasetDict), or '' for loose Arrow files."""
        fs, path = url_to_fs(self.spec.url)
        if not fs.isdir(path):
            return ""
        root = fs.unstrip_protocol(path)
        if fs.exists(join(path, "dataset_dict.json")):
            splits = _load_json(join(root, "dataset_dict.json")).get("splits", [])
            split = self.spec.options.get("split") or (splits[0] if len(splits) == 1 else None)
            if split not in splits:
                raise UserError(f"{self.spec.url}: a DatasetDict with splits {', '.join(splits)}; "
                                "choose one with the split option")
            root = join(root, check_component(split, f"split name in {join(root, 'dataset_dict.json')}"))
        return root if url_to_fs(root)[0].exists(join(url_to_fs(root)[1], "state.json")) else ""

    @cached_property
    def files(self) -> list[SourceFile]:
        if not self._root:
            return list_files(self.spec.url, (".arrow",), "Arrow files")
        state = _load_json(join(self._root, "state.json"))
        where = f"data file name in {join(self._root, 'state.json')}"
        names = [check_relative(d["filename"], where) for d in state.get("_data_files", [])]
        if not names:
            raise UserError(f"{join(self._root, 'state.json')}: lists no data files")
        return [list_files(join(self._root, n))[0] for n in names]

    def parts(self) -> list[Part]:
        return [Part(i, f.url, f.size, stamp=f.stamp) for i, f in enumerate(self.files)]

    @cached_property
    def _raw_schema(self) -> pa.Schema:
        with open_file(self.files[0].url) as f:
            return _reader(f, self.files[0].url).schema

    @cached_property
    def _media(self) -> dict[str, str]:
        """Media field name → its feature type (Image, Audio, ...)."""
        features = self._features()
        media = {}
        for f in self._raw_schema:
            kind = features.get(f.name, {}).get("_type") if isinstance(features.get(f.name), dict) else None
            if _is_media_struct(f.type) and (kind in MEDIA_ROLES or not features):
                media[f.name] = kind or ""
        return media

    def _features(self) -> dict:
        info_url = join(self._root, "dataset_info.json") if self._root else ""
        if info_url and url_to_fs(info_url)[0].exists(url_to_fs(info_url)[1]):
            return _load_json(info_url).get("features") or {}
        meta = (self._raw_schema.metadata or {}).get(b"huggingface")
        try:
            return json.loads(meta)["info"]["features"] if meta else {}
        except (ValueError, KeyError, TypeError):
            return {}

    @cached_property
    def _schema(self) -> pa.Schema:
        fields = [pa.field(f.name, pa.binary()) if f.name in self._media else f for f in self._raw_schema]
        return normalize_schema(pa.schema(fields), self.files[0].url)

    def schema(self) -> pa.Schema:
        return self._schema

    def hints(self) -> Mapping[str, Any]:
        return {"roles": {name: MEDIA_ROLES[kind] for name, kind in self._media.items() if kind in MEDIA_ROLES},
                "hf_features": {name: kind for name, kind in self._media.items()}}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        row = 0
        with open_file(part.url) as f:
            reader = _reader(f, part.url)
            if reader.schema.names != self._raw_schema.names:
                raise UserError(f"{part.url}: columns {reader.schema.names} differ from the source's "
                                f"{self._raw_schema.names}")
            for batch in _batches(reader, part.url):
                for piece in _bounded(batch):
                    yield normalize_batch(self._unwrap_media(piece, part.url, row), self._schema, part.url)
                    row += piece.num_rows

    def _unwrap_media(self, batch: pa.RecordBatch, url: str, first_row: int) -> pa.RecordBatch:
        columns = []
        for name, column in zip(batch.schema.names, batch.columns):
            columns.append(_media_bytes(column, url, name, first_row) if name in self._media else column)
        return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _is_media_struct(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and {t.field(i).name for i in range(t.num_fields)} == {"bytes", "path"}


def _media_bytes(column: pa.Array, url: str, name: str, first_row: int) -> pa.Array:
    data, path = pc.struct_field(column, "bytes"), pc.struct_field(column, "path")
    path_only = pc.and_(pc.is_null(data), pc.is_valid(path))
    if pc.any(path_only).as_py():
        i = pc.index(path_only, True).as_py()
        raise UserError(f"{url}: field {name!r} row {first_row + i} holds only a path ({path[i].as_py()!r}), "
                        "not the file's bytes; save the dataset with the media embedded")
    data = pc.if_else(pc.is_valid(column), data, pa.scalar(None, data.type))
    return data.cast(pa.binary())


def _reader(f, url: str):
    """An IPC file or stream reader, whichever `f` holds."""
    try:
        if f.read(len(_FILE_MAGIC)) == _FILE_MAGIC:
            f.seek(0)
            return pa.ipc.open_file(f)
        f.seek(0)
        return pa.ipc.open_stream(f)
    except UNREADABLE as e:
        raise arrow_error(e, f"cannot read {url} as Arrow IPC") from None


def _batches(reader, url: str) -> Iterator[pa.RecordBatch]:
    try:
        if isinstance(reader, pa.ipc.RecordBatchFileReader):
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
        else:
            yield from reader
    except UNREADABLE as e:
        raise arrow_error(e, f"cannot read {url} as Arrow IPC") from None


def _bounded(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """`batch` in slices of at most BATCH_ROWS rows and about BATCH_BYTES bytes."""
    per_row = batch.nbytes / max(batch.num_rows, 1)
    step = max(1, min(BATCH_ROWS, int(BATCH_BYTES // max(per_row, 1))))
    for start in range(0, batch.num_rows, step):
        yield batch.slice(start, step)


def _load_json(url: str) -> dict:
    try:
        data = json.loads(read_bytes(url))
    except ValueError as e:
        raise UserError(f"{url}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{url}: expected a JSON object")
    return data
