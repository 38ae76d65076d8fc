"""Optional dependencies: each is imported where it is first needed, and a missing one is a one-line
UserError naming the extra that installs it (`pip install 'dsinspect[tui]'`), not a traceback.

The lowest layer (beside `errors`): the engine and every face may import it."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from types import ModuleType

from dsinspect.errors import UserError

__all__ = ["require", "require_installed", "missing_extra"]


def require(module: str, extra: str, what: str | None = None) -> ModuleType:
    """`module` imported; a UserError naming `extra` when it is not installed (`what` needs it)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if not _is_missing(module, e.name):
            raise  # the module is there but one of its own dependencies is not: a broken install, shown as is
        raise missing_extra([extra], what) from None


def require_installed(needs: Iterable[tuple[str, str]], what: str | None = None) -> None:
    """Each (module, extra) of `needs` installed, checked without importing (for a command that hands
    over to another process, or before a screen clears); else one UserError naming every missing extra."""
    missing = [extra for module, extra in needs if not _installed(module)]
    if missing:
        raise missing_extra(missing, what)


def missing_extra(extras: Iterable[str], what: str | None = None) -> UserError:
    """The one-line error for missing extras: `what` needs the 'tui' extra: pip install 'dsinspect[tui]'."""
    names = list(dict.fromkeys(extras))
    said = " and ".join(repr(name) for name in names) + (" extra" if len(names) == 1 else " extras")
    return UserError(f"{what or 'this'} needs the {said}: pip install 'dsinspect[{','.join(names)}]'")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError as e:  # a parent package is missing (or an import hook refuses the module)
        return not _is_missing(module, e.name)


def _is_missing(module: str, name: str | None) -> bool:
    """The missing module `name` is `module` or one of its parent packages."""
    return name is not None and (module == name or module.startswith(name + "."))
