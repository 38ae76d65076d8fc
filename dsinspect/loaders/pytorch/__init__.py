"""The PyTorch adapter: one rank's batches as dicts of tensors for any number of DataLoader workers,
handed over through shared-memory rings, with a global state that restores into any worker or rank
count. Needs the `torch` extra; the only subpackage that imports torch, and `import dsinspect` never
loads it.

Modules: `dataset` (TorchBatches and the producers its workers run), `conversion` (Arrow and numpy
columns -> tensors), `loader` (TorchLoader), `transfer` (worker -> main process), `ring` (the
shared-memory ring), `recording` (which process writes a rank's run record lines), `consistency`
(the ranks' check that they resume from one checkpoint, at a load and at the start of a pass),
`packed` (a packed-sequence batch as a language model step's tensors), `packed_loader`
(PackedTorchLoader: packed batches from DataLoader workers).
May import `read`, `records`, `order`, `store`, `format`, `dsinspect.errors`.
"""

from dsinspect.extras import require as _require

_require("torch", "torch", "dsinspect.loaders.pytorch")  # without the extra: one line naming it, not a traceback

from dsinspect.loaders.pytorch.conversion import batch_to_torch  # noqa: E402
from dsinspect.loaders.pytorch.dataset import TorchBatches  # noqa: E402
from dsinspect.loaders.pytorch.loader import TorchLoader  # noqa: E402
from dsinspect.loaders.pytorch.packed import packed_to_torch  # noqa: E402
from dsinspect.loaders.pytorch.packed_loader import PackedTorchLoader  # noqa: E402

__all__ = ["PackedTorchLoader", "TorchBatches", "TorchLoader", "batch_to_torch", "packed_to_torch"]
