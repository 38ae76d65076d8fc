"""The Grain adapter: a Grain data source whose elements are one rank's batches in dsinspect's order,
so Grain's transformations, worker pools and checkpoints run on top while the order, the state and
replay stay dsinspect's. Needs the `grain` extra; the only subpackage that imports grain.

Modules: `source` (StepSource, and the exact mapping between Grain's iterator state and a
LoaderState), `packed` (PackedStepSource: packed sequences). May import `read`, `order`, `store`,
`format`, `dsinspect.errors`.
"""

from dsinspect.extras import require as _require

_require("grain", "grain", "dsinspect.loaders.grain")  # without the extra: one line naming it, not a traceback

from dsinspect.loaders.grain.packed import PackedStepSource  # noqa: E402
from dsinspect.loaders.grain.source import StepSource, grain_state, loader_state  # noqa: E402

__all__ = ["PackedStepSource", "StepSource", "grain_state", "loader_state"]
