"""Which catalog to open when none is named: DSINSPECT_CATALOG, else the sample catalog.

The sample catalog is used from a copy in the user's cache directory, never from the install tree:
what reading it leaves behind (derived values, run records under `<catalog>/runs`) stays out of the
clone or the site-packages folder. Writing user data into it is refused by the CLI (`ingest`, `tag`
need a named catalog): a cache directory may be cleared at any time."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.storage import cache_dir

__all__ = ["open_catalog", "bundled_catalog_path", "cache_dir", "named_catalog_url", "BUNDLED"]

BUNDLED = Path(__file__).resolve().parent.parent / "sample_data"  # the source tree's copy (read, never written)
DEMO_LEARNER = "demo-learner"  # the run record in the sample catalog's runs/ (demo/learner.py)
_COPY_FORMAT = b"copy 2: with runs/demo-learner"  # in the copy's name: a copy made before it was shipped is not used


def named_catalog_url(url: str | None = None) -> str | None:
    """`url`, else $DSINSPECT_CATALOG, else None (no catalog named: the sample catalog is meant)."""
    return url or os.environ.get("DSINSPECT_CATALOG") or None


def open_catalog(url: str | None = None) -> Catalog:
    """The catalog at `url`; None means $DSINSPECT_CATALOG, else the sample catalog."""
    return Catalog(named_catalog_url(url) or str(bundled_catalog_path()))


def bundled_catalog_path() -> Path:
    """The sample catalog, in the user's cache directory: copied once from the source tree's
    `sample_data/` (named by the hash of its record, so a regenerated sample gets a fresh copy), or,
    in an installed wheel (which has no such folder), generated there once."""
    record = BUNDLED / "sample-data.json"
    if (BUNDLED / "datasets").is_dir() and record.is_file():
        digest = hashlib.sha256(record.read_bytes() + _COPY_FORMAT).hexdigest()[:16]
        return _once(cache_dir() / f"sample-catalog-{digest}", _copy_bundled)
    from dsinspect.demo.build import GENERATOR_VERSION, write_sample_catalog

    return _once(cache_dir() / f"sample-catalog-{GENERATOR_VERSION}", lambda into: write_sample_catalog(str(into)))


def _copy_bundled(staging: Path) -> None:
    shutil.copytree(BUNDLED, staging, dirs_exist_ok=True, ignore=_leftovers)


def _leftovers(directory: str, names: list[str]) -> list[str]:
    """What reading the source tree's catalog may have left there: not copied. The demo learner's run
    record is sample data (demo/learner.py), the only run record that is."""
    if Path(directory) == BUNDLED / "runs":
        return [n for n in names if n != DEMO_LEARNER]
    return [n for n in names if n == "derived"]


def _once(target: Path, fill: Callable[[Path], None]) -> Path:
    """`target`, filled by `fill` into a staging folder and renamed into place on first use."""
    if not (target / "datasets").is_dir():
        staging = Path(tempfile.mkdtemp(prefix=".sample-catalog-", dir=_made(target.parent)))
        fill(staging)
        try:
            staging.rename(target)  # atomic: a concurrent first run sees all of it or none
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process got there first
    return target


def _made(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory
