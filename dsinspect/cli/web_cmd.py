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

__all__ = ["web", "streamlit_command", "app_environment", "COMMANDS"]

APP = Path(__file__).resolve().parent.parent / "web" / "app.py"
CATALOG_ENV = "DSINSPECT_CATALOG"  # the app reads only this catalog (dsinspect.web.web_model.configured_url)
RUNS_ENV = "DSINSPECT_RUNS"  # run records the Replay page may open by name (dsinspect.web.web_runs)
TYPED_TRANSFORMS_ENV = "DSINSPECT_WEB_TYPED_TRANSFORMS"  # the Replay page may import a typed module:function
TRANSFORM_ENV = "DSINSPECT_WEB_TRANSFORM"  # the Replay page's preset transform (dsinspect.web.web_replay)


MAX_UPLOAD_MB = 32  # a run spec or fingerprint log uploaded to the Replay page (Streamlit holds it in memory)


def streamlit_command(port: int) -> list[str]:
    """The exact `streamlit run` line: loopback only, no usage statistics, no browser, no file watcher,
    uploads of at most MAX_UPLOAD_MB (Streamlit's default is 200 MB, kept in memory per file)."""
    return [sys.executable, "-m", "streamlit", "run", str(APP),
            "--server.headless", "true", "--server.address", "127.0.0.1", "--server.port", str(port),
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
            "--global.developmentMode", "false", "--client.toolbarMode", "viewer",
            "--server.maxUploadSize", str(MAX_UPLOAD_MB)]


def app_environment(catalog_url: str, runs_url: str | None = None, transform: str | None = None,
                    typed_transforms: bool = False) -> dict[str, str]:
    """What the app is told through its environment: the one catalog, the runs folder, a preset
    transform, and whether the page may import a transform typed into it."""
    env = {CATALOG_ENV: catalog_url, TYPED_TRANSFORMS_ENV: "1" if typed_transforms else "0"}
    if runs_url:
        env[RUNS_ENV] = runs_url
    if transform:
        env[TRANSFORM_ENV] = transform
    return env


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
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise click.ClickException("the web app needs Streamlit: pip install streamlit") from None
    catalog = catalog_from(ctx, catalog_url)
    env = {**os.environ, **app_environment(catalog.url, runs_url, transform, allow_typed_transforms)}
    click.echo(f"dsinspect web: http://127.0.0.1:{port}/ (catalog {catalog.url}); Ctrl-C stops it", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    cmd = streamlit_command(port)
    os.execve(cmd[0], cmd, env)


COMMANDS = [web]
