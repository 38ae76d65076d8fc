"""`pip install dsinspect` without extras: the engine imports and reads batches, the core CLI works, and
a face or decoder whose extra is missing is one line naming the extra (exit 2).

"Not installed" is a `sitecustomize` on PYTHONPATH whose import hook refuses the extras' modules, in a
fresh interpreter for each check."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXTRAS = ("streamlit", "textual", "textual_image", "av", "PIL", "tokenizers", "tiktoken", "bpe_openai", "torch", "ray")

BLOCKER = f"""
import sys

class NotInstalled:
    '''Refuses the optional packages, as an environment without dsinspect's extras would.'''
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


@pytest.fixture
def bare_env(tmp_path) -> dict[str, str]:
    """The environment of an interpreter in which the extras are not installed."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if k != "DSINSPECT_CATALOG"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)])
    return env


def run_python(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_blocker_refuses_the_extras(bare_env):
    done = run_python(bare_env, "-c", "import PIL")
    assert done.returncode == 1 and "ModuleNotFoundError: No module named 'PIL'" in done.stderr


def test_the_engine_imports_and_reads_batches_without_extras(bare_env, tmp_path):
    code = textwrap.dedent(f"""
        import sys
        import pyarrow as pa
        import dsinspect, dsinspect.loaders
        from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions

        cat = Catalog({str(tmp_path / "cat")!r})
        fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens")]
        rows = [{{"id": i, "tokens": list(range(i % 5))}} for i in range(100)]
        cat.write_version("toy", rows, fields, key="id", options=WriteOptions(shard_rows=30))
        spec = RunSpec.create(cat, "toy", seed=3, batch_size=8)
        with Loader(spec, catalog=cat) as loader:
            batch = next(iter(loader))
        assert sorted(batch.table.column("id").to_pylist()) == sorted(int(i) for i in batch.indices)
        assert dsinspect.replay and dsinspect.diff and dsinspect.open_catalog  # the root's lazy names resolve
        print(sorted({{m.split(".")[0] for m in sys.modules}} & set({EXTRAS!r})))
    """)
    done = run_python(bare_env, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_importing_the_engine_loads_no_extra_even_when_installed():
    code = ("import sys, dsinspect, dsinspect.loaders\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({EXTRAS!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("argv, line", [
    (["tui"], "dsinspect tui needs the 'tui' and 'media' extras: pip install 'dsinspect[tui,media]'"),
    (["web"], "dsinspect web needs the 'web' and 'media' extras: pip install 'dsinspect[web,media]'"),
    (["show", "demo-images:0"], "dsinspect show needs the 'media' extra: pip install 'dsinspect[media]'"),
])
def test_a_face_without_its_extra_is_one_line_naming_it(bare_env, argv, line):
    done = run_python(bare_env, "-m", "dsinspect", *argv)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"dsinspect: error: {line}"]
    assert done.stdout == ""


def test_the_core_commands_work_without_extras(bare_env):
    listing = run_python(bare_env, "-m", "dsinspect", "ls")
    assert listing.returncode == 0, listing.stderr
    assert "demo-images" in listing.stdout
    replayed = run_python(bare_env, "-m", "dsinspect", "replay", "--address", "demo-text@v1", "--step", "0",
                          "--batch-size", "2")
    assert replayed.returncode == 0, replayed.stderr
    assert "fingerprint (stored)" in replayed.stdout


def test_the_pytorch_adapter_without_torch_names_the_extra(bare_env):
    code = ("from dsinspect.errors import UserError\n"
            "try:\n    import dsinspect.loaders.pytorch\n"
            "except UserError as e:\n    print(e)\n")
    done = run_python(bare_env, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("dsinspect.loaders.pytorch needs the 'torch' extra: "
                                   "pip install 'dsinspect[torch]'")
