"""Make a version visible: write its manifest and point tags at it, all or nothing.

The writer publishes through here (given the catalog's filesystem and layout), so it needs no
private door into the catalog.
"""

from __future__ import annotations

import contextlib
from typing import Iterable

from dsinspect.loaders.format.manifest import Manifest
from dsinspect.loaders.store.layout import Layout
from dsinspect.loaders.store.storage import locked, write_atomic
from dsinspect.loaders.store.tags import LATEST, move_tags

__all__ = ["publish"]


def publish(fs, layout: Layout, name: str, manifest: Manifest, tags: Iterable[str]) -> str:
    """Write the manifest unless that content exists; point the given tags (and `latest`, when the
    version is new) at it; its version id. If the tags cannot be written, a manifest this call wrote
    is removed again, so no version appears that the tags do not know."""
    version_id = manifest.id
    path = layout.manifest(name, version_id)
    with locked(fs, layout.tags_file(name)):
        moved = tuple(tags)
        created = not fs.exists(path)
        if created:
            write_atomic(fs, path, manifest.to_file_bytes())
            moved = (LATEST, *moved)
        # else: equal content, equal id; nothing is written and `latest` stays where it is
        if moved:
            try:
                move_tags(fs, layout, name, moved, version_id)
            except BaseException:
                if created:
                    with contextlib.suppress(OSError):
                        fs.rm_file(path)
                raise
    return version_id
