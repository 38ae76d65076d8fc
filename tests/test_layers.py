"""The layers declared in pyproject.toml ([tool.importlinter]) hold, and `lint-imports` catches a forbidden
import of each kind: run on a copy of the package with one import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "300"}  # no wrapped lines in the report
    script = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", script, "--no-cache", "--no-logo"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the package's sources and its contracts, to break on purpose."""
    target = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / "dsinspect", target / "dsinspect", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    return target


def test_the_contracts_hold_on_the_package():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" not in done.stdout.replace("0 broken", "")


# (module that gains an import, the import, the contract id that must break, what the report names)
VIOLATIONS = [
    ("loaders/format/manifest.py", "import dsinspect.tui", "faces",
     "dsinspect.loaders.format.manifest -> dsinspect.tui"),
    ("tui/screens/help.py", "import dsinspect.web.models.sample", "faces",
     "dsinspect.tui.screens.help -> dsinspect.web.models.sample"),
    ("inspect/hexdump.py", "import dsinspect.term", "faces", "dsinspect.inspect.hexdump -> dsinspect.term"),
    ("loaders/format/canonical.py", "from dsinspect.loaders.store import catalog", "engine",
     "dsinspect.loaders.format.canonical -> dsinspect.loaders.store.catalog"),
    ("loaders/read/stats.py", "import dsinspect.loaders.audit.export", "engine",
     "dsinspect.loaders.read.stats -> dsinspect.loaders.audit.export"),
    ("loaders/pytorch/ring.py", "import dsinspect.loaders.diff", "engine",
     "dsinspect.loaders.pytorch.ring -> dsinspect.loaders.diff"),
    ("loaders/order/plan.py", "import dsinspect", "root", "dsinspect.loaders.order.plan -> dsinspect"),
    ("loaders/sequences/concat.py", "import dsinspect.loaders.read.loader", "engine",
     "dsinspect.loaders.sequences.concat -> dsinspect.loaders.read.loader"),
    ("loaders/order/plan.py", "import dsinspect.loaders.sequences.concat", "engine",
     "dsinspect.loaders.order.plan -> dsinspect.loaders.sequences.concat"),
    ("term/preview.py", "import textual", "no-ui", "dsinspect.term.preview -> textual"),
    ("cli/show_cmd.py", "import dsinspect.tui.app", "cli-no-ui", "dsinspect.cli.show_cmd -> dsinspect.tui.app"),
    ("tui/widgets/token_strip.py", "import dsinspect.tui.screens.sample", "tui",
     "dsinspect.tui.widgets.token_strip -> dsinspect.tui.screens.sample"),
    ("web/ui/nav.py", "import dsinspect.web.app_pages.catalog", "web",
     "dsinspect.web.ui.nav -> dsinspect.web.app_pages.catalog"),
    ("web/models/stats.py", "import streamlit", "web-models", "dsinspect.web.models.stats -> streamlit"),
    ("loaders/order/permutation.py", "from dsinspect.loaders.order import state", "acyclic",
     "No cycles are allowed in dsinspect.loaders.order."),
]


@pytest.mark.parametrize("module, line, contract, named", VIOLATIONS, ids=[f"{v[2]}:{v[0]}" for v in VIOLATIONS])
def test_a_forbidden_import_breaks_its_contract(tree, module, line, contract, named):
    path = tree / "dsinspect" / module
    original = path.read_text()
    path.write_text(original + f"\n{line}  # added by test_layers\n")
    try:
        done = lint_imports(tree)
    finally:
        path.write_text(original)
    assert done.returncode == 1, done.stdout + done.stderr
    report = done.stdout
    titles = {c["id"]: c["name"] for c in _contracts()}
    assert f"{titles[contract]} BROKEN" in report
    assert named in report


def _contracts() -> list[dict]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_engine_subpackage_is_in_a_layer():
    """A new engine folder must be placed in the layers, or nothing constrains it."""
    engine = next(c for c in _contracts() if c["id"] == "engine")
    placed = {name.strip() for layer in engine["layers"] for name in layer.split("|")}
    folders = {p.parent.name for p in (ROOT / "dsinspect" / "loaders").glob("*/__init__.py")}
    assert folders == placed
