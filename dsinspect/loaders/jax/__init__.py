"""The JAX adapter: each JAX process reads only its own ranks' rows of every global batch and the
batches are assembled into global `jax.Array`s laid out by the sharding the user passes, with the
same order, state, records and replay as every other reader. Needs the `jax` extra; the only
subpackage that imports jax, and `import dsinspect` never loads it.

Modules: `batches` (JaxBatches), `packed` (PackedJaxBatches: packed sequences). May import `read`,
`records`, `order`, `store`, `format`, `dsinspect.errors`.
"""

from dsinspect.extras import require as _require

_require("jax", "jax", "dsinspect.loaders.jax")  # without the extra: one line naming it, not a traceback

from dsinspect.loaders.jax.batches import JaxBatches  # noqa: E402
from dsinspect.loaders.jax.packed import PackedJaxBatches  # noqa: E402

__all__ = ["JaxBatches", "PackedJaxBatches"]
