"""Where a catalog keeps each thing: the one home of its on-storage paths.

    <root>/datasets/<name>/versions/<version-id>.json   manifest, immutable
    <root>/datasets/<name>/shards/<sha256>.parquet      content-addressed shards, shared by versions
    <root>/datasets/<name>/shards/<sha256>.index.json   a shard's index (its parts' sha256s), same name
    <root>/datasets/<name>/blobs/<sha256>.<ext>         content-addressed side files (tokenizers)
    <root>/datasets/<name>/tags.json                    tag -> version id
    <root>/datasets/<name>/ingest/<job-id>/             an unfinished ingest's staging (ingest.engine)
    <root>/datasets/<name>/leases/, leases.lock         writers in flight and gc (store.leases)
    <root>/datasets/<name>/derived/<kind>/<sha256>.parquet  per-row values derived from one shard
                                                        (token counts, image sizes: dsinspect.inspect.derived)
    <root>/datasets/<name>/stream/stream.json            an append stream's fields and key (loaders/stream)
    <root>/datasets/<name>/stream/commits/<seq>.json    its commits, numbered from 0 (16 digits), immutable

Every name is checked (`address.check_name`, `format.pathnames`) before it becomes part of a path,
so a stored or user-given name never points outside its directory.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsinspect.loaders.format.pathnames import check_ext, check_sha256
from dsinspect.loaders.store.address import check_name
from dsinspect.loaders.store.storage import join

__all__ = ["Layout", "display", "DATASETS", "VERSIONS", "SHARDS", "BLOBS", "TAGS_FILE", "STAGING", "DERIVED", "LEASES",
           "STREAM", "COMMITS"]

DATASETS, VERSIONS, SHARDS, BLOBS, TAGS_FILE, STAGING = "datasets", "versions", "shards", "blobs", "tags.json", "ingest"
DERIVED, LEASES, STREAM, COMMITS = "derived", "leases", "stream", "commits"


@dataclass(frozen=True)
class Layout:
    """The paths of a catalog rooted at `root` (a path of its filesystem, without protocol).
    Plural names are directories, singular ones files."""

    root: str

    def datasets(self) -> str:
        return join(self.root, DATASETS)

    def dataset(self, name: str) -> str:
        return join(self.root, DATASETS, check_name(name))

    def versions(self, name: str) -> str:
        return join(self.dataset(name), VERSIONS)

    def manifest(self, name: str, version_id: str) -> str:
        return join(self.versions(name), f"{check_sha256(version_id, 'version id')}.json")

    def shards(self, name: str) -> str:
        return join(self.dataset(name), SHARDS)

    def shard(self, name: str, sha256: str) -> str:
        return join(self.shards(name), f"{check_sha256(sha256, 'shard sha256')}.parquet")

    def shard_index(self, name: str, sha256: str) -> str:
        """The index of shard `sha256` (format/shard_index.py): named after the shard it describes."""
        return join(self.shards(name), f"{check_sha256(sha256, 'shard sha256')}.index.json")

    def blob(self, name: str, sha256: str, ext: str) -> str:
        blob = check_sha256(sha256, "blob sha256") + check_ext(ext, "blob file ending")
        return join(self.dataset(name), BLOBS, blob)

    def derived(self, name: str, kind: str, sha256: str) -> str:
        """The values of `kind` (a code's content hash) derived from shard `sha256`'s rows."""
        return join(self.dataset(name), DERIVED, check_sha256(kind, "derived kind"),
                    f"{check_sha256(sha256, 'shard sha256')}.parquet")

    def tags_file(self, name: str) -> str:
        return join(self.dataset(name), TAGS_FILE)

    def leases(self, name: str) -> str:
        """The directory of `name`'s write leases and gc markers (store/leases.py)."""
        return join(self.dataset(name), LEASES)

    def staging(self, name: str) -> str:
        """The directory of `name`'s unfinished ingest jobs, one sub-directory each."""
        return join(self.dataset(name), STAGING)

    def stream_spec(self, name: str) -> str:
        """An append stream's fields and key (loaders/stream): written once, when it is created."""
        return join(self.dataset(name), STREAM, "stream.json")

    def commits(self, name: str) -> str:
        return join(self.dataset(name), STREAM, COMMITS)

    def commit(self, name: str, seq: int) -> str:
        """Commit `seq` of `name`'s stream: 16 digits, so names sort as numbers."""
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq < 10**16:
            raise ValueError(f"a commit number is an integer in 0..10^16 - 1, not {seq!r}")
        return join(self.commits(name), f"{seq:016d}.json")


def display(fs, path: str) -> str:
    """A path of `fs` as a URL a person can paste (the protocol kept for remote stores)."""
    return fs.unstrip_protocol(path) if not path.startswith("/") else path
