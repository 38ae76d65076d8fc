"""The commit log of a stream: many writers append, any number of readers follow, nothing is locked.

An append writes its rows as content-addressed shards (as any version's: `VersionWriter`), then
publishes a commit naming them by creating `stream/commits/<seq>.json` *exclusively*: a link of a
finished temp file on a local disk, a put with If-None-Match: * on S3 (`storage.create_exclusive`).
Whoever creates commit n first owns it; a writer that finds n taken tries n + 1. So:

- a commit is visible whole or not at all (its file appears complete, its shards before it);
- commits are numbered 0, 1, 2, … without gaps: a writer moves past n only once n exists, and starts
  from a listing's highest number + 1, every number below which exists;
- a writer killed before its commit file exists loses that append only: its shards are garbage that
  gc collects (after its grace period; while the append runs its write lease keeps gc out), and a
  reader never sees them; one killed after loses nothing;
- readers follow by reading commit n, n + 1, … until one is missing: O(new commits), no listing.

The order of commits is the order their files were created, which is the order a learner reads them
in; `snapshot` makes any prefix of the stream an ordinary version (content-addressed: the same prefix
always gives the same version id).
"""

from __future__ import annotations

import datetime as dt
import json
import posixpath
from typing import Any, Iterable, Iterator

from dsinspect.errors import IntegrityError, NotFoundError, StorageError, UserError
from dsinspect.loaders.format.manifest import Field, Manifest
from dsinspect.loaders.format.rollout_fields import declare_meanings
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.leases import write_lease
from dsinspect.loaders.store.storage import create_exclusive, write_errors
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.loaders.store.writer import VersionWriter, WriteOptions
from dsinspect.loaders.stream.commits import Commit, StreamSpec, check_label

__all__ = ["Stream", "open_stream", "snapshot", "APPEND_OPTIONS"]

# How an append writes its shards (any WriteOptions may be passed instead; none changes a row's hash):
# zstd at level 1 (on token ids as small as level 3, faster), floats (log-probs) stored plain and no
# statistics of list items: per append of 64 rollouts of 1,024 tokens + log-probs, Parquet writes them
# in ~2.7 ms of CPU instead of ~3.9 for 6% more bytes (benchmarks/README.md).
APPEND_OPTIONS = WriteOptions(compression_level=1, compress_floats=False, nested_statistics=False)


def open_stream(catalog: Catalog, name: str, fields: Iterable[Field] | None = None, *,
                key: str | None = None) -> "Stream":
    """The stream of dataset `name`; with `fields`, created when it does not exist yet (and refused
    when it exists with other fields or another key). Fields that are LLM rollouts are created with each
    column's meaning declared in its options (`rollout_fields.declare_meanings`), as ingest does."""
    layout, fs = catalog.layout, catalog.fs
    path = layout.stream_spec(name)
    if fields is not None:  # rollouts get their meanings declared, as ingest declares them (docs/RL.md)
        given = StreamSpec(tuple(fields), key)
        wanted = StreamSpec(tuple(declare_meanings(fields)), key)
        Manifest(wanted.fields, (), key)  # names, roles and the key checked as a version's would be
        create_exclusive(fs, path, _pretty(wanted.to_json()))
    data = _read(fs, path)
    if data is None:
        raise NotFoundError(f"dataset {name!r} has no stream (create it with its fields)")
    spec = StreamSpec.from_bytes(data, fs.unstrip_protocol(path))
    if fields is not None and spec not in (wanted, given):  # given: a stream created before meanings were
        raise UserError(f"dataset {name!r}: its stream exists with other fields or another key "
                        f"({', '.join(f.name for f in spec.fields)}; key {spec.key})")
    return Stream(catalog, name, spec)


class Stream:
    """Dataset `name`'s stream (`open_stream`): append rows as commits, read commits in order."""

    def __init__(self, catalog: Catalog, name: str, spec: StreamSpec):
        self.catalog, self.name, self.spec = catalog, name, spec
        self._next = None  # the lowest commit number that may be free (a hint: checked on create)
        self._spec_id = spec.id  # a hash of the fields: ~0.05 ms an append when made each time

    def append(self, rows: Any, *, writer: str = "", message: str = "",
               options: WriteOptions = APPEND_OPTIONS, created_at: str | None = None) -> Commit:
        """Write `rows` (a Table, a RecordBatch, batches or row dicts) and publish them as the next
        commit; the commit. Under a write lease from the first shard to the commit file, so gc never
        takes a shard a commit is about to name. `created_at` (ISO 8601) stamps the commit instead of
        the clock: a stream generated again (the sample catalog's) is then the same bytes. Each shard
        is on disk (fsync) before the commit names it, and the commit before it is linked: a commit that
        survives a crash names shards that did."""
        check_label(writer, "writer"), check_label(message, "message")
        fs, layout = self.catalog.fs, self.catalog.layout
        with write_lease(fs, layout, self.name):
            shard_writer = VersionWriter(self.catalog, self.name, self.spec.fields, key=self.spec.key,
                                         options=options, sync_shards=True)
            try:
                shard_writer.write(rows)
                shards = shard_writer.finish_shards()
            except BaseException:
                shard_writer.abort()  # rows that do not fit: nothing of them stays behind
                raise
            if not shards:
                raise UserError(f"stream {self.name!r}: an append of no rows")
            created = created_at or dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
            seq = self._head() if self._next is None else self._next
            while True:
                # Skip what other writers took since this one's last commit: an existence check costs
                # ~0.02 ms, a create that fails a temp file and an fsync (8 writers: 2 a commit before).
                while fs.exists(layout.commit(self.name, seq)):
                    seq += 1
                commit = Commit(seq, self._spec_id, tuple(shards), writer, created, message)
                if create_exclusive(fs, layout.commit(self.name, seq), commit.to_bytes()):
                    self._next = seq + 1
                    return commit
                seq += 1  # taken between the check and the create

    def commits(self, since: int = 0, until: int | None = None) -> Iterator[Commit]:
        """Commits `since`, `since + 1`, … (up to `until`, excluded), in order, as far as they exist now."""
        seq = since
        while until is None or seq < until:
            commit = self.commit(seq)
            if commit is None:
                return
            yield commit
            seq += 1

    def commit(self, seq: int) -> Commit | None:
        """Commit `seq`, or None when it does not exist (yet); refused when it is not this stream's."""
        fs = self.catalog.fs
        path = self.catalog.layout.commit(self.name, seq)
        data = _read(fs, path)
        if data is None:
            return None
        commit = Commit.from_bytes(data, seq, fs.unstrip_protocol(path))
        if commit.stream != self.spec.id:
            raise IntegrityError(f"{fs.unstrip_protocol(path)}: a commit of another stream's rows")
        return commit

    def head(self) -> int:
        """The number of commits now: the next commit's number."""
        seq = self._head()
        while self.commit(seq) is not None:  # a listing may lag (object stores): count on from it
            seq += 1
        return seq

    def _head(self) -> int:
        """The highest commit number a listing shows, + 1 (0 for none): every number below exists."""
        fs, directory = self.catalog.fs, self.catalog.layout.commits(self.name)
        with write_errors(fs, directory):
            try:
                names = fs.ls(directory, detail=False)
            except FileNotFoundError:
                return 0
        numbers = [int(stem) for stem in (posixpath.basename(p)[:-5] for p in names if p.endswith(".json"))
                   if stem.isdigit()]
        return max(numbers) + 1 if numbers else 0


def snapshot(stream: Stream, until: int | None = None, *, tags: Iterable[str] = (), message: str = "",
             parent: str | None = None, options: WriteOptions = WriteOptions()) -> DatasetVersion:
    """Commits 0 .. `until` - 1 (default: all there are now) as an ordinary version of the dataset, their
    shards in commit order (nothing is rewritten: the same prefix, and `parent`, always give the same
    version id). `parent`: the version id it follows (an earlier snapshot), for `ls` and the viewers."""
    commits = list(stream.commits(0, until))
    if until is not None and len(commits) < until:
        raise UserError(f"stream {stream.name!r} has {len(commits)} commits, not {until}")
    if not commits:
        raise UserError(f"stream {stream.name!r} has no commit to snapshot")
    writer = VersionWriter(stream.catalog, stream.name, stream.spec.fields, key=stream.spec.key, tags=tags,
                           parent=parent,
                           message=message or f"stream commits 0..{len(commits) - 1}", options=options,
                           created_at=commits[-1].created_at)
    for commit in commits:
        for shard in commit.shards:
            writer.add_shard(shard)
    return writer.commit()


def _read(fs: Any, path: str) -> bytes | None:
    """The bytes of the small file `path`, None when it does not exist (yet)."""
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"cannot read {fs.unstrip_protocol(path)}: {e}") from None


def _pretty(obj: dict) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
