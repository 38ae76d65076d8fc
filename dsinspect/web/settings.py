"""What `dsinspect web` tells the Streamlit app it starts, through the app's environment: the one catalog,
the runs directory, a preset transform, and whether a transform typed into the page may be imported.
Both sides use this module: the CLI writes (`app_environment`), the pages read. Imports no Streamlit,
so the CLI can import it without starting a web stack."""

from __future__ import annotations

import os

__all__ = ["CATALOG_ENV", "RUNS_ENV", "TRANSFORM_ENV", "TYPED_TRANSFORMS_ENV", "app_environment", "catalog_url",
           "runs_url", "preset_transform", "typed_transforms_allowed"]

CATALOG_ENV = "DSINSPECT_CATALOG"  # the app reads only this catalog (also the CLI's default catalog)
RUNS_ENV = "DSINSPECT_RUNS"  # run records the Replay page may open by name
TRANSFORM_ENV = "DSINSPECT_WEB_TRANSFORM"  # the Replay page's preset transform (`--transform`)
TYPED_TRANSFORMS_ENV = "DSINSPECT_WEB_TYPED_TRANSFORMS"  # "1": the page may import a typed module:function


def app_environment(catalog_url: str, runs_url: str | None = None, transform: str | None = None,
                    typed_transforms: bool = False) -> dict[str, str]:
    """The variables the CLI sets for the app: the one catalog, the runs folder, a preset transform,
    and whether the page may import a transform typed into it."""
    env = {CATALOG_ENV: catalog_url, TYPED_TRANSFORMS_ENV: "1" if typed_transforms else "0"}
    if runs_url:
        env[RUNS_ENV] = runs_url
    if transform:
        env[TRANSFORM_ENV] = transform
    return env


def catalog_url() -> str | None:
    """The catalog the app was started on, or None (the app then opens the bundled one)."""
    return os.environ.get(CATALOG_ENV) or None


def runs_url() -> str | None:
    """The runs directory given to `dsinspect web --runs`, or None (the app then uses `<catalog>/runs`)."""
    return os.environ.get(RUNS_ENV) or None


def preset_transform() -> str:
    """The operator's transform (`dsinspect web --transform`), or ""."""
    return os.environ.get(TRANSFORM_ENV, "")


def typed_transforms_allowed() -> bool:
    """Whether `dsinspect web --allow-typed-transforms` was given."""
    return os.environ.get(TYPED_TRANSFORMS_ENV) == "1"
