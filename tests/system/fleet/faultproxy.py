"""A query-API proxy in front of a real Prometheus that can answer like a failing one.

Modes: ok (forward), http_500, http_400, too_many_samples (422 with Prometheus's wording),
warnings (a real answer with a `warnings` list, as Thanos sends for a partial response),
huge (a valid JSON answer padded past any sane cap), slow (answers after `delay` seconds),
drip (headers, then a byte every 0.3 s), not_json, hang_up (closes without a status line).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time
from typing import Any

import requests


class FaultProxy:
    def __init__(self, upstream: str):
        self.upstream = upstream
        self.mode = "ok"
        self.only: str | None = None  # a path prefix: the mode applies to those requests alone
        self.delay = 5.0
        self.requests = 0
        self._stop = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def forward(self, path: str, body: bytes, content_type: str) -> tuple[int, bytes]:
        answer = requests.post(self.upstream + path, data=body, headers={"Content-Type": content_type}, timeout=30)
        return answer.status_code, answer.content


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: FaultProxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hang up on purpose here


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        proxy = self.server.owner  # type: ignore[attr-defined]
        proxy.requests += 1
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode = proxy.mode if proxy.only is None or self.path.startswith(proxy.only) else "ok"
        if mode == "http_500":
            return self._send(500, b"upstream connect error")
        if mode == "http_400":
            return self._send(
                400,
                json.dumps({"status": "error", "errorType": "bad_data", "error": 'invalid parameter "query"'}).encode(),
            )
        if mode == "too_many_samples":
            return self._send(
                422,
                json.dumps(
                    {
                        "status": "error",
                        "errorType": "execution",
                        "error": "query processing would load too many samples into memory in query execution",
                    }
                ).encode(),
            )
        if mode == "not_json":
            return self._send(200, b"<html>502 Bad Gateway</html>")
        if mode == "hang_up":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if mode == "slow" and proxy._stop.wait(proxy.delay):
            return None
        if mode == "drip":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(1000):
                    if proxy._stop.wait(0.3):
                        break
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True
            return None
        status, answer = proxy.forward(self.path, body, self.headers.get("Content-Type", ""))
        if mode == "warnings":
            payload = json.loads(answer)
            payload["warnings"] = ["store 10.0.0.7:10901 unreachable: partial response"]
            answer = json.dumps(payload).encode()
        if mode in ("bad_value", "bad_labels"):  # valid JSON, one series not the query API's
            payload = json.loads(answer)
            result = payload["data"]["result"]
            if result and mode == "bad_value":
                result[-1]["value"][1] = "not a number"
            elif result:
                result[-1]["metric"] = ["not", "an", "object"]
            answer = json.dumps(payload).encode()
        if mode == "huge":
            payload = json.loads(answer)
            payload["data"]["padding"] = "x" * (8 * 2**20)
            answer = json.dumps(payload).encode()
        return self._send(status, answer)

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)


def wait_until(condition: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False
