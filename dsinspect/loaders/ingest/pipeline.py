"""The ingest pipeline: a source split into parts, each converted on an engine (inline, process pool,
Ray), one commit publishing the manifest; an interrupted run resumes where it stopped."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.errors import UserError
from dsinspect.loaders.compute.engines import check_engine, run_tasks
from dsinspect.loaders.compute.tasks import TaskFailed
from dsinspect.loaders.format.manifest import Field, Shard
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.ingest.engine import (
    DEFAULT_OPENER,
    ROW_PROGRESS,
    Job,
    commit_job,
    convert_part,
    fields_from_json,
    load_record,
    open_with,
    plan_job,
    record_path,
    tidy_staging,
)
from dsinspect.loaders.ingest.engine_choice import AUTO, available_cpus, choose_engine
from dsinspect.loaders.ingest.keys import inherited_key, key_candidate, verified_key
from dsinspect.loaders.ingest.restore import SIDECAR_KEY, find_sidecar
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.store.catalog import LATEST, Catalog
from dsinspect.loaders.store.leases import write_lease
from dsinspect.loaders.store.storage import url_to_fs
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.loaders.store.writer import WriteOptions

__all__ = ["ingest", "run_ingest", "IngestProgress", "IngestResult", "convert_part"]

TASK = "dsinspect.loaders.ingest.engine:convert_part"


@dataclass(frozen=True)
class IngestProgress:
    """Cumulative progress after each finished part (skipped parts count as done)."""

    parts_done: int
    parts_total: int
    rows: int
    bytes: int
    bytes_total: int


@dataclass(frozen=True)
class IngestResult:
    version: DatasetVersion
    parts: int
    parts_converted: int
    parts_skipped: int
    rows: int
    bytes: int
    seconds: float
    engine: str

    def to_json(self) -> dict:
        return {"name": self.version.name, "id": self.version.id, "address": self.version.address,
                "rows": self.rows, "bytes": self.bytes, "parts": self.parts, "parts_converted": self.parts_converted,
                "parts_skipped": self.parts_skipped, "seconds": round(self.seconds, 3), "engine": self.engine,
                "shards": len(self.version.manifest.shards)}


def ingest(catalog: Catalog, source: str | SourceSpec, name: str, **kwargs: Any) -> DatasetVersion:
    """Ingest `source` (a URL or a spec) as a new version of `name`; see `run_ingest` for options."""
    return run_ingest(catalog, source, name, **kwargs).version


def run_ingest(catalog: Catalog, source: str | SourceSpec, name: str, *, kind: str | None = None,
               roles: Mapping[str, str] | None = None, key: str | None = None, no_key: bool = False,
               tokenizer: str | None = None, meanings: Mapping[str, str | None] | None = None,
               fields: Iterable[Field] | None = None, engine: str = AUTO,
               workers: int | None = None,
               options: Mapping[str, Any] | None = None, write: WriteOptions = WriteOptions(), message: str = "",
               tags: Iterable[str] = (), on_progress: Callable[[IngestProgress], None] | None = None,
               retries: int = 2, opener: str = DEFAULT_OPENER) -> IngestResult:
    """Plan, convert the parts not yet converted, commit. `engine` "auto" picks inline or the pool
    for the parts to convert (`engine_choice`). `tokenizer` (a tokenizer.json path or URL, or
    "cl100k_base" / "o200k_base") is attached to the tokens fields; `meanings` ({field: rollout meaning,
    None for none}) declares what a column of LLM rollouts means (the rest inferred and declared when
    the columns are rollouts: `infer_fields`); `fields` skips inference;
    `opener` names the function that opens a spec as a Source in every worker ("module:function").
    Without `key` (and without an export's sidecar, whose key is exact) the key of `name`'s latest
    version is kept, else one is inferred and verified (`keys`); `no_key` declares none."""
    started = time.monotonic()
    check_engine(engine if engine != AUTO else "inline", workers)
    if key is not None and no_key:
        raise UserError("--key and --no-key exclude each other")
    if engine not in ("inline", AUTO) and _in_process(catalog):
        raise UserError(f"engine {engine!r} needs a catalog other processes can open; {catalog.url} lives in "
                        "this process only (use engine 'inline')")
    spec = source if isinstance(source, SourceSpec) else _detect(source, kind, options or {})
    src = _open(opener, spec)
    parts = _parts(src, spec)
    sidecar = find_sidecar(spec.url) or _embedded_sidecar(spec, parts)
    spec, src = _pin_arrays(opener, spec, src, parts, roles or {}, sidecar)
    if sidecar is not None:
        _put_blobs(catalog, name, spec.url, sidecar)
    fields = list(fields) if fields is not None else _fields(catalog, name, src, parts, sidecar, roles or {},
                                                             key, tokenizer, meanings or {})
    candidate = None
    if key is None and not no_key:
        key = sidecar.get("key") if sidecar is not None else inherited_key(name, _latest(catalog, name), fields)
        candidate = key_candidate(spec.kind, fields) if key is None and sidecar is None else None
    job = plan_job(catalog, name, spec, parts, fields, key, write, sidecar, opener)
    with write_lease(catalog.fs, catalog.layout, name):  # gc keeps out until the commit: parts' shards are safe
        result = _run(catalog, job, parts, engine, workers, retries, message, tags, on_progress, started, candidate)
    tidy_staging(catalog, name)
    return result


def _pin_arrays(opener: str, spec: SourceSpec, src, parts: list[Part], roles: Mapping[str, str],
                sidecar: dict | None) -> tuple[SourceSpec, Any]:
    """Each array column's layout (`ndarrays`), decided over the whole source before any part converts
    and pinned in the spec every part reads: no layout depends on which part a worker sees first, and
    a value the survey refuses stops the ingest before any shard is written. Columns whose role is
    `bytes` (or whose exported type is binary) keep each value's bytes."""
    columns = src.array_columns() if hasattr(src, "array_columns") else []
    if not columns or "arrays" in spec.options:
        return spec, src
    raw = {c for c in columns if roles.get(c) == Role.BYTES.value} | _exported_binary(sidecar)
    spec = SourceSpec(spec.kind, spec.url, {**spec.options, "arrays": src.array_layouts(parts, raw)})
    return spec, _open(opener, spec)


def _exported_binary(sidecar: dict | None) -> set[str]:
    """The source columns of an export's binary fields."""
    if sidecar is None:
        return set()
    columns = sidecar.get("columns", {})
    return {columns.get(f["name"], f["name"]) for f in sidecar["fields"] if f.get("type") == "binary"}


def _run(catalog: Catalog, job: Job, parts: list[Part], engine: str, workers: int | None, retries: int,
         message: str, tags: Iterable[str], on_progress, started: float, candidate: str | None) -> IngestResult:
    records: dict[int, dict] = {}
    for p in parts:
        record = load_record(catalog, record_path(catalog, job.dataset, job.id, p.index))
        if record is not None:
            records[p.index] = record
    todo = [p.index for p in parts if p.index not in records]
    if engine == AUTO:  # decided over the parts left to convert (a resumed job may have one left)
        engine = "inline" if _in_process(catalog) else choose_engine(
            job.source["kind"], [parts[i].size for i in todo], available_cpus(), workers)
    bytes_total = sum(p.size for p in parts)

    in_flight = [0]  # rows of the part converting in this process (inline), before its record

    def report() -> None:
        if on_progress:
            rows = sum(r["rows"] for r in records.values()) + in_flight[0]
            on_progress(IngestProgress(len(records), len(parts), rows, sum(r["bytes"] for r in records.values()),
                                       bytes_total))

    def rows_written(n: int) -> None:
        in_flight[0] += n
        report()

    def done(i: int, result: dict) -> None:
        records[todo[i]] = result
        in_flight[0] = 0
        report()

    report()
    token = ROW_PROGRESS.set(rows_written if on_progress else None)
    try:
        run_tasks(engine, TASK, [job.payload(i) for i in todo], workers=workers, retries=retries, on_done=done)
    except TaskFailed as e:
        part = parts[todo[e.index]]
        raise UserError(f"ingest of {job.source['url']}: part {part.index} ({part.url}): {e}") from None
    finally:
        ROW_PROGRESS.reset(token)
    converted = sum(1 for i in todo if not records[i].get("skipped"))
    shards = [Shard(**s) for r in records.values() for s in r["shards"]] if candidate is not None else []
    inferred = verified_key(catalog, job.dataset, shards, candidate)
    version = commit_job(catalog, job, list(records.values()), message=message, tags=tags, inferred_key=inferred)
    return IngestResult(version, len(parts), converted, len(parts) - converted, version.num_rows, bytes_total,
                        time.monotonic() - started, engine)


def _latest(catalog: Catalog, name: str) -> DatasetVersion | None:
    latest = catalog.tags(name).get(LATEST)  # no tags file: a new dataset
    return catalog.version(name, latest) if latest else None


def _in_process(catalog: Catalog) -> bool:
    return catalog.url.startswith("memory://")


def _detect(url: str, kind: str | None, options: Mapping[str, Any]) -> SourceSpec:
    from dsinspect.loaders.ingest.sources import detect_source
    return detect_source(url, kind, **options)


def _open(opener: str, spec: SourceSpec):
    return open_with(opener)(spec)


def _parts(src, spec: SourceSpec) -> list[Part]:
    parts = src.parts()
    if [p.index for p in parts] != list(range(len(parts))):
        raise UserError(f"{spec.url}: the reader listed parts out of order")  # a reader bug, named plainly
    return parts


def _fields(catalog: Catalog, name: str, src, parts: list[Part], sidecar: dict | None, roles: Mapping[str, str],
            key: str | None, tokenizer: str | None, meanings: Mapping[str, str | None]) -> list[Field]:
    """The version's fields: from an export's sidecar (roles and meanings still overridable), else inferred."""
    if sidecar is not None:
        from dsinspect.loaders.format.rollout_fields import with_meanings

        fields = fields_from_json(sidecar["fields"], "the export sidecar")
        unknown = set(roles) - {f.name for f in fields}
        if unknown:
            raise UserError(f"no field {sorted(unknown)[0]!r} in the source "
                            f"(fields: {', '.join(f.name for f in fields)})")
        fields = [Field(f.name, f.type, roles.get(f.name, f.role), f.nullable, f.options) for f in fields]
        return with_meanings(fields, meanings, " in the source")  # only what is asked: an export restores exactly
    from dsinspect.loaders.ingest.infer import infer_fields

    sample = _sample(src, parts)
    option = _tokenizer_option(catalog, name, tokenizer) if tokenizer is not None else None
    return infer_fields(src.schema(), sample, src.hints(), roles, option, key, meanings)


def source_fields(catalog: Catalog, source: str, name: str, *, kind: str | None = None,
                  roles: Mapping[str, str] | None = None, key: str | None = None, tokenizer: str | None = None,
                  meanings: Mapping[str, str | None] | None = None) -> list[Field]:
    """The fields `ingest` would give `source` (roles, the tokenizer stored in the catalog, rollout meanings
    inferred and declared, overrides applied), reading one batch of it and writing no rows: what a stream
    is created with from a file (`dsinspect append --create`)."""
    spec = _detect(source, kind, {})
    src = _open(DEFAULT_OPENER, spec)
    return _fields(catalog, name, src, _parts(src, spec), None, roles or {}, key, tokenizer, meanings or {})


def _tokenizer_option(catalog: Catalog, name: str, tokenizer: str) -> dict:
    """The field option for `--tokenizer`: an OpenAI encoding by name (cl100k_base, o200k_base) or a
    tokenizer.json path or URL, either stored in the catalog as a blob named by its sha256."""
    from dsinspect.loaders.format.tokenizer_docs import TIKTOKEN_ENCODINGS, tiktoken_document

    if tokenizer in TIKTOKEN_ENCODINGS:
        try:
            document = tiktoken_document(tokenizer)
        except (OSError, ImportError, ValueError) as e:
            raise UserError(f"cannot load the {tokenizer} encoding from the bpe-openai package: {e}") from None
        return {"kind": "tiktoken", "name": tokenizer, "blob": catalog.put_blob(name, document, ".json")}
    return {"kind": "huggingface", "blob": catalog.put_blob(name, _read_tokenizer(tokenizer), ".json")}


def _sample(src, parts: list[Part]) -> pa.RecordBatch | None:
    for p in parts:
        for batch in src.read(p):
            if batch.num_rows:
                return batch
    return None


def _read_tokenizer(url: str) -> bytes:
    fs, path = url_to_fs(url)
    try:
        data = fs.cat_file(path)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read tokenizer {url}: {e}") from None
    from dsinspect.extras import require

    Tokenizer = require("tokenizers", "tokenizers", "--tokenizer FILE").Tokenizer
    try:
        Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # noqa: BLE001 - any parse failure is the same user mistake
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"{url}: not a Hugging Face tokenizer.json ({reason})") from None
    return data


def _put_blobs(catalog: Catalog, name: str, url: str, sidecar: dict) -> None:
    """Copy the side files an export carried (tokenizers) into the catalog, checked by hash."""
    from dsinspect.loaders.ingest.export import read_exported_blobs

    for data, ext in read_exported_blobs(url, sidecar,
                                         have=lambda sha, ext: catalog.fs.exists(catalog.layout.blob(name, sha, ext))):
        catalog.put_blob(name, data, ext)


def _embedded_sidecar(spec: SourceSpec, parts: list[Part]) -> dict | None:
    """A Parquet export's sidecar, embedded in each file's schema metadata (files copied without
    their `dsinspect.json` still re-ingest exactly)."""
    if spec.kind != "parquet" or not parts:
        return None
    from dsinspect.loaders.ingest.source_files import open_file

    with open_file(parts[0].url) as f:
        raw = (pq.read_schema(f).metadata or {}).get(SIDECAR_KEY)
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None
