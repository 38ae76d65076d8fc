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
