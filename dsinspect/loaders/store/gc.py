"""What an interrupted write leaves in a catalog, found and removed; versions are never touched.

Garbage is, per dataset:
- `shard`: a shard file no manifest references (a writer or ingest killed before it published), or
  the index file named after such a shard;
- `staging`: an ingest job's staging directory (`ingest/<job-id>/`) nobody has resumed;
- `temp`: a temp file of an interrupted atomic write or spool (`.tmp-*`).

Only what is older than a grace period counts: shards named by a young staging record belong to
an ingest that may resume. Whatever the grace, nothing is removed from a dataset a write is in
flight on: every writer holds a write lease from its first shard to its manifest, and gc removes
only while it collects the dataset, which no lease overlaps (store/leases.py); a busy dataset is
skipped and reported. While it collects, the manifests are listed again just before anything is
removed, so a version published meanwhile keeps its shards.
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from dsinspect.errors import IntegrityError
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.layout import SHARDS
from dsinspect.loaders.store.leases import collecting
from dsinspect.loaders.store.storage import join, modified_time, write_errors

__all__ = ["Garbage", "Removal", "find_garbage", "remove_garbage", "dataset_names", "DEFAULT_GRACE_HOURS"]

DEFAULT_GRACE_HOURS = 24.0
TEMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class Garbage:
    dataset: str
    kind: str  # "shard" | "staging" | "temp"
    path: str
    bytes: int
    age_hours: float

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "age_hours": round(self.age_hours, 2)}


def find_garbage(catalog: Catalog, names: Iterable[str] | None = None, *, grace_hours: float = DEFAULT_GRACE_HOURS,
                 now: float | None = None) -> list[Garbage]:
    """Every item of garbage older than `grace_hours` in the named datasets (default: all)."""
    now = time.time() if now is None else now
    found: list[Garbage] = []
    for name in names if names is not None else dataset_names(catalog):
        found += _dataset_garbage(catalog, name, grace_hours * 3600.0, now)
    return found


def dataset_names(catalog: Catalog) -> list[str]:
    """Every dataset directory, with or without versions (an ingest into a new dataset that was
    killed before its first manifest leaves one without)."""
    base = catalog.layout.datasets()
    if not catalog.fs.isdir(base):
        return []
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in catalog.fs.ls(base, detail=False) if catalog.fs.isdir(p))


@dataclass(frozen=True)
class Removal:
    removed: list[Garbage]
    busy: list[str]  # datasets left alone: a write was in flight on them


def remove_garbage(catalog: Catalog, items: list[Garbage]) -> Removal:
    """Remove `items` (from find_garbage) while collecting each dataset (store/leases.py): nothing of
    a dataset a write is in flight on, no shard a manifest references by then."""
    removed, busy = [], []
    for name in sorted({g.dataset for g in items}):
        with collecting(catalog.fs, catalog.layout, name) as free:
            if not free:
                busy.append(name)
                continue
            referenced = _referenced(catalog, name)  # final: no commit can run meanwhile
            for g in (g for g in items if g.dataset == name):
                if g.kind == "shard" and _sha256_of(g.path) in referenced:
                    continue  # a version published since the listing uses it
                with write_errors(catalog.fs, g.path):
                    if catalog.fs.exists(g.path):
                        catalog.fs.rm(g.path, recursive=g.kind == "staging")
                removed.append(g)
    return Removal(removed, busy)


def _dataset_garbage(catalog: Catalog, name: str, grace_s: float, now: float) -> list[Garbage]:
    base = catalog.layout.dataset(name)
    referenced = _referenced(catalog, name)
    found, kept_by_staging = [], set()
    for job_dir, files in _staging_jobs(catalog, catalog.layout.staging(name)).items():
        age = now - max((modified_time(info) or now for info in files.values()), default=now)
        if age < grace_s:
            kept_by_staging |= _shards_named_by(catalog, files)
        else:
            found.append(Garbage(name, "staging", job_dir, sum(int(i.get("size") or 0) for i in files.values()),
                                 age / 3600.0))
    for path, info in _files(catalog, base).items():
        age = now - (modified_time(info) or now)  # an unknown mtime counts as new: kept
        if age < grace_s or "/ingest/" in path[len(base):]:
            continue
        kind = _kind(posixpath.basename(path), posixpath.basename(posixpath.dirname(path)), referenced, kept_by_staging)
        if kind:
            found.append(Garbage(name, kind, path, int(info.get("size") or 0), age / 3600.0))
    return found


def _kind(basename: str, parent: str, referenced: set[str], kept: set[str]) -> str | None:
    if basename.startswith(TEMP_PREFIX):
        return "temp"
    for ending in (".parquet", ".index.json"):  # a shard, or the index named after it
        if parent == SHARDS and basename.endswith(ending):
            sha = basename[: -len(ending)]
            return None if sha in referenced or sha in kept else "shard"
    return None


def _referenced(catalog: Catalog, name: str) -> set[str]:
    versions = set()
    if catalog.fs.isdir(catalog.layout.versions(name)):
        versions = {s.sha256 for vid in catalog.version_ids(name) for s in catalog.manifest(name, vid).shards}
    return versions | _streamed(catalog, name)


def _streamed(catalog: Catalog, name: str) -> set[str]:
    """The shards an append stream's commits hold (loaders/stream): referenced as a version's are."""
    directory = catalog.layout.commits(name)
    with write_errors(catalog.fs, directory):
        if not catalog.fs.isdir(directory):
            return set()
        names = catalog.fs.ls(directory, detail=False)
    shards = set()
    for path in names:
        if path.endswith(".json") and not posixpath.basename(path).startswith("."):
            with write_errors(catalog.fs, path):
                data = catalog.fs.cat_file(path)
            try:  # what a commit names cannot be known from a damaged one: collect nothing rather than guess
                shards.update(s["sha256"] for s in json.loads(data)["shards"])
            except (ValueError, KeyError, TypeError) as e:
                raise IntegrityError(f"{catalog.fs.unstrip_protocol(path)}: a stream commit gc cannot read "
                                     f"({e.__class__.__name__}); nothing of {name!r} is collected") from None
    return shards


def _sha256_of(path: str) -> str:
    return posixpath.basename(path).split(".", 1)[0]  # <sha>.parquet or <sha>.index.json


def _staging_jobs(catalog: Catalog, ingest_dir: str) -> dict[str, dict[str, dict]]:
    """Each job directory under `ingest/` with its files' infos."""
    jobs: dict[str, dict[str, dict]] = {}
    for path, info in _files(catalog, ingest_dir).items():
        job = join(ingest_dir, path[len(ingest_dir):].strip("/").split("/")[0])
        jobs.setdefault(job, {})[path] = info
    return jobs


def _shards_named_by(catalog: Catalog, files: dict[str, dict]) -> set[str]:
    named: set[str] = set()
    for path in files:
        if path.endswith(".json") and not posixpath.basename(path).startswith(TEMP_PREFIX):
            try:
                named |= {s["sha256"] for s in json.loads(catalog.fs.cat_file(path)).get("shards", [])}
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                continue  # an unreadable record protects nothing; its job restarts anyway
    return named


def _files(catalog: Catalog, directory: str) -> dict[str, dict]:
    try:
        return catalog.fs.find(directory, detail=True) if catalog.fs.exists(directory) else {}
    except FileNotFoundError:
        return {}
