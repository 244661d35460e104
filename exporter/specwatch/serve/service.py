"""`specwatch run`: the Service that owns the poll loop, the config it runs, and the HTTP server.

The poller is the only writer: each tick it polls every target, feeds the Pipeline, evaluates,
collects the /metrics families, records the page's history point, and swaps one immutable published
View (specwatch.view) in http_server.Published. Its page, status JSON (status.py) and /metrics bytes
are rendered on their first read and kept until the next poll: nothing is drawn for a view nobody
reads. HTTP handlers (http_server.py) only read it, so a scrape does no I/O towards vLLM and takes
no lock. Target, schema and verdict changes are logged once each
(change_log.py), not once per poll.

The config is reloaded in place, by the poll thread between two ticks, on SIGHUP and when the
config file changes (reload.py: how a change is noticed and what it invalidates). A bad new config
is refused with one log line and the running one is kept. Only what changed is rebuilt: windows and
verdicts survive a reload that leaves targets and windows alone. In sidecar mode the process never
exits on a config problem: it serves /healthz and /metrics and reports the error until a good
config arrives.

Fleet mode (`prometheus:` set): each tick is one FleetSource.poll instead of the target polls, and
the published View is the evaluator's (with a fleet section); everything else (server, reload,
health, the renderers) is the same. A reload may switch modes: the View says which.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import structlog
from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from specwatch import __version__
from specwatch.base.urls import redact_url
from specwatch.config import Config, ConfigError
from specwatch.export import contract, metrics_text
from specwatch.export.collector import SpecwatchCollector
from specwatch.export.page import render_page
from specwatch.export.page_history import PageHistory
from specwatch.export.status import encode_status
from specwatch.fleet.evaluator import FleetEvaluator, FleetSource
from specwatch.fleet.history import DEADLINE, HISTORY_ERROR_REASONS, read_history
from specwatch.serve.change_log import ChangeLog
from specwatch.serve.drain import Drain
from specwatch.serve.http_server import CappedHTTPServer, Published, Rendered, handler_for
from specwatch.serve.readback import Readback, readback_collector
from specwatch.serve.reload import ConfigSource, ReloadCollector, ReloadStatus, warn_about_alert_window
from specwatch.serve.start_read import StartRead, StartReadCollector
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.scrape import ScrapeError, Scraper, ScrapeResult, steady_clock
from specwatch.view import View
from specwatch.view.fleet import HistoryRead, replica_name

__all__ = ["Service"]


#: After a poll-loop bug the fleet evaluator starts afresh; it reads the history again only when the
#: last read is at least this old, so a fault that recurs poll after poll costs one read an hour.
HISTORY_REREAD_SECONDS = 3600.0
log = structlog.get_logger("specwatch")


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
        # Fleet mode: the history before the first poll, replayed once per new evaluator (fleet/history.py).
        self._history_pending = self.fleet is not None
        self.history: HistoryRead | None = None
        self.history_errors = dict.fromkeys(HISTORY_ERROR_REASONS, 0)
        self._history_crashed = False  # the last poll-loop bug came from the history read
        self._history_read_at: float | None = None  # monotonic start of the last history read
        # Sidecar mode with `readback:`: what the previous pod exported, read once after start.
        self.readback = Readback(config.readback) if self.active and config.readback and not self.fleet else None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._reload_requested = False
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SpecwatchCollector(lambda: self._rendering_view))
        self.registry.register(ReloadCollector(lambda: self.reload_status))
        self.registry.register(readback_collector(lambda: self.readback, lambda: self.pipeline.restore_disagreed))
        self.poll_errors = 0  # poll-loop bugs recovered in process (_recover)
        self.drain = Drain()  # sidecar mode after SIGTERM: what each target answered since (drain.py)
        self.registry.register(PollErrorsCollector(lambda: self.poll_errors))
        self.registry.register(
            StartReadCollector("specwatch_history_errors", "specwatch_history_steps", self._history_read)
        )
        self._rendering_view: View = self.pipeline.view()
        self._changes = ChangeLog()
        # The page's history is written by the poll thread and read by a page render (the HTTP
        # thread) under this lock; the generation says whether a render's view is still the newest.
        self._page_lock = threading.Lock()
        self._page_generation = 0
        # prometheus_client's process_* and python_info, rendered after the sidecar's families.
        self.self_registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.self_registry)
        PlatformCollector(registry=self.self_registry)
        self.page_history = PageHistory()  # the page's last hour per route-window (bounded)
        self.published = self._publish(ready=False)
        self.httpd: CappedHTTPServer | None = None
        self._pool = ThreadPoolExecutor(max_workers=max(len(config.targets), 1), thread_name_prefix="specwatch-fetch")
        self._poll_thread: threading.Thread | None = None
        if config_error is None:
            warn_about_alert_window(config)
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
        if not self.active or new.pipeline_shape() != old.pipeline_shape():
            self.pipeline = Pipeline(new).adopt_counters(self.pipeline)  # windows start afresh, counters continue
            rebuilt.append("pipeline")
            self._changes.clear()
        else:
            rebuilt += self.pipeline.reconfigure(new)  # windows and verdicts are kept
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
        if not self.active and self.readback is None and new.readback is not None and new.prometheus is None:
            # Started on a bad config: the first good one still reads the previous pod back.
            self.readback = Readback(new.readback)
            self.readback.start()
        if new.log != old.log and self._on_log_config is not None:
            self._on_log_config(new)
        if not self.active or (new.windows, new.alerting) != (old.windows, old.alerting):
            warn_about_alert_window(new)
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
        if self.fleet is not None and new.prometheus is not None and new.fleet_shape() == old.fleet_shape():
            return self.fleet.evaluator.reconfigure(new)  # verdicts are kept
        if self.fleet is None and new.prometheus is None:
            return []
        if self.fleet is not None:
            self.fleet.client.close()
        self.fleet = FleetSource(FleetEvaluator(new)) if new.prometheus is not None else None
        self._history_pending, self.history = self.fleet is not None, None
        if (old.prometheus is None) != (new.prometheus is None) and self.active:
            log.warning(
                "config_mode_switched",
                mode="fleet" if new.prometheus else "sidecar",
                note="windows and verdicts start afresh",
            )
        return ["fleet"]

    # -- polling ---------------------------------------------------------------------------------
    def _fetch(self, name: str) -> tuple[float, ScrapeResult | ScrapeError]:
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
        if self.readback is not None and (restored := self.readback.take()) is not None:
            # Here: the poll thread is the pipeline's only writer.
            self.pipeline.restore(restored.before_windows, restored.curves)
        # Targets are fetched in parallel (a hung one must not delay the others past the interval),
        # then ingested in config order by this one thread, the only writer of the pipeline.
        if len(self.config.targets) > 1:
            results = list(self._pool.map(self._fetch, [t.name for t in self.config.targets]))
        else:
            results = [self._fetch(self.config.targets[0].name)]
        for target, (now, result) in zip(self.config.targets, results, strict=True):
            if isinstance(result, ScrapeError):
                exc = result
                self.drain.note(target.name, exc.reason)
                self.pipeline.ingest_error(target.name, now, exc.reason)
                self.page_history.note_error(target.name, now, exc.reason, str(exc))
                self._changes.target_down(target.name, "target_down", exc.reason, str(exc))
                continue
            outcome = self.pipeline.ingest(target.name, now, result.text, result.duration)
            self.drain.note(target.name, None if outcome.ok else outcome.reason)  # not metrics: gone
            if not outcome.ok:
                self.page_history.note_error(target.name, now, outcome.reason, outcome.message or "")
                self._changes.target_down(target.name, "target_rejected", outcome.reason, outcome.message or "")
                continue
            over = tuple(sorted((k, n) for k, n in outcome.dropped.items() if n)) or None
            if self._changes.changed(("dropped", target.name), over) and over:
                # Once per change: routes or engines past specwatch's bounds (docs/architecture.md §2).
                log.warning("payload_over_bounds", target=target.name, dropped=dict(over))
            self._changes.info(
                ("target", target.name),
                ("up",),
                "target_up",
                target=target.name,
                duration_seconds=round(result.duration, 4),
            )
            self._changes.info(
                ("schema", target.name),
                (outcome.engine, outcome.schema),
                "schema_detected",
                target=target.name,
                engine=outcome.engine,
                schema=outcome.schema,
                routes=list(outcome.routes),
            )
            if outcome.resets:
                log.info("counter_reset", target=target.name, routes=outcome.resets)
        for evaluation in self.pipeline.evaluate(self.clock()):
            self._changes.verdict(("verdict", evaluation.stats.route, evaluation.stats.window), evaluation)
        self.published = self._publish(ready=True)

    def _poll_fleet(self, fleet: FleetSource) -> None:
        """Fleet mode's tick: the constant query set, then every replica's evaluation. A failed query
        is counted and logged once by the evaluator; nothing is served from it. The first tick of a
        new evaluator replays the history before it first; its first poll is then at the time the read
        went up to, so the read's steps and that poll are backtest's grid."""
        now = self.clock()
        if self._history_pending:
            self._history_pending = False
            self._read_history(fleet, now)
            if self._stop.is_set():
                return
        for replica, evaluation in fleet.poll(now) or ():
            key = ("verdict", replica, evaluation.stats.route, evaluation.stats.window)
            self._changes.verdict(key, evaluation, replica=replica_name(replica))
        self.published = self._publish(ready=True)

    def _read_history(self, fleet: FleetSource, now: float) -> None:
        """The history read (fleet/history.py) on its own thread while this one, the evaluator's only
        other writer, waits for it and keeps /healthz ticking (a slow Prometheus must not look like a
        hung poll loop). A failed or cut-short read is counted and logged once; polling goes on. A bug
        in the read is raised here, in the poll thread, for _recover (which then does not retry it)."""
        prometheus = fleet.evaluator.config.prometheus
        if prometheus is None or prometheus.history_lookback <= 0:
            self.history = HistoryRead(0.0, None, None, 0, 0, 0.0)
            return
        result: list[HistoryRead] = []
        failure: list[Exception] = []
        self._history_read_at = time.monotonic()

        def reading() -> None:
            try:
                result.append(read_history(fleet.evaluator, now))
            except Exception as exc:  # noqa: BLE001 - raised again in the poll thread below
                failure.append(exc)

        reader = threading.Thread(target=reading, name="specwatch-history", daemon=True)
        reader.start()
        deadline = time.monotonic() + DEADLINE + 10.0  # the read keeps to DEADLINE; this only guards it
        while reader.is_alive() and not self._stop.is_set() and time.monotonic() < deadline:
            reader.join(timeout=0.5)
            self.published = replace(self.published, last_tick=time.monotonic())
        if self._stop.is_set():
            return  # stopping: the reader is a daemon thread, its result is not needed
        if failure or reader.is_alive() or not result:
            self._history_crashed = True  # a bug: _recover starts afresh, without this read
            if failure:
                raise failure[0]
            raise RuntimeError("the history read did not finish")
        read = self.history = result[0]
        if read.error is not None:
            self.history_errors[read.error] += 1
            log.warning(
                "fleet_history_failed",
                reason=read.error,
                steps=read.steps,
                action="polling live; the learners keep what was read",
            )
        else:
            log.info("fleet_history_read", steps=read.steps, queries=read.queries, seconds=round(read.seconds, 3))

    def _history_read(self) -> StartRead | None:
        """specwatch_history_errors_total{reason} and specwatch_history_steps (fleet mode only)."""
        if self.fleet is None:
            return None
        return self.history_errors, self.history.steps if self.history is not None else None

    def _publish(self, *, ready: bool) -> Published:
        """Swap in (and return) this poll's view. The page's history is recorded here (one point per
        route-window, cheap); the /metrics families are collected here, so they hold this poll's
        values; their bytes, the status document and the page are rendered on their first read
        (Rendered), at most once per view, and not at all for a view nobody reads."""
        view = self.fleet.evaluator.view(self.history) if self.fleet is not None else self.pipeline.view()
        self._rendering_view = view
        families = metrics_text.collect(self.registry)
        error = self.reload_status.error if not self.active else None
        not_ready = f"config error: {error}\n".encode() if error else b"starting\n"
        with self._page_lock:
            recorded = self._record_page(view)
            self._page_generation += 1
            page = self._page_renderer(view, self.reload_status.error, self.active, time.time(), self._page_generation)
            published = Published(
                view,
                Rendered(lambda: metrics_text.render_text(families, self._self_families())),
                Rendered(lambda: encode_status(view)),
                ready,
                time.monotonic(),
                Rendered(page) if recorded else Rendered(b""),
                not_ready,
                Rendered(lambda: metrics_text.render_openmetrics(families, self._self_families())),
            )
            self.published = published
        return published

    def _self_families(self) -> list[Metric]:
        """process_* and python_info (prometheus_client's own collectors), read when /metrics is
        rendered: the process's memory and CPU against its limits (issue #37)."""
        return metrics_text.collect(self.self_registry)

    def _record_page(self, view: View) -> bool:
        """The page's history point for this view. A bug in it must not cost the poll its windows
        (_recover): it is logged once and `/` falls back to the static landing page."""
        try:
            self.page_history.record(view)
        except Exception as exc:  # logged below: the page is an extra, /metrics and the verdicts go on
            if self._changes.changed(("page_failed",), repr(exc)[:200]):
                log.exception("page_render_failed")
            return False
        return True

    def _page_renderer(
        self, view: View, error: str | None, polling: bool, wall: float, generation: int
    ) -> Callable[[], bytes]:
        """`/` for one view, rendered on its first request (in the HTTP thread) under the page lock,
        against the history as it was when the view was published. A request that reaches a view
        after the poller has published a newer one (the history has moved on) gets the newer page. A
        bug in the page is logged once and `/` falls back to the static landing page."""

        def render() -> bytes:
            with self._page_lock:
                if generation == self._page_generation:
                    try:
                        return render_page(view, self.page_history, now=wall, config_error=error, polling=polling)
                    except Exception as exc:  # logged below: the page is an extra, /metrics and the verdicts go on
                        if self._changes.changed(("page_failed",), repr(exc)[:200]):
                            log.exception("page_render_failed")
                        return b""
            return self.published.page  # outside the lock: it may render the newer page

        return render

    def _poll_loop(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            try:
                self._reload_if_due()
                if self.active:
                    self.poll_once()
                else:
                    self.published = self._publish(ready=False)  # alive, waiting for a good config
            except Exception as exc:  # noqa: BLE001 - a bug, not a target fault: recovered here
                self._recover(exc)
            if self.drain.check(t.name for t in self.config.targets):
                return  # every target has gone since SIGTERM: run_forever stops the rest
            # Without a config, tick every second: the file is checked once per tick. Draining: poll
            # faster, so the exit follows vLLM's within a fraction of a second.
            interval = self.config.poll_interval if self.active else 1.0
            if self.drain.active:
                interval = self.drain.interval(interval)
            next_tick += interval
            now = time.monotonic()
            if next_tick < now:  # overran: skip missed ticks rather than bunch polls together
                next_tick = now + interval - ((now - next_tick) % interval)
            self._wake.wait(max(0.0, next_tick - now))
            if self._wake.is_set():
                self._wake.clear()
                next_tick = time.monotonic()  # reload (or stop) now, then poll on a fresh schedule

    def _recover(self, exc: Exception) -> None:
        """A poll-loop bug (target faults never get here): count it, log it once per kind, and start
        the windows afresh from the running config, keeping the exported counters, so a half-applied
        poll can neither repeat the fault forever nor serve numbers from it. No kubelet restart is
        needed (in sidecar mode one would make the vLLM pod NotReady), and /healthz keeps ticking.
        A new fleet evaluator reads the history again, unless the bug was in that read (no loop)."""
        self.poll_errors += 1
        history_crashed, self._history_crashed = self._history_crashed, False
        if self._changes.changed(("poll_failed",), repr(exc)[:200]):
            log.exception("poll_failed", recovery="windows restarted from the running config")
        try:
            if self.active:
                self.pipeline = Pipeline(self.config).adopt_counters(self.pipeline)
                if self.fleet is not None:
                    self.fleet.client.close()
                    self.fleet = FleetSource(FleetEvaluator(self.config))
                    # Re-read only when the last read is old: a fault that recurs poll after poll
                    # must not re-read hours of history each time (a re-read storm on Prometheus).
                    last = self._history_read_at
                    recent = last is not None and time.monotonic() - last < HISTORY_REREAD_SECONDS
                    self._history_pending, self.history = not (history_crashed or recent), None
            self.published = self._publish(ready=self.published.ready)
        except Exception:  # the rebuild itself failed: /healthz goes stale, alerts fire
            log.exception("poll_recovery_failed")

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        host, port = self.config.listen_address
        self.httpd = CappedHTTPServer((host, port), handler_for(self))
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="specwatch-http", daemon=True
        ).start()
        self._poll_thread = threading.Thread(target=self._poll_loop, name="specwatch-poll", daemon=True)
        self._poll_thread.start()
        if self.readback is not None:
            self.readback.start()  # its own thread and deadline: the first poll does not wait
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

    def run_forever(self, reload_pending: Callable[[], bool] | None = None, *, sidecar: bool = False) -> int:
        """Serve until SIGTERM or SIGINT. reload_pending: whether a SIGHUP arrived before this
        installed its handler (cli.py queues those); it is then done as a reload after start.
        sidecar: SIGTERM comes to the whole vLLM pod at once and vLLM may drain a while, so keep
        polling (every DRAIN_POLL_INTERVAL) and serving, so the last windows reach Prometheus, until
        every target's first answer that says vLLM has gone (a refused connection, a non-metrics
        answer: drain.py), or `shutdown_drain` has passed, whichever comes first; the chart keeps
        that cap below the pod's terminationGracePeriodSeconds. A second signal exits at once."""
        signals = threading.Semaphore(0)

        def on_signal(signum: int, _frame: object) -> None:
            signals.release()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGHUP, lambda _signum, _frame: self.request_reload())
        if reload_pending is not None and reload_pending():
            self.request_reload()  # a SIGHUP queued during start-up: reload once the loop runs
        self.start()
        while not signals.acquire(timeout=0.2):
            pass
        reason = "signal"
        drain = self.config.shutdown_drain if sidecar and self.active and self.config.prometheus is None else 0.0
        if drain > 0:
            started = time.monotonic()
            deadline = started + drain
            self.drain.begin()
            self._wake.set()  # poll now: vLLM may already be gone
            log.info(
                "draining",
                until="every target refuses or answers without metrics",
                at_most_seconds=drain,
                poll_interval=self.drain.interval(self.config.poll_interval),
            )
            reason = "drain timeout"
            while (left := deadline - time.monotonic()) > 0:
                if self.drain.done.is_set():
                    reason = "targets gone"
                    break
                if signals.acquire(timeout=min(left, 0.05)):
                    reason = "second signal"
                    break
            log.info(
                "drained",
                reason=reason,
                seconds=round(time.monotonic() - started, 3),
                ended=dict(self.drain.ended),
            )
        self.stop()
        log.info("stopped", reason=reason)
        return 0


class PollErrorsCollector(Collector):
    """specwatch_poll_errors_total: poll-loop bugs, each recovered in process."""

    def __init__(self, count: Callable[[], int]):
        self._count = count

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        yield contract.single("specwatch_poll_errors", float(self._count()))
