"""The Hugging Face `datasets` adapter: a version as a `datasets.Dataset` memory-mapped from the
node's verified shard cache (no copy of the data), and one rank's rows in dsinspect's order as a
`datasets.IterableDataset` (what `Trainer` and `map` consume); and back, a Dataset pushed as a
version. Needs the `hf` extra; the only subpackage that imports `datasets`.

Modules: `dataset` (as_dataset, as_iterable, resume_state), `push` (push_dataset: a Dataset as a
version, through `ingest`). May import `ingest`, `read`, `records`, `order`, `store`, `format`,
`dsinspect.errors`.
"""

from dsinspect.extras import require as _require

_require("datasets", "hf", "dsinspect.loaders.hf")  # without the extra: one line naming it, not a traceback

from dsinspect.loaders.hf.dataset import as_dataset, as_iterable, resume_state  # noqa: E402
from dsinspect.loaders.hf.push import push_dataset  # noqa: E402

__all__ = ["as_dataset", "as_iterable", "resume_state", "push_dataset"]
