"""The CLI starts fast because it imports a command's implementation only when that command runs:
`dsinspect --help` loads neither the engine nor rich, `dsinspect ls` loads no image, video or UI
library, and `dsinspect replay` of a text batch from a run record loads only the reader, rich and
the previews (benchmarks/bench_startup.py measures the times)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def imported_by(*argv: str) -> set[str]:
    """The modules a fresh `python -m dsinspect ARGV` imports (from -X importtime)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DSINSPECT_CATALOG", None)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "dsinspect", *map(str, argv)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_help_loads_neither_the_engine_nor_rich():
    modules = imported_by("--help")
    assert top_level(modules) & {"pyarrow", "numpy", "fsspec", "rich", "xxhash"} == set()
    assert {m for m in modules if m.startswith(("dsinspect.loaders", "dsinspect.term", "dsinspect.inspect"))} == set()


def test_a_command_help_loads_no_engine_either():
    assert top_level(imported_by("replay", "--help")) & {"pyarrow", "numpy", "rich"} == set()


def test_ls_loads_no_image_video_or_ui_library():
    modules = imported_by("ls")
    assert top_level(modules) & {"PIL", "av", "textual", "streamlit", "tokenizers", "torch"} == set()
    assert {"dsinspect.term.render", "dsinspect.inspect.images", "dsinspect.inspect.video"} & modules == set()
    assert "pyarrow.compute" not in modules  # ~100 ms of every command's start (the writer's token counts)


def test_replay_from_a_run_record_loads_no_ui_media_pandas_or_writer(tmp_path):
    from dsinspect.defaults import open_catalog
    from dsinspect.loaders import Loader, RunSpec

    catalog = open_catalog()  # the bundled sample catalog, as the subprocess's default
    spec = RunSpec.create(catalog, "demo-text@v1", batch_size=8, world_size=4)
    with Loader(spec, rank=3, catalog=catalog, record_dir=str(tmp_path / "run")) as loader:
        for _ in zip(range(4), loader):
            pass
    modules = imported_by("replay", "--spec", tmp_path / "run", "--step", 3, "--rank", 3)
    assert "dsinspect.loaders.audit.replay" in modules and "rich.table" in modules  # it did replay and print
    assert top_level(modules) & {"PIL", "av", "textual", "streamlit", "tokenizers", "torch", "pandas"} == set()
    assert {m for m in modules if m.startswith(("dsinspect.tui", "dsinspect.web.", "dsinspect.inspect.images",
                                                "dsinspect.inspect.video", "dsinspect.term.render",
                                                "dsinspect.loaders.audit.export", "dsinspect.loaders.audit.logcheck",
                                                "rich.progress"))} == {"dsinspect.web.settings"}  # names only


def test_the_cli_spells_the_engine_choices_of_ingest_as_the_engine_does():
    from dsinspect.cli.ingest_cmd import ENGINE_CHOICES
    from dsinspect.loaders.compute.engines import ENGINES
    from dsinspect.loaders.ingest.engine_choice import AUTO

    assert ENGINE_CHOICES == (AUTO, *ENGINES)
