"""`specwatch run`: the poll loop and the HTTP server.

The poller is the only writer: each tick it polls every target, feeds the Pipeline, evaluates,
renders /metrics once, and swaps one immutable published view. HTTP handlers only read that
view, so a scrape does no I/O towards vLLM, takes no lock, and an idle or slow client costs one
thread of its own (ThreadingHTTPServer with a connection cap and a socket timeout).

The config is reloaded in place, by the poll thread between two ticks: on SIGHUP and when the
config file changes (a Kubernetes ConfigMap update is an atomic symlink swap, so the file's
identity and content are polled; no inotify). A bad new config is refused with one log line and
the running one is kept. Only what changed is rebuilt: windows and verdicts survive a reload that
leaves targets and windows alone. In sidecar mode the process never exits on a config problem:
it serves /healthz and /metrics and reports the error until a good config arrives.

Fleet mode (`prometheus:` set): each tick is one FleetSource.poll instead of the target polls, and
/metrics and /api/v1/status serve the fleet state; everything else (server, reload, health) is the
same. A reload may switch modes: the registry serves whichever mode the running config is in.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from . import __version__, costmodel
from .collector import SpecwatchCollector
from .config import Config, ConfigError, format_duration
from .fleet import FleetEvaluator, FleetSource, FleetState, replica_name
from .fleet_metrics import FleetCollector
from .pipeline import Pipeline, RouteEvaluation, State, evaluation_record
from .scrape import ScrapeError, Scraper, redact_url, steady_clock

log = structlog.get_logger("specwatch")

MAX_CONNECTIONS = 64  # concurrent HTTP connections; more are refused, never queued behind slow ones
CLIENT_SOCKET_TIMEOUT = 5.0  # an idle client is dropped after this (connections are capped)


@dataclass(frozen=True)
class Published:
    state: State
    metrics: bytes
    status: bytes
    ready: bool
    last_tick: float  # monotonic time of the last loop tick (liveness)


def window_status(evaluation: RouteEvaluation) -> dict[str, Any]:
    """One window of one route on /api/v1/status (either mode)."""
    record = evaluation_record(evaluation)
    record.pop("route"), record.pop("window")
    record.update(
        {
            "acceptance_margin": evaluation.value("acceptance_margin"),
            "max_speculative_batch_size": evaluation.value("max_speculative_batch_size"),
            "position_acceptance_rates": evaluation.position_rates,
            "itl_per_token_mean_seconds": evaluation.stats.itl_per_token_mean_seconds,
            "recommended_config": evaluation.recommended_config,
            "candidate_verdict": getattr(evaluation.assessment, "candidate", None),
            "samples": evaluation.stats.samples,
        }
    )
    if evaluation.config_check is not None:
        record["config_check"] = evaluation.config_check.as_dict()
    if record["recommended_config"] is not None:
        record["recommended_speculative_config_flag"] = (
            "--speculative-config '" + json.dumps(record["recommended_config"], separators=(",", ":")) + "'"
        )
    return record


def status_document(state: State, config: Config) -> dict[str, Any]:
    routes = []
    for route in state.routes:
        windows = {e.stats.window: window_status(e) for e in route.evaluations}
        routes.append(
            {
                "route": route.route,
                "target": route.target,
                "model_name": route.model_name,
                "schema": route.schema,
                "method": route.method,
                "spec_present": route.spec_present,
                "configured_k": route.configured_k,
                "expects_speculation": route.expects_speculation,
                "baseline_itl_p99_seconds": route.baseline_itl_p99_seconds,
                "windows": windows,
                "grading": route.grading.as_dict() if route.grading is not None else None,
            }
        )
    targets = [
        {
            "name": t.name,
            "url": redact_url(t.url),
            "up": t.up,
            "last_success": t.last_success,
            "scrape_duration_seconds": t.scrape_duration,
            "errors": dict(t.errors),
            "counter_resets": t.resets,
            "schema": t.schema,
            "polls": t.polls,
        }
        for t in state.targets
    ]
    return {
        "version": __version__,
        "t": state.t,
        "targets": targets,
        "routes": routes,
        "windows": list(config.window_labels),
    }


def fleet_status_document(state: FleetState, config: Config) -> dict[str, Any]:
    """Fleet mode: the query source's health, one entry per replica and route (nothing from a failed
    poll or for a stale replica, as on /metrics), and the fleet rows."""
    prometheus = {
        "url": redact_url(config.prometheus.url) if config.prometheus else None,
        "up": state.up,
        "last_success": state.last_success,
        "query_duration_seconds": state.query_duration,
        "queries": state.queries,
        "queries_per_poll": state.queries_per_poll,
        "errors": dict(state.errors),
        "stale_replicas": state.stale_replicas,
    }
    routes = [
        {
            "route": r.route,
            "target": replica_name(r.replica),
            "replica": dict(r.replica),
            "model_name": r.model_name,
            "method": r.method,
            "windows": {e.stats.window: window_status(e) for e in r.evaluations},
        }
        for r in state.routes
        if state.up and not r.stale and r.evaluations
    ]
    fleet = [
        {
            "route": row.route,
            "window": row.window,
            "replicas": row.replicas,
            "verdicts": dict(row.verdicts),
            "acceptance_rate": row.acceptance_rate,
            "losing_token_share": row.losing_token_share,
            "generation_tokens": row.generation_tokens,
        }
        for row in state.fleet
    ]
    return {
        "version": __version__,
        "mode": "fleet",
        "t": state.t,
        "prometheus": prometheus,
        "routes": routes,
        "fleet": fleet,
        "windows": list(config.window_labels),
    }


def _json_safe(value: Any) -> Any:
    """JSON has no NaN or infinity: such a value is reported as null, like an absent gauge."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def alert_window_warning(config: Config) -> str | None:
    """The alert rules read one window (alerting.window); if it is not exported they never fire."""
    window = config.alerting.window
    if window in config.windows:
        return None
    label = format_duration(window)
    return (
        f"alerting.window {label} is not among windows [{', '.join(config.window_labels)}]: "
        f'the alert rules read window="{label}" and can never fire; add it to windows or set '
        "alerting.window (the chart's prometheusRule.alertWindow) to one of them"
    )


def _warn_about_alert_window(config: Config) -> None:
    if warning := alert_window_warning(config):
        log.warning("alert_window_not_in_windows", message=warning)


FileIdentity = tuple[int, int, int, int]  # (device, inode, mtime ns, size) of the resolved file


class ConfigSource:
    """The config file (or none: env and defaults only) plus the command line's overrides.

    changed() is cheap enough for every tick: one stat; the content is hashed only when the
    file's identity moved, and a change counts only when the bytes differ from the last attempt
    (a ConfigMap resync that rewrites the same content is not a reload)."""

    def __init__(self, path: str | None, load: Callable[[str | None], Config]):
        self.path = path
        self._load = load
        self._identity: FileIdentity | None = self._stat()
        self._digest: str | None = self._hash()

    def _stat(self) -> FileIdentity | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)  # follows the ..data symlink a ConfigMap volume swaps
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    def _hash(self) -> str | None:
        if self.path is None:
            return None
        try:
            with open(self.path, "rb") as handle:
                return hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            return None

    def changed(self) -> bool:
        if self.path is None:
            return False
        identity = self._stat()
        if identity == self._identity:
            return False
        self._identity = identity
        digest = self._hash()
        if digest == self._digest:
            return False
        self._digest = digest
        return True

    def load(self) -> Config:
        return self._load(self.path)


class ReloadStatus:
    """What the last config load did, exported under the names Prometheus uses for its own."""

    def __init__(self, error: str | None, now: float, previous_success: float | None = None):
        self.successful = error is None
        self.success_timestamp: float | None = previous_success if error else now
        self.error = error


class _ReloadCollector(Collector):
    def __init__(self, status: Callable[[], ReloadStatus]):
        self._status = status

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        status = self._status()
        ok = GaugeMetricFamily(
            "specwatch_config_last_reload_successful",
            "1 if the last config load (start, SIGHUP or file change) succeeded, 0 if it was refused "
            "(the previous config, or none in sidecar mode, keeps running).",
        )
        ok.add_metric([], 1.0 if status.successful else 0.0)
        yield ok
        if status.success_timestamp is not None:
            when = GaugeMetricFamily(
                "specwatch_config_last_reload_success_timestamp_seconds",
                "Unix time of the last successful config load.",
            )
            when.add_metric([], status.success_timestamp)
            yield when


def _pipeline_shape(config: Config) -> tuple[Any, ...]:
    """What the windows and verdicts are keyed on: a change here starts them afresh."""
    return (tuple((t.name, t.url) for t in config.targets), config.routes, config.windows, config.route_ttl_polls)


def _cost_inputs(config: Config) -> tuple[Any, ...]:
    return (config.hardware, config.model, config.draft, config.profile, config.profile_path, config.tensor_parallel)


def _fleet_shape(config: Config) -> tuple[Any, ...]:
    """What fleet mode's queries and verdicts are keyed on: a change here starts them afresh."""
    return (config.prometheus, config.routes, config.windows, config.route_ttl_polls)


class _ModeCollector(Collector):
    """The sidecar's families or fleet mode's (the same names): one registry serves either mode."""

    def __init__(self, sidecar: Collector, fleet: Collector, fleet_mode: Callable[[], bool]):
        self._sidecar, self._fleet, self._fleet_mode = sidecar, fleet, fleet_mode

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        return (self._fleet if self._fleet_mode() else self._sidecar).collect()


class Service:
    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] | None = None,
        source: ConfigSource | None = None,
        config_error: str | None = None,
        on_log_config: Callable[[Config], None] | None = None,
    ):
        """config_error: the config could not be loaded (sidecar mode). `config` is then only a
        fallback that gives the listen address; nothing is polled until a good config arrives."""
        self.config = config
        self.clock: Callable[[], float] = clock or steady_clock()
        self.source = source
        self._on_log_config = on_log_config
        self.active = config_error is None
        self.reload_status = ReloadStatus(config_error, time.time())
        self.pipeline = Pipeline(config)
        self.scrapers = self._scrapers_for(config)
        # Fleet mode: one FleetSource instead of the scrapers (which are then none).
        self.fleet = FleetSource(FleetEvaluator(config)) if self.active and config.prometheus else None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._reload_requested = False
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(
            _ModeCollector(
                SpecwatchCollector(lambda: self._rendering_state),
                FleetCollector(lambda: self._rendering_fleet),
                lambda: self._rendering_fleet is not None,
            )
        )
        self.registry.register(_ReloadCollector(lambda: self.reload_status))
        self._rendering_state: State = self.pipeline.state()
        self._rendering_fleet: FleetState | None = None
        self._last_logged: dict[tuple[Any, ...], Any] = {}
        self.published = self._publish(ready=False)
        self.httpd: ThreadingHTTPServer | None = None
        self._pool = ThreadPoolExecutor(max_workers=max(len(config.targets), 1), thread_name_prefix="specwatch-fetch")
        self._poll_thread: threading.Thread | None = None
        if config_error is None:
            _warn_about_alert_window(config)
        else:
            log.error(
                "config_error",
                error=config_error,
                action="serving /healthz and /metrics; nothing is "
                "polled until the config file is fixed (reloaded on change or SIGHUP)",
            )

    @staticmethod
    def _scrapers_for(config: Config) -> dict[str, Scraper]:
        return {
            t.name: Scraper(t.url, timeout=t.timeout, max_bytes=t.max_bytes, headers=t.headers) for t in config.targets
        }

    # -- reload ----------------------------------------------------------------------------------
    def request_reload(self) -> None:
        """Safe from a signal handler: the poll thread does the work before its next tick."""
        self._reload_requested = True
        self._wake.set()

    def _reload_if_due(self) -> None:
        forced, self._reload_requested = self._reload_requested, False
        file_changed = self.source is not None and self.source.changed()
        if not (forced or file_changed) or self.source is None:
            return
        try:
            new = self.source.load()
        except ConfigError as exc:
            self.reload_status = ReloadStatus(str(exc), time.time(), self.reload_status.success_timestamp)
            # One line per refused change; the config that runs is not touched.
            log.error(
                "config_reload_failed",
                error=str(exc),
                trigger="signal" if forced else "file",
                kept="previous config" if self.active else "no config (nothing polled)",
            )
            return
        self.apply(new, trigger="signal" if forced else "file")

    def apply(self, new: Config, *, trigger: str = "api") -> None:
        """Swap to a validated config, rebuilding only what it changes."""
        old = self.config
        if new.listen != old.listen and self.httpd is not None:
            log.warning("config_listen_needs_restart", running=old.listen, configured=new.listen)
            new = replace(new, listen=old.listen)
        rebuilt: list[str] = []
        if not self.active or _pipeline_shape(new) != _pipeline_shape(old):
            self.pipeline = Pipeline(new)  # new targets, routes or windows: history starts afresh
            rebuilt.append("pipeline")
            self._last_logged.clear()
        else:
            if _cost_inputs(new) != _cost_inputs(old):
                self.pipeline.cost_model = costmodel.cost_model_from_config(new)
                rebuilt.append("cost_model")
            self.pipeline.config = new  # decision thresholds etc.; windows and verdicts are kept
        if not self.active or new.targets != old.targets:
            for scraper in self.scrapers.values():
                scraper.close()
            self.scrapers = self._scrapers_for(new)
            if len(new.targets) != len(old.targets):
                self._pool.shutdown(wait=False)
                self._pool = ThreadPoolExecutor(
                    max_workers=max(len(new.targets), 1), thread_name_prefix="specwatch-fetch"
                )
            rebuilt.append("scrapers")
        rebuilt += self._apply_fleet(new, old)
        if new.log != old.log and self._on_log_config is not None:
            self._on_log_config(new)
        if not self.active or (new.windows, new.alerting) != (old.windows, old.alerting):
            _warn_about_alert_window(new)
        self.config = new
        self.active = True
        self.reload_status = ReloadStatus(None, time.time())
        log.info(
            "config_reloaded",
            trigger=trigger,
            rebuilt=rebuilt,
            windows=list(new.window_labels),
            targets=[t.name for t in new.targets],
            mode="fleet" if new.prometheus else "sidecar",
        )
        self.published = self._publish(ready=self.published.ready and "pipeline" not in rebuilt)

    def _apply_fleet(self, new: Config, old: Config) -> list[str]:
        """Fleet mode's part of a reload (entering or leaving it included); what was rebuilt."""
        if self.fleet is not None and new.prometheus is not None and _fleet_shape(new) == _fleet_shape(old):
            evaluator = self.fleet.evaluator
            evaluator.config = new  # decision thresholds etc.; verdicts are kept
            if _cost_inputs(new) != _cost_inputs(old):
                evaluator.cost_model = costmodel.cost_model_from_config(new)
                return ["cost_model"]
            return []
        if self.fleet is None and new.prometheus is None:
            return []
        if self.fleet is not None:
            self.fleet.client.close()
        self.fleet = FleetSource(FleetEvaluator(new)) if new.prometheus is not None else None
        if (old.prometheus is None) != (new.prometheus is None) and self.active:
            log.warning(
                "config_mode_switched",
                mode="fleet" if new.prometheus else "sidecar",
                note="windows and verdicts start afresh",
            )
        return ["fleet"]

    # -- polling ---------------------------------------------------------------------------------
    def _fetch(self, name: str) -> tuple[float, Any]:
        started = self.clock()
        try:
            return started, self.scrapers[name].fetch()
        except ScrapeError as exc:
            # Returned, not raised: drop the traceback and context, whose frames would keep the failed
            # body (up to max_bytes of a gzip bomb) alive until the next poll.
            exc.__context__ = None
            return started, exc.with_traceback(None)

    def poll_once(self) -> None:
        if self.fleet is not None:
            self._poll_fleet(self.fleet)
            return
        # Targets are fetched in parallel (a hung one must not delay the others past the interval),
        # then ingested in config order by this one thread, the only writer of the pipeline.
        if len(self.config.targets) > 1:
            results = list(self._pool.map(self._fetch, [t.name for t in self.config.targets]))
        else:
            results = [self._fetch(self.config.targets[0].name)]
        for target, (now, result) in zip(self.config.targets, results, strict=True):
            if isinstance(result, ScrapeError):
                exc = result
                self.pipeline.ingest_error(target.name, now, exc.reason)
                self._log_change(
                    ("target", target.name),
                    ("down", exc.reason),
                    "target_down",
                    target=target.name,
                    reason=exc.reason,
                    error=str(exc)[:200],
                )
                continue
            outcome = self.pipeline.ingest(target.name, now, result.text, result.duration)
            if not outcome.ok:
                self._log_change(
                    ("target", target.name),
                    ("down", outcome.reason),
                    "target_rejected",
                    target=target.name,
                    reason=outcome.reason,
                    error=(outcome.message or "")[:200],
                )
                continue
            self._log_change(
                ("target", target.name),
                ("up",),
                "target_up",
                target=target.name,
                duration_seconds=round(result.duration, 4),
            )
            self._log_change(
                ("schema", target.name),
                outcome.schema,
                "schema_detected",
                target=target.name,
                schema=outcome.schema,
                routes=list(outcome.routes),
            )
            if outcome.resets:
                log.info("counter_reset", target=target.name, routes=outcome.resets)
        for evaluation in self.pipeline.evaluate(self.clock()):
            stats = evaluation.stats
            self._log_change(
                ("verdict", stats.route, stats.window),
                evaluation.verdict,
                "verdict_changed",
                route=stats.route,
                window=stats.window,
                verdict=evaluation.verdict,
                acceptance_rate=evaluation.value("acceptance_rate"),
                breakeven_acceptance_rate=evaluation.value("breakeven_acceptance_rate"),
                batch_size=stats.batch_size,
                recommended_config=evaluation.recommended_config,
            )
        self.published = self._publish(ready=True)

    def _poll_fleet(self, fleet: FleetSource) -> None:
        """Fleet mode's tick: the constant query set, then every replica's evaluation. A failed query
        is counted and logged once by the evaluator; nothing is served from it."""
        for replica, evaluation in fleet.poll(self.clock()) or ():
            stats = evaluation.stats
            self._log_change(
                ("verdict", replica, stats.route, stats.window),
                evaluation.verdict,
                "verdict_changed",
                replica=replica_name(replica),
                route=stats.route,
                window=stats.window,
                verdict=evaluation.verdict,
                acceptance_rate=evaluation.value("acceptance_rate"),
                breakeven_acceptance_rate=evaluation.value("breakeven_acceptance_rate"),
                batch_size=stats.batch_size,
                recommended_config=evaluation.recommended_config,
            )
        self.published = self._publish(ready=True)

    def _log_change(self, key: tuple[Any, ...], value: Any, event: str, **fields: Any) -> None:
        """One log line per state change, not one per poll."""
        if len(self._last_logged) > 10_000:
            self._last_logged.clear()  # route churn must not grow memory; at worst a line repeats
        if self._last_logged.get(key) != value:
            self._last_logged[key] = value
            log.info(event, **fields)

    def _publish(self, *, ready: bool) -> Published:
        state = self.pipeline.state()
        self._rendering_state = state
        fleet = self._rendering_fleet = self.fleet.evaluator.state() if self.fleet is not None else None
        metrics = generate_latest(self.registry)
        document = status_document(state, self.config) if fleet is None else fleet_status_document(fleet, self.config)
        status = json.dumps(_json_safe(document), allow_nan=False, default=str).encode()
        return Published(state, metrics, status, ready, time.monotonic())

    def _poll_loop(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            try:
                self._reload_if_due()
                if self.active:
                    self.poll_once()
                else:
                    self.published = self._publish(ready=False)  # alive, waiting for a good config
            except Exception as exc:
                # A bug, not a target fault (those are handled above). Log it once per kind and do
                # not refresh the liveness tick: if it persists, /healthz fails and the pod restarts.
                if self._last_logged.get(("poll_failed",)) != repr(exc)[:200]:
                    self._last_logged[("poll_failed",)] = repr(exc)[:200]
                    log.exception("poll_failed")
            # Without a config, tick every second: the file is checked once per tick.
            interval = self.config.poll_interval if self.active else 1.0
            next_tick += interval
            now = time.monotonic()
            if next_tick < now:  # overran: skip missed ticks rather than bunch polls together
                next_tick = now + interval - ((now - next_tick) % interval)
            self._wake.wait(max(0.0, next_tick - now))
            if self._wake.is_set():
                self._wake.clear()
                next_tick = time.monotonic()  # reload (or stop) now, then poll on a fresh schedule

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        host, port = self.config.listen_address
        self.httpd = _Server((host, port), _handler_for(self))
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="specwatch-http", daemon=True
        ).start()
        self._poll_thread = threading.Thread(target=self._poll_loop, name="specwatch-poll", daemon=True)
        self._poll_thread.start()
        prometheus = self.config.prometheus
        log.info(
            "started",
            version=__version__,
            listen=f"{host}:{self.port}",
            mode="fleet" if prometheus else "sidecar",
            prometheus=redact_url(prometheus.url) if prometheus else None,
            targets=[t.name for t in self.config.targets],
            poll_interval=self.config.poll_interval,
            windows=list(self.config.window_labels),
            config=self.source.path if self.source else None,
            config_ok=self.active,
        )
        if self.pipeline.rests_on_defaults():
            info = self.pipeline.cost_model_info()
            log.warning(
                "cost_model_defaults",
                hardware=info.hardware,
                model=info.model,
                message="no hardware or model configured: verdicts rest on assumed defaults until the "
                "step-time curve is learned (set hardware/model, or a profile)",
            )

    @property
    def port(self) -> int:
        return self.httpd.server_address[1] if self.httpd else 0

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        if self._poll_thread is not None:
            self._poll_thread.join(timeout=1.5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for scraper in self.scrapers.values():
            scraper.close()
        if self.fleet is not None:
            self.fleet.client.close()

    def run_forever(self) -> int:
        stop_signal = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            stop_signal.set()
            self._stop.set()
            self._wake.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGHUP, lambda _signum, _frame: self.request_reload())
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


def _handler_for(service: Service) -> type[BaseHTTPRequestHandler]:
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
