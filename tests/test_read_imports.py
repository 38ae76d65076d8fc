"""Layering: the engine imports no UI library (checked in a fresh interpreter)."""

import subprocess
import sys

import pytest

UI = ("textual", "streamlit", "rich", "click")


@pytest.mark.parametrize("module", ["dsinspect.loaders", "dsinspect"])
def test_engine_imports_no_ui_library(module):
    code = f"import sys, {module}; print(','.join(m for m in {UI!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "", f"{module} loaded {done.stdout.strip()}"


def test_reading_batches_loads_no_pandas():
    """pandas costs ~0.5 s to import: the read path must never pull it in (time to first batch)."""
    code = """
import sys
import dsinspect
from dsinspect.loaders import Loader, RunSpec
cat = dsinspect.open_catalog()
for name in ("demo-text", "demo-images", "demo-video", "demo-rl"):
    with Loader(RunSpec.create(cat, name, batch_size=4), catalog=cat) as loader:
        next(iter(loader)).rows()
print("pandas" in sys.modules, "pyarrow.dataset" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
