"""`dsinspect web`: the exact streamlit line (loopback, no usage statistics) and the command's help."""

from click.testing import CliRunner

from dsinspect.cli import cli
from dsinspect.cli.web_cmd import APP, streamlit_command
from dsinspect.web import settings
from dsinspect.web.models import catalog as catalogs
from dsinspect.web.models import runs_dir
from dsinspect.web.settings import RUNS_ENV, TRANSFORM_ENV, TYPED_TRANSFORMS_ENV, app_environment


def test_streamlit_line_is_loopback_without_usage_stats():
    cmd = streamlit_command(8765)
    pairs = dict(zip(cmd[5::2], cmd[6::2]))
    assert cmd[1:5] == ["-m", "streamlit", "run", str(APP)] and APP.is_file()
    assert pairs["--server.address"] == "127.0.0.1" and pairs["--server.port"] == "8765"
    assert pairs["--browser.gatherUsageStats"] == "false" and pairs["--server.headless"] == "true"
    assert int(pairs["--server.maxUploadSize"]) <= 32  # MB: an upload is held in memory (Streamlit's default: 200)


def test_web_is_registered_with_a_port_option():
    done = CliRunner().invoke(cli, ["web", "--help"])
    assert done.exit_code == 0 and "--port" in done.output
    assert CliRunner().invoke(cli, ["web", "--port", "0"]).exit_code == 2


def test_runs_and_transform_reach_the_app_by_the_names_it_reads():
    assert app_environment("/c") == {"DSINSPECT_CATALOG": "/c", TYPED_TRANSFORMS_ENV: "0"}  # typing code: off
    env = app_environment("/c", "/runs", "job.data:augment", typed_transforms=True)
    assert env[RUNS_ENV] == "/runs" and env[TRANSFORM_ENV] == "job.data:augment" and env[TYPED_TRANSFORMS_ENV] == "1"
    done = CliRunner().invoke(cli, ["web", "--help"])
    assert "--runs" in done.output and "--transform" in done.output and "--allow-typed-transforms" in done.output


def test_the_app_reads_back_what_the_cli_writes(monkeypatch):
    for name in (settings.CATALOG_ENV, RUNS_ENV, TRANSFORM_ENV, TYPED_TRANSFORMS_ENV):
        monkeypatch.delenv(name, raising=False)
    assert (settings.runs_url(), settings.preset_transform(), settings.typed_transforms_allowed()) == (None, "", False)
    for name, value in app_environment("/c", "/runs", "job.data:augment", typed_transforms=True).items():
        monkeypatch.setenv(name, value)
    assert catalogs.configured_url() == "/c" and runs_dir.runs_url("/c") == "/runs"
    assert settings.preset_transform() == "job.data:augment" and settings.typed_transforms_allowed()


def test_the_cli_imports_the_contract_without_streamlit():
    import subprocess
    import sys

    code = "import sys, dsinspect.cli, dsinspect.web.settings; print('streamlit' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_busy_port_is_one_line_and_exit_2_before_anything_claims_to_serve(tmp_path):
    """Before: "dsinspect web: http://127.0.0.1:P/ …; Ctrl-C stops it", then Streamlit's banner and its
    error, exit 1. Now one line naming the port, exit 2, and no Streamlit started."""
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "dsinspect", "web", "--port", str(port)],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr and "--port" in done.stderr
    assert "http://" not in done.stderr and "Streamlit" not in done.stderr
