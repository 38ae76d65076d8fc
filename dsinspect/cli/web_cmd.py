"""`dsinspect web [--port P]`: the Streamlit app on 127.0.0.1, usage statistics off, on one catalog.

The command becomes Streamlit (exec, same PID) rather than starting it as a child: a signal sent to
the PID of `dsinspect web` (SIGTERM, SIGINT, SIGHUP, even SIGKILL) reaches the
server itself, so no orphaned Streamlit keeps serving the port."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from dsinspect.cli.output import catalog_from, catalog_option
from dsinspect.extras import require_installed
from dsinspect.web.settings import app_environment  # the app reads what it writes through the same module

__all__ = ["web", "streamlit_command", "COMMANDS"]

APP = Path(__file__).resolve().parent.parent / "web" / "app.py"


MAX_UPLOAD_MB = 32  # a run spec or fingerprint log uploaded to the Replay page (Streamlit holds it in memory)


def streamlit_command(port: int) -> list[str]:
    """The exact `streamlit run` line: loopback only, no usage statistics, no browser, no file watcher,
    uploads of at most MAX_UPLOAD_MB (Streamlit's default is 200 MB, kept in memory per file)."""
    return [sys.executable, "-m", "streamlit", "run", str(APP),
            "--server.headless", "true", "--server.address", "127.0.0.1", "--server.port", str(port),
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
            "--global.developmentMode", "false", "--client.toolbarMode", "viewer",
            "--server.maxUploadSize", str(MAX_UPLOAD_MB)]


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True, help="Port on 127.0.0.1.")
@click.option("--runs", "runs_url", metavar="DIR", help="Run records the Replay page may open by name "
              "[default: CATALOG/runs].")
@click.option("--transform", metavar="package.module:function",
              help="Preset the Replay page's transform (the job's; imported from the current directory).")
@click.option("--allow-typed-transforms", is_flag=True,
              help="Let the Replay page import any package.module:function typed into it. Off by default: "
                   "whoever reaches the port could run code on this machine.")
@catalog_option
@click.pass_context
def web(ctx: click.Context, port: int, runs_url: str | None, transform: str | None, allow_typed_transforms: bool,
        catalog_url: str | None) -> None:
    """The web app (Streamlit) on http://127.0.0.1:PORT, reading only the configured catalog."""
    # checked, not imported: Streamlit replaces this process below
    require_installed((("streamlit", "web"), ("PIL", "media"), ("av", "media")), "dsinspect web")
    catalog = catalog_from(ctx, catalog_url)
    env = {**os.environ, **app_environment(catalog.url, runs_url, transform, allow_typed_transforms)}
    click.echo(f"dsinspect web: http://127.0.0.1:{port}/ (catalog {catalog.url}); Ctrl-C stops it", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    cmd = streamlit_command(port)
    os.execve(cmd[0], cmd, env)


COMMANDS = [web]
