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
    state = pipeline.state()
    start_http_server(port, addr="127.0.0.1", registry=registry_for(lambda: state))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "payloads":
        serve_payloads(sys.argv[2], int(sys.argv[3]))
    elif mode == "peer":
        serve_peer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode}")
