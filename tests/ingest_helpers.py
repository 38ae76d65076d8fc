"""Shared by the ingest tests: JSONL sources written to disk, a source opener that fails on purpose, and
what the token-format tests do alike (ingest from the shell, a version's rows, a sha256).

The failing opener is named by "module:function" like any opener, so it runs in pool workers and
Ray tasks too (they import this module from `tests/`). It wraps the real JSONL reader and, on
the first attempt at the parts listed in `spec.options["fail"]`, raises an OSError (`"raise"`) or
kills its own process with SIGKILL (`"kill"`), or raises on every attempt (`"always"`). Attempts are
counted with marker files, so a retry in another process sees them.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pyarrow as pa

from dsinspect.loaders.store.catalog import Catalog

OPENER = "ingest_helpers:open_failing"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ingest_with_cli(catalog: Path, source, name: str, *flags):
    """`dsinspect ingest SOURCE NAME FLAGS` (inline) into `catalog`: the version it made. (The CLI is
    imported here: pool workers and Ray tasks import this module for its opener.)"""
    from cli_inprocess import run_cli

    done = run_cli("--catalog", catalog, "ingest", source, name, "--engine", "inline", "--json", *flags)
    assert done.returncode == 0, done.stderr
    return Catalog(str(catalog)).resolve(name)


def version_rows(version) -> pa.Table:
    """Every row of `version`, its row-hash column included."""
    return pa.concat_tables([version.read_shard(s) for s in range(len(version.manifest.shards))])


def write_jsonl_source(directory: Path, files: int, rows: int) -> Path:
    """`files` JSONL files of `rows` rows each: ids, text, token lists, floats."""
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        with open(directory / f"part-{f:03d}.jsonl", "w") as out:
            for i in range(rows):
                n = f * rows + i
                out.write(json.dumps({"id": n, "text": f"row {n} " + "x" * (n % 17),
                                      "input_ids": [n % 50000, (n * 7) % 50000, n % 3], "score": n / 8}) + "\n")
    return directory


class _Failing:
    def __init__(self, inner, options):
        self.inner, self.spec = inner, inner.spec
        self._fail = {int(k): v for k, v in options.get("fail", {}).items()}
        self._marks = Path(options["marks"])

    def parts(self):
        return self.inner.parts()

    def schema(self):
        return self.inner.schema()

    def hints(self):
        return self.inner.hints()

    def read(self, part):
        mode = self._fail.get(part.index)
        if mode:
            mark = self._marks / f"part-{part.index}.attempt-{len(list(self._marks.glob(f'part-{part.index}.*')))}"
            mark.touch()
            if mode == "always" or len(list(self._marks.glob(f"part-{part.index}.*"))) == 1:
                if mode == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise OSError(f"injected failure reading {part.url}")
        yield from self.inner.read(part)


def open_failing(spec):
    from dsinspect.loaders.ingest.jsonl import JsonlSource

    return _Failing(JsonlSource(spec), spec.options)


def attempts(marks: Path, part: int) -> int:
    return len(list(marks.glob(f"part-{part}.*")))
