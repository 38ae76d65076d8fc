"""The UI's only data boundary: every catalog read, row fetch and sample decode goes through here.

Methods block (they may read remote shards); screens call them from thread workers only.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.defaults import open_catalog
from dsinspect.inspect import Sample, open_sample
from dsinspect.loaders.store.address import Address, parse_address
from dsinspect.loaders.store.describe import catalog_listing, version_info
from dsinspect.loaders.records.transforms import guarded, load_job_transform
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["DataSource", "RowPage", "CELL_WIDTH"]

CELL_WIDTH = 24
_GROUP_CACHE = 16  # row groups kept in memory for the sample table


@dataclass(frozen=True)
class RowPage:
    """Display cells for rows `start .. start + len(cells)` of a version."""

    start: int
    cells: list[list[str]]


class DataSource:
    """A catalog seen by the UI: listings, versions, pages of table cells and samples."""

    def __init__(self, catalog_url: str | None = None, catalog: Any = None):
        self.catalog = catalog if catalog is not None else open_catalog(catalog_url)
        self._versions: dict[tuple[str, str], DatasetVersion] = {}
        self._groups: OrderedDict[tuple[str, int, int], pa.Table] = OrderedDict()
        self._lock = Lock()

    @property
    def url(self) -> str:
        return self.catalog.url

    def listing(self) -> dict[str, Any]:
        return catalog_listing(self.catalog)

    def version(self, address: str | Address) -> DatasetVersion:
        """The version an address names (its index, if any, is ignored); cached per (name, ref)."""
        addr = parse_address(address) if isinstance(address, str) else address
        key = (addr.name, addr.ref)
        with self._lock:
            cached = self._versions.get(key)
        if cached is None:
            cached = self.catalog.resolve(Address(addr.name, addr.ref))
            with self._lock:
                self._versions[key] = cached
        return cached

    def info(self, version: DatasetVersion) -> dict[str, Any]:
        return version_info(version)

    def history(self, name: str) -> list[dict[str, Any]]:
        """Every version of `name`, newest first, as plain summaries."""
        for item in self.listing()["datasets"]:
            if item["name"] == name:
                return sorted(item["versions"], key=lambda v: v.get("created_at") or "", reverse=True)
        return []

    def columns(self, version: DatasetVersion) -> list[str]:
        return [f.name for f in version.fields]

    def rows(self, version: DatasetVersion, start: int, count: int) -> RowPage:
        """Cells of rows [start, start + count): reads (and caches) whole row groups."""
        stop = min(version.num_rows, start + count)
        if start >= stop:
            return RowPage(start, [])
        names = self.columns(version)
        table = version.take(range(start, stop), names, read_group=lambda s, g: self._group(version, s, g, names))
        columns = [_cells(table.column(n)) for n in names]
        return RowPage(start, [[str(start + i), *(col[i] for col in columns)] for i in range(stop - start)])

    def sample(self, address: str | Address) -> Sample:
        addr = parse_address(address) if isinstance(address, str) else address
        version = self.version(addr)
        return open_sample(version, 0 if addr.index is None else addr.index)

    def diff(self, a: str, b: str, limit: int = 500) -> Any:
        """What changed from version `a` to version `b` (a VersionDiff); indexes in the addresses are ignored."""
        from dsinspect.loaders.diff.compare import diff

        return diff(self.version(a), self.version(b), self.catalog, limit=limit)

    def replay(self, spec: str, step: int, rank: str, transform: str | None = None) -> Any:
        """The batch of (step, rank) of the run in `spec` (a spec file or run record directory);
        `rank` is an integer or "all". With `transform` (package.module:function) each rank's batch
        also carries `.transformed`, the job's transform re-run seeded as in the job."""
        from dsinspect.loaders.audit.replay import replay

        fn = _transform(transform)
        return guarded(lambda: replay(spec, step, rank, catalog=self.catalog, transform=fn), transform)

    def check_step(self, spec: str, log: str, step: int, transform: str | None = None) -> Any:
        """The fingerprint log `log` (a file or run record directory) checked at `step` against
        replay: a LogCheck (`.ok`, `.checked`, `.divergence`)."""
        from dsinspect.loaders.audit.logcheck import check_log

        fn = _transform(transform)
        return guarded(lambda: check_log(spec, log, steps=range(step, step + 1), catalog=self.catalog,
                                          transform=fn), transform)

    def _group(self, version: DatasetVersion, shard: int, group: int, names: list[str]) -> pa.Table:
        key = (version.id, shard, group)
        with self._lock:
            table = self._groups.get(key)
            if table is not None:
                self._groups.move_to_end(key)
                return table
        table = version.read_row_group(shard, group, names)
        with self._lock:
            self._groups[key] = table
            while len(self._groups) > _GROUP_CACHE:
                self._groups.popitem(last=False)
        return table


# -- transforms -----------------------------------------------------------------------------------

def _transform(name: str | None) -> Any:
    """The job's transform by name (its modules import from the current directory), or None."""
    return load_job_transform(name) if name else None


# -- cells ----------------------------------------------------------------------------------------

def _cells(col: pa.ChunkedArray) -> list[str]:
    """Short one-line strings for a column: sizes for binary, lengths and heads for lists."""
    t = col.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        sizes = pc.binary_length(col).to_pylist() if not pa.types.is_fixed_size_binary(t) else [t.byte_width] * len(col)
        return ["null" if n is None else f"<{n:,} bytes>" for n in sizes]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_list_cell(v) for v in col.to_pylist()]
    if pa.types.is_struct(t):
        return [_struct_cell(v) for v in col.to_pylist()]
    return [_short(v) for v in col.to_pylist()]


def _short(value: Any) -> str:
    if value is None:
        return "null"
    text = " ".join(str(value).split())
    return text if len(text) <= CELL_WIDTH else text[: CELL_WIDTH - 1] + "…"


def _list_cell(value: list | None) -> str:
    if value is None:
        return "null"
    head = " ".join(str(v) for v in value[:6])
    return _short(f"[{len(value)}] {head}")


def _struct_cell(value: dict | None) -> str:
    if value is None:
        return "null"
    sizes = [f"{k}:{len(v)}" if isinstance(v, list) else k for k, v in value.items()]
    return _short("{" + " ".join(sizes) + "}")
