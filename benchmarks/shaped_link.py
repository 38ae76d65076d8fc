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
    bytes_up: int = 0    # client -> server
    bytes_down: int = 0  # server -> client
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, up: int = 0, down: int = 0, connections: int = 0) -> None:
        with self._lock:
            self.bytes_up += up
            self.bytes_down += down
            self.connections += connections


class ShapedLink:
    """Listens on 127.0.0.1 (a free port) and forwards every connection to `upstream` through the
    shaped link; `rate` None means unlimited, `burst` defaults to 1/50 s of the rate (≥ one chunk)."""

    def __init__(self, upstream: tuple[str, int], rtt: float = 0.0, rate: float | None = None,
                 burst: float | None = None):
        if rtt < 0:
            raise ValueError("rtt must be ≥ 0")
        self.upstream, self.rtt, self.rate = upstream, float(rtt), rate
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
