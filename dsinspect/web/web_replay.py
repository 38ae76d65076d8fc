"""Replay for the web: run specs travel in the URL as base64url JSON (never as a path), and a
replayed batch becomes plain rows and a Parquet download."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pyarrow.parquet as pq

from dsinspect.errors import UserError
from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.replay import replay
from dsinspect.loaders.replay_export import provenance_table
from dsinspect.loaders.spec import RunSpec

__all__ = ["encode_spec", "decode_spec", "build_spec", "replay_model", "MAX_SPEC_CHARS"]

MAX_SPEC_CHARS = 64_000


def encode_spec(spec: RunSpec) -> str:
    """The spec as URL-safe text for `?spec=`: base64url of its compact JSON, without padding."""
    text = json.dumps(spec.to_json(), sort_keys=True, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def decode_spec(text: str) -> RunSpec:
    """A spec from `encode_spec`'s text, or from the spec JSON itself (an uploaded file)."""
    text = (text or "").strip()
    if not text or len(text) > MAX_SPEC_CHARS:
        raise UserError(f"a run spec must be 1 to {MAX_SPEC_CHARS:,} characters")
    if not text.startswith("{"):
        try:
            text = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raise UserError("the spec parameter is neither spec JSON nor base64url of it") from None
    return RunSpec.loads(text, "run spec")


def build_spec(catalog: Catalog, address: str, seed: int, batch_size: int, world_size: int, shuffle: str) -> RunSpec:
    return RunSpec.create(catalog, address, seed=seed, batch_size=batch_size, world_size=world_size, shuffle=shuffle)


def replay_model(catalog: Catalog, spec_text: str, step: int, rank: str) -> dict[str, Any]:
    """The batch of (step, rank or "all") as rows with provenance, fingerprints and Parquet bytes."""
    spec = decode_spec(spec_text)
    result = replay(spec, int(step), rank, catalog=catalog)
    rows = [{"rank": s.rank, "position": s.position, "index": s.index, "address": f"{s.source}@{s.version[:12]}:{s.index}",
             "shard": s.shard, "shard_row": s.shard_row, "row_hash": s.row_hash.hex(), "padding": s.padding,
             "verified": s.verified, "seed": str(s.seed)} for s in result.samples]
    buf = io.BytesIO()
    pq.write_table(provenance_table(result), buf)
    return {"spec_hash": result.spec.hash, "epoch": result.epoch, "step": result.step, "ranks": result.ranks,
            "world_size": result.spec.world_size, "batch_size": result.spec.batch_size,
            "sources": [f"{s.name}@{s.version[:12]}" for s in result.spec.sources],
            "fingerprints": {str(r): fp for r, fp in result.fingerprints.items()}, "rows": rows,
            "unverified": len(result.unverified), "parquet": buf.getvalue()}
