"""`dsinspect web [--port P]`: the Streamlit app on 127.0.0.1, usage statistics off, on one catalog."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from dsinspect.cli.output import catalog_from, catalog_option

__all__ = ["web", "streamlit_command", "COMMANDS"]

APP = Path(__file__).resolve().parent.parent / "web" / "app.py"
CATALOG_ENV = "DSINSPECT_CATALOG"  # the app reads only this catalog (dsinspect.web.web_model.configured_url)


def streamlit_command(port: int) -> list[str]:
    """The exact `streamlit run` line: loopback only, no usage statistics, no browser, no file watcher."""
    return [sys.executable, "-m", "streamlit", "run", str(APP),
            "--server.headless", "true", "--server.address", "127.0.0.1", "--server.port", str(port),
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
            "--global.developmentMode", "false", "--client.toolbarMode", "viewer"]


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True, help="Port on 127.0.0.1.")
@catalog_option
@click.pass_context
def web(ctx: click.Context, port: int, catalog_url: str | None) -> None:
    """The web app (Streamlit) on http://127.0.0.1:PORT, reading only the configured catalog."""
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise click.ClickException("the web app needs Streamlit: pip install streamlit") from None
    catalog = catalog_from(ctx, catalog_url)
    env = {**os.environ, CATALOG_ENV: catalog.url}
    click.echo(f"dsinspect web: http://127.0.0.1:{port}/ (catalog {catalog.url}); Ctrl-C stops it", err=True)
    try:
        code = subprocess.call(streamlit_command(port), env=env)
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


COMMANDS = [web]
