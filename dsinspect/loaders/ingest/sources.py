"""The source registry: open a `SourceSpec` as a reader, or guess its kind from a URL.

Kinds: jsonl, parquet, hf (a `datasets` `save_to_disk` directory, or `.arrow` files), webdataset
(`.tar` shards), mds (a MosaicML Streaming directory with `index.json`), files (one row per file:
a folder of images and video clips), and the tokenized corpora of pretraining (token_streams.py):
megatron (`.bin` + `.idx`), olmo (flat token `.npy` memmaps), nanogpt (a raw `.bin` without `.idx`),
litdata (`optimize` output for `TokensLoader`: `index.json` whose config names it), datatrove
(`.ds` + `.ds.index`). Readers are imported when first opened, so asking for one kind never imports
another's dependencies.
"""

from __future__ import annotations

import pkgutil
from typing import Any

from dsinspect.errors import UserError
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.ingest.infer import role_for_extension
from dsinspect.loaders.ingest.source import Source, SourceSpec
from dsinspect.loaders.ingest.source_files import is_glob
from dsinspect.loaders.store.storage import url_to_fs

__all__ = ["KINDS", "open_source", "detect_source"]

KINDS = {
    "jsonl": "dsinspect.loaders.ingest.jsonl:JsonlSource",
    "parquet": "dsinspect.loaders.ingest.parquet:ParquetSource",
    "hf": "dsinspect.loaders.ingest.hf:HfSource",
    "webdataset": "dsinspect.loaders.ingest.webdataset:WebDatasetSource",
    "mds": "dsinspect.loaders.ingest.mds:MdsSource",
    "files": "dsinspect.loaders.ingest.files:FilesSource",
    "megatron": "dsinspect.loaders.ingest.megatron:MegatronSource",
    "olmo": "dsinspect.loaders.ingest.token_memmaps:OlmoSource",
    "nanogpt": "dsinspect.loaders.ingest.token_memmaps:NanoGptSource",
    "litdata": "dsinspect.loaders.ingest.litdata_tokens:LitDataTokensSource",
    "datatrove": "dsinspect.loaders.ingest.datatrove:DatatroveSource",
}

# Name endings that decide the kind on their own, longest first so `.jsonl.gz` beats `.gz`.
_SUFFIX_KINDS = sorted(
    [(s, "jsonl") for s in (".jsonl", ".ndjson", ".json")]
    + [(s + c, "jsonl") for s in (".jsonl", ".ndjson", ".json") for c in (".gz", ".zst", ".zstd", ".bz2", ".xz")]
    + [(".parquet", "parquet"), (".pq", "parquet"), (".parq", "parquet"),
       (".arrow", "hf"), (".tar", "webdataset"), (".tar.gz", "webdataset"), (".tgz", "webdataset"),
       (".idx", "megatron"), (".bin", "nanogpt"), (".npy", "olmo"), (".ds", "datatrove"),
       (".ds.index", "datatrove"), (".ds.loss", "datatrove")],
    key=lambda sk: -len(sk[0]))

# Marker files that make a directory one kind.
_MARKERS = [("index.json", "mds"), ("dataset_info.json", "hf"), ("state.json", "hf"),
            ("dataset_dict.json", "hf")]


def open_source(spec: SourceSpec) -> Source:
    """The reader for `spec` (an unknown kind is a UserError listing the known ones)."""
    if spec.kind not in KINDS:
        raise UserError(f"unknown source kind {spec.kind!r} (known: {', '.join(KINDS)})")
    return pkgutil.resolve_name(KINDS[spec.kind])(spec)


def detect_source(url: str, kind: str | None = None, **options: Any) -> SourceSpec:
    """A spec for `url`, its kind given or guessed from the name (file or glob) or, for a directory,
    from marker files (MDS `index.json`, Hugging Face `dataset_info.json`/`state.json`) and then the
    endings of the files inside: `files` when they are all images and videos."""
    if kind is not None:
        if kind not in KINDS:
            raise UserError(f"unknown source kind {kind!r} (known: {', '.join(KINDS)})")
        return SourceSpec(kind, url, options)
    return SourceSpec(_guess(url), url, options)


def _guess(url: str) -> str:
    by_name = _kind_of_name(url.rstrip("/")) or ("files" if _is_media(url.rstrip("/")) else None)
    fs, path = url_to_fs(url)
    if by_name == "nanogpt" and not is_glob(url) and _exists(fs, path[:-len(".bin")] + ".idx"):
        return "megatron"  # a Megatron .bin, named beside its .idx
    if by_name:
        return by_name
    try:
        if is_glob(url) or not fs.isdir(path):
            if not is_glob(url) and not fs.exists(path):
                raise UserError(f"{url}: no such file or directory")
            raise UserError(f"{url}: cannot tell the source kind from its name; pass the kind "
                            f"({', '.join(KINDS)})")
        names = {p.rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)}
        for marker, kind in _MARKERS:
            if marker in names:
                return "litdata" if marker == "index.json" and _is_litdata(fs, f"{path}/index.json") else kind
        paths = fs.find(path)
    except OSError as e:
        raise UserError(f"cannot list {url}: {e}") from None
    found = {k for p in paths if (k := _kind_of_name(p))}
    if "megatron" in found:  # Megatron's .bin files are its data, not nanoGPT streams
        found.discard("nanogpt")
    if len(found) == 1:
        return found.pop()
    visible = [p for p in paths if not any(n.startswith(".") for n in p[len(path):].split("/"))]  # .DS_Store
    if not found and visible and all(map(_is_media, visible)):
        return "files"
    if not found:
        raise UserError(f"{url}: no JSONL, Parquet, Arrow, tar, MDS or token files, nor only images and videos, found; "
                        f"pass the kind ({', '.join(KINDS)})")
    raise UserError(f"{url}: holds files of several kinds ({', '.join(sorted(found))}); pass the kind")


def _exists(fs, path: str) -> bool:
    try:
        return bool(fs.exists(path))
    except OSError:
        return False


def _is_litdata(fs, path: str) -> bool:
    """Whether an `index.json` is LitData's (`{"chunks": [...], "config": {...}}`) rather than MDS's
    (`{"shards": [...], "version": 2}`); one that is neither is left to the MDS reader to refuse."""
    import json

    try:
        with fs.open(path, "rb") as f:
            index = json.loads(f.read(1 << 26))  # an index is small: a larger one is not read whole
    except (OSError, ValueError):
        return False
    return isinstance(index, dict) and "chunks" in index and isinstance(index.get("config"), dict)


def _is_media(name: str) -> bool:
    """An image or video file by its name (`.jpg`, `.PNG`, `.mp4`, `.webm`, …)."""
    last = name.rsplit("/", 1)[-1]
    return "." in last and role_for_extension(last.rsplit(".", 1)[-1]) in (Role.IMAGE, Role.VIDEO)


def _kind_of_name(name: str) -> str | None:
    for suffix, kind in _SUFFIX_KINDS:
        if name.endswith(suffix):
            return kind
    return None
