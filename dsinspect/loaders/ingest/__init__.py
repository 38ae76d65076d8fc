"""Ingest: turn a JSONL / Parquet / Hugging Face / WebDataset / MDS source into a new version.

    version = ingest(catalog, "data/*.jsonl", "my-text", roles={"ids": "tokens"}, engine="pool")

The source splits into independent parts, converted inline, in a process pool or on Ray; one
commit publishes the manifest (see `engine`). Re-running an interrupted ingest skips the parts
already converted. A directory written by `export` carries a sidecar that restores exact types,
roles, options and key, so ingest → export → ingest gives the same version id.

Public: `ingest`, `run_ingest` and their results, `export_version`; the rest of the folder is internal:
`pipeline` (the run), `engine` (a part's conversion and the commit), one module per source format,
`infer` (fields and roles), `export` (a version back to files).

May import `store`, `format`, `compute`, `dsinspect.errors`.
"""

from dsinspect.loaders.ingest.export import export_version
from dsinspect.loaders.ingest.pipeline import IngestProgress, IngestResult, convert_part, ingest, run_ingest

__all__ = ["ingest", "run_ingest", "IngestProgress", "IngestResult", "convert_part", "export_version"]
