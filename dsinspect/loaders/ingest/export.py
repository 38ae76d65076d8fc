"""Export a version as Parquet, JSON Lines or WebDataset tar files, one file per shard, on any fsspec URL;
or its tokens in a pretraining format (`megatron`, `olmo`, `nanogpt`: the modules of those sources
write them, as the ecosystem's own writer does).

Every export writes a `_dsinspect.export` sidecar (fields with exact types, roles and options, the key,
how each value was written) and copies side files (tokenizers) under `_blobs/`; a Parquet export
also embeds the sidecar in each file's schema metadata. Re-ingesting the directory restores the
exact version (see docs/INGEST.md for what each format carries).

- parquet: the columns as stored, minus the row-hash column.
- jsonl: one object per row; binary values as base64 text, dates/times/timestamps/durations as
  their stored integer, decimals as text.
- webdataset: one tar per shard, sample key = the global row index (9+ digits), one member per
  field named `<key>.<field>.<ext>` (`png`/`jpg`/`webp`/`gif` or `mp4`/`webm` by magic bytes for
  media, `npy` for arrays stored as .npy files, `txt` for strings, `bin` for other binary, `json` for
  everything else; a binary array or bytes field named `*.npy`, a WebDataset member kept as its bytes,
  as `<key>.<field>`). A null value has no member.
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.errors import UserError
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field, sha256_hex
from dsinspect.loaders.format.pathnames import check_ext, check_sha256
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.ingest.restore import SIDECAR, SIDECAR_FORMAT, SIDECAR_KEY
from dsinspect.loaders.store.storage import join, refuse_read_only, url_to_fs, write_atomic
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["FORMATS", "export_version", "read_exported_blobs", "write_sidecar"]

FORMATS = ("parquet", "jsonl", "webdataset", "megatron", "olmo", "nanogpt")
# the pretraining formats: a tokens field written as the ecosystem's own writer writes it (each module says how)
_TOKEN_FORMATS = {"megatron": "dsinspect.loaders.ingest.megatron:export_megatron",
                  "olmo": "dsinspect.loaders.ingest.token_memmaps:export_olmo",
                  "nanogpt": "dsinspect.loaders.ingest.token_memmaps:export_nanogpt"}
_EXT = {"parquet": "parquet", "jsonl": "jsonl", "webdataset": "tar"}
_MTIME = 0  # fixed member times: the same version exports to the same bytes
_USTAR_NAME = 100  # bytes of a member name without a '/' (USTAR keeps exports readable by every tar reader)


def export_version(version: DatasetVersion, fmt: str, dest: str,
                   on_rows: Callable[[int], None] | None = None) -> dict:
    """Write `version` to the directory `dest`; a summary (files, rows, format)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r} (formats: {', '.join(FORMATS)})")
    if fmt in _TOKEN_FORMATS:
        import pkgutil

        return pkgutil.resolve_name(_TOKEN_FORMATS[fmt])(version, dest, on_rows)
    fs, root = url_to_fs(dest)
    refuse_read_only(fs, root)
    if fs.exists(root) and (not fs.isdir(root) or fs.ls(root, detail=False)):
        raise UserError(f"{dest}: export destination exists and is not an empty directory")
    fs.makedirs(root, exist_ok=True)
    sidecar = _sidecar(version, fmt)
    files = []
    start = 0
    for shard in range(len(version.manifest.shards)):
        path = join(root, f"part-{shard:05d}.{_EXT[fmt]}")
        groups = _row_groups(version, shard)
        with fs.open(path, "wb") as out:
            if fmt == "parquet":
                _write_parquet(out, version, groups, sidecar, on_rows)
            elif fmt == "jsonl":
                _write_jsonl(out, version, groups, on_rows)
            else:
                _write_tar(out, version, groups, start, sidecar["columns"], on_rows)
        start += version.manifest.shards[shard].rows
        files.append(fs.unstrip_protocol(path))
    write_sidecar(version, fs, root, sidecar)
    return {"address": version.address, "id": version.id, "format": fmt, "dest": dest, "files": files,
            "rows": version.num_rows}


def write_sidecar(version: DatasetVersion, fs: Any, root: str, sidecar: dict | None = None) -> None:
    """The export's side files (tokenizers, under `_blobs/`) and its sidecar (default: one without
    encodings, column names or layout, as a pretraining format's export writes it), so that ingesting
    `root` restores the version's fields, roles, options and key."""
    if sidecar is None:
        sidecar = {"format": SIDECAR_FORMAT, "export": "tokens", "source": version.address, "version_id": version.id,
                   "fields": [f.to_json() for f in version.fields], "key": version.manifest.key, "encodings": {},
                   "columns": {}, "blobs": [blob for blob, _ in _blobs(version)], "layout": {}}
    for blob, data in _blobs(version):
        path = join(root, "_blobs", check_sha256(blob["sha256"], "tokenizer blob sha256"))
        write_atomic(fs, path, data)  # no file ending: kind detection skips it
    write_atomic(fs, join(root, SIDECAR), (json.dumps(sidecar, indent=2, sort_keys=True) + "\n").encode())


def read_exported_blobs(url: str, sidecar: dict, have: Callable[[str, str], bool] = lambda sha, ext: False
                        ) -> Iterator[tuple[bytes, str]]:
    """The side files an export carried that the target does not `have`, each checked by sha256."""
    fs, path = url_to_fs(url)
    if not fs.isdir(path):
        path = path.rsplit("/", 1)[0]
    for sha, ext in _blob_names(sidecar, fs.unstrip_protocol(join(path, SIDECAR))):
        where = join(path, "_blobs", sha)
        if have(sha, ext):
            continue
        try:
            data = fs.cat_file(where)
        except OSError as e:
            raise UserError(f"{fs.unstrip_protocol(where)}: side file (tokenizer) of the export is not readable; "
                            f"copy the export's _blobs/ directory along ({e.__class__.__name__})") from None
        if sha256_hex(data) != sha:
            raise UserError(f"{fs.unstrip_protocol(where)}: content does not match the sha256 in its name")
        yield data, ext


def _blob_names(sidecar: dict, where: str) -> list[tuple[str, str]]:
    """(sha256, file ending) of each side file an export's sidecar lists; both become file names
    (here and in the catalog), so anything but a sha256 and a plain ending is refused."""
    blobs = sidecar.get("blobs", [])
    if not isinstance(blobs, list) or not all(isinstance(b, dict) for b in blobs):
        raise UserError(f"{where}: 'blobs' must be a list of objects")
    return [(check_sha256(b.get("sha256"), f"blobs[{i}].sha256 in {where}"),
             check_ext(b.get("ext"), f"blobs[{i}].ext in {where}")) for i, b in enumerate(blobs)]


# -- the sidecar -------------------------------------------------------------------------------

def _sidecar(version: DatasetVersion, fmt: str) -> dict:
    encodings = {f.name: e for f in version.fields if (e := _encoding(f, fmt))}
    columns = {f.name: _member_name(f, version) for f in version.fields} if fmt == "webdataset" else {}
    layout = {f"part-{i:05d}.{_EXT[fmt]}": _group_rows(version, i) for i in range(len(version.manifest.shards))}
    return {"format": SIDECAR_FORMAT, "export": fmt, "source": version.address, "version_id": version.id,
            "fields": [f.to_json() for f in version.fields], "key": version.manifest.key,
            "encodings": encodings, "columns": columns, "blobs": [blob for blob, _ in _blobs(version)],
            "layout": layout}


def _group_rows(version: DatasetVersion, shard: int) -> list[int]:
    """Rows per row group of a shard: a re-ingest writes the same groups, so the same shard bytes."""
    with version.catalog.fs.open(version.shard_path(shard), "rb") as f:
        meta = pq.ParquetFile(f).metadata
        return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]


def _encoding(f: Field, fmt: str) -> str | None:
    t = f.type
    if fmt == "parquet":
        return None
    if _is_binary(t):
        return "base64" if fmt == "jsonl" else None
    if fmt == "webdataset":
        return "utf-8" if pa.types.is_string(t) or pa.types.is_large_string(t) else "json"
    return None


def _blobs(version: DatasetVersion) -> list[tuple[dict, bytes]]:
    blobs = {}
    for f in version.fields:
        tok = f.options.get("tokenizer")
        if isinstance(tok, dict) and "blob" in tok:
            blobs[tok["blob"]] = version.catalog.read_blob(version.name, tok["blob"], ".json")
    return [({"sha256": sha, "ext": ".json"}, data) for sha, data in sorted(blobs.items())]


# -- reading the version -----------------------------------------------------------------------

def _row_groups(version: DatasetVersion, shard: int) -> Iterator[pa.Table]:
    """The shard's rows one row group at a time, without the row-hash column (bounded memory).
    Decoded in this thread: with Arrow's pool, a worker may release the last reference to the
    Python file object late, needing the GIL, and one that asks while the interpreter finalizes
    aborts the process (std::terminate; see verify._read_hashing)."""
    with version.catalog.fs.open(version.shard_path(shard), "rb") as f:
        pf = pq.ParquetFile(f)
        for g in range(pf.metadata.num_row_groups):
            yield pf.read_row_group(g, use_threads=False).drop_columns([HASH_COLUMN]).cast(version.manifest.schema)


# -- writers -----------------------------------------------------------------------------------

def _write_parquet(out, version: DatasetVersion, groups, sidecar: dict, on_rows) -> None:
    schema = version.manifest.schema.with_metadata({SIDECAR_KEY: json.dumps(sidecar, sort_keys=True)})
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        for table in groups:
            writer.write_table(table.replace_schema_metadata(schema.metadata))
            if on_rows:
                on_rows(table.num_rows)


def _write_jsonl(out, version: DatasetVersion, groups, on_rows) -> None:
    for table in groups:
        columns = {f.name: _json_values(table.column(f.name), f.type, f.name) for f in version.fields}
        for i in range(table.num_rows):
            row = {name: values[i] for name, values in columns.items()}
            out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")
        if on_rows:
            on_rows(table.num_rows)


def _json_values(column: pa.ChunkedArray, t: pa.DataType, name: str) -> list[Any]:
    if _is_binary(t):
        return [None if v is None else base64.b64encode(v).decode("ascii") for v in column.to_pylist()]
    if pa.types.is_temporal(t):
        return column.cast(pa.int32() if t.bit_width == 32 else pa.int64()).to_pylist()
    if pa.types.is_decimal(t):
        return [None if v is None else str(v) for v in column.to_pylist()]
    if _has_unjsonable(t):
        raise UserError(f"field {name!r} of type {t} holds binary or temporal values inside a nested type, "
                        "which JSON Lines export does not support (export as parquet)")
    return column.to_pylist()


def _write_tar(out, version: DatasetVersion, groups, start: int, columns: dict[str, str], on_rows) -> None:
    width = _key_width(version)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        row = start
        for table in groups:
            values = {f.name: _member_values(table.column(f.name), f) for f in version.fields}
            for i in range(table.num_rows):
                key = f"{row:0{width}d}"
                for f in version.fields:
                    data = values[f.name][i]
                    if data is not None:
                        _add_member(tar, f"{key}.{columns[f.name]}", data)
                row += 1
            if on_rows:
                on_rows(table.num_rows)


def _member_values(column: pa.ChunkedArray, f: Field) -> list[bytes | None]:
    t = f.type
    if _is_binary(t):
        return column.to_pylist()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [None if v is None else v.encode("utf-8") for v in column.to_pylist()]
    if _has_unjsonable(t) and not (pa.types.is_temporal(t) or pa.types.is_decimal(t)):
        raise UserError(f"field {f.name!r} of type {t} holds binary or temporal values inside a nested type, "
                        "which WebDataset export does not support (export as parquet)")
    return [None if v is None else json.dumps(v, separators=(",", ":")).encode("utf-8")
            for v in _json_values(column, t, f.name)]


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), _MTIME, 0o644
    tar.addfile(info, io.BytesIO(data))


def _member_name(f: Field, version: DatasetVersion) -> str:
    """`<field>.<ext>`, the tail of a WebDataset member name `<key>.<field>.<ext>`. A field name
    with a separator or control character would put members in other directories, or outside the
    directory the tar is extracted into ('0.x/../../y'): refused."""
    if any(c in f.name for c in "/\\") or not f.name.isprintable():
        raise UserError(f"field {f.name!r} of {version.address} cannot name a WebDataset member (it holds '/', "
                        "'\\' or a control character): export as parquet or jsonl")
    tail = f.name if _is_npy_member(f) else f"{f.name}.{_member_ext(f, version)}"
    if len(f"{_key_width(version) * '0'}.{tail}".encode()) > _USTAR_NAME:
        raise UserError(f"field {f.name[:40]!r}… of {version.address} cannot name a WebDataset member: "
                        f"'<key>.{tail}' is longer than a tar name's {_USTAR_NAME} bytes: export as parquet or jsonl")
    return tail


def _key_width(version: DatasetVersion) -> int:
    return max(9, len(str(version.num_rows)))


def _is_npy_member(f: Field) -> bool:
    """A WebDataset `.npy` member kept as its bytes (role array or bytes): exported under its own name."""
    return _is_binary(f.type) and f.role in (Role.ARRAY, Role.BYTES) and f.name.lower().endswith(".npy")


def _member_ext(f: Field, version: DatasetVersion) -> str:
    if f.role in (Role.IMAGE, Role.VIDEO):
        head = _first_value(version, f.name)
        return _media_ext(head) or ("img" if f.role is Role.IMAGE else "vid")
    if _is_binary(f.type) and f.role is Role.ARRAY:  # .npy files (format/npy.py)
        return "npy"
    if _is_binary(f.type):
        return "bin"
    if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
        return "txt"
    return "json"


def _media_ext(head: bytes | None) -> str | None:
    if not head:
        return None
    if head.startswith(b"\xff\xd8\xff"):
        return "jpg"
    if head.startswith(b"\x89PNG"):
        return "png"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm"
    return None


def _first_value(version: DatasetVersion, name: str) -> bytes | None:
    for shard in range(len(version.manifest.shards)):
        for table in _row_groups(version, shard):
            for v in table.column(name).to_pylist():
                if v is not None:
                    return v[:16]
    return None


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _has_unjsonable(t: pa.DataType) -> bool:
    if _is_binary(t) or pa.types.is_temporal(t) or pa.types.is_decimal(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_unjsonable(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_unjsonable(t.value_type)
    return False
