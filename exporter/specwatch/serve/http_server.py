"""The hardened HTTP side of `specwatch run`: a capped threading server and the read-only handler.

Handlers only read the immutable view the poller published last (Published), so a scrape does no
I/O towards vLLM and takes no lock. An idle or slow client costs one thread of its own: connections
are capped (more are refused, never queued behind slow ones) and idle sockets time out. Request
bodies are never read, and a request carrying one closes its keep-alive connection.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST

from specwatch import __version__
from specwatch.config import Config
from specwatch.sidecar.state import State

MAX_CONNECTIONS = 64  # concurrent HTTP connections; more are refused, never queued behind slow ones
CLIENT_SOCKET_TIMEOUT = 5.0  # an idle client is dropped after this (connections are capped)


@dataclass(frozen=True)
class Published:
    """One poll's result as served: swapped whole by the poller, only read by the handlers."""

    state: State
    metrics: bytes
    status: bytes
    ready: bool
    last_tick: float  # monotonic time of the last loop tick (liveness)


class PublishedView(Protocol):
    """What the handler reads from the service: the last published view and the running config."""

    @property
    def published(self) -> Published: ...

    @property
    def config(self) -> Config: ...


class CappedHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that refuses connections beyond MAX_CONNECTIONS; IPv6 when the host is."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the cap: refuse instead of queueing behind slow clients
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


LANDING = b"""<!doctype html><html><head><title>specwatch</title></head><body>
<h1>specwatch</h1><p>Is vLLM's speculative decoding paying for itself at the live batch size?</p>
<ul><li><a href="/metrics">/metrics</a> (Prometheus)</li><li><a href="/api/v1/status">/api/v1/status</a> (JSON)</li>
<li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li></ul></body></html>"""


def handler_for(service: PublishedView) -> type[BaseHTTPRequestHandler]:
    """The request handler class serving `service`'s published view."""

    class Handler(BaseHTTPRequestHandler):
        server_version = f"specwatch/{__version__}"
        timeout = CLIENT_SOCKET_TIMEOUT
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # keep-alive: headers and body are two writes; Nagle + delayed ACK = +40 ms

        def log_message(self, *args: Any) -> None:  # access logs would be one line per scrape
            return

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _unread_body(self) -> None:
            # Request bodies are never read. One left on a keep-alive connection would be parsed as
            # the next request line (request desync), so a request carrying one closes the connection.
            if self.headers.get("Content-Length", "0").strip() not in ("", "0") or self.headers.get(
                "Transfer-Encoding"
            ):
                self.close_connection = True

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            self._unread_body()
            path = self.path.split("?", 1)[0]  # query strings are ignored: nothing can change what is polled
            published = service.published
            if path == "/metrics":
                self._send(200, published.metrics, CONTENT_TYPE_LATEST)
            elif path == "/api/v1/status":
                self._send(200, published.status, "application/json")
            elif path == "/healthz":
                stale = time.monotonic() - published.last_tick > 3 * service.config.poll_interval + 5
                self._send(503 if stale else 200, b"stalled\n" if stale else b"ok\n", "text/plain")
            elif path == "/readyz":
                self._send(
                    200 if published.ready else 503, b"ready\n" if published.ready else b"starting\n", "text/plain"
                )
            elif path == "/":
                self._send(200, LANDING, "text/html; charset=utf-8")
            else:
                self._send(404, b"not found\n", "text/plain")

        def do_POST(self) -> None:
            self._unread_body()
            self._send(405, b"method not allowed\n", "text/plain")

        do_PUT = do_DELETE = do_PATCH = do_POST

    return Handler
