"""A static file server on 127.0.0.1 for the http(s) catalog tests: `python -m http.server`'s handler
(directory index pages, HEAD, GET) plus what it lacks and every real static server has, Range
requests answered with 206 Partial Content. Counts requests by method and status."""

from __future__ import annotations

import collections
import os
import re
import threading
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class RangeHandler(SimpleHTTPRequestHandler):
    counts: collections.Counter  # set per server

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass

    def send_response(self, code, message=None) -> None:
        self.counts[(self.command, code)] += 1
        super().send_response(code, message)

    def end_headers(self) -> None:
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def send_head(self):
        path = self.translate_path(self.path)
        match = _RANGE.match(self.headers.get("Range", ""))
        if not match or not os.path.isfile(path) or (not match[1] and not match[2]):
            return super().send_head()
        size = os.path.getsize(path)
        if match[1]:
            start, end = int(match[1]), min(int(match[2]) if match[2] else size - 1, size - 1)
        else:  # a suffix: the last N bytes
            start, end = max(0, size - int(match[2])), size - 1
        if start >= size or start > end:
            self.send_error(416, "Range Not Satisfiable")
            return None
        f = open(path, "rb")
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self._remaining = end - start + 1
        return f

    def copyfile(self, source, outputfile) -> None:
        remaining = getattr(self, "_remaining", None)
        if remaining is None:
            return super().copyfile(source, outputfile)
        self._remaining = None
        outputfile.write(source.read(remaining))


@contextmanager
def serving(directory: str, handler_class: type = RangeHandler) -> Iterator[tuple[str, collections.Counter]]:
    """Serve `directory` on a free loopback port: (base URL, request counts by (method, status))."""
    counts: collections.Counter = collections.Counter()
    handler = partial(type("Handler", (handler_class,), {"counts": counts}), directory=directory)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", counts
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
