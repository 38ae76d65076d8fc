"""The terminal UI (Textual): browse a catalog, page through samples, inspect one sample's fields.

`run(address, catalog_url)` starts it; the app module is imported only then, so importing the package
costs nothing. Never imports `dsinspect.web`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run"]


def run(address: str | None = None, catalog_url: str | None = None, catalog: Any = None,
        transform: str | None = None) -> None:
    """Open the terminal UI on a catalog (an open one, a URL, or the default), at `address` when given;
    `transform` (package.module:function) is the run's transform the replay screen re-runs."""
    from dsinspect.tui.adapter import DataSource
    from dsinspect.tui.app import DsinspectApp

    DsinspectApp(address=address, source=DataSource(catalog_url, catalog=catalog), transform=transform).run()
