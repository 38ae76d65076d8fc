"""A TCP proxy that behaves like a slower link: a round-trip time and a bandwidth, for reading an
S3 server on loopback as a cluster reads object storage (issue #18). The kernel here has no
`netem`, so the shaping lives in user space:

    with ShapedLink(("127.0.0.1", server_port), rtt=0.020, rate=50e6) as link:
        endpoint = f"http://127.0.0.1:{link.port}"

Each direction is a delay line with a token bucket. A chunk read from one side at time t goes out
to the other side at t + rtt/2 at the earliest (so a request and its answer cost one RTT, and
chunks in flight overlap as on a real link), and no faster than the direction's bucket allows: `rate`
bytes/s shared by every connection (the link is one pipe, whatever the number of streams), bursts
of at most `burst` bytes. A bounded queue per connection and direction keeps the proxy from
buffering a whole answer (it holds twice what the link carries in one delay, at least 2 MiB): a
slow link pushes back on the sender through TCP.

With `http=True` the link also speaks HTTP/1.1 to its clients as an object store's front end does:
it keeps a client's connection open across requests (moto's werkzeug server closes every one, so a
reader's connection pool could never be seen reusing anything), forwards each request upstream on
a connection of its own, and counts requests beside connections. A new connection then costs what
it costs on a real network: one round trip (the TCP handshake) before its first request leaves.

The timing rules are pure functions of a clock (`TokenBucket`, `departure`), tested with a fake
one; the sockets are the asyncio edge, run on an event loop in a thread of their own.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field

__all__ = ["TokenBucket", "departure", "ShapedLink", "LinkStats"]

CHUNK = 64 << 10  # bytes read at once from a socket
QUEUED_CHUNKS = 32  # per connection and direction, at least (2 MiB) before the sender is pushed back
FAST = 1e9  # bytes/s taken for an unlimited link when sizing its delay line


class TokenBucket:
    """Bytes may leave at `rate` per second on average, in bursts of at most `burst`: `take(n, now)`
    books n bytes and says when they may go. Bookings queue in call order (a negative balance is
    what earlier bookings still owe), so the link's bandwidth is shared by everyone who takes."""

    def __init__(self, rate: float, burst: float):
        if rate <= 0 or burst <= 0:
            raise ValueError("a token bucket needs a positive rate and burst")
        self.rate, self.burst = float(rate), float(burst)
        self._tokens, self._at = float(burst), None

    def take(self, n: int, now: float) -> float:
        """Book `n` bytes at time `now`; the time at which they may leave (≥ now)."""
        if self._at is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= n
        return now if self._tokens >= 0 else now - self._tokens / self.rate


def departure(arrived: float, now: float, delay: float, bucket: TokenBucket | None, n: int) -> float:
    """When a chunk of `n` bytes that arrived at `arrived` leaves: not before `arrived + delay`
    (propagation), then as the bucket allows (booked when it reaches the head of the line)."""
    due = max(now, arrived + delay)
    return due if bucket is None else bucket.take(n, due)


@dataclass
class LinkStats:
    """What crossed the link (both counted when a chunk is written out)."""

    connections: int = 0
    requests: int = 0    # HTTP requests forwarded (http=True only)
    bytes_up: int = 0    # client -> server
    bytes_down: int = 0  # server -> client
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, up: int = 0, down: int = 0, connections: int = 0, requests: int = 0) -> None:
        with self._lock:
            self.bytes_up += up
            self.bytes_down += down
            self.connections += connections
            self.requests += requests


class ShapedLink:
    """Listens on 127.0.0.1 (a free port) and forwards every connection to `upstream` through the
    shaped link; `rate` None means unlimited, `burst` defaults to 1/50 s of the rate (≥ one chunk);
    `http`: keep clients' connections alive (see the module's docstring)."""

    def __init__(self, upstream: tuple[str, int], rtt: float = 0.0, rate: float | None = None,
                 burst: float | None = None, http: bool = False):
        if rtt < 0:
            raise ValueError("rtt must be ≥ 0")
        self.upstream, self.rtt, self.rate, self.http = upstream, float(rtt), rate, http
        burst = burst if burst is not None else (max(CHUNK, rate / 50) if rate else None)
        # one bucket per direction: like a full-duplex link, answers and requests do not share bandwidth
        self._buckets = {d: TokenBucket(rate, burst) if rate else None for d in ("up", "down")}
        self.stats = LinkStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._ready = threading.Event()
        self._connections: set[asyncio.Task] = set()
        self.port = 0

    def __enter__(self) -> "ShapedLink":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "ShapedLink":
        listener = socket.create_server(("127.0.0.1", 0))
        self.port = listener.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, args=(listener,), name="shaped-link", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop = self._thread = None

    async def _shutdown(self) -> None:
        """Stop listening, then end every connection's tasks (their peers may be gone already)."""
        self._server.close()
        # until none is left: ending a connection's task can start others (gather wraps its pumps)
        while tasks := [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self, listener: socket.socket) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(asyncio.start_server(self._serve, sock=listener))
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        # held here: asyncio's stream protocol drops its reference to this task when the client's
        # connection is lost, and a pending task nobody references is collected mid-flight
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            await self._connect(client_r, client_w)
        finally:
            self._connections.discard(task)

    async def _connect(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.stats.add(connections=1)
        if self.http:
            try:
                await self._serve_http(client_r, client_w)
            finally:
                client_w.close()
            return
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(self._pump(client_r, server_w, "up"), self._pump(server_r, client_w, "down"),
                             return_exceptions=True)
        for w in (client_w, server_w):
            w.close()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, direction: str) -> None:
        """One direction of one connection: a reader filling a bounded delay line, a writer
        emptying it at the departure times."""
        loop = asyncio.get_running_loop()
        delay, bucket = self.rtt / 2, self._buckets[direction]
        # room for twice what the link carries during one delay: the line, not its queue, limits a stream
        line: asyncio.Queue = asyncio.Queue(max(QUEUED_CHUNKS, int(2 * (self.rate or FAST) * delay / CHUNK) + 1))

        async def fill() -> None:
            try:
                while data := await source.read(CHUNK):
                    await line.put((loop.time(), data))
            except (ConnectionError, OSError):
                pass
            await line.put(None)  # the end (not when cancelled: the writer is going away too)

        filling = asyncio.ensure_future(fill())
        try:
            while (item := await line.get()) is not None:
                arrived, data = item
                wait = departure(arrived, loop.time(), delay, bucket, len(data)) - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                sink.write(data)
                await sink.drain()
                self.stats.add(**{direction: len(data)})
            if sink.can_write_eof():
                sink.write_eof()
        except (ConnectionError, OSError):
            pass
        finally:
            filling.cancel()
            await asyncio.gather(filling, return_exceptions=True)  # ended, not left pending

    # -- http=True: a front end that keeps clients' connections alive ------------------------------

    async def _serve_http(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        """Requests of one client connection, one after another (HTTP/1.1 without pipelining, as
        clients send them), each forwarded on an upstream connection of its own."""
        loop = asyncio.get_running_loop()
        _no_delay(client_w)
        ready = loop.time() + self.rtt  # the handshake: the first request leaves a round trip later
        while True:
            try:
                head = await client_r.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
                return
            lines, headers = _parse_head(head)
            method = lines[0].split(" ", 1)[0].upper()
            if headers.get("expect", "").lower() == "100-continue":
                client_w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = b"".join([piece async for piece in _body(client_r, headers)])
            request = _head_bytes(lines, headers, drop=("expect", "connection")) + body
            due = departure(max(loop.time(), ready), loop.time(), self.rtt / 2, self._buckets["up"], len(request))
            await asyncio.sleep(max(0.0, due - loop.time()))
            self.stats.add(up=len(request), requests=1)
            if not await self._forward(request, method, client_w):
                return

    async def _forward(self, request: bytes, method: str, client_w: asyncio.StreamWriter) -> bool:
        """One request upstream and its answer back through the delay line; False when the client's
        connection has to end with it (an answer delimited by the upstream's close, or an error)."""
        loop = asyncio.get_running_loop()
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            return False
        _no_delay(server_w)
        line: asyncio.Queue = asyncio.Queue(max(QUEUED_CHUNKS, int(2 * (self.rate or FAST) * self.rtt / 2 / CHUNK) + 1))
        keep = [True]

        async def fill() -> None:
            try:
                server_w.write(request)
                await server_w.drain()
                while True:  # interim 1xx answers (werkzeug's own 100 Continue) are not forwarded
                    head = await server_r.readuntil(b"\r\n\r\n")
                    lines, headers = _parse_head(head)
                    status = int(lines[0].split()[1])
                    if status >= 200:
                        break
                no_body = method == "HEAD" or status in (204, 304)
                delimited = no_body or "content-length" in headers or "chunked" in headers.get("transfer-encoding", "")
                keep[0] = delimited
                dropped = ("connection",) if delimited else ()  # an answer ended by the close keeps saying so
                await line.put((loop.time(), _head_bytes(lines, headers, drop=dropped)))
                if not no_body:
                    async for piece in _body(server_r, headers, until_close=not delimited):
                        await line.put((loop.time(), piece))
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError, ValueError):
                keep[0] = False
            await line.put(None)

        filling = asyncio.ensure_future(fill())
        try:
            while (item := await line.get()) is not None:
                arrived, data = item
                wait = departure(arrived, loop.time(), self.rtt / 2, self._buckets["down"], len(data)) - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                client_w.write(data)
                await client_w.drain()
                self.stats.add(down=len(data))
        except (ConnectionError, OSError):
            keep[0] = False
        finally:
            filling.cancel()
            await asyncio.gather(filling, return_exceptions=True)
            server_w.close()
        return keep[0]


def _no_delay(writer: asyncio.StreamWriter) -> None:
    """Small writes (an answer's head, then its body) go out at once: with Nagle's algorithm a kept-
    alive connection waits for the client's delayed ACK (~40 ms) before each answer."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _parse_head(head: bytes) -> tuple[list[str], dict[str, str]]:
    """A request's or answer's head: its lines (the first one and the header lines as sent) and
    its headers by lower-case name."""
    lines = head.decode("latin-1").split("\r\n")[:-2]
    headers = {}
    for text in lines[1:]:
        name, _, value = text.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines, headers


def _head_bytes(lines: list[str], headers: dict[str, str], drop: tuple[str, ...]) -> bytes:
    kept = [lines[0]] + [x for x in lines[1:] if x.partition(":")[0].strip().lower() not in drop]
    return ("\r\n".join(kept) + "\r\n\r\n").encode("latin-1")


async def _body(reader: asyncio.StreamReader, headers: dict[str, str], until_close: bool = False):
    """A message's body as it arrives, in pieces of at most CHUNK (chunked framing passed on as sent)."""
    if "chunked" in headers.get("transfer-encoding", ""):
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            yield size_line + await reader.readexactly(size + 2)
            if size == 0:
                return
    if until_close:
        while data := await reader.read(CHUNK):
            yield data
        return
    left = int(headers.get("content-length", "0"))
    while left > 0:
        data = await reader.read(min(CHUNK, left))
        if not data:
            raise ConnectionError("the answer ended early")
        left -= len(data)
        yield data
