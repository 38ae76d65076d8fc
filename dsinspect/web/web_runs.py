"""The run records the web app may read: only the folders directly inside one configured runs
directory, chosen by name from its listing. A name from the URL (`?run=NAME`) is looked up in that
listing, never joined to a path as given, so no query parameter reaches any other file.

The runs directory is the one `dsinspect web --runs URL` names (see `settings`), else `<catalog>/runs`.
"""

from __future__ import annotations

from dsinspect.errors import UserError
from dsinspect.loaders.store.storage import join, url_to_fs
from dsinspect.web import settings

__all__ = ["runs_url", "run_names", "run_path"]


def runs_url(catalog_url: str) -> str:
    return settings.runs_url() or join(str(catalog_url), "runs")


def run_names(runs: str) -> list[str]:
    """The run record folders (those holding specs/ or fingerprints/) directly inside `runs`."""
    fs, root = url_to_fs(runs)
    if not fs.isdir(root):
        return []
    names = []
    for entry in fs.ls(root, detail=True):
        if entry.get("type") != "directory":
            continue
        path = entry["name"].rstrip("/")
        if fs.isdir(join(path, "specs")) or fs.isdir(join(path, "fingerprints")):
            names.append(path.rsplit("/", 1)[-1])
    return sorted(names)


def run_path(runs: str, name: str) -> str:
    """The run record called `name`, if the runs directory lists it; else one clear error."""
    if name not in run_names(runs):
        raise UserError(f"no run record {name!r} in the runs directory {runs}")
    return join(runs.rstrip("/"), name)
