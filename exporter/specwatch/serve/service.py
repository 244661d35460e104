"""`specwatch run`: the Service that owns the poll loop, the config it runs, and the HTTP server.

The poll thread is the only writer: each tick its Source polls, then it collects the /metrics
families, records the page's history point, and swaps one immutable published View
(specwatch.view) in http_server.Published. Its page, status JSON (status.py) and /metrics bytes are
rendered on their first read and kept until the next poll: nothing is drawn for a view nobody
reads. HTTP handlers (http_server.py) only read it, so a scrape does no I/O towards vLLM and takes
no lock.

The config is reloaded in place, by the poll thread between two ticks, on SIGHUP and when the
config file changes (reload.py: how a change is noticed and what it invalidates). A bad new config
is refused with one log line and the running one is kept. Only what changed is rebuilt: windows and
verdicts survive a reload that leaves targets and windows alone. In sidecar mode the process never
exits on a config problem: it serves /healthz and /metrics and reports the error until a good
config arrives.

What is polled is a Source (view/source.py), chosen once from the config (serve/sources.py): the
sidecar's targets (sidecar/source.py) or, with `prometheus:` set, the fleet's query API
(fleet/source.py). Everything else (server, reload, health, the renderers of its View) is the same;
a reload that switches modes builds the other Source.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from specwatch import __version__
from specwatch.base.logsetup import get_logger
from specwatch.base.urls import redact_url
from specwatch.config import Config, ConfigError
from specwatch.config.cost_model import config_is_default
from specwatch.export import contract, metrics_text
from specwatch.export.collector import SpecwatchCollector
from specwatch.export.families import Metric, Registry
from specwatch.export.page_history import PageHistory
from specwatch.export.process import PlatformCollector, ProcessCollector
from specwatch.serve.drain import Drain
from specwatch.serve.http_server import CappedHTTPServer, Published, Rendered, handler_for
from specwatch.serve.readback import Readback, readback_collector
from specwatch.serve.reload import ConfigSource, ReloadCollector, ReloadStatus, warn_about_alert_window
from specwatch.serve.sources import source_for
from specwatch.serve.start_read import StartReadCollector, history_read
from specwatch.sidecar.scrape import steady_clock
from specwatch.verdict.grading import WindowSummary
from specwatch.view import View
from specwatch.view.change_log import ChangeLog

__all__ = ["Service"]


log = get_logger("specwatch")


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
        # `readback:` (sidecar mode only): what the previous pod exported, read once after start.
        self.readback = Readback(config.readback) if self.active and config.readback else None
        # What is polled: chosen once from the config, and again on a reload that switches modes.
        self.poller = source_for(config, self, self.clock, self._restored)
        self._stop = threading.Event()
        self._wake = Wake()
        self._reload_requested = False
        self._file_checked = -math.inf  # monotonic time the config file was last looked at
        # /metrics: first the view's own families (a function of the immutable view alone: built at
        # the first read of a view's /metrics, never for a view nobody scrapes), then the live ones
        # (reload status, read-back, poll errors, history read: collected at each poll, so they
        # hold that poll's values). `registry`: both, in that order, collected now.
        self._live_registry = Registry()
        self._live_registry.register(ReloadCollector(lambda: self.reload_status))
        self._live_registry.register(
            readback_collector(lambda: self.readback, lambda: self._rendering_view.targets.restore_disagreed)
        )
        self.poll_errors = 0  # poll-loop bugs recovered in process (_recover)
        self.drain = Drain()  # sidecar mode after SIGTERM: what each target answered since (drain.py)
        self._live_registry.register(PollErrorsCollector(lambda: self.poll_errors))
        self._live_registry.register(
            StartReadCollector(
                "specwatch_history_errors", "specwatch_history_steps", lambda: history_read(self._rendering_view)
            )
        )
        self.registry = Registry()
        self.registry.register(SpecwatchCollector(lambda: self._rendering_view))
        self.registry.register(self._live_registry)
        self._rendering_view: View = self.poller.view()
        self._changes = ChangeLog()
        # The page's history is written by the poll thread and read by a page render (the HTTP
        # thread) under this lock; the generation says whether a render's view is still the newest.
        self._page_lock = threading.Lock()
        self._page_generation = 0
        # process_* and python_info, rendered after the sidecar's families.
        self.self_registry = Registry()
        self.self_registry.register(ProcessCollector())
        self.self_registry.register(PlatformCollector())
        self.page_history = PageHistory()  # the page's last hour per route-window (bounded)
        self.published = self._publish(ready=False)
        self.httpd: CappedHTTPServer | None = None
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

    # -- reload ----------------------------------------------------------------------------------
    def request_reload(self) -> None:
        """Safe from a signal handler: the poll thread does the work before its next tick."""
        self._reload_requested = True
        self._wake.set()

    def _reload_if_due(self) -> None:
        forced, self._reload_requested = self._reload_requested, False
        file_changed = self.source is not None and self._file_check_due() and self.source.changed()
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

    def _file_check_due(self) -> bool:
        """The config file is looked at once per evaluation: every tick, unless the evaluations are
        spaced out (Config.evaluation_period: a reload is then taken within one evaluation period;
        SIGHUP and the API at the next tick)."""
        if self.config.evaluation_period <= self.config.poll_interval:
            return True  # every tick: no clock read
        now = time.monotonic()
        if not self.config.evaluation_due(now - self._file_checked):
            return False
        self._file_checked = now
        return True

    def apply(self, new: Config, *, trigger: str = "api") -> None:
        """Swap to a validated config, rebuilding only what it changes."""
        old = self.config
        if new.listen != old.listen and self.httpd is not None:
            log.warning("config_listen_needs_restart", running=old.listen, configured=new.listen)
            new = replace(new, listen=old.listen)
        rebuilt = self.poller.reconfigure(new) if self.active else None
        if rebuilt is None:  # the first good config, or another mode: its own source, afresh
            self.poller.close()
            self.poller = source_for(new, self, self.clock, self._restored)
            rebuilt = ["pipeline", "source"]
            if self.active:
                log.warning("config_mode_switched", mode=self.poller.mode, note="windows and verdicts start afresh")
        if not self.active and self.readback is None and new.readback is not None:
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
            mode=self.poller.mode,
        )
        self.published = self._publish(ready=self.published.ready and "pipeline" not in rebuilt)

    # -- polling ---------------------------------------------------------------------------------
    def poll_once(self) -> None:
        evaluated = self.poller.poll()
        if self._stop.is_set():
            return
        if evaluated or not self.published.ready:
            self.published = self._publish(ready=True)
        else:
            self.alive()  # nothing new to publish (evaluation_interval): the loop ticked

    def _restored(self) -> tuple[Mapping[str, WindowSummary], Mapping[str, tuple[tuple[float, float], ...]]] | None:
        """The previous pod's evidence, once it has been read back (`readback:`)."""
        restored = self.readback.take() if self.readback is not None else None
        return None if restored is None else (restored.before_windows, restored.curves)

    # -- what the source is lent (view/source.Host) --------------------------------------------------
    def answered(self, target: str, t: float, ok: bool, reason: str | None, message: str) -> None:
        self.drain.note(target, None if ok else reason)  # not metrics: gone
        if not ok:
            self.page_history.note_error(target, t, reason, message)

    def stopping(self) -> bool:
        return self._stop.is_set()

    def alive(self) -> None:
        self.published = self.published.ticked(time.monotonic())

    def _publish(self, *, ready: bool) -> Published:
        """Swap in (and return) this poll's view. The page's history is recorded here (one point per
        route-window, cheap); the live /metrics families are collected here, so they hold this
        poll's values (ViewFamilies); the view's own families, the /metrics bytes, the status
        document and the page are built on their first read (Rendered), at most once per view, and
        not at all for a view nobody reads."""
        view = self._rendering_view = self.poller.view()
        families = ViewFamilies(view, metrics_text.collect(self._live_registry))
        error = self.reload_status.error if not self.active else None
        not_ready = f"config error: {error}\n".encode() if error else b"starting\n"
        with self._page_lock:
            recorded = self._record_page(view)
            self._page_generation += 1
            page = self._page_renderer(view, self.reload_status.error, self.active, time.time(), self._page_generation)
            published = Published(
                view,
                Rendered(lambda: metrics_text.render_text(families.get(), self._self_families())),
                Rendered(lambda: _status(view)),
                ready,
                time.monotonic(),
                Rendered(page) if recorded else Rendered(b""),
                not_ready,
                Rendered(lambda: metrics_text.render_openmetrics(families.get(), self._self_families())),
            )
            self.published = published
        return published

    def _self_families(self) -> list[Metric]:
        """process_* and python_info (export/process.py), read when /metrics is
        rendered: the process's memory and CPU against its limits."""
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
                        from specwatch.export.page import render_page  # at the first request for a page

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
            if self.drain.active and self.drain.check(t.name for t in self.config.targets):
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
            if self._wake.wait(max(0.0, next_tick - now)):
                next_tick = time.monotonic()  # reload (or stop) now, then poll on a fresh schedule

    def _recover(self, exc: Exception) -> None:
        """A poll-loop bug (target faults never get here): count it, log it once per kind, and start
        the windows afresh from the running config, keeping the exported counters, so a half-applied
        poll can neither repeat the fault forever nor serve numbers from it. No kubelet restart is
        needed (in sidecar mode one would make the vLLM pod NotReady), and /healthz keeps ticking."""
        self.poll_errors += 1
        if self._changes.changed(("poll_failed",), repr(exc)[:200]):
            log.exception("poll_failed", recovery="windows restarted from the running config")
        try:
            if self.active:
                self.poller.recover()
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
            mode=self.poller.mode,
            prometheus=redact_url(prometheus.url) if prometheus else None,
            targets=[t.name for t in self.config.targets],
            poll_interval=self.config.poll_interval,
            evaluation_interval=self.config.evaluation_period,
            windows=list(self.config.window_labels),
            config=self.source.path if self.source else None,
            config_ok=self.active,
        )
        if self.config.profile is None and config_is_default(self.config):
            cm = self._rendering_view.cost_model
            log.warning(
                "cost_model_defaults",
                hardware=cm.hardware.name,
                model=cm.model.name,
                message="no hardware or model configured: verdicts rest on assumed defaults until the "
                "step-time curve is learned (set hardware/model, or a profile)",
            )

    @property
    def port(self) -> int:
        return self.httpd.server_address[1] if self.httpd else 0

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self.readback is not None:
            self.readback.stop()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        if self._poll_thread is not None:
            self._poll_thread.join(timeout=1.5)
        self.poller.close()

    def run_forever(self, reload_pending: Callable[[], bool] | None = None, *, sidecar: bool = False) -> int:
        """Serve until SIGTERM or SIGINT. reload_pending: whether a SIGHUP arrived before this
        installed its handler (cli.py queues those); it is then done as a reload after start.
        sidecar: SIGTERM comes to the whole vLLM pod at once and vLLM may drain a while, so keep
        polling (every DRAIN_POLL_INTERVAL) and serving, so the last windows reach Prometheus, until
        every target's first answer that says vLLM has gone (a refused connection, a non-metrics
        answer: drain.py), or `shutdown_drain` has passed, whichever comes first; the chart keeps
        that cap below the pod's terminationGracePeriodSeconds. A second signal exits at once."""
        signals = StopSignals(on_reload=self.request_reload)
        before = {number: signal.signal(number, signals.note) for number in (signal.SIGTERM, signal.SIGINT)}
        before[signal.SIGHUP] = signal.signal(signal.SIGHUP, signals.note_reload)
        if reload_pending is not None and reload_pending():
            self.request_reload()  # a SIGHUP queued during start-up: reload once the loop runs
        try:
            self.start()
            signals.wait()
            return self._shut_down(signals, sidecar=sidecar)
        finally:
            for number, handler in before.items():  # never a handler writing to a closed pipe
                signal.signal(number, handler)
            signals.close()

    def _shut_down(self, signals: StopSignals, *, sidecar: bool) -> int:
        """After the first signal: drain (sidecar mode, see run_forever), then stop."""
        reason = "signal"
        drain = self.config.shutdown_drain if sidecar and self.active and self.poller.drains else 0.0
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
                if signals.wait(min(left, 0.05)):
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


class Wake:
    """What the poll thread sleeps on between ticks, and what wakes it early (a reload, a stop, a
    drain): one lock used as a binary semaphore, set when released. threading.Event does the same
    through a Condition, whose every wait allocates a waiter lock and takes the Condition's own: per
    tick that cost 40-70 us more CPU than this (bench/wake_cost.py). set() never blocks and takes
    no lock, so it is safe from any thread."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()  # held: not set

    def set(self) -> None:
        with contextlib.suppress(RuntimeError):  # already set: released twice
            self._lock.release()

    def wait(self, timeout: float) -> bool:
        """Sleep until set() or `timeout` seconds; True when set (and then cleared)."""
        return self._lock.acquire(True, min(timeout, threading.TIMEOUT_MAX))


class ViewFamilies:
    """One published view's /metrics families: the view's own (SpecwatchCollector, built on the
    first get(), shared by the text and OpenMetrics renderings) and the live ones collected at the
    poll. Read by the HTTP thread only; a second reader racing the first builds the same list."""

    __slots__ = ("_families", "_live", "_view")

    def __init__(self, view: View, live: list[Metric]):
        self._view = view
        self._live = live
        self._families: list[Metric] | None = None

    def get(self) -> list[Metric]:
        families = self._families
        if families is None:
            families = self._families = [*SpecwatchCollector(lambda: self._view).collect(), *self._live]
        return families


class StopSignals:
    """SIGTERM and SIGINT as the main thread waits for them, and SIGHUP passed on to `on_reload`
    from the same wait. A handler only writes a byte to a pipe: it takes no lock (a handler runs in
    the main thread, between any two of its bytecodes, so one that took a lock could wait forever
    on its own thread: setting the poll thread's Event from the SIGHUP handler did, when the signal
    came while the main thread held that Event's lock to stop or drain), and the wait sleeps in
    select() on the pipe, so an idle sidecar's main thread is never woken to look (a wait with a
    timeout in a loop cost about 0.5 ms of CPU a second)."""

    def __init__(self, on_reload: Callable[[], None] | None = None) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # a handler never blocks, even on a full pipe
        self._on_reload = on_reload

    def note(self, _signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.write(self._write, b"s")

    def note_reload(self, _signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.write(self._write, b"h")

    def wait(self, timeout: float | None = None) -> bool:
        """Whether a stop signal came (each wait takes one) before `timeout` seconds (None:
        forever). A SIGHUP met on the way is handed to `on_reload`, outside the handler, and the
        wait goes on."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            readable, _, _ = select.select([self._read], [], [], left)
            if not readable:
                return False
            if os.read(self._read, 1) != b"h":
                return True
            if self._on_reload is not None:
                self._on_reload()

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)


def _status(view: View) -> bytes:
    from specwatch.export.status import encode_status  # at the first request for the status document

    return encode_status(view)


class PollErrorsCollector:
    """specwatch_poll_errors_total: poll-loop bugs, each recovered in process."""

    def __init__(self, count: Callable[[], int]):
        self._count = count

    def collect(self) -> Iterable[Metric]:
        yield contract.single("specwatch_poll_errors", float(self._count()))
