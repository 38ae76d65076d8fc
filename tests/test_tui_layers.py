"""The two terminal faces share renderings through `dsinspect.term`; neither imports the other, and
`term` stays free of any UI framework (checked in fresh interpreters)."""

import subprocess
import sys

import pytest


def loaded(code: str, prefixes: tuple[str, ...]) -> list[str]:
    probe = f"import sys; {code}; print(' '.join(m for m in sys.modules if m.startswith({prefixes!r})))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_term_loads_no_ui_framework():
    assert loaded("import dsinspect.term", ("textual", "click", "streamlit", "dsinspect.cli", "dsinspect.tui")) == []


@pytest.mark.parametrize("code", ["import dsinspect.tui.app", "from dsinspect.tui.field_view import prepare"])
def test_tui_imports_nothing_from_the_cli(code):
    assert loaded(code, ("dsinspect.cli", "click")) == []


def test_cli_show_imports_nothing_from_the_tui():
    assert loaded("import dsinspect.cli, dsinspect.cli.show_cmd, dsinspect.cli.render", ("dsinspect.tui", "textual")) == []


def _imported_modules(path) -> set[str]:
    """Every module a source file imports, at the top or lazily inside a function."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_tui_module_imports_the_cli_even_lazily():
    from pathlib import Path

    import dsinspect.tui

    sources = sorted(Path(dsinspect.tui.__file__).parent.glob("*.py"))
    assert len(sources) > 10
    offenders = {p.name: sorted(m for m in _imported_modules(p) if m.split(".")[:2] == ["dsinspect", "cli"])
                 for p in sources}
    assert {k: v for k, v in offenders.items() if v} == {}
