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
