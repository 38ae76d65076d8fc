"""The run records the web app may read: only the folders directly inside one configured runs
directory, chosen by name from its listing. A name from the URL (`?run=NAME`) is looked up in that
listing, never joined to a path as given, so no query parameter reaches any other file.

The runs directory is the one `dsinspect web --runs URL` names (see `settings`), else `<catalog>/runs`.
"""

from __future__ import annotations

from dsinspect.errors import UserError
from dsinspect.inspect.runs import default_runs_dir, run_names
from dsinspect.loaders.store.storage import join
from dsinspect.web import settings

__all__ = ["runs_url", "run_names", "run_path"]


def runs_url(catalog_url: str) -> str:
    return settings.runs_url() or default_runs_dir(catalog_url)


def run_path(runs: str, name: str) -> str:
    """The run record called `name`, if the runs directory lists it (`run_names`: the folders holding
    specs/ or fingerprints/ directly inside it); else one clear error."""
    if name not in run_names(runs):
        raise UserError(f"no run record {name!r} in the runs directory {runs}")
    return join(runs.rstrip("/"), name)
