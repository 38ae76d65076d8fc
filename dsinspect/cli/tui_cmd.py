"""`dsinspect tui [ADDRESS]`: the Textual terminal UI (also what `dsinspect` alone opens)."""

from __future__ import annotations

import sys

import click

from dsinspect.cli.output import catalog_from, catalog_option
from dsinspect.errors import UserError
from dsinspect.extras import require_installed

# what the terminal UI imports beyond the core: Textual and its image widgets, Pillow and PyAV for the samples
NEEDS = (("textual", "tui"), ("textual_image", "tui"), ("PIL", "media"), ("av", "media"))


@click.command()
@click.argument("address", required=False)
@catalog_option
@click.option("--transform", metavar="package.module:function", default=None,
              help="The job's batch transform: replay shows each sample as stored and as fed to the model.")
@click.pass_context
def tui(ctx: click.Context, address: str | None, catalog_url: str | None, transform: str | None = None) -> None:
    """Browse the catalog in the terminal; ADDRESS (NAME[@REF][:INDEX]) opens a version or a sample,
    a run record (a job's record_dir, by path or by its name in CATALOG/runs) its steps × ranks,
    segments, gaps and check. A dataset and a run of the same name: the dataset opens."""
    from dsinspect.inspect.runs import is_run_record, run_location
    from dsinspect.loaders.store.address import parse_address

    run_dir = address if address and is_run_record(address) else None
    catalog = None
    if address and not run_dir and "/" not in address:  # perhaps a run's name in <catalog>/runs
        catalog = catalog_from(ctx, catalog_url)
        named = run_location(catalog.url, address)
        run_dir = named if named != address and address not in catalog.datasets() else None
    if run_dir:
        address = None
    addr = parse_address(address) if address else None  # a malformed address: one line, before the screen clears
    require_installed(NEEDS, "dsinspect tui")
    if not interactive():
        # Textual without a terminal never gets a key and never exits (it spun at ~74% CPU)
        raise UserError("dsinspect tui needs a terminal (stdin and stderr are not both one); without one use "
                        "`dsinspect ls`, `dsinspect info ADDRESS` or `dsinspect show ADDRESS:INDEX`")
    catalog = catalog or catalog_from(ctx, catalog_url)
    catalog.check_exists()
    if addr is not None:  # a dataset, version or row that is not there is a one-line error too, not a blank screen
        version = catalog.resolve(addr)
        if addr.index is not None:
            version.check_index(addr.index)
    from dsinspect.tui import run  # Textual loads only when the UI starts

    run(address, catalog=catalog, transform=transform, run_dir=run_dir)


def interactive() -> bool:
    """Both ends are a terminal: the UI can run (Textual reads stdin and draws on stderr)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


COMMANDS = [tui]
