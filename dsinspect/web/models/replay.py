"""Replay for the web: run specs travel in the URL as base64url JSON (never as a path); a replayed
batch becomes plain rows, each sample as stored and as fed to the model when a transform is given,
a Parquet download made when asked (`batch_parquet`), and the verdict of a fingerprint log on it. A
link may name any batch: more than MAX_REPLAY_SAMPLES samples per page are refused before anything is
read (`check_size`), and more than MAX_REPLAY_BYTES (row groups read and rows, as the shards' footers
count them: loaders/audit/bounds.py) before a row is read.

Transforms are code: `import_transform` imports what a person typed into the page (or what the
operator passed to `dsinspect web --transform`), never a name taken from the URL (see app_pages/replay.py)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any, Callable

import pyarrow.parquet as pq

from dsinspect.errors import UserError
from dsinspect.inspect.cells import cell, repr_line
from dsinspect.loaders.audit.bounds import BatchTooLarge
from dsinspect.loaders.audit.export import provenance_table
from dsinspect.loaders.audit.logcheck import check_log, parse_steps
from dsinspect.loaders.audit.replay import Replay, load_specs, parse_rank, replay
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.records import runlog
from dsinspect.loaders.records.runlog import spec_for_step
from dsinspect.loaders.records.transforms import as_table, guarded, load_job_transform
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["encode_spec", "decode_spec", "build_spec", "replay_model", "batch_parquet", "import_transform", "parse_log",
           "log_check", "check_size", "MAX_SPEC_CHARS", "MAX_REPLAY_SAMPLES", "MAX_MIXTURE_BLOCK", "MAX_REPLAY_BYTES"]

MAX_SPEC_CHARS = 64_000
MAX_REPLAY_SAMPLES = 1024  # samples one page replays (batch size × ranks shown): 10^7 would exhaust the server
MAX_MIXTURE_BLOCK = 1 << 20  # a mixture's schedule is built a block at a time: 2×10^8 took 4 GB and 12 s
# bytes one page replays (256 copies of a 10 MB row are 2.5 GB within the sample cap; the server holds
# about twice the bound while it reads and shows the batch)
MAX_REPLAY_BYTES = 128 << 20
TOO_LARGE_HINT = ("a page replays at most this much: pick one rank, or use `dsinspect replay --spec RUN.json "
                  "--step N --export DIR`, which writes any batch a part at a time")


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


def replay_model(catalog: Catalog, specs: str | list[RunSpec], step: int, rank: str,
                 transform: str | None = None) -> dict[str, Any]:
    """The batch of (step, rank or "all") as rows with provenance and fingerprints, and the spec in
    force at the step (for `batch_parquet`); with `transform`, each sample's fields as stored and as
    the transform fed them to the model. A packed-sequence run's batch is its sequences instead
    (packed_replay.py; no transform: that is a row job's)."""
    source = load_specs(decode_spec(specs) if isinstance(specs, str) else specs)
    spec = spec_for_step(source, int(step))
    if spec.sequences is not None:
        from dsinspect.web.models.packed_replay import packed_replay_model

        check_size([spec], rank)
        return packed_replay_model(catalog, source, int(step), rank, MAX_REPLAY_BYTES)
    fn = import_transform(transform) if transform else None
    result = _replayed(catalog, specs, step, rank, fn, transform)
    rows = [{"rank": s.rank, "position": s.position, "index": s.index,
             "address": f"{s.source}@{s.version[:12]}:{s.index}",
             "shard": s.shard, "shard_row": s.shard_row, "row_hash": s.row_hash.hex(), "padding": s.padding,
             "verified": s.verified, "seed": f"{s.seed:016x}"} for s in result.samples]  # hex, as the CLI
    return {"spec_hash": result.spec.hash, "spec": result.spec.dumps(), "epoch": result.epoch, "step": result.step,
            "ranks": result.ranks,
            "world_size": result.spec.world_size, "batch_size": result.spec.batch_size,
            "sources": [f"{s.name}@{s.version[:12]}" for s in result.spec.sources],
            "fingerprints": {str(r): fp for r, fp in result.fingerprints.items()}, "rows": rows,
            "unverified": len(result.unverified), "stored": _stored_cells(result),
            "transform": transform or None, "fed": _fed_cells(result) if fn else None,
            "transformed_fingerprints": {str(r): fp for r, fp in result.transformed_fingerprints.items()},
            "transform_error": result.transform_error}


def batch_parquet(catalog: Catalog, spec_json: str, step: int, rank: str) -> bytes:
    """The batch a `replay_model` shows (its "spec": the segment in force at `step`) as Parquet with
    provenance, as `dsinspect replay --export` writes it: made when the page's download button is
    pressed, so no page holds a batch's bytes."""
    result = _replayed(catalog, [RunSpec.loads(spec_json, "run spec")], step, rank)
    buf = io.BytesIO()
    pq.write_table(provenance_table(result), buf, compression="zstd")
    return buf.getvalue()


def _replayed(catalog: Catalog, specs: str | list[RunSpec], step: int, rank: str,
              fn: Callable[[Any], Any] | None = None, transform: str | None = None) -> Replay:
    """The batch, within the page's bounds: samples (`check_size`) and bytes (MAX_REPLAY_BYTES)."""
    source = load_specs(decode_spec(specs) if isinstance(specs, str) else specs)
    check_size([spec_for_step(source, int(step))], rank)
    try:
        return guarded(lambda: replay(source, int(step), rank, catalog=catalog, transform=fn,
                                      max_bytes=MAX_REPLAY_BYTES), transform)
    except BatchTooLarge as e:
        raise e.hinted(TOO_LARGE_HINT) from None


def _stored_cells(result: Replay) -> list[dict[str, str]]:
    """Per sample (batch order, as `rows`), each field's value as a short text cell."""
    return [{c: cell(b.table.column(c)[i]) for c in b.table.column_names}
            for b in result.batches for i in range(b.table.num_rows)]


def _fed_cells(result: Replay) -> list[dict[str, str] | str]:
    """Per sample, what the transform made of it: its row of the output taken as a table, or a line
    saying why there is no such row (output not a table, or not one row per sample)."""
    out: list[dict[str, str] | str] = []
    for b in result.batches:
        n = b.table.num_rows
        try:
            table = as_table(b.transformed)
        except UserError:
            out += [f"the transform returned {repr_line(b.transformed)}, not a table"] * n
            continue
        if table.num_rows != n:
            out += [f"the transform made {table.num_rows} rows from {n} (columns {', '.join(table.column_names)})"] * n
            continue
        out += [{c: cell(table.column(c)[i]) for c in table.column_names} for i in range(n)]
    return out


def import_transform(name: str) -> Callable[[Any], Any]:
    """The callable `package.module:function` names; the job's own modules import from the directory
    `dsinspect web` was started in, as with the CLI (Streamlit puts only the app's folder on the path)."""
    return load_job_transform(name)


def parse_log(data: bytes, where: str) -> list[dict[str, Any]]:
    """The lines of an uploaded rank log (JSONL), checked as a log file is (`runlog.parse_log`). An
    upload is whole (no kill cut it short), so its last line counts with or without a newline."""
    text = data.decode("utf-8", "replace")
    lines = list(runlog.parse_log((text if text.endswith("\n") else text + "\n").splitlines(keepends=True), where))
    if not any("segment" not in entry for entry in lines):
        raise UserError(f"{where}: no fingerprint log lines")
    return lines


def log_check(catalog: Catalog, specs: str | list[RunSpec], log: str | list[dict[str, Any]], steps: str | None,
              rank: str, transform: str | None = None) -> dict[str, Any]:
    """The log's verdict on `steps` (one step `N`, or None for the whole log) for `rank` (or all):
    how many lines matched, else the first divergence (step, rank, positions, reason)."""
    fn = import_transform(transform) if transform else None
    source = load_specs(decode_spec(specs) if isinstance(specs, str) else specs)
    check_size(source, rank)
    ranks = None if rank.strip().lower() == "all" else parse_rank(rank)  # a filter: any rank the log may hold
    result = guarded(lambda: check_log(source, log, parse_steps(steps), catalog, fn, ranks=ranks), transform)
    return result.to_json()


def check_size(specs: list[RunSpec], rank: str) -> None:
    """Refuse, before anything is read, a replay of more than MAX_REPLAY_SAMPLES samples per step
    under any of `specs` (the batch size, times the world size for rank "all"), or of a mixture
    whose block is larger than MAX_MIXTURE_BLOCK."""
    for spec in specs:
        if len(spec.sources) > 1 and spec.mixture_block > MAX_MIXTURE_BLOCK:
            raise UserError(f"this mixture's block is {spec.mixture_block:,} positions; a page replays blocks of at "
                            f"most {MAX_MIXTURE_BLOCK:,}: use `dsinspect replay` on the command line")
        ranks = spec.world_size if str(rank).strip().lower() == "all" else 1
        samples = spec.batch_size * ranks
        if samples > MAX_REPLAY_SAMPLES:
            raise UserError(f"this batch holds {samples:,} samples ({spec.batch_size:,} per rank × {ranks:,} "
                            f"rank(s)); a page replays at most {MAX_REPLAY_SAMPLES:,}: pick one rank, or use "
                            "`dsinspect replay --spec RUN.json --step N --export DIR` for the whole batch")


def verdict(check: dict[str, Any], what: str) -> tuple[str, str]:
    """("success" | "warning" | "error", one line) for a `log_check` result about `what` (e.g. "step 3")."""
    if check["checked"] == 0:
        return "warning", f"{what}: the log has no line for this (step, rank)"
    d = check["divergence"]
    if d is None:
        sides = ", ".join(f"{n} {side}" for side, n in sorted(check["sides"].items()))
        a, b = check["steps"]
        span = f"step {a}" if a == b else f"steps {a}..{b}"
        return "success", f"{what}: ✓ matches the log ({check['checked']} line(s), {sides}; {span})"
    where = f"positions {', '.join(map(str, d['positions']))}" if d["positions"] else "no position attributable"
    return "error", f"{what}: ✗ first divergence at step {d['step']}, rank {d['rank']} ({d['of']}; {where})"


def marked_rows(rows: list[dict[str, Any]], check: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The batch rows with a `log` column: ✗ at the positions of a divergence, ✓ on every row when
    the log has one matching line per rank shown, blank where the log does not speak for the row."""
    if check is None:
        return rows
    d = check["divergence"]
    ranks = {r["rank"] for r in rows}
    all_matched = d is None and check["checked"] == len(ranks)
    bad = {(d["rank"], p) for p in d["positions"]} if d else set()
    return [{**r, "log": "✗ diverges" if (r["rank"], r["position"]) in bad else ("✓" if all_matched else "")}
            for r in rows]
