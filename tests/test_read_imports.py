"""What reading batches imports at run time, in a fresh interpreter: no UI library and nothing slow to
import (which modules may import which is lint-imports' job: pyproject.toml, tests/test_layers.py)."""

import json
import subprocess
import sys

NEVER = ("textual", "streamlit", "rich", "click", "PIL", "av", "torch",
         "pandas",           # ~0.5 s to import: it would show in every job's time to first batch
         "pyarrow.dataset",  # pulls in the dataset machinery (and its thread pools) the engine does not use
         "numpy.ma")         # np.unique's first call imports it (~30 ms of a first batch): dsinspect.arrays

READ_EVERY_DEMO = """
import json, sys
import dsinspect
from dsinspect.loaders import Loader, RunSpec
cat = dsinspect.open_catalog()
for name in ("demo-text", "demo-images", "demo-video", "demo-rl"):
    with Loader(RunSpec.create(cat, name, batch_size=4), catalog=cat) as loader:
        next(iter(loader)).rows()
print(json.dumps(sorted(sys.modules)))
"""


def test_reading_batches_loads_no_ui_and_nothing_slow():
    done = subprocess.run([sys.executable, "-c", READ_EVERY_DEMO], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    assert "dsinspect.loaders.read.loader" in loaded  # the probe did read
    assert sorted(m for m in NEVER if m in loaded) == []
