"""`dsinspect web [--port P]`: the Streamlit app on 127.0.0.1, usage statistics off, on one catalog.

The command becomes Streamlit (exec, same PID) rather than starting it as a child: a signal sent to
the PID of `dsinspect web` (SIGTERM, SIGINT, SIGHUP, even SIGKILL) reaches the server itself, so no
orphaned Streamlit keeps serving the port. SIGINT and SIGTERM stop it at any moment of its start-up
(`stop_signals_default`); SIGHUP does unless it was started ignoring it (`nohup`). A busy port is
refused in one line before anything claims to serve (`check_port`)."""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
from pathlib import Path

import click

from dsinspect.cli.output import catalog_from, catalog_option
from dsinspect.errors import UserError
from dsinspect.extras import require_installed
from dsinspect.web.settings import app_environment  # the app reads what it writes through the same module

__all__ = ["web", "streamlit_command", "check_port", "COMMANDS"]

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


def check_port(port: int) -> None:
    """Refuse, in one line, a port on 127.0.0.1 that cannot be listened on (in use, or not allowed);
    bound as Streamlit binds it (SO_REUSEADDR: a port a closed server left in TIME_WAIT is free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as e:
            why = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be listened on ({e.strerror})"
            raise UserError(f"port {port} on 127.0.0.1 {why}: pick another with --port") from None


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
    check_port(port)  # before anything says it serves: Streamlit's own refusal comes after its banner
    env = {**os.environ, **app_environment(catalog.url, runs_url, transform, allow_typed_transforms)}
    click.echo(f"dsinspect web: http://127.0.0.1:{port}/ (catalog {catalog.url}); Ctrl-C stops it", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    cmd = streamlit_command(port)
    stop_signals_default()
    os.execve(cmd[0], cmd, env)


def stop_signals_default() -> None:
    """SIGINT and SIGTERM stop the server from the first instant of the process exec makes: their default
    actions (a shell script's background job starts with SIGINT ignored, and an ignored signal stays
    ignored across exec until Streamlit installs its handlers, so one sent during its start-up was lost),
    and unblocked. SIGHUP keeps what it was given: under `nohup` the server outlives its terminal."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


COMMANDS = [web]
