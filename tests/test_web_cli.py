"""`dsinspect web`: the exact streamlit line (loopback, no usage statistics) and the command's help."""

from click.testing import CliRunner

from dsinspect.cli import cli
from dsinspect.cli.web_cmd import APP, streamlit_command


def test_streamlit_line_is_loopback_without_usage_stats():
    cmd = streamlit_command(8765)
    pairs = dict(zip(cmd[5::2], cmd[6::2]))
    assert cmd[1:5] == ["-m", "streamlit", "run", str(APP)] and APP.is_file()
    assert pairs["--server.address"] == "127.0.0.1" and pairs["--server.port"] == "8765"
    assert pairs["--browser.gatherUsageStats"] == "false" and pairs["--server.headless"] == "true"


def test_web_is_registered_with_a_port_option():
    done = CliRunner().invoke(cli, ["web", "--help"])
    assert done.exit_code == 0 and "--port" in done.output
    assert CliRunner().invoke(cli, ["web", "--port", "0"]).exit_code == 2
