"""A catalog on S3 that cannot be reached or signed in to is one line naming the catalog, the
endpoint and the cause, exit 2, within seconds, for every catalog command (issue #31: `dsinspect
ls` printed an 83-154 line traceback and exited 1). Against moto's server on loopback: no AWS
keys in the environment, a closed loopback port, a bucket that does not exist."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from s3_server import S3Server

from dsinspect.errors import StorageError
from dsinspect.loaders.store.access import access_error

# slow: one CLI process per command against moto's server and an unreachable endpoint
pytestmark = pytest.mark.slow

pytest.importorskip("moto")
pytest.importorskip("s3fs")

COMMANDS = [
    ["ls"],
    ["info", "toy@v1"],
    ["show", "toy@v1:0"],
    ["tag", "toy@v1", "best"],
    ["verify", "toy@v1"],
    ["gc"],
    ["replay", "--address", "toy@v1", "--step", "0"],
    ["diff", "toy@v1", "toy@v2"],
    ["query", "toy@v1", "--where", "id > 1"],
    ["stats", "toy@v1"],
    ["export", "toy@v1", "OUT", "--format", "parquet"],
]


@pytest.fixture(scope="module")
def server():
    with S3Server() as s:
        yield s


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when this returns: connections to it are refused


def environment(home, endpoint: str, keys: bool) -> dict[str, str]:
    """This environment without any AWS setting (no keys, no profile, no instance metadata), s3fs
    pointed at `endpoint`, and with `keys` the test server's credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "FSSPEC_S3"}
    env.update({"HOME": str(home), "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(home / "none"),
                "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"), "FSSPEC_S3": json.dumps({"endpoint_url": endpoint})})
    if keys:
        env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"})
    return env


def dsinspect(catalog: str, args: list[str], env: dict[str, str], out) -> subprocess.CompletedProcess:
    args = [str(out) if a == "OUT" else a for a in args]
    return subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", catalog, *args], env=env,
                          capture_output=True, text=True, timeout=300)


def one_line(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsinspect: error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize("args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_without_credentials_every_catalog_command_is_one_line(server, tmp_path, args):
    done = dsinspect(server.url("catalog"), args, environment(tmp_path, server.endpoint, keys=False), tmp_path / "o")
    one_line(done, f"catalog {server.url('catalog')}: no credentials to sign requests to {server.endpoint} "
                   "(NoCredentialsError: Unable to locate credentials): set AWS_ACCESS_KEY_ID and "
                   "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")


@pytest.mark.parametrize("args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_an_unreachable_endpoint_is_one_line_for_every_catalog_command(tmp_path, args):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    done = dsinspect("s3://some-bucket/catalog", args, environment(tmp_path, endpoint, keys=True), tmp_path / "o")
    one_line(done, f"catalog s3://some-bucket/catalog: cannot reach {endpoint}: Connection refused")


def test_a_bucket_that_does_not_exist_is_one_line(server, tmp_path):
    done = dsinspect("s3://no-such-bucket-dsinspect/catalog", ["ls"],
                     environment(tmp_path, server.endpoint, keys=True), tmp_path / "o")
    one_line(done, "catalog s3://no-such-bucket-dsinspect/catalog does not exist")


def test_only_unreachable_stores_and_missing_credentials_are_access_errors():
    botocore = pytest.importorskip("botocore.exceptions")
    refused = botocore.EndpointConnectionError(endpoint_url="http://10.0.0.1:9000/bucket/key?x=1")
    refused.__context__ = ConnectionRefusedError(111, "Connect call failed")
    error = access_error(refused, "catalog s3://bucket/c")
    assert isinstance(error, StorageError)
    assert str(error) == "catalog s3://bucket/c: cannot reach http://10.0.0.1:9000: Connection refused"
    assert str(access_error(botocore.NoCredentialsError(), "catalog s3://b/c")) == (
        "catalog s3://b/c: no credentials to sign requests to the store (NoCredentialsError: Unable to locate "
        "credentials)")
    for other in (FileNotFoundError(2, "no such key"), PermissionError(13, "denied"), TimeoutError("slow"),
                  botocore.ClientError({"Error": {"Code": "SlowDown"}}, "GetObject"), ValueError("a bug")):
        assert access_error(other, "catalog s3://b/c") is None
