"""Shared by the ingest tests: JSONL sources written to disk, and a source opener that fails on purpose.

The failing opener is named by "module:function" like any opener, so it runs in pool workers and
Ray tasks too (they import this module from `tests/`). It wraps the real JSONL reader and, on
the first attempt at the parts listed in `spec.options["fail"]`, raises an OSError (`"raise"`) or
kills its own process with SIGKILL (`"kill"`), or raises on every attempt (`"always"`). Attempts are
counted with marker files, so a retry in another process sees them.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

OPENER = "ingest_helpers:open_failing"


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
