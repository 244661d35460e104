"""A fake Prometheus query API on loopback for the read-back and history bounds: range answers of
the size and shape an attacker (or a large fleet) would give, built per request. Bounded: each
answer is built from the request's own range; the server stops with the test."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

Answer = Callable[[dict[str, str]], bytes]


class FakePrometheus:
    """POST /api/v1/query_range and /api/v1/query answered by ``answer(form)``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                form["path"] = self.path
                fake.requests.append(form)
                body = fake.answer(form)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakePrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def matrix(series: list[tuple[dict[str, str], list[tuple[float, str]]]]) -> bytes:
    """Prometheus's own writing of a matrix answer."""
    result = [{"metric": labels, "values": [[t, v] for t, v in points]} for labels, points in series]
    return json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}}, separators=(",", ":")
    ).encode()


def grid(form: dict[str, str]) -> list[float]:
    start, end, step = float(form["start"]), float(form["end"]), float(form["step"])
    n = int((end - start) / step + 1e-9)
    return [start + i * step for i in range(n + 1)]
