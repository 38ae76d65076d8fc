"""Shared output helpers: rich for people on stdout, progress and errors on stderr, JSON for scripts.

Imports only click: rich and the catalog load when a command first prints or opens one, so
`dsinspect --help` starts without them."""

from __future__ import annotations

import json
import os
import select
import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

import click

if TYPE_CHECKING:
    from rich.console import Console

    from dsinspect.loaders.store.catalog import Catalog


class LazyConsole:
    """A rich Console made on first use, with the options it was declared with."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            options = {k: v() if callable(v) else v for k, v in self._options.items()}
            self._console = Console(**options)
            self._console.on_broken_pipe = self._pipe_closed  # rich's own ends in exit 1, a failed check's code
        return self._console

    def _pipe_closed(self) -> None:
        self.console.quiet = True  # nothing more to render
        pipe_closed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


PIPED_WIDTH = 132  # columns of piped output when COLUMNS does not say


def piped_width() -> int | None:
    """Columns for output that is not a terminal and has no COLUMNS: PIPED_WIDTH (read by people too,
    in logs and bug reports: tables get room instead of rich's 80). None: the terminal's or COLUMNS'."""
    return None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").strip().isdigit() else PIPED_WIDTH


def print_whole(renderable: Any, **options: Any) -> None:
    """Print `renderable`; piped with no COLUMNS, at the width it needs whole (a wide table is better
    wide than folded into pieces of its headers)."""
    if piped_width() is None:
        return out.print(renderable, **options)
    console = out.console
    needed = console.measure(renderable, options=console.options.update_width(10_000)).maximum
    width = console.width
    console.width = max(width, needed)
    try:
        console.print(renderable, **options)
    finally:
        console.width = width


out = LazyConsole(highlight=False, width=piped_width)
err = LazyConsole(stderr=True, highlight=False)


PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a program a closed pipe stopped


_CLOSED: list[bool] = []  # stdout's reader went away during this command


def pipe_closed() -> None:
    """Stdout's reader went away (`dsinspect replay ... | head`): what is still printed goes to /dev/null
    and the command goes on to its verdict. `main` then exits with PIPE_CLOSED, unless the command
    failed: a failed check into `| head` still exits 1."""
    if not _CLOSED:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # also spares the interpreter's last flush
        os.close(devnull)
        _CLOSED.append(True)


def exit_code(code: int) -> int:
    """The code a command that ended with `code` exits with: PIPE_CLOSED for a success whose output
    lost its reader (as SIGPIPE's default would report), else its own."""
    return PIPE_CLOSED if code == 0 and _CLOSED else code


def stdout_closed() -> bool:
    """Stdout is a pipe nobody reads any more (a BrokenPipeError may also come from a socket)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no file descriptor
        return False


def fail(message: str, code: int) -> None:
    """One line on stderr, then exit with `code`."""
    click.echo(f"dsinspect: error: {message}", err=True)
    sys.exit(code)


def emit_json(data: Any) -> None:
    try:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False))
    except BrokenPipeError:
        if not stdout_closed():
            raise  # not stdout's
        pipe_closed()


_OPENED: list[Catalog] = []  # the catalog this command opened: `main` names it when its store cannot be reached


def catalog_from(ctx: click.Context, url: str | None) -> Catalog:
    """The catalog named on this command, else on the group, else the default."""
    from dsinspect.defaults import open_catalog

    root = ctx.find_root().obj or {}
    catalog = open_catalog(url or root.get("catalog_url"))
    _OPENED[:] = [catalog]
    return catalog


def opened_catalog() -> Catalog | None:
    """The catalog `catalog_from` opened last in this process, if any."""
    return _OPENED[-1] if _OPENED else None


def catalog_to_write(ctx: click.Context, url: str | None) -> Catalog:
    """`catalog_from` for a command that adds user data: one named here, on the group or by
    $DSINSPECT_CATALOG, never the default sample catalog (a copy in a cache, which may be cleared)."""
    from dsinspect.defaults import named_catalog_url
    from dsinspect.errors import UserError

    root = ctx.find_root().obj or {}
    if named_catalog_url(url or root.get("catalog_url")) is None:
        raise UserError(f"{ctx.info_name}: name the catalog to write to: --catalog URL or DSINSPECT_CATALOG=URL "
                        "(the default, the sample catalog, is for reading)")
    return catalog_from(ctx, url)


catalog_option = click.option("--catalog", "catalog_url", metavar="URL", default=None,
                              help="Catalog URL; overrides the one given before the command.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@contextmanager
def progress(description: str, total: int | None, unit_bytes: bool = False) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal; yields `advance(n)`."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn()]
    counts = [DownloadColumn(), TransferSpeedColumn()] if unit_bytes else [TextColumn("{task.completed}/{task.total}")]
    columns += counts
    columns.append(TimeRemainingColumn())
    with Progress(*columns, console=err.console, disable=not err.is_terminal, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


@contextmanager
def count_progress(description: str, unit: str) -> Iterator[Callable[[int, int], None]]:
    """A bar on stderr when it is a terminal, fed `update(done, total)`: done/total `unit` and their
    rate per second. Off a terminal it draws nothing."""
    if not err.is_terminal:
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    started = time.monotonic()
    columns = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[counts]}"),
               TimeRemainingColumn()]
    with Progress(*columns, console=err.console, transient=True) as bar:
        task = bar.add_task(description, total=None, counts="")

        def update(done: int, total: int) -> None:
            rate = done / max(time.monotonic() - started, 1e-6)
            bar.update(task, completed=done, total=total, counts=f"{done:,}/{total:,} {unit}, {rate:,.0f} {unit}/s")
        yield update
