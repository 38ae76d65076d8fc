"""Run `dsinspect ARGS` in this process as `subprocess.run([sys.executable, "-m", "dsinspect", *ARGS],
capture_output=True, text=True)` would, for tests whose subject is the command's output and exit
code, not the process (~0.1 s instead of ~1.3 s of interpreter start and imports).

What a new process would start without is reset around each call: the consoles of
dsinspect.cli.output (a rich Console fixes its width and colours from the environment and stdout
when first used), the record of a closed stdout and of the catalog opened, and the environment
(variables set for the call, and any the command sets itself, are put back). Stdout and stderr are
text buffers, not terminals, as a subprocess's pipes are. An exception no layer turned into an exit
code propagates (a subprocess would print its traceback and exit 1): the test fails on it.

Keep a real process where the process is the subject: pipes, signals, terminals and their widths,
startup, variables read at process start, the exit code as a shell sees it."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterable, Iterator, Mapping


@contextlib.contextmanager
def fresh_process_state(env: Mapping[str, str] | None = None, unset: Iterable[str] = ()) -> Iterator[None]:
    """Within: the environment with `unset` removed and `env` set, and the CLI's per-process state
    as a new process has it; after: the environment as it was, and that state cleared again."""
    from dsinspect.cli import output

    saved = dict(os.environ)
    for name in unset:
        os.environ.pop(name, None)
    os.environ.update(env or {})
    _clear(output)
    try:
        yield
    finally:
        _clear(output)
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


def _clear(output) -> None:
    output.out._console = None
    output.err._console = None
    output._CLOSED.clear()
    output._OPENED.clear()


def run_cli(*args: object, env: Mapping[str, str] | None = None,
            unset: Iterable[str] = ("DSINSPECT_CATALOG",)) -> subprocess.CompletedProcess:
    """`dsinspect ARGS` in this process: a CompletedProcess with returncode, stdout and stderr."""
    from dsinspect.cli import main

    argv = [str(a) for a in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    with fresh_process_state(env, unset), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):  # what the interpreter prints for sys.exit("message")
                stderr.write(e.code + "\n")
    return subprocess.CompletedProcess(["dsinspect", *argv], code, stdout.getvalue(), stderr.getvalue())
