"""The hardened HTTP side of `specwatch run`: an event-loop server and the read-only routes.

Routes only read the immutable view the poller published last (Published), so a scrape does no
I/O towards vLLM and takes no lock. The whole front is one thread with a selector (epoll), so a
held connection costs a few KiB and no thread; a few hostile clients on the pod network can neither
exhaust its memory nor lock a scraper or the kubelet's probes out:

- a request head is read by the loop, non-blocking, into a buffer bounded in *total* bytes
  (MAX_HEAD_BYTES: 414 or 431 past it, then close), not only per line as http.server bounded it;
- the whole head has a deadline (HEAD_TIMEOUT) from accept or from the end of the previous
  response: a slowloris dripping a byte per second is cut there, not kept alive by every byte as
  a per-recv timeout is. An idle keep-alive connection is the same wait (nothing is pending);
- when slots get scarce (SCARCE_FRACTION of MAX_CONNECTIONS in use) idle and half-sent
  connections get SCARCE_HEAD_TIMEOUT instead; when they are all taken, a new connection evicts
  the one that has waited longest without a complete request, so a holder of every slot cannot
  lock anybody out: a real request completes in a millisecond, an attacker's never does;
- only a complete head is parsed (http_head.py: http.server's parsing and limits, without http.server)
  and routed, in the loop: serving a published view is a few tens of microseconds (the first read
  of a view's page, status or /metrics renders it once: a few ms);
- the response is written non-blocking from the published bytes themselves (no copy per
  connection) with a deadline (WRITE_TIMEOUT); while it is pending nothing more is read, so a
  pipelining client that never reads holds at most one response and one head;
- kernel socket buffers are capped per connection (SO_SNDBUF / SO_RCVBUF).

Request bodies are never read, and a request carrying one closes its keep-alive connection.

Every response carries SECURITY_HEADERS: the page's Content-Security-Policy (export/page.py; as a
header it also holds frame-ancestors, which its meta tag cannot) and `X-Content-Type-Options:
nosniff`, so no browser runs a status JSON or an error text as HTML or script whatever is in it.

Clients are told the idle deadline, so one that honours it and reuses its connection on the
deadline's own cadence (a sampler every 5 s) does not send a request just as the server closes
(`RemoteDisconnected`; urllib3 neither honours the header nor retries that, so bench/soak.py
opens a connection per sample). Every keep-alive response carries `Keep-Alive: timeout=N`
(advertised_idle_timeout): whole seconds, at least one under the deadline in force, because the
client's clock starts after the server's (once it has read the response) and its whole next head
must arrive in time. When that leaves under one second (slots scarce: SCARCE_HEAD_TIMEOUT), the
response says `Connection: close` instead and the client's next request opens a new connection.
A promise is kept: a connection whose last response advertised N keeps the deadline N came
from for that wait even if slots turn scarce meanwhile (an honouring client never races the
close). That holds at most one HEAD_TIMEOUT and only for a connection that completed a request
before the slots turned scarce; once they are, every response closes, so no promise is renewed
and eviction of the longest waiter when every slot is taken is unchanged. A response that closes
the connection never carries Keep-Alive.
"""

from __future__ import annotations

import contextlib
import errno
import math
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from specwatch.config import Config
from specwatch.export.csp import CONTENT_SECURITY_POLICY
from specwatch.export.metrics_text import CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE
from specwatch.serve.http_head import Refusal, Request, parse_head, response_head
from specwatch.view import View

MAX_CONNECTIONS = 512  # open connections; past it a new one evicts the longest waiter, never queues
MAX_HEAD_BYTES = 16 * 1024  # a whole request head (request line and headers), far above a scrape's
HEAD_TIMEOUT = 5.0  # seconds from accept (or the previous response) to a complete request head
SCARCE_FRACTION = 0.75  # past this share of MAX_CONNECTIONS in use, waiting connections get...
SCARCE_HEAD_TIMEOUT = 1.0  # ...this instead of HEAD_TIMEOUT
WRITE_TIMEOUT = 10.0  # seconds for a client to take a whole response
RECV_CHUNK = 8192
SOCKET_BUFFER = 64 * 1024  # SO_SNDBUF / SO_RCVBUF per connection (the kernel doubles it)
SWEEP_INTERVAL = 0.1  # how often deadlines are checked
ACCEPT_BATCH = 64  # connections accepted per readiness of the listening socket

#: Sent with every response (see the module docstring).
SECURITY_HEADERS = (
    ("Content-Security-Policy", f"{CONTENT_SECURITY_POLICY}; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)
_SECURITY_HEAD = "".join(f"{name}: {value}\r\n" for name, value in SECURITY_HEADERS)

_BLANK_LINE = re.compile(rb"\n\r?\n")  # the end of a head: a line ending, then an empty line


def head_end(buffer: bytes | bytearray, start: int = 0) -> int:
    """The index just past a complete request head in `buffer`, or -1. A head is a request line
    and headers up to an empty line (CRLF or bare LF, as http.server accepted); an empty first line
    is a head of its own (answered by closing). `start`: where the last search stopped, so a head
    dripped a byte at a time is not searched again from its start."""
    if buffer[:1] == b"\n" or buffer[:2] == b"\r\n":
        return 1 if buffer[:1] == b"\n" else 2
    match = _BLANK_LINE.search(buffer, max(start - 2, 0))
    return match.end() if match else -1


def advertised_idle_timeout(head_timeout: float) -> int | None:
    """The N of `Keep-Alive: timeout=N` on a response after which the server allows `head_timeout`
    seconds for the next complete head: whole seconds, at least one under it (see the module
    docstring). None when that is under one second: the response closes the connection instead."""
    seconds = math.floor(head_timeout) - 1
    return seconds if seconds >= 1 else None


class Rendered:
    """Bytes rendered on their first read and kept: one render per published view at most, and
    none for a view nobody reads (the page, the status document, /metrics in each format). The
    render runs in the reader's thread (the HTTP loop), once, under a lock."""

    __slots__ = ("_lock", "_render", "_value")

    def __init__(self, render: Callable[[], bytes] | bytes):
        self._lock = threading.Lock()
        self._value: bytes | None = render if isinstance(render, bytes) else None
        self._render: Callable[[], bytes] | None = None if isinstance(render, bytes) else render

    @property
    def rendered(self) -> bool:
        return self._value is not None

    def get(self) -> bytes:
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    render, self._render = self._render, None
                    self._value = render() if render is not None else b""
                value = self._value
        return value


@dataclass(frozen=True)
class Published:
    """One poll's result as served: swapped whole by the poller, only read by the routes. The
    page, the status document and /metrics are rendered on their first read (Rendered) and kept
    until the next poll publishes a new view."""

    view: View
    rendered_metrics: Rendered
    rendered_status: Rendered
    ready: bool
    last_tick: float  # monotonic time of the last loop tick (liveness)
    rendered_page: Rendered  # `/` (export/page.py); empty: the static LANDING
    not_ready: bytes  # /readyz's body while not ready: starting, or the config error
    rendered_openmetrics: Rendered  # /metrics when OpenMetrics is asked for

    def ticked(self, now: float) -> Published:
        """The same publication at a later loop tick (a poll with nothing new to publish).
        Positional: dataclasses.replace looks the fields up each call, and this is every poll."""
        return Published(
            self.view,
            self.rendered_metrics,
            self.rendered_status,
            self.ready,
            now,
            self.rendered_page,
            self.not_ready,
            self.rendered_openmetrics,
        )

    @property
    def metrics(self) -> bytes:
        return self.rendered_metrics.get()

    @property
    def openmetrics(self) -> bytes:
        return self.rendered_openmetrics.get()

    @property
    def status(self) -> bytes:
        return self.rendered_status.get()

    @property
    def page(self) -> bytes:
        return self.rendered_page.get()


class PublishedView(Protocol):
    """What the routes read from the service: the last published view and the running config."""

    @property
    def published(self) -> Published: ...

    @property
    def config(self) -> Config: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """What a route answers a request: the status, the body (not sent to HEAD) and its type.
    `close`: the connection closes after it whatever the request asked."""

    status: int
    body: bytes
    content_type: str
    close: bool = False


#: The routes: a parsed request to its answer, run in the loop (so only reads published views).
Route = Callable[[Request], Answer]

_ERROR_BODIES = {
    400: b"bad request\n",
    414: b"request head too long\n",
    431: b"request header fields too large\n",
    505: b"HTTP version not supported\n",
}

_CLOSE = "Connection: close\r\n"


def _response(answer: Answer, connection: str, *, head_only: bool = False) -> list[bytes | memoryview]:
    """The response's head and body, with `connection` (its Connection and Keep-Alive lines)."""
    head = response_head(
        answer.status,
        f"Content-Type: {answer.content_type}\r\nContent-Length: {len(answer.body)}\r\n"
        f"Cache-Control: no-store\r\n{_SECURITY_HEAD}{connection}",
    )
    return [head] if head_only else [head, answer.body]


class _Connection:
    """One client connection as the loop sees it. `since`: when its current wait began (accept or
    the end of the previous response, or the start of the pending response). `promised_wait`: the
    head deadline its last response's Keep-Alive header promised (0: none)."""

    __slots__ = ("address", "close_after", "events", "inbuf", "out", "promised_wait", "scanned", "since", "sock")

    def __init__(self, sock: socket.socket, address: Any, now: float):
        self.sock = sock
        self.address = address
        self.inbuf = bytearray()
        self.scanned = 0
        self.out: list[bytes | memoryview] = []
        self.since = now
        self.close_after = False
        self.promised_wait = 0.0
        self.events = selectors.EVENT_READ

    def rank(self) -> tuple[int, float]:
        """Eviction order: idle first, then half-sent heads, then pending responses; oldest first."""
        if self.out:
            return (2, self.since)
        return (1 if self.inbuf else 0, self.since)


class CappedHTTPServer:
    """The HTTP front: one thread, one selector; IPv6 when the host is. The interface the service
    and the tests use is socketserver's: serve_forever(poll_interval), shutdown(), server_close(),
    server_address. Counters (accepted, evicted, timed_out, refused_heads, peak_buffered) are
    plain attributes, read by the tests and the benchmark."""

    def __init__(
        self,
        address: tuple[str, int],
        route: Route,
        *,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        host = address[0]
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.route = route
        self.max_connections = max_connections
        self.socket = socket.socket(self.address_family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(1024)
            self.socket.setblocking(False)
        except OSError:
            self.socket.close()
            raise
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self.socket, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._wake_r)
        self._conns: dict[int, _Connection] = {}
        self._stopping = False
        self._stopped = threading.Event()
        self._stopped.set()
        self.accepted = self.evicted = self.timed_out = self.refused_heads = self.requests = 0
        self.peak_buffered = 0  # the most bytes of request head ever buffered for one connection
        self.peak_connections = 0

    # -- socketserver's interface --------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        last_sweep = time.monotonic()
        try:
            while not self._stopping:
                # With no connection there is no deadline to sweep: sleep until a client connects
                # or shutdown() writes to the wake socket, instead of waking ten times a second.
                timeout = min(poll_interval, SWEEP_INTERVAL) if self._conns else None
                for key, mask in self._selector.select(timeout):
                    if key.data is None:
                        self._accept()
                    elif key.data is self._wake_r:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        conn: _Connection = key.data
                        if conn.sock.fileno() < 0:
                            continue  # closed earlier in this batch (evicted)
                        try:
                            if mask & selectors.EVENT_READ:
                                self._on_readable(conn)
                            if mask & selectors.EVENT_WRITE and conn.sock.fileno() in self._conns:
                                self._on_writable(conn)
                        except Exception:  # noqa: BLE001 - one connection's failure must not stop the front
                            self._close(conn)
                now = time.monotonic()
                if now - last_sweep >= SWEEP_INTERVAL:
                    last_sweep = now
                    self._sweep(now)
        finally:
            self._stopping = False
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serve_forever and wait for it (as socketserver's does)."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._stopped.wait()

    def server_close(self) -> None:
        for conn in list(self._conns.values()):
            self._close(conn)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(self.socket)
        self.socket.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def head_timeout(self) -> float:
        """The head deadline a waiting connection gets now: shorter while slots are scarce."""
        scarce = len(self._conns) >= SCARCE_FRACTION * self.max_connections
        return SCARCE_HEAD_TIMEOUT if scarce else HEAD_TIMEOUT

    # -- the loop ------------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM) and self._conns:
                    self._evict()  # out of descriptors: make room; the next readiness retries
                return
            if len(self._conns) >= self.max_connections:
                self._evict()
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
                if self.address_family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn = _Connection(sock, address, time.monotonic())
                self._conns[sock.fileno()] = conn
                self._selector.register(sock, selectors.EVENT_READ, conn)
            except OSError:
                self._conns.pop(sock.fileno(), None)
                sock.close()
                continue
            self.accepted += 1
            self.peak_connections = max(self.peak_connections, len(self._conns))

    def _evict(self) -> None:
        """Close the connection that has waited longest without a complete request (idle ones first)."""
        victim = min(self._conns.values(), key=_Connection.rank, default=None)
        if victim is not None:
            self.evicted += 1
            self._close(victim)

    def _close(self, conn: _Connection) -> None:
        fd = conn.sock.fileno()
        if self._conns.get(fd) is conn:
            del self._conns[fd]
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
        conn.sock.close()
        conn.inbuf = bytearray()
        conn.out = []

    def _set_events(self, conn: _Connection, events: int) -> None:
        if conn.events != events:
            conn.events = events
            self._selector.modify(conn.sock, events, conn)

    def _on_readable(self, conn: _Connection) -> None:
        try:
            # Never more than one byte past the head limit: the buffer is bounded, not per read.
            data = conn.sock.recv(max(min(RECV_CHUNK, MAX_HEAD_BYTES + 1 - len(conn.inbuf)), 1))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        conn.inbuf += data
        self.peak_buffered = max(self.peak_buffered, len(conn.inbuf))
        self._serve(conn)

    def _serve(self, conn: _Connection) -> None:
        """Answer every complete head buffered (pipelining), one at a time, while nothing is pending."""
        while not conn.out:
            end = head_end(conn.inbuf, conn.scanned)
            if end < 0 or end > MAX_HEAD_BYTES:
                if len(conn.inbuf) <= MAX_HEAD_BYTES and end < 0:
                    conn.scanned = len(conn.inbuf)
                    return  # wait for more of the head (within its deadline)
                self.refused_heads += 1
                first_line_done = b"\n" in conn.inbuf[: MAX_HEAD_BYTES + 1]
                limit = f"a request head is at most {MAX_HEAD_BYTES} bytes\n".encode()
                self._answer_error(conn, 431 if first_line_done else 414, limit)
                return
            head = bytes(conn.inbuf[:end])
            del conn.inbuf[:end]
            conn.scanned = 0
            self._handle(conn, head)
            if conn.sock.fileno() not in self._conns:
                return
        # A response is pending: stop reading until it is taken (bounded input per connection).

    def _handle(self, conn: _Connection, head: bytes) -> None:
        self.requests += 1
        request = parse_head(head)
        if isinstance(request, Refusal):
            if request.status is None:
                self._close(conn)  # an empty request line: nothing to answer
            else:
                self._answer_error(conn, request.status, head_only=request.method == "HEAD")
            return
        # The Connection lines for a keep-alive response say how long it may stay idle.
        keep_alive = request.keep_alive
        connection = ""
        head_timeout = self.head_timeout()
        if keep_alive:
            idle = advertised_idle_timeout(head_timeout)
            keep_alive = idle is not None
            connection = f"Connection: keep-alive\r\nKeep-Alive: timeout={idle}\r\n" if keep_alive else _CLOSE
        try:
            answer = self.route(request)
        except Exception:  # noqa: BLE001 - a bug in a route must not take the loop down with it
            self._close(conn)
            return
        if answer.close or request.carries_body:
            keep_alive = False
        chunks: list[bytes | memoryview] = []
        if request.expects_continue and keep_alive:  # never invite a body the closing answer won't read
            chunks.append(f"HTTP/1.1 100 Continue\r\n{connection}\r\n".encode())
        conn.promised_wait = head_timeout if keep_alive else 0.0
        chunks += _response(answer, connection if keep_alive else _CLOSE, head_only=request.method == "HEAD")
        self._respond(conn, chunks, close=not keep_alive)

    def _answer_error(self, conn: _Connection, code: int, body: bytes = b"", *, head_only: bool = False) -> None:
        answer = Answer(code, body or _ERROR_BODIES.get(code, b"error\n"), "text/plain")
        conn.inbuf = bytearray()
        self._respond(conn, _response(answer, _CLOSE, head_only=head_only), close=True)

    def _respond(self, conn: _Connection, chunks: list[bytes | memoryview], *, close: bool) -> None:
        conn.out = [memoryview(c) for c in chunks if len(c)]
        conn.close_after = close
        conn.since = time.monotonic()
        if close:
            conn.inbuf = bytearray()  # nothing after a closing request is parsed (a body, a smuggled one)
        self._flush(conn)

    def _on_writable(self, conn: _Connection) -> None:
        self._flush(conn)
        if not conn.out and conn.sock.fileno() in self._conns:
            self._serve(conn)  # the next pipelined request, if one is buffered

    def _flush(self, conn: _Connection) -> None:
        while conn.out:
            try:
                sent = conn.sock.sendmsg(conn.out[:16])
            except (BlockingIOError, InterruptedError):
                self._set_events(conn, selectors.EVENT_WRITE)
                return
            except OSError:
                self._close(conn)
                return
            while sent and conn.out:
                first = conn.out[0]
                if sent >= len(first):
                    sent -= len(first)
                    conn.out.pop(0)
                else:
                    conn.out[0] = first[sent:]
                    sent = 0
        if conn.close_after:
            self._close(conn)
            return
        conn.since = time.monotonic()  # the wait for the next request starts now
        self._set_events(conn, selectors.EVENT_READ)

    def _sweep(self, now: float) -> None:
        head_timeout = self.head_timeout()
        for conn in list(self._conns.values()):
            limit = WRITE_TIMEOUT if conn.out else max(head_timeout, conn.promised_wait)
            if now - conn.since > limit:
                self.timed_out += 1
                self._close(conn)


def wants_openmetrics(accept: str) -> bool:
    """Whether an Accept header asks for OpenMetrics (`application/openmetrics-text`, any version,
    not refused with q=0), as prometheus_client's own choose_encoder negotiates; else the text format."""
    for accepted in accept.split(","):
        media, *params = (part.strip() for part in accepted.split(";"))
        if media.lower() == "application/openmetrics-text":
            refused = any(p.replace(" ", "").lower() in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in params)
            if not refused:
                return True
    return False


LANDING = b"""<!doctype html><html><head><title>specwatch</title></head><body>
<h1>specwatch</h1><p>Is vLLM's speculative decoding paying for itself at the live batch size?</p>
<ul><li><a href="/metrics">/metrics</a> (Prometheus)</li><li><a href="/api/v1/status">/api/v1/status</a> (JSON)</li>
<li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li></ul></body></html>"""


def handler_for(service: PublishedView) -> Route:
    """The routes serving `service`'s published view."""

    def route(request: Request) -> Answer:
        if request.method in ("POST", "PUT", "DELETE", "PATCH"):
            return Answer(405, b"method not allowed\n", "text/plain")
        if request.method not in ("GET", "HEAD"):
            return Answer(501, b"not implemented\n", "text/plain", close=True)
        path = request.target.split("?", 1)[0]  # query strings are ignored: nothing can change what is polled
        published = service.published
        if path == "/metrics":
            if wants_openmetrics(request.header("accept")):
                return Answer(200, published.openmetrics, OPENMETRICS_CONTENT_TYPE)
            return Answer(200, published.metrics, CONTENT_TYPE)
        if path == "/api/v1/status":
            return Answer(200, published.status, "application/json")
        if path == "/healthz":
            stale = time.monotonic() - published.last_tick > 3 * service.config.poll_interval + 5
            return Answer(503 if stale else 200, b"stalled\n" if stale else b"ok\n", "text/plain")
        if path == "/readyz":
            ready = published.ready
            return Answer(200 if ready else 503, b"ready\n" if ready else published.not_ready, "text/plain")
        if path == "/":
            return Answer(200, published.page or LANDING, "text/html; charset=utf-8")
        return Answer(404, b"not found\n", "text/plain")

    return route
