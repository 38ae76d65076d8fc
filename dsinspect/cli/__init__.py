"""The `dsinspect` command: every feature from the shell, rich output for people, --json for scripts."""

from __future__ import annotations

import sys

import click

from dsinspect.cli import (
    catalog_cmds,
    diff_cmd,
    ingest_cmd,
    query_cmd,
    replay_cmd,
    runs_cmd,
    show_cmd,
    stats_cmd,
    stream_cmd,
    tui_cmd,
    web_cmd,
    where_cmd,
)
from dsinspect.cli.output import PIPE_CLOSED, exit_code, fail, pipe_closed, stdout_closed
from dsinspect.errors import DsinspectError, StorageError, reason_of
from dsinspect.web.settings import CATALOG_ENV

__all__ = ["main", "cli"]


class _Commands(click.Group):
    """The command group; a closed stdout ends a command quietly with its own code (click's handling
    would exit 1, a failed check's code)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as e:
            if stdout_closed():  # a write no helper caught: the command cannot go on to a verdict
                pipe_closed()
                sys.exit(PIPE_CLOSED)
            raise StorageError(reason_of(e)) from None  # a socket's, not stdout's


@click.group(cls=_Commands, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--catalog", "catalog_url", metavar="URL", envvar=CATALOG_ENV,
              help="Catalog URL (any fsspec URL); default $DSINSPECT_CATALOG, else the sample catalog "
                   "(a copy in the cache directory; ingest and tag need a catalog named).")
@click.option("--inject-faults", "inject_faults", metavar="SPEC", default=None,
              help="Debug: inject storage read faults, e.g. 'seed=7,error=0.05,truncate=0.02,flip=0.02,slow=0.01' "
                   "(grammar in dsinspect/loaders/store/faults.py); a count of injected faults goes to stderr at exit.")
@click.version_option(package_name="dsinspect")
@click.pass_context
def cli(ctx: click.Context, catalog_url: str | None, inject_faults: str | None = None) -> None:
    """Versioned datasets for ML training, and the tools to see exactly what training read."""
    ctx.obj = {"catalog_url": catalog_url}
    if inject_faults is not None:
        _inject_faults(ctx, inject_faults)
    if ctx.invoked_subcommand is None:
        # no command: the terminal UI; without a terminal (a pipe, a script) the listing instead
        ctx.invoke(tui_cmd.tui if tui_cmd.interactive() else catalog_cmds.ls)


def _inject_faults(ctx: click.Context, text: str) -> None:
    """Validate the spec now (a bad one is a UserError), then let every `url_to_fs` wrap its
    filesystem; the environment variable also reaches subprocesses (the web app)."""
    import os

    from dsinspect.loaders.store import faults
    faults.FaultSpec.parse(text)
    os.environ[faults.ENV] = text
    ctx.call_on_close(lambda: click.echo(f"dsinspect: {faults.GLOBAL_STATS.summary()}", err=True))


for command in catalog_cmds.COMMANDS:
    cli.add_command(command)
for command in show_cmd.COMMANDS:
    cli.add_command(command)
for command in replay_cmd.COMMANDS + where_cmd.COMMANDS + runs_cmd.COMMANDS + diff_cmd.COMMANDS:
    cli.add_command(command)
for command in query_cmd.COMMANDS + stats_cmd.COMMANDS:
    cli.add_command(command)
for command in web_cmd.COMMANDS:
    cli.add_command(command)
for command in tui_cmd.COMMANDS:
    cli.add_command(command)
for command in ingest_cmd.COMMANDS + stream_cmd.COMMANDS:
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every error ends in one line on stderr and its `exit_code` (dsinspect.errors): 2 for a
    user mistake or a storage refusal, 1 for a failed check or a read that failed on every try; output
    whose reader went away (`| head`) ends quietly with 141, as SIGPIPE's default would, unless the
    command failed (a failed check stays 1)."""
    try:
        cli.main(args=argv, prog_name="dsinspect", standalone_mode=False)
        if exit_code(0):  # it succeeded, its reader gone
            sys.exit(exit_code(0))
    except click.exceptions.Exit as e:
        sys.exit(exit_code(e.exit_code))
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.Abort:
        sys.exit(130)
    except DsinspectError as e:
        fail(str(e), e.exit_code)
    except OSError as e:  # a storage failure no layer put into words: exit as its StorageError would
        fail(reason_of(e), StorageError.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # a store no layer put into words: no endpoint, no credentials (else a bug: its traceback)
        from dsinspect.cli.output import opened_catalog
        from dsinspect.loaders.store.access import access_error

        catalog = opened_catalog()
        refused = access_error(e, f"catalog {catalog.url}" if catalog else "storage", catalog.fs if catalog else None)
        if refused is None:
            raise
        fail(str(refused), refused.exit_code)
