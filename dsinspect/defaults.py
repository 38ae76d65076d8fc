"""Which catalog to open when none is named: DSINSPECT_CATALOG, else the bundled sample catalog."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.storage import cache_dir

__all__ = ["open_catalog", "bundled_catalog_path", "cache_dir"]

BUNDLED = Path(__file__).resolve().parent.parent / "sample_data"


def open_catalog(url: str | None = None) -> Catalog:
    """The catalog at `url`; None means $DSINSPECT_CATALOG, else the bundled sample catalog."""
    url = url or os.environ.get("DSINSPECT_CATALOG") or str(bundled_catalog_path())
    return Catalog(url)


def bundled_catalog_path() -> Path:
    """The sample catalog shipped in the source tree; an installed wheel (which has no such folder)
    generates the same deterministic catalog into the cache once instead."""
    if (BUNDLED / "datasets").is_dir():
        return BUNDLED
    from dsinspect.demo.build import GENERATOR_VERSION, write_sample_catalog

    target = cache_dir() / f"sample-catalog-{GENERATOR_VERSION}"
    if not (target / "datasets").is_dir():
        staging = Path(tempfile.mkdtemp(prefix=".sample-catalog-", dir=_made(target.parent)))
        write_sample_catalog(str(staging))
        try:
            staging.rename(target)  # atomic: a concurrent first run sees all of it or none
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process got there first
    return target


def _made(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory
