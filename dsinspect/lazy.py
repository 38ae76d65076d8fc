"""Names a package loads on first use (PEP 562): importing the package costs nothing until one is asked
for, and then only that name's module. The one mechanism behind the root, `loaders`, `inspect` and `term`.

The lowest layer (beside `errors`): standard library only."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, Iterable[str]]) -> tuple[Callable[[str], Any], Callable[[], list]]:
    """`__getattr__` and `__dir__` for `package`, whose names live in the modules `homes` maps to them
    (a module name may be relative to the package: ".read.loader"). A loaded name is stored in the
    package, so the next lookup is a plain attribute."""
    namespace = sys.modules[package].__dict__
    home_of = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
