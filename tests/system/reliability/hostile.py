"""A small hostile HTTP server on loopback, for faults the simulator cannot express exactly.

Raw sockets, not http.server: a hostile peer must be able to hang after the request, drip one
byte at a time, lie in Content-Length, cut a chunked body without its terminator, or send a
gzip bomb. Every connection is served by one behaviour, a callable `(conn, request, server)`,
that the test can swap at any time with `server.set(...)`. Each connection is closed after one
response, so every poll of the sidecar is a fresh request the behaviour sees.

Every loop here is bounded in time (`MAX_HOLD_SECONDS`) and stops when the server stops.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from support.loopback import free_port

MAX_HOLD_SECONDS = 30.0  # no behaviour holds a connection longer than this
MAX_REQUEST_HEAD = 64 * 1024


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes


Behaviour = Callable[[socket.socket, Request, "HostileServer"], None]


@dataclass
class HostileServer:
    behaviour: Behaviour | None = None
    requests: list[Request] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 0

    def __post_init__(self):
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((self.host, self.port))
        self._sock.listen(128)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://{self.host}:{self.port}/metrics"
        self._lock = threading.Lock()
        if self.behaviour is None:
            self.behaviour = respond(200, b"")
        self._thread = threading.Thread(target=self._accept_loop, name="hostile-accept", daemon=True)
        self._thread.start()

    # -- control --------------------------------------------------------------------------
    def set(self, behaviour: Behaviour) -> None:
        with self._lock:
            self.behaviour = behaviour

    @property
    def count(self) -> int:
        return len(self.requests)

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, returning True early when the server is stopping."""
        return self._stop.wait(seconds)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- serving --------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), name="hostile-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5.0)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < MAX_REQUEST_HEAD:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            request = _parse_request(head)
            if len(self.requests) < 10_000:
                self.requests.append(request)
            with self._lock:
                behaviour = self.behaviour
            behaviour(conn, request, self)
        except OSError:
            pass  # the client gave up: that is what most faults are for
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def _parse_request(head: bytes) -> Request:
    text = head.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Request(parts[0] if parts else "", parts[1] if len(parts) > 1 else "", headers, head)


def _head(status: int, headers: dict[str, str]) -> bytes:
    reason = {
        200: "OK",
        301: "Moved Permanently",
        302: "Found",
        307: "Temporary Redirect",
        308: "Permanent Redirect",
        401: "Unauthorized",
        500: "Internal Server Error",
        502: "Bad Gateway",
        503: "Service Unavailable",
    }.get(status, "Whatever")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()] + ["Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


Body = "bytes | Callable[[], bytes]"


def _body(body) -> bytes:
    return body() if callable(body) else body


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# -- behaviours -------------------------------------------------------------------------------
def respond(status: int = 200, body=b"", headers: dict[str, str] | None = None) -> Behaviour:
    """A complete, honest response (the body may be a callable, evaluated per request)."""

    def behave(conn, _request, _server):
        data = _body(body)
        conn.sendall(
            _head(status, {"Content-Type": CONTENT_TYPE, "Content-Length": str(len(data)), **(headers or {})}) + data
        )

    return behave


def chunked(body, *, chunk: int = 64 * 1024, terminate: bool = True, fraction: float = 1.0) -> Behaviour:
    """Transfer-Encoding: chunked, no Content-Length; optionally cut without the final 0-chunk."""

    def behave(conn, _request, _server):
        data = _body(body)
        data = data[: int(len(data) * fraction)]
        conn.sendall(_head(200, {"Content-Type": CONTENT_TYPE, "Transfer-Encoding": "chunked"}))
        for i in range(0, len(data), chunk):
            piece = data[i : i + chunk]
            conn.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        if terminate:
            conn.sendall(b"0\r\n\r\n")

    return behave


def hang() -> Behaviour:
    """Accept, read the request, never answer (until the server stops or MAX_HOLD_SECONDS)."""

    def behave(conn, _request, server):
        server.wait(MAX_HOLD_SECONDS)

    return behave


def close_without_answer() -> Behaviour:
    """Read the request, then hang up without a status line."""

    def behave(conn, _request, _server):
        return None

    return behave


def drip(body, *, interval: float = 0.1) -> Behaviour:
    """Honest headers, then the body one byte per `interval` (each read succeeds: slowloris server)."""

    def behave(conn, _request, server):
        data = _body(body)
        conn.sendall(_head(200, {"Content-Type": CONTENT_TYPE, "Content-Length": str(len(data))}))
        start = time.monotonic()
        for i in range(len(data)):
            if server.wait(interval) or time.monotonic() - start > MAX_HOLD_SECONDS:
                return
            conn.sendall(data[i : i + 1])

    return behave


def drop_mid_body(body, *, fraction: float = 0.5) -> Behaviour:
    """Content-Length promises the whole body; the connection closes after `fraction` of it."""

    def behave(conn, _request, _server):
        data = _body(body)
        conn.sendall(
            _head(200, {"Content-Type": CONTENT_TYPE, "Content-Length": str(len(data))})
            + data[: int(len(data) * fraction)]
        )

    return behave


def redirect(location: str, status: int = 302) -> Behaviour:
    def behave(conn, _request, _server):
        conn.sendall(_head(status, {"Location": location, "Content-Length": "0"}))

    return behave


@functools.lru_cache(maxsize=4)
def gzip_bomb_bytes(decoded_size: int) -> bytes:
    """`decoded_size` zero bytes, gzip-compressed (200 MiB -> about 200 KiB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    parts = []
    left = decoded_size
    while left > 0:
        n = min(left, len(block))
        parts.append(compressor.compress(block[:n]))
        left -= n
    parts.append(compressor.flush())
    return b"".join(parts)


def gzip_bomb(decoded_size: int = 200 * 2**20) -> Behaviour:
    data = gzip_bomb_bytes(decoded_size)
    return respond(200, data, {"Content-Encoding": "gzip"})


def gzip_body(body) -> Behaviour:
    """An honest gzip-encoded response, as prometheus_client sends when asked."""
    import gzip

    def behave(conn, request, server):
        respond(200, gzip.compress(_body(body), 6), {"Content-Encoding": "gzip"})(conn, request, server)

    return behave


def refused_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    return f"http://127.0.0.1:{free_port()}/metrics"
