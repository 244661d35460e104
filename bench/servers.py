"""Helper processes for the /metrics latency benchmark (run as `python -m bench.servers MODE ...`).

payloads REC PORT   a stand-in vLLM: each GET /metrics returns the next poll of a recording
peer REC PORT N     the peer exporter: prometheus_client's own `start_http_server` serving the same
                    SpecwatchCollector over the state after N polls of the recording, rendered per
                    scrape (how a prometheus_client exporter normally serves)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve_payloads(rec: str, port: int) -> None:
    lock = threading.Lock()
    fh = open(rec, encoding="utf-8")  # noqa: SIM115 - read by the handler for the server's whole life

    def next_text() -> bytes:
        with lock:
            line = fh.readline()
            if not line:
                fh.seek(0)
                line = fh.readline()
        return json.loads(line)["text"].encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            return

        def do_GET(self):
            body = next_text()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


def serve_peer(rec: str, port: int, polls: int) -> None:
    from prometheus_client import start_http_server

    from specwatch.config import load
    from specwatch.export.collector import registry_for
    from specwatch.sidecar.pipeline import Pipeline

    from .replay_proc import replay_config

    pipeline = Pipeline(load(str(replay_config())))
    with open(rec, encoding="utf-8") as fh:
        for _ in range(polls):
            entry = json.loads(fh.readline())
            pipeline.ingest("vllm", entry["t"], entry["text"])
            pipeline.evaluate(entry["t"])
    view = pipeline.view()
    start_http_server(port, addr="127.0.0.1", registry=registry_for(lambda: view))
    while True:
        time.sleep(3600)


def serve_legacy(rec: str, port: int, polls: int) -> None:
    import socket
    from typing import Any

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from specwatch.config import load
    from specwatch.export.collector import registry_for
    from specwatch.sidecar.pipeline import Pipeline

    from .replay_proc import replay_config

    pipeline = Pipeline(load(str(replay_config())))
    with open(rec, encoding="utf-8") as fh:
        for _ in range(polls):
            entry = json.loads(fh.readline())
            pipeline.ingest("vllm", entry["t"], entry["text"])
            pipeline.evaluate(entry["t"])
    view = pipeline.view()
    metrics = generate_latest(registry_for(lambda: view))

    class CappedHTTPServer(ThreadingHTTPServer):  # verbatim from http_server.py at 0bc6721
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 128

        def __init__(self, address: tuple[str, int], handler: Any) -> None:
            if ":" in address[0]:
                self.address_family = socket.AF_INET6
            self._slots = threading.BoundedSemaphore(64)
            super().__init__(address, handler)

        def process_request(self, request: Any, client_address: Any) -> None:
            if not self._slots.acquire(blocking=False):
                self.shutdown_request(request)
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

    class Handler(BaseHTTPRequestHandler):  # the old handler's transport settings and routes
        timeout = 5.0
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:
            return

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics, CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                self._send(200, b"ok\n", "text/plain")
            else:
                self._send(404, b"not found\n", "text/plain")

    CappedHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "payloads":
        serve_payloads(sys.argv[2], int(sys.argv[3]))
    elif mode == "legacy":
        serve_legacy(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "peer":
        serve_peer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode}")
