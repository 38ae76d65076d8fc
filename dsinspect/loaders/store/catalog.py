"""The catalog: plain files on any fsspec URL holding datasets, immutable versions and tags
(where each lives: `layout`; how a version is made visible: `publish`)."""

from __future__ import annotations

import copy
import re
import time
from typing import Any, Iterable

from dsinspect.errors import (
    DamagedError,
    IntegrityError,
    ManifestError,
    NotFoundError,
    RetriesExhausted,
    StorageError,
    UserError,
    reason_of,
)
from dsinspect.loaders.format.manifest import Field, Manifest, sha256_hex
from dsinspect.loaders.store.access import access_error
from dsinspect.loaders.store.address import HEX_PREFIX_MIN, Address, check_name, parse_address
from dsinspect.loaders.store.layout import VERSIONS, Layout, display
from dsinspect.loaders.store.leases import write_lease
from dsinspect.loaders.store.node_copies import NodeCopies
from dsinspect.loaders.store.storage import (
    join,
    locked,
    read_only,
    read_whole,
    refuse_read_only,
    url_to_fs,
    write_atomic,
)
from dsinspect.loaders.store.tags import LATEST, VERSION_ID, move_tags, parse_tags
from dsinspect.loaders.store.transient import is_transient
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.loaders.store.writer import Rows, VersionWriter, WriteOptions

__all__ = ["Catalog", "LATEST"]

_HEX = re.compile(r"^[0-9a-f]+$")
_VERSION_FILE = re.compile(r"^([0-9a-f]{64})\.json$")
_READ_TRIES = 4


class Catalog:
    """A catalog at `url`. Reads go straight to storage; nothing is held but small manifests, and
    for a remote catalog this node's copies of manifests and shard indexes (`node_copies`)."""

    def __init__(self, url: str, *, node_copies: bool = True):
        """`node_copies=False`: read only what is stored, never this node's copies (what `verify`
        checks: a copy is checked on use, so a good one would hide damage in the store)."""
        self.url = str(url)
        try:
            self.fs, self.root = url_to_fs(self.url)
        except UserError as e:  # an unknown protocol, a client package missing: say it is the catalog
            raise UserError(f"catalog {e}") from None
        self.layout = Layout(self.root)
        self._manifests: dict[tuple[str, str], Manifest] = {}
        self.copies = NodeCopies.for_store(self.fs) if node_copies else None

    def __repr__(self) -> str:
        return f"Catalog({self.url!r})"

    def without_copies(self) -> "Catalog":
        """This catalog (its filesystem as it is) reading only what is stored, never this node's
        copies: what `verify` checks (a copy is checked on use, so a good one would hide damage in
        the store). Itself when it keeps no copies."""
        if self.copies is None:
            return self
        other = copy.copy(self)
        other.copies, other._manifests = None, {}
        return other

    # -- paths ---------------------------------------------------------------------------------

    def display(self, path: str) -> str:
        """A path as a URL a person can paste (the protocol kept for remote stores)."""
        return display(self.fs, path)

    # -- listing -------------------------------------------------------------------------------

    def check_exists(self) -> None:
        """NotFoundError unless the catalog's root directory exists: reading a catalog that is not
        there is a mistake (a typo'd path would otherwise list as empty). Writing creates it."""
        try:
            if self.fs.isdir(self.root):
                return
        except Exception as e:  # noqa: BLE001 - a client's errors: no endpoint, no credentials, refused
            refused = access_error(e, f"catalog {self.url}", self.fs)
            if refused is not None:
                raise refused from None
            if isinstance(e, OSError):  # a server that does not answer, refused permissions: say which catalog
                raise StorageError(f"cannot read catalog {self.url}: {reason_of(e)}") from None
            raise
        if read_only(self.fs):
            raise NotFoundError(f"catalog {self.url} lists nothing: the server gives no index page for it "
                                "(python -m http.server and nginx autoindex do), or it does not exist")
        raise NotFoundError(f"catalog {self.url} does not exist")

    def datasets(self) -> list[str]:
        base = self.layout.datasets()
        if not self.fs.isdir(base):
            return []
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(base, detail=False)]
        return sorted(n for n in names if self.fs.isdir(join(base, n, VERSIONS)))  # listed as stored, unchecked

    def version_ids(self, name: str) -> list[str]:
        directory = self.layout.versions(name)
        if not self.fs.isdir(directory):
            try:
                self.check_exists()
            except NotFoundError as e:  # the dataset named, and why nothing is there
                raise NotFoundError(f"no dataset {name!r}: {e}") from None
            raise NotFoundError(f"no dataset {name!r} in catalog {self.url}")
        files = (p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(directory, detail=False))
        return sorted(m[1] for m in map(_VERSION_FILE.match, files) if m)

    def versions(self, name: str) -> list[DatasetVersion]:
        """Every version of `name`, oldest first."""
        versions = [self.version(name, v) for v in self.version_ids(name)]
        return sorted(versions, key=lambda v: (str(v.manifest.meta.get("created_at", "")), v.id))

    def tags(self, name: str) -> dict[str, str]:
        path = self.layout.tags_file(name)
        try:  # one request: no existence check first (each is a round trip to object storage)
            raw = self._read(path)
        except FileNotFoundError:
            return {}
        return parse_tags(raw, self.display(path))

    # -- resolving -----------------------------------------------------------------------------

    def resolve(self, address: str | Address) -> DatasetVersion:
        """The version an address names (`NAME[@REF][:INDEX]`; the index is ignored here)."""
        addr = parse_address(address) if isinstance(address, str) else address
        return self.version(addr.name, self.resolve_ref(addr.name, addr.ref))

    def resolve_ref(self, name: str, ref: str) -> str:
        """A tag, or a unique version-id prefix of at least 8 hex digits, as a full version id. A
        whole id is looked up by its manifest (read now, as it is needed next: one request, none
        with this node's copy), without reading tags or listings (an http catalog may have none)."""
        if VERSION_ID.fullmatch(ref):
            try:
                self.manifest(name, ref)
                return ref
            except NotFoundError:
                pass
        try:
            tags = self.tags(name)
        except DamagedError:
            if not (len(ref) >= HEX_PREFIX_MIN and _HEX.match(ref)):
                raise
            tags = {}  # an id prefix needs no tags: the version stays reachable beside a damaged tags.json
        if ref in tags:
            return tags[ref]
        ids = self.version_ids(name)
        if len(ref) >= HEX_PREFIX_MIN and _HEX.match(ref):
            matches = [v for v in ids if v.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise UserError(f"version prefix {ref!r} of {name!r} is ambiguous: "
                                + ", ".join(m[:16] for m in matches))
            raise NotFoundError(f"no version of {name!r} starts with {ref!r}")
        hint = f"tags: {', '.join(sorted(tags))}" if tags else "it has no tags"
        raise NotFoundError(f"{name!r} has no tag {ref!r} "
                            f"({hint}; or give >= {HEX_PREFIX_MIN} hex digits of a version id)")

    def version(self, name: str, version_id: str) -> DatasetVersion:
        return DatasetVersion(self, name, version_id, self.manifest(name, version_id))

    def manifest(self, name: str, version_id: str) -> Manifest:
        """The manifest of a version, checked against its id (content addressing is verified on read)."""
        cached = self._manifests.get((name, version_id))
        if cached is not None:
            return cached
        if self.copies is None or not VERSION_ID.fullmatch(version_id):
            manifest = self._fetch_manifest(name, version_id)[1]
        else:
            where = self.display(self.layout.manifest(name, version_id))
            manifest = self.copies.get(version_id, "manifest", lambda: self._fetch_manifest(name, version_id),
                                       lambda raw: _checked_manifest(raw, version_id, where))
        self._manifests[(name, version_id)] = manifest
        return manifest

    def _fetch_manifest(self, name: str, version_id: str) -> tuple[bytes, Manifest]:
        path = self.layout.manifest(name, version_id)
        where = self.display(path)
        for second_read in (False, True):  # damaged in transit, or at rest: a second read tells them apart
            try:
                raw = self._read(path)
            except FileNotFoundError:
                raise NotFoundError(f"version {version_id} of {name!r} is missing: {where}") from None
            try:
                manifest = Manifest.from_bytes(raw, where)
            except ManifestError as e:
                if second_read:  # a stored object failing its check (exit 1), not a user's bad file
                    raise DamagedError(str(e)) from None
                continue
            if manifest.id == version_id:
                return raw, manifest
            if second_read:
                raise IntegrityError(f"{where}: content hashes to {manifest.id}, not the version id in its name")
        raise AssertionError("unreachable")

    # -- writing -------------------------------------------------------------------------------

    def writer(self, name: str, fields: Iterable[Field], *, key: str | None = None, parent: str | None = LATEST,
               message: str = "", tags: Iterable[str] = (), options: WriteOptions = WriteOptions(),
               created_at: str | None = None, on_rows=None) -> VersionWriter:
        """A writer for a new version of `name` (created if new); parent defaults to its `latest`."""
        check_name(name)
        for tag in tags:
            check_name(tag, "tag")
        self.check_writable()
        parent_id = self._parent_id(name, parent)
        return VersionWriter(self, name, fields, key=key, parent=parent_id, message=message, tags=tags,
                             options=options, created_at=created_at, on_rows=on_rows)

    def write_version(self, name: str, data: Rows, fields: Iterable[Field], **kwargs: Any) -> DatasetVersion:
        """Write `data` as a new version of `name` in one call; see `writer` for the options."""
        with self.writer(name, fields, **kwargs) as w:
            w.write(data)
        assert w.version is not None
        return w.version

    def check_writable(self) -> None:
        """StorageError (exit 2) for a catalog on a read-only store (http, https), before any work."""
        refuse_read_only(self.fs, self.root)

    def set_tag(self, name: str, tag: str, version_id: str) -> None:
        check_name(tag, "tag")
        self.check_writable()
        self.manifest(name, version_id)  # a tag never points at a missing version
        # the lock keeps concurrent taggers from losing an update; the lease, gc from the write's temp file
        with locked(self.fs, self.layout.tags_file(name)), write_lease(self.fs, self.layout, name):
            move_tags(self.fs, self.layout, name, (tag,), version_id)

    def put_blob(self, name: str, data: bytes, ext: str = "") -> str:
        """Store a side file (e.g. a tokenizer.json) by content; its sha256."""
        self.check_writable()
        sha = sha256_hex(data)
        path = self.layout.blob(name, sha, ext)
        with write_lease(self.fs, self.layout, name):  # gc keeps out while its temp file is there
            if not self.fs.exists(path):
                write_atomic(self.fs, path, data)
        return sha

    def read_blob(self, name: str, sha256: str, ext: str = "") -> bytes:
        path = self.layout.blob(name, sha256, ext)
        if not self.fs.exists(path):
            raise NotFoundError(f"blob {sha256} of {name!r} is missing: {self.display(path)}")
        data = self._read(path)
        if sha256_hex(data) != sha256:
            data = self._read(path)
        if sha256_hex(data) != sha256:
            raise IntegrityError(f"{self.display(path)}: content hashes to {sha256_hex(data)}, expected {sha256}")
        return data

    def _read(self, path: str) -> bytes:
        """A small metadata file, retrying what storage clients raise for transient trouble."""
        for attempt in range(_READ_TRIES):
            try:
                return read_whole(self.fs, path)
            except (FileNotFoundError, PermissionError):
                raise
            except Exception as e:  # noqa: BLE001 - a client's errors: only transient ones are tried again
                refused = access_error(e, f"catalog {self.url}", self.fs)
                if refused is not None:  # no endpoint, no credentials: the client tried the connection already
                    raise refused from None
                if not is_transient(e):
                    if isinstance(e, OSError):
                        raise StorageError(f"cannot read {self.display(path)}: {reason_of(e)}") from e
                    raise
                if attempt + 1 == _READ_TRIES:
                    raise RetriesExhausted(f"cannot read {self.display(path)} after {_READ_TRIES} tries: "
                                           + reason_of(e)) from None
                time.sleep(0.05 * 2 ** attempt)
        raise AssertionError("unreachable")

    def _parent_id(self, name: str, parent: str | None) -> str | None:
        if parent is None:
            return None
        if parent == LATEST and LATEST not in (self.tags(name) if self._exists(name) else {}):
            return None
        return self.resolve_ref(name, parent)

    def _exists(self, name: str) -> bool:
        return self.fs.isdir(self.layout.versions(name))


def _checked_manifest(raw: bytes, version_id: str, where: str) -> Manifest | None:
    """A node copy's manifest if it is the version's, else None (fetched again)."""
    try:
        manifest = Manifest.from_bytes(raw, where)
    except ManifestError:
        return None
    return manifest if manifest.id == version_id else None
