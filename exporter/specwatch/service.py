"""`specwatch run`: the poll loop and the HTTP server.

The poller is the only writer: each tick it polls every target, feeds the Pipeline, evaluates,
renders /metrics once, and swaps one immutable published view. HTTP handlers only read that
view, so a scrape does no I/O towards vLLM, takes no lock, and an idle or slow client costs one
thread of its own (ThreadingHTTPServer with a connection cap and a socket timeout).
"""

from __future__ import annotations

import json
import math
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import __version__
from .collector import registry_for
from .config import Config
from .pipeline import Pipeline, State, evaluation_record
from .scrape import Scraper, ScrapeError, redact_url, steady_clock

log = structlog.get_logger("specwatch")

MAX_CONNECTIONS = 64          # concurrent HTTP connections; more are refused, never queued behind slow ones
CLIENT_SOCKET_TIMEOUT = 5.0  # an idle client is dropped after this (connections are capped)


@dataclass(frozen=True)
class Published:
    state: State
    metrics: bytes
    status: bytes
    ready: bool
    last_tick: float  # monotonic time of the last loop tick (liveness)


def status_document(state: State, config: Config) -> dict[str, Any]:
    routes = []
    for route in state.routes:
        windows = {}
        for evaluation in route.evaluations:
            record = evaluation_record(evaluation)
            record.pop("route"), record.pop("window")
            record.update({
                "acceptance_margin": evaluation.value("acceptance_margin"),
                "max_speculative_batch_size": evaluation.value("max_speculative_batch_size"),
                "position_acceptance_rates": evaluation.value("position_rates"),
                "itl_per_token_mean_seconds": evaluation.stats.itl_per_token_mean_seconds,
                "recommended_config": evaluation.value("recommended_config"),
                "candidate_verdict": getattr(evaluation.assessment, "candidate", None),
                "samples": evaluation.stats.samples,
            })
            if record["recommended_config"] is not None:
                record["recommended_speculative_config_flag"] = (
                    "--speculative-config '" + json.dumps(record["recommended_config"], separators=(",", ":")) + "'")
            windows[evaluation.stats.window] = record
        routes.append({
            "route": route.route, "target": route.target, "model_name": route.model_name,
            "schema": route.schema, "method": route.method, "spec_present": route.spec_present,
            "configured_k": route.configured_k, "expects_speculation": route.expects_speculation,
            "baseline_itl_p99_seconds": route.baseline_itl_p99_seconds, "windows": windows,
        })
    targets = [{
        "name": t.name, "url": redact_url(t.url), "up": t.up, "last_success": t.last_success,
        "scrape_duration_seconds": t.scrape_duration, "errors": dict(t.errors), "counter_resets": t.resets,
        "schema": t.schema, "polls": t.polls,
    } for t in state.targets]
    return {"version": __version__, "t": state.t, "targets": targets, "routes": routes,
            "windows": list(config.window_labels)}


def _json_safe(value: Any) -> Any:
    """JSON has no NaN or infinity: such a value is reported as null, like an absent gauge."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


class Service:
    def __init__(self, config: Config, *, clock=None):
        self.config = config
        self.clock = clock or steady_clock()
        self.pipeline = Pipeline(config)
        self.scrapers = {t.name: Scraper(t.url, timeout=t.timeout, max_bytes=t.max_bytes, headers=t.headers)
                         for t in config.targets}
        self._stop = threading.Event()
        self._registry = registry_for(lambda: self._rendering_state)
        self._rendering_state: State = self.pipeline.state()
        self._last_logged: dict[tuple, Any] = {}
        self.published = self._publish(ready=False)
        self.httpd: ThreadingHTTPServer | None = None
        self._pool = ThreadPoolExecutor(max_workers=len(config.targets), thread_name_prefix="specwatch-fetch")
        self._poll_thread: threading.Thread | None = None

    # -- polling ---------------------------------------------------------------------------------
    def _fetch(self, name: str):
        started = self.clock()
        try:
            return started, self.scrapers[name].fetch()
        except ScrapeError as exc:
            # Returned, not raised: drop the traceback and context, whose frames would keep the failed
            # body (up to max_bytes of a gzip bomb) alive until the next poll.
            exc.__context__ = None
            return started, exc.with_traceback(None)

    def poll_once(self) -> None:
        # Targets are fetched in parallel (a hung one must not delay the others past the interval),
        # then ingested in config order by this one thread, the only writer of the pipeline.
        if len(self.config.targets) > 1:
            results = list(self._pool.map(self._fetch, [t.name for t in self.config.targets]))
        else:
            results = [self._fetch(self.config.targets[0].name)]
        for target, (now, result) in zip(self.config.targets, results):
            if isinstance(result, ScrapeError):
                exc = result
                self.pipeline.ingest_error(target.name, now, exc.reason)
                self._log_change(("target", target.name), ("down", exc.reason), "target_down",
                                 target=target.name, reason=exc.reason, error=str(exc)[:200])
                continue
            outcome = self.pipeline.ingest(target.name, now, result.text, result.duration)
            if not outcome.ok:
                self._log_change(("target", target.name), ("down", outcome.reason), "target_rejected",
                                 target=target.name, reason=outcome.reason, error=(outcome.message or "")[:200])
                continue
            self._log_change(("target", target.name), ("up",), "target_up", target=target.name,
                             duration_seconds=round(result.duration, 4))
            self._log_change(("schema", target.name), outcome.schema, "schema_detected", target=target.name,
                             schema=outcome.schema, routes=list(outcome.routes))
            if outcome.resets:
                log.info("counter_reset", target=target.name, routes=outcome.resets)
        for evaluation in self.pipeline.evaluate(self.clock()):
            stats = evaluation.stats
            self._log_change(("verdict", stats.route, stats.window), evaluation.verdict, "verdict_changed",
                             route=stats.route, window=stats.window, verdict=evaluation.verdict,
                             acceptance_rate=evaluation.value("acceptance_rate"),
                             breakeven_acceptance_rate=evaluation.value("breakeven_acceptance_rate"),
                             batch_size=stats.batch_size,
                             recommended_config=evaluation.value("recommended_config"))
        self.published = self._publish(ready=True)

    def _log_change(self, key: tuple, value: Any, event: str, **fields: Any) -> None:
        """One log line per state change, not one per poll."""
        if len(self._last_logged) > 10_000:
            self._last_logged.clear()  # route churn must not grow memory; at worst a line repeats
        if self._last_logged.get(key) != value:
            self._last_logged[key] = value
            log.info(event, **fields)

    def _publish(self, *, ready: bool) -> Published:
        state = self.pipeline.state()
        self._rendering_state = state
        metrics = generate_latest(self._registry)
        status = json.dumps(_json_safe(status_document(state, self.config)), allow_nan=False, default=str).encode()
        return Published(state, metrics, status, ready, time.monotonic())

    def _poll_loop(self) -> None:
        interval = self.config.poll_interval
        next_tick = time.monotonic()
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # noqa: BLE001 - the loop must survive anything a target sends
                # A bug, not a target fault (those are handled above). Log it once per kind and do
                # not refresh the liveness tick: if it persists, /healthz fails and the pod restarts.
                if self._last_logged.get(("poll_failed",)) != repr(exc)[:200]:
                    self._last_logged[("poll_failed",)] = repr(exc)[:200]
                    log.exception("poll_failed")
            next_tick += interval
            now = time.monotonic()
            if next_tick < now:  # overran: skip missed ticks rather than bunch polls together
                next_tick = now + interval - ((now - next_tick) % interval)
            self._stop.wait(max(0.0, next_tick - now))

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        host, port = self.config.listen_address
        self.httpd = _Server((host, port), _handler_for(self))
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                         name="specwatch-http", daemon=True).start()
        self._poll_thread = threading.Thread(target=self._poll_loop, name="specwatch-poll", daemon=True)
        self._poll_thread.start()
        log.info("started", version=__version__, listen=f"{host}:{self.port}",
                 targets=[t.name for t in self.config.targets], poll_interval=self.config.poll_interval,
                 windows=list(self.config.window_labels))
        if self.pipeline.rests_on_defaults():
            info = self.pipeline.cost_model_info()
            log.warning("cost_model_defaults", hardware=info.hardware, model=info.model,
                        message="no hardware or model configured: verdicts rest on assumed defaults until the "
                                "step-time curve is learned (set hardware/model, or a profile)")

    @property
    def port(self) -> int:
        return self.httpd.server_address[1] if self.httpd else 0

    def stop(self) -> None:
        self._stop.set()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        if self._poll_thread is not None:
            self._poll_thread.join(timeout=1.5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for scraper in self.scrapers.values():
            scraper.close()

    def run_forever(self) -> int:
        stop_signal = threading.Event()

        def on_signal(signum, _frame):
            stop_signal.set()
            self._stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        while not stop_signal.wait(0.2):
            pass
        self.stop()
        log.info("stopped", reason="signal")
        return 0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, handler):
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the cap: refuse instead of queueing behind slow clients
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


LANDING = b"""<!doctype html><html><head><title>specwatch</title></head><body>
<h1>specwatch</h1><p>Is vLLM's speculative decoding paying for itself at the live batch size?</p>
<ul><li><a href="/metrics">/metrics</a> (Prometheus)</li><li><a href="/api/v1/status">/api/v1/status</a> (JSON)</li>
<li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li></ul></body></html>"""


def _handler_for(service: Service):
    class Handler(BaseHTTPRequestHandler):
        server_version = f"specwatch/{__version__}"
        timeout = CLIENT_SOCKET_TIMEOUT
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # keep-alive: headers and body are two writes; Nagle + delayed ACK = +40 ms

        def log_message(self, *args):  # access logs would be one line per scrape
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
            if self.headers.get("Content-Length", "0").strip() not in ("", "0") or self.headers.get("Transfer-Encoding"):
                self.close_connection = True

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
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
                self._send(200 if published.ready else 503, b"ready\n" if published.ready else b"starting\n", "text/plain")
            elif path == "/":
                self._send(200, LANDING, "text/html; charset=utf-8")
            else:
                self._send(404, b"not found\n", "text/plain")

        def do_POST(self):
            self._unread_body()
            self._send(405, b"method not allowed\n", "text/plain")

        do_PUT = do_DELETE = do_PATCH = do_POST

    return Handler
