"""Verify a version: every shard's sha256, every row's hash, every side file the fields name."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.errors import DsinspectError, reason_of
from dsinspect.loaders.format.arrow_errors import UNREADABLE
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.format.token_counts import token_count
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["ShardReport", "VerifyReport", "verify_version", "verify_shard", "verify_side_files", "stored"]

_CHUNK = 4 << 20
_MAX_BAD_ROWS = 100  # listed per shard; the count is always exact


@dataclass
class ShardReport:
    index: int
    url: str
    sha256: str
    rows: int
    actual_sha256: str | None = None
    problems: list[str] = field(default_factory=list)
    bad_rows: list[int] = field(default_factory=list)
    bad_row_count: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class VerifyReport:
    address: str
    version_id: str
    shards: list[ShardReport]
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(s.ok for s in self.shards)

    def to_json(self) -> dict:
        return {"address": self.address, "version_id": self.version_id, "ok": self.ok, "problems": self.problems,
                "shards": [{**asdict(s), "ok": s.ok} for s in self.shards]}


def verify_version(version: DatasetVersion, on_bytes: Callable[[int], None] | None = None) -> VerifyReport:
    """Re-hash everything the version is made of, as stored (never this node's copies: `stored`);
    problems are collected, never raised (a stored manifest that does not check out, read again for a
    version that came from a copy, is an IntegrityError: there is no version to report on)."""
    version = stored(version)
    report = VerifyReport(version.address, version.id, [], verify_side_files(version))
    for shard in range(len(version.manifest.shards)):
        report.shards.append(verify_shard(version, shard, on_bytes))
    return report


def stored(version: DatasetVersion) -> DatasetVersion:
    """The version as read from storage alone: from a catalog that keeps node copies, its manifest
    read and checked again without them (`Catalog.without_copies`); else the version as given."""
    catalog = version.catalog.without_copies()
    return version if catalog is version.catalog else catalog.version(version.name, version.id)


def verify_side_files(version: DatasetVersion) -> list[str]:
    """Problems with the side files (tokenizers) the fields name."""
    problems = []
    for f in version.fields:
        tok = f.options.get("tokenizer")
        if isinstance(tok, dict) and "blob" in tok:
            try:
                version.catalog.read_blob(version.name, tok["blob"], ".json")
            except DsinspectError as e:
                problems.append(f"field {f.name!r}: tokenizer: {e}")
    return problems


def verify_shard(version: DatasetVersion, shard: int, on_bytes: Callable[[int], None] | None = None) -> ShardReport:
    entry = version.manifest.shards[shard]
    rep = ShardReport(shard, version.shard_url(shard), entry.sha256, entry.rows)
    try:
        data = _read_hashing(version, shard, rep, on_bytes)
    except FileNotFoundError:
        rep.problems.append("shard file is missing")
        return rep
    except OSError as e:
        rep.problems.append(f"shard file is not readable: {reason_of(e)}")
        return rep
    if rep.actual_sha256 != entry.sha256:
        rep.problems.append(f"sha256 mismatch: manifest says {entry.sha256}, file hashes to {rep.actual_sha256}")
    if len(data) != entry.bytes:
        rep.problems.append(f"size mismatch: manifest says {entry.bytes} bytes, file has {len(data)}")
    elif entry.index_sha256 is not None:
        _check_index(version, shard, data, rep)
    try:
        _check_rows(version, shard, data, rep)
    except (*UNREADABLE, DsinspectError) as e:
        rep.problems.append(f"rows not readable: {reason_of(e)}")
    return rep


def _check_index(version: DatasetVersion, shard: int, data: pa.Buffer, rep: ShardReport) -> None:
    """The shard's index: its own sha256, and each part's sha256 against the bytes (a damaged shard
    is then also located to the row group that holds the damage)."""
    try:
        index = version.shard_index(shard)
    except DsinspectError as e:
        rep.problems.append(f"index: {reason_of(e)}")
        return
    view = memoryview(data)
    for part in range(index.parts):
        start, end = index.span(part)
        got = hashlib.sha256(view[start:end]).hexdigest()
        if got != index.sha256[part]:
            what = "the footer" if part == index.footer else f"row group {part}"
            rep.problems.append(f"index: part {part} ({what}, bytes {start}..{end}) hashes to {got}, "
                                f"the index says {index.sha256[part]}")


def _read_hashing(version: DatasetVersion, shard: int, rep: ShardReport,
                  on_bytes: Callable[[int], None] | None) -> pa.Buffer:
    """The shard's bytes in memory Arrow owns, hashed on the way. Not a Python `bytes`: Arrow's
    CPU pool threads decode the row groups and may drop the last reference to the buffer after
    `read_row_group` has returned; releasing a Python-owned buffer takes the GIL, and a thread
    asking for it while the interpreter finalizes is ended by CPython with pthread_exit, whose
    unwinding through Arrow's noexcept frames calls std::terminate (exit 134 after a complete
    report, ~1% of runs on a busy 2-core machine; benchmarks/stress_verify_exit.py)."""
    digest, sink = hashlib.sha256(), pa.BufferOutputStream()
    with version.catalog.fs.open(version.shard_path(shard), "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
            sink.write(chunk)  # a copy into Arrow's memory pool
            if on_bytes:
                on_bytes(len(chunk))
    rep.actual_sha256 = digest.hexdigest()
    return sink.getvalue()


def _check_rows(version: DatasetVersion, shard: int, data: pa.Buffer, rep: ShardReport) -> None:
    names = [f.name for f in version.fields]
    pf = pq.ParquetFile(pa.BufferReader(data))
    have = pf.schema_arrow.names
    if have != [*names, HASH_COLUMN]:
        rep.problems.append(f"columns {have} do not match the manifest's {[*names, HASH_COLUMN]}")
        return
    if pf.metadata.num_rows != rep.rows:
        rep.problems.append(f"row count mismatch: manifest says {rep.rows}, file has {pf.metadata.num_rows}")
    first = int(version.shard_starts[shard])
    offset = 0
    counted = dict(version.manifest.shards[shard].tokens)
    tokens = dict.fromkeys(counted, 0)
    for group in range(pf.metadata.num_row_groups):
        table = pf.read_row_group(group).cast(version.manifest.schema.append(pf.schema_arrow.field(HASH_COLUMN)))
        for name in tokens:
            tokens[name] += token_count(table.column(name))
        stored = table.column(HASH_COLUMN).to_pylist()
        for i, (want, got) in enumerate(zip(stored, row_hashes(table, names))):
            if want != got:
                rep.bad_row_count += 1
                if len(rep.bad_rows) < _MAX_BAD_ROWS:
                    rep.bad_rows.append(first + offset + i)
        offset += table.num_rows
    if rep.bad_row_count:
        rep.problems.append(f"{rep.bad_row_count} row(s) do not match their stored row hash")
    for name, count in tokens.items():
        if count != counted[name]:
            rep.problems.append(f"token count mismatch: field {name!r} has {count:,} tokens, "
                                f"the manifest says {counted[name]:,}")

