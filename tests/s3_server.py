"""An S3 server on loopback for tests: moto's WSGI app in a threaded werkzeug server, behind a
middleware that counts requests and injects faults deterministically. No pytest in here.

    with S3Server() as server, s3_environment(server):
        catalog = Catalog(server.url("catalog"))          # s3://<bucket>/catalog, through s3fs
        server.fail_next(path, 2, status=503)             # the next 2 GETs of that path fail
        server.corrupt(path)                              # GETs of that path serve one flipped byte
        server.requests(method="GET", key=...)            # what was asked, with bytes sent

How s3fs finds the server: fsspec's configuration (`fsspec.config.conf["s3"]`, which every new
S3FileSystem takes as default keyword arguments), set in this process and exported as the
environment variable FSSPEC_S3 (JSON) so that child processes (torchrun ranks, spawned workers)
read it when they import fsspec. Credentials and region come from the environment (moto accepts
any); `Catalog(url)` needs no storage options.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import unquote

from werkzeug.serving import make_server

__all__ = ["S3Server", "Request", "s3_environment", "s3_server", "PROBLEM_RETRIES"]

# botocore retries 5xx answers itself (legacy mode: 5 attempts). The tests pin it to one attempt so
# that every injected failure reaches dsinspect's own retry loop and can be counted exactly.
PROBLEM_RETRIES = {"retries": {"total_max_attempts": 1, "mode": "standard"}}

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


@dataclass(frozen=True)
class Request:
    """One request the server answered."""

    method: str
    path: str            # /<bucket>/<key>, unquoted
    range: str | None    # the Range header as sent
    status: int
    nbytes: int          # body bytes sent (GET responses)
    start: int | None    # first byte of the object in the body (0 for a whole-object GET)

    @property
    def key(self) -> str:
        return self.path.split("/", 2)[2] if self.path.count("/") >= 2 else ""


class _Middleware:
    """WSGI: count every request (and the body bytes of GETs), inject failures and corruption."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.log: list[Request] = []
        self.failures: dict[str, list[int]] = {}   # path -> [remaining, status]
        self.corruptions: dict[str, list] = {}     # path -> [remaining or None (forever), position, checksums]
        self.hold: tuple[str, float] | None = None  # (path part, seconds): GETs of such paths answered late
        self.in_flight = self.most_in_flight = 0    # GETs of held paths being answered now, and at most

    def __call__(self, environ, start_response):
        method = environ["REQUEST_METHOD"]
        path = unquote(environ.get("PATH_INFO", ""))
        rng = environ.get("HTTP_RANGE")
        with self.lock:
            failure = self.failures.get(path) if method == "GET" else None
            if failure and failure[0] > 0:
                failure[0] -= 1
                status = failure[1]
            else:
                status = None
            corrupt = self.corruptions.get(path) if method == "GET" else None
            if corrupt is not None and corrupt[0] is not None:
                if corrupt[0] <= 0:
                    corrupt = None
                else:
                    corrupt[0] -= 1
        if status is not None:
            return self._fail(method, path, rng, status, start_response)

        held = self.hold is not None and method == "GET" and self.hold[0] in path
        if held:
            with self.lock:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            time.sleep(self.hold[1])
        try:
            answered = self._ranged(environ, path, rng) if method == "GET" and rng else None
            status_line, headers, body = answered or self._moto(environ)
        finally:
            if held:
                with self.lock:
                    self.in_flight -= 1
        code = int(status_line.split()[0])
        headers = list(headers)
        start = None
        if method == "GET" and code in (200, 206):
            start = 0
            content_range = next((v for k, v in headers if k.lower() == "content-range"), None)
            m = _CONTENT_RANGE.match(content_range or "")
            total = len(body)
            if m:
                start, total = int(m[1]), int(m[3])
            if corrupt is not None and body:
                position = corrupt[1] if corrupt[1] is not None else total // 2
                if start <= position < start + len(body):
                    i = position - start
                    body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1:]
                if not corrupt[2]:  # serve the bad bytes as if they were right (no checksum to catch it)
                    headers = [(k, v) for k, v in headers if not k.lower().startswith("x-amz-checksum")]
        with self.lock:
            self.log.append(Request(method, path, rng, code, len(body) if method == "GET" else 0, start))
        start_response(status_line, headers)
        return [body]

    def _moto(self, environ) -> tuple[str, list, bytes]:
        captured: dict = {}

        def capture(status_line, headers, exc_info=None):
            captured["status"], captured["headers"] = status_line, headers
            return lambda data: None  # moto never uses the write() callable

        result = self.app(environ, capture)
        try:
            body = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return captured["status"], captured["headers"], body

    def _ranged(self, environ, path: str, rng: str) -> tuple[str, list, bytes] | None:
        """A GET of one byte range, answered with moto's headers (from a HEAD with the same range)
        and only those bytes of the stored object. moto itself reads the whole object for a range
        (a 160 KB range of a 50 MB object took 42 ms, of a 1 MB one 7 ms), which would make the
        server, not the link, what limits range reads in benchmarks/bench_remote.py. None (moto
        answers the GET itself) for anything else: other ranges, errors, a moto without these internals."""
        if not re.fullmatch(r"bytes=\d+-\d+", rng):
            return None
        status_line, headers, _ = self._moto({**environ, "REQUEST_METHOD": "HEAD"})
        m = _CONTENT_RANGE.match(next((v for k, v in headers if k.lower() == "content-range"), ""))
        if not status_line.startswith("206") or not m:
            return None
        try:
            from moto.core import DEFAULT_ACCOUNT_ID
            from moto.s3.models import s3_backends

            bucket, key = path.lstrip("/").split("/", 1)
            stored = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].get_object(bucket, key)
            with stored.lock:
                stored._value_buffer.seek(int(m[1]))
                body = stored._value_buffer.read(int(m[2]) - int(m[1]) + 1)
        except Exception:  # noqa: BLE001 - internals moved: moto's own (slow) path
            return None
        return status_line, headers, body

    def _fail(self, method, path, rng, status, start_response):
        code = {500: "InternalError", 503: "ServiceUnavailable"}.get(status, "InternalError")
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>injected by the test server</Message><Resource>{path}</Resource>"
                f"<RequestId>{uuid.uuid4().hex}</RequestId></Error>").encode()
        with self.lock:
            self.log.append(Request(method, path, rng, status, 0, None))
        reason = {500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Error")
        start_response(f"{status} {reason}", [("Content-Type", "application/xml"),
                                              ("Content-Length", str(len(body)))])
        return [body]


class S3Server:
    """moto's S3 on 127.0.0.1 on a free port, with one fresh bucket; start()/stop() or `with`."""

    def __init__(self, bucket: str | None = None):
        self.bucket = bucket or f"dsinspect-{uuid.uuid4().hex[:12]}"
        self._server = None
        self._thread: threading.Thread | None = None
        self._middleware: _Middleware | None = None

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> "S3Server":
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        # what ThreadedMotoServer serves, wrapped
        self._middleware = _Middleware(DomainDispatcherApplication(create_backend_app))
        self._server = make_server("127.0.0.1", 0, self._middleware, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-s3", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._server.server_port

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, prefix: str = "catalog") -> str:
        return f"s3://{self.bucket}/{prefix}"

    def environ(self, **config_kwargs) -> dict[str, str]:
        """Environment variables that point s3fs (in this or a child process) at the server."""
        options = {"endpoint_url": self.endpoint}
        if config_kwargs:
            options["config_kwargs"] = config_kwargs
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true", "FSSPEC_S3": json.dumps(options)}

    def storage_options(self, **config_kwargs) -> dict:
        return json.loads(self.environ(**config_kwargs)["FSSPEC_S3"])

    # -- paths -----------------------------------------------------------------------------------

    def path(self, fs_path: str) -> str:
        """The request path of an s3fs path or s3:// URL (`bucket/key` -> `/bucket/key`)."""
        return "/" + fs_path.split("://", 1)[-1].lstrip("/")

    # -- faults ----------------------------------------------------------------------------------

    def fail_next(self, path: str, n: int, status: int = 503) -> None:
        """The next `n` GETs of `path` get `status` (an S3 XML error) instead of the object."""
        with self._middleware.lock:
            self._middleware.failures[self.path(path)] = [n, status]

    def corrupt(self, path: str, times: int | None = None, position: int | None = None,
                checksums: bool = False) -> None:
        """GETs of `path` (the next `times`, default all) serve the object with the byte at
        `position` (default: the middle) inverted; Range GETs covering it too.

        moto sends the object's stored checksum (x-amz-checksum-crc32) with a GET, and botocore
        then checks the body itself. By default those headers are dropped, so the client sees the
        bad bytes as a store that holds them would serve them (as S3 serves ranged reads: without
        a whole-object checksum); `checksums=True` keeps them (corruption in transit)."""
        with self._middleware.lock:
            self._middleware.corruptions[self.path(path)] = [times, position, checksums]

    def hold_gets(self, contains: str, seconds: float) -> None:
        """Answer GETs whose path contains `contains` only after `seconds` (a long round trip), and
        count how many are in flight at once (`most_in_flight`): requests sent together overlap,
        requests sent one after another never do."""
        with self._middleware.lock:
            self._middleware.hold = (contains, seconds)
            self._middleware.most_in_flight = 0

    @property
    def most_in_flight(self) -> int:
        return self._middleware.most_in_flight

    def clear_faults(self) -> None:
        with self._middleware.lock:
            self._middleware.failures.clear()
            self._middleware.corruptions.clear()
            self._middleware.hold = None

    # -- counting --------------------------------------------------------------------------------

    def reset_counts(self) -> None:
        with self._middleware.lock:
            self._middleware.log.clear()

    def requests(self, method: str | None = None, path: str | None = None,
                 contains: str | None = None) -> list[Request]:
        """Requests answered so far (since the last reset), optionally of one method and path, or
        whose path contains a string."""
        with self._middleware.lock:
            log = list(self._middleware.log)
        p = self.path(path) if path else None
        return [r for r in log if (method is None or r.method == method) and (p is None or r.path == p)
                and (contains is None or contains in r.path)]

    def counts(self) -> dict[tuple[str, str], int]:
        """Requests per (method, path)."""
        out: dict[tuple[str, str], int] = {}
        for r in self.requests():
            out[(r.method, r.path)] = out.get((r.method, r.path), 0) + 1
        return out

    def get_bytes(self, path: str | None = None, contains: str | None = None) -> int:
        """Body bytes sent in answer to GETs (whole and Range), of one path or all."""
        return sum(r.nbytes for r in self.requests("GET", path, contains))

    def downloads(self, contains: str = "/shards/") -> dict[str, int]:
        """Per path: how many times the object was read from its first byte (a fetch of the whole
        file streams from offset 0; footer and row-group reads start elsewhere)."""
        out: dict[str, int] = {}
        for r in self.requests("GET", contains=contains):
            if r.status in (200, 206) and r.start == 0:
                out[r.path] = out.get(r.path, 0) + 1
        return out


@contextmanager
def s3_environment(server: S3Server, **config_kwargs) -> Iterator[dict[str, str]]:
    """Point s3fs at `server` in this process (fsspec config) and in children (environment);
    restore both afterwards and drop cached S3FileSystem instances either way."""
    import fsspec.config

    env = server.environ(**config_kwargs)
    saved_env = {k: os.environ.get(k) for k in env}
    saved_conf = fsspec.config.conf.get("s3")
    os.environ.update(env)
    fsspec.config.conf["s3"] = json.loads(env["FSSPEC_S3"])
    _forget_s3_instances()
    try:
        yield env
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if saved_conf is None:
            fsspec.config.conf.pop("s3", None)
        else:
            fsspec.config.conf["s3"] = saved_conf
        _forget_s3_instances()


def _forget_s3_instances() -> None:
    try:
        import s3fs
    except ImportError:
        return
    s3fs.S3FileSystem.clear_instance_cache()


@contextmanager
def s3_server(**config_kwargs) -> Iterator[tuple[S3Server, str, dict]]:
    """(server, catalog URL, storage options) with the environment set and a fresh bucket made.
    A fixture is one line: `with s3_server() as served: yield served`. `config_kwargs` go to
    botocore (e.g. PROBLEM_RETRIES)."""
    import fsspec

    with S3Server() as server, s3_environment(server, **config_kwargs):
        fs = fsspec.filesystem("s3")
        fs.mkdir(server.bucket)
        server.reset_counts()
        yield server, server.url("catalog"), server.storage_options(**config_kwargs)
