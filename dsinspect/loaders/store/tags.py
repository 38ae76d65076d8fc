"""A dataset's tags.json (tag -> version id): parsed strictly, moved without losing a concurrent update."""

from __future__ import annotations

import json
import re
from typing import Iterable

from dsinspect.errors import DamagedError
from dsinspect.loaders.store.layout import Layout, display
from dsinspect.loaders.store.storage import rewrite

__all__ = ["LATEST", "parse_tags", "move_tags"]

LATEST = "latest"
VERSION_ID = re.compile(r"[0-9a-f]{64}")


def parse_tags(data: bytes, where: str) -> dict[str, str]:
    """The tags in a tags.json's bytes; DamagedError naming `where` for anything but names -> version ids."""
    try:
        tags = json.loads(data)
    except RecursionError:
        raise DamagedError(f"{where}: nested too deeply") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DamagedError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) and VERSION_ID.fullmatch(v)
                                             for k, v in tags.items()):
        raise DamagedError(f"{where}: tags must map names to 64-hex version ids")
    return tags


def move_tags(fs, layout: Layout, name: str, tags: Iterable[str], version_id: str) -> None:
    """Point `tags` of dataset `name` at `version_id` in one read-modify-write of tags.json that no
    concurrent writer's update is lost to (callers hold `storage.locked` on local disks; a
    conditional put on S3)."""
    path = layout.tags_file(name)

    def change(current: bytes | None) -> bytes:
        known = parse_tags(current, display(fs, path)) if current is not None else {}
        return _tags_bytes({**known, **{t: version_id for t in tags}})

    rewrite(fs, path, change)


def _tags_bytes(tags: dict[str, str]) -> bytes:
    return (json.dumps(tags, sort_keys=True, indent=2) + "\n").encode("utf-8")
