"""A small catalog of token rows for the framework adapters' tests (tests/test_conformance.py,
test_jax.py, test_grain.py, test_hf.py): an id, a fixed-size list of int32 tokens and a short text
per row, written as one version. The catalog keeps the rows it wrote (`catalog.tokens`,
`catalog.rows`) and the version (`catalog.written`) for the tests to compare with."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dsinspect.loaders import Catalog, Field, WriteOptions


def token_catalog(root, name: str, rows: int, width: int, seed: int, *, shard_rows: int, row_group_rows: int,
                  id_type: pa.DataType | None = None) -> Catalog:
    id_type = id_type or pa.int64()
    tokens = np.random.default_rng(seed).integers(0, 1000, (rows, width), dtype=np.int32)
    table = pa.table({"id": pa.array(np.arange(rows), id_type),
                      "tokens": pa.FixedSizeListArray.from_arrays(pa.array(tokens.ravel()), width),
                      "text": pa.array([f"row {i} " * (i % 7) for i in range(rows)])})
    fields = [Field("id", id_type, "scalar", nullable=False), Field("tokens", table.schema.field(1).type, "tokens"),
              Field("text", pa.string(), "text")]
    catalog = Catalog(str(root))
    catalog.written = catalog.write_version(name, table, fields, key="id",
                                            options=WriteOptions(shard_rows=shard_rows, row_group_rows=row_group_rows))
    catalog.tokens, catalog.rows = tokens, table.to_pylist()
    return catalog
