"""The run record format: file names, line kinds, batch fingerprints and per-sample digests.

    <dir>/specs/step-<start, 12 digits>-<segment id>.json   the spec of one segment (its first writer)
    <dir>/fingerprints/rank-<rank, 5 digits>.jsonl          segment headers and step lines of one rank

A segment header:  {"segment", "parent", "start", "world_size", "batch_size", "spec", "rank", "time"}
A step line:       {"step", "rank", "epoch", "fingerprint", "n", "of", "seg", "samples"?, "wait"?}

A batch fingerprint is XXH3-128 over the batch's 16-byte row hashes in batch order (padding
included), hex; "of" says whether the hashes are of the rows as stored or as transformed. "samples"
is the base64 of the first DIGEST_BYTES of each stored row hash: which position changed. Records
written before segments existed (`specs/step-<12 digits>.json`, lines without "seg") still read.
docs/RUN_RECORDS.md is the prose version.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Iterable, Iterator

import numpy as np
import xxhash

from dsinspect.errors import UserError
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.store.storage import join, url_to_fs

__all__ = ["batch_fingerprint", "sample_digests", "digests_of", "segment_id", "spec_file_name", "read_specs",
           "spec_for_step", "read_fingerprints", "read_log", "parse_log", "DIGEST_BYTES", "SPEC_FILE"]

DIGEST_BYTES = 4  # per sample: a changed row shows with probability 1 - 2^-32
SPEC_FILE = re.compile(r"^step-(\d{12})(?:-([0-9a-f]{16}))?\.json$")


def batch_fingerprint(row_hashes: Iterable[bytes] | np.ndarray) -> str:
    if isinstance(row_hashes, np.ndarray):
        return xxhash.xxh3_128_hexdigest(np.ascontiguousarray(row_hashes).tobytes())
    return xxhash.xxh3_128_hexdigest(b"".join(row_hashes))


def sample_digests(row_hashes: np.ndarray) -> str:
    """The per-sample digests of an (n, 16) uint8 array of row hashes, as a log line carries them."""
    return base64.b64encode(np.ascontiguousarray(row_hashes[:, :DIGEST_BYTES]).tobytes()).decode("ascii")


def digests_of(row_hashes: Iterable[bytes]) -> list[bytes]:
    """Each row hash cut to its digest, to compare with a line's decoded "samples"."""
    return [h[:DIGEST_BYTES] for h in row_hashes]


def decode_digests(text: str, n: int) -> list[bytes] | None:
    """A line's "samples" as n digests, or None when it is missing or malformed (then unused)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        return None
    if len(raw) != n * DIGEST_BYTES:
        return None
    return [raw[i:i + DIGEST_BYTES] for i in range(0, len(raw), DIGEST_BYTES)]


def segment_id(spec: RunSpec, parent: str | None) -> str:
    """The same on every rank and worker of a segment: the spec (its start, world size and batch
    size included) and the segment whose state it resumed from."""
    return xxhash.xxh3_64_hexdigest(f"{spec.hash}|{parent or ''}".encode())


def spec_file_name(spec: RunSpec, segment: str) -> str:
    return f"step-{spec.start_step:012d}-{segment}.json"


def read_specs(directory: str) -> list[tuple[str | None, RunSpec]]:
    """Every spec file of a run as (segment id or None for an old record, spec), in start-step order."""
    fs, root = url_to_fs(directory)
    base = join(root, "specs")
    if not fs.isdir(base):
        raise UserError(f"{directory}: no run records here (no specs/ folder)")
    found = []
    for name in sorted(p.rsplit("/", 1)[-1] for p in fs.ls(base, detail=False)):
        match = SPEC_FILE.match(name)
        if match:
            spec = RunSpec.loads(fs.cat_file(join(base, name)).decode(), f"{directory}/specs/{name}")
            found.append((match.group(2), spec))
    return sorted(found, key=lambda item: item[1].start.step)


def spec_for_step(specs: list[RunSpec], step: int) -> RunSpec:
    """The segment in force at `step` among specs given in start-step order: the last one starting
    at or before it (a run record directory knows better: `RunRecord.spec_at`)."""
    covering = [s for s in specs if s.start.step <= step]
    if not covering:
        raise UserError(f"no run spec covers step {step}")
    return covering[-1]


def read_fingerprints(path: str) -> Iterator[dict]:
    """The step lines of a fingerprint log file or of a run directory (all ranks)."""
    return (entry for entry in read_log(path) if "segment" not in entry)


def read_log(path: str) -> Iterator[dict]:
    """Every line of a fingerprint log file or of a run directory (all ranks, file by file, each in
    written order), checked as it is read (`parse_log`)."""
    fs, root = url_to_fs(path)
    files = (sorted(fs.glob(join(root, "fingerprints", "rank-*.jsonl"))) if fs.isdir(root) else [root])
    for f in files:
        with fs.open(f, "r") as handle:
            yield from parse_log(handle, f)


def parse_log(lines: Iterable[str], where: str) -> Iterator[dict]:
    """The entries of one rank's log (its lines with their newlines): segment headers carry "segment",
    step lines "step".

    A line a kill cut short is no evidence and is skipped: the last line without its newline, or a
    malformed line right before a segment header (a resumed writer ends the cut line and starts
    with its header). Any other malformed line is an error naming `where` and the line number."""
    cut: str | None = None  # a malformed line, forgiven only if a header follows it
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        entry = _parse(line)
        if entry is None:
            if not line.endswith("\n"):
                continue
            if cut is not None:
                raise UserError(cut)
            cut = f"{where}:{number}: not a fingerprint log line"
            continue
        if cut is not None and "segment" not in entry:
            raise UserError(cut)
        cut = None
        yield entry
    if cut is not None:
        raise UserError(cut)


def _parse(line: str) -> dict | None:
    try:
        entry = json.loads(line)
        if "segment" in entry:
            str(entry["segment"]), int(entry["start"]), int(entry["world_size"])
        else:
            int(entry["step"]), int(entry["rank"]), str(entry["fingerprint"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    return entry
