"""The Ray Data adapter: a version read as a `ray.data.Dataset`, its shards fetched in parallel by
Ray's read tasks, each checked against its sha256 before a row of it is used, with column
projection; and a Ray pipeline's output written as a new version whose id does not depend on the
number of workers. Needs the `ray` extra; with `compute/` (Ray task engine for ingest and verify),
the only places that import ray.

Modules: `read` (VersionDatasource, read_version), `write` (VersionDatasink, write_version: staging
pieces written by Ray's write tasks, then ingested in fixed row ranges on the Ray engine). May
import `ingest`, `read`, `store`, `format`, `dsinspect.errors`.
"""

from dsinspect.extras import require as _require

_require("ray", "ray", "dsinspect.loaders.raydata")  # without the extra: one line naming it, not a traceback

from dsinspect.loaders.raydata.read import VersionDatasource, read_version  # noqa: E402
from dsinspect.loaders.raydata.write import VersionDatasink, write_version  # noqa: E402

__all__ = ["VersionDatasource", "read_version", "VersionDatasink", "write_version"]
